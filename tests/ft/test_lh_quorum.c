/* The lighthouse's pure part (src/ft/quorum.c), rule by rule against
 * torchft's quorum_compute and its lighthouse tests: heartbeat expiry,
 * min_replicas, the split-brain guard, the join timeout counted from the
 * earliest join, the fast quorum with newcomers, shrink_only, quorum ids
 * bumped on a changed member list or commit failures and never reused;
 * then the records: round trips, malformed input refused, and random
 * corruption never read out of bounds (every decode reads an exact-size
 * heap copy, so ASan sees any overrun). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/harness.h"

#include "ft/lh_impl.h"
#include "ft/lighthouse.h"
#include "gang/status.h"

#define NOW 100000 /* ms; every case's "now" */
#define HB 5000    /* heartbeat timeout */
#define JOIN 60000 /* join timeout */

typedef struct world {
  gang__lh_replica r[16];
  int n;
  gang__lh_config cfg;
} world;

static void world_init(world *w, int min_replicas) {
  memset(w, 0, sizeof *w);
  w->cfg = (gang__lh_config){min_replicas, JOIN, HB};
}

/* A replica that beat `age` ms ago (-1: never) and joined `joined_ago` ms
 * ago (-1: not joined). */
static gang__lh_replica *rep(world *w, const char *id, int64_t age,
                             int64_t joined_ago) {
  gang__lh_replica *r = &w->r[w->n++];
  memset(r, 0, sizeof *r);
  snprintf(r->member.replica_id, sizeof r->member.replica_id, "%s", id);
  r->member.world_size = 1;
  r->last_beat_ms = age < 0 ? INT64_MIN : NOW - age;
  r->joined = joined_ago >= 0;
  r->joined_ms = NOW - joined_ago;
  return r;
}

/* Runs the computation dt ms after the joins, the heartbeats as fresh as
 * they were at NOW; returns the member ids joined by ',' ("" when it
 * waits), the reason in why. */
static const char *run(world *w, const gang__lh_quorum *prev, int64_t dt,
                       char *why) {
  static char ids[512];
  gang__lh_replica r[16];
  memcpy(r, w->r, sizeof r);
  for (int i = 0; i < w->n; i++)
    if (r[i].last_beat_ms != INT64_MIN)
      r[i].last_beat_ms += dt;
  gang__lh_member *m = NULL;
  int n = -1;
  bool ok =
      gang__lh_compute(&w->cfg, r, w->n, prev, NOW + dt, &m, &n, why, 256);
  ids[0] = '\0';
  if (!ok) {
    assert_null(m);
    assert_int_equal(n, 0);
    return ids;
  }
  assert_true(n > 0);
  for (int i = 0; i < n; i++)
    snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%s", i ? "," : "",
             m[i].replica_id);
  free(m);
  return ids;
}

/* A previous quorum of the given ids (sorted, as quorums are). */
static gang__lh_quorum prev_of(int64_t id, const char *const *ids, int n) {
  gang__lh_quorum q = {id, 7, 3, n, calloc((size_t)n, sizeof(gang__lh_member)),
                       0};
  for (int i = 0; i < n; i++) {
    snprintf(q.members[i].replica_id, GANG_LH_ID_MAX, "%s", ids[i]);
    q.members[i].world_size = 1;
  }
  return q;
}

static void test_all_joined_sorted(void **state) {
  (void)state;
  world w;
  world_init(&w, 1);
  rep(&w, "c", 10, 5);
  rep(&w, "a", 10, 5);
  rep(&w, "b", 10, 5);
  char why[256];
  assert_string_equal(run(&w, NULL, 0, why), "a,b,c");
  assert_non_null(strstr(why, "quorum of 3"));
}

static void test_heartbeat_expiry(void **state) {
  (void)state;
  world w;
  world_init(&w, 1);
  rep(&w, "a", 10, 5);
  rep(&w, "b", HB, 5);     /* exactly the timeout: dead */
  rep(&w, "c", HB - 1, 5); /* one ms younger: alive */
  rep(&w, "d", -1, 5);     /* never beat */
  char why[256];
  assert_string_equal(run(&w, NULL, 0, why), "a,c");
  /* A dead replica that has not joined does not hold the round up. */
  w.r[1].joined = false;
  assert_string_equal(run(&w, NULL, 0, why), "a,c");
}

static void test_min_replicas(void **state) {
  (void)state;
  world w;
  world_init(&w, 3);
  rep(&w, "a", 10, 5);
  rep(&w, "b", 10, 5);
  char why[256];
  assert_string_equal(run(&w, NULL, JOIN * 2, why), "");
  assert_non_null(strstr(why, "min_replicas 3"));
  rep(&w, "c", 10, 0);
  assert_string_equal(run(&w, NULL, 0, why), "a,b,c");
}

static void test_split_brain(void **state) {
  (void)state;
  world w;
  world_init(&w, 1);
  rep(&w, "a", 10, 5);
  rep(&w, "b", 10, 5);
  rep(&w, "c", 10, -1);
  rep(&w, "d", 10, -1);
  char why[256];
  /* 2 of 4: not more than half, whatever the join timeout says. */
  assert_string_equal(run(&w, NULL, 0, why), "");
  assert_non_null(strstr(why, "more than half of the 4"));
  assert_string_equal(run(&w, NULL, JOIN * 10, why), "");
  /* 2 of 5 (5 / 2 = 2 in integer division) waits too; 3 of 5 does not. */
  rep(&w, "e", 10, -1);
  assert_string_equal(run(&w, NULL, JOIN * 10, why), "");
  w.r[2].joined = true;
  w.r[2].joined_ms = NOW;
  assert_string_equal(run(&w, NULL, JOIN * 10, why), "a,b,c");
  /* The others' heartbeats expire: the two alone are a majority. */
  w.r[2].joined = false;
  w.r[2].last_beat_ms = w.r[3].last_beat_ms = w.r[4].last_beat_ms = 0;
  assert_string_equal(run(&w, NULL, 0, why), "a,b");
}

static void test_join_timeout_from_earliest(void **state) {
  (void)state;
  world w;
  world_init(&w, 1);
  w.cfg.join_timeout_ms = 10000;
  rep(&w, "a", 10, 0)->joined_ms = 1000;
  rep(&w, "b", 10, 0)->joined_ms = 5000;
  rep(&w, "c", 10, -1); /* heartbeats, never joins */
  char why[256];
  w.r[0].last_beat_ms = w.r[1].last_beat_ms = w.r[2].last_beat_ms = 10000;
  w.cfg.heartbeat_timeout_ms = 1 << 30;
  gang__lh_member *m;
  int n;
  assert_false(
      gang__lh_compute(&w.cfg, w.r, w.n, NULL, 10999, &m, &n, why, 256));
  assert_non_null(strstr(why, "waiting up to 1 ms for 1"));
  /* 10 s after the earliest join (not the latest): the round closes. */
  assert_true(
      gang__lh_compute(&w.cfg, w.r, w.n, NULL, 11000, &m, &n, why, 256));
  assert_int_equal(n, 2);
  free(m);
  /* Everyone heartbeating has joined: no waiting at all. */
  w.r[2].joined = true;
  w.r[2].joined_ms = 10500;
  assert_true(
      gang__lh_compute(&w.cfg, w.r, w.n, NULL, 10500, &m, &n, why, 256));
  assert_int_equal(n, 3);
  free(m);
}

static void test_fast_quorum(void **state) {
  (void)state;
  const char *ab[] = {"a", "b"};
  gang__lh_quorum prev = prev_of(4, ab, 2);
  world w;
  world_init(&w, 5); /* min_replicas cannot be met: fast skips it */
  rep(&w, "b", 10, 0);
  rep(&w, "a", 10, 0);
  rep(&w, "new", 10, 0); /* a newcomer already waiting comes along */
  rep(&w, "x", 10, -1);  /* heartbeating, not joined: not waited for */
  rep(&w, "y", 10, -1);
  rep(&w, "z", 10, -1);
  rep(&w, "zz", 10, -1); /* 3 of 7 joined: the split-brain guard is skipped */
  char why[256];
  assert_string_equal(run(&w, &prev, 0, why), "a,b,new");
  assert_non_null(strstr(why, "fast quorum"));
  /* One previous member missing: no fast quorum (it is still alive). */
  w.r[0].joined = false;
  assert_string_equal(run(&w, &prev, 0, why), "");
  /* ... nor when it is dead; then the ordinary rules apply. */
  w.cfg.min_replicas = 1;
  w.r[0].last_beat_ms = 0;
  for (int i = 3; i < 7; i++)
    w.r[i].last_beat_ms = 0;
  assert_string_equal(run(&w, &prev, 0, why), "a,new");
  assert_null(strstr(why, "fast"));
  gang__lh_quorum_fini(&prev);
}

static void test_shrink_only(void **state) {
  (void)state;
  const char *ab[] = {"a", "b"};
  gang__lh_quorum prev = prev_of(4, ab, 2);
  world w;
  world_init(&w, 1);
  rep(&w, "a", 10, 0)->member.shrink_only = true;
  rep(&w, "b", 10, 0);
  rep(&w, "c", 10, 0);
  char why[256];
  assert_string_equal(run(&w, &prev, 0, why), "a,b");
  assert_non_null(strstr(why, "shrink_only=1"));
  /* b dead: not fast; a newcomer still does not get in, and it counts
   * toward the guard and min_replicas (torchft counts before filtering). */
  w.r[1].last_beat_ms = 0;
  w.cfg.min_replicas = 2;
  assert_string_equal(run(&w, &prev, 0, why), "a");
  /* Without a previous quorum shrink_only has nothing to keep to. */
  assert_string_equal(run(&w, NULL, 0, why), "a,c");
  /* Nobody of the previous quorum left: nothing to form. */
  w.r[0].last_beat_ms = 0;
  w.cfg.min_replicas = 1;
  w.r[2].member.shrink_only = true;
  assert_string_equal(run(&w, &prev, 0, why), "");
  gang__lh_quorum_fini(&prev);
}

static void test_new_id(void **state) {
  (void)state;
  const char *ab[] = {"a", "b"}, *abc[] = {"a", "b", "c"}, *ac[] = {"a", "c"};
  gang__lh_quorum q_ab = prev_of(1, ab, 2), q_abc = prev_of(2, abc, 3),
                  q_ac = prev_of(3, ac, 2);
  assert_true(gang__lh_new_id(NULL, q_ab.members, 2));
  assert_false(gang__lh_new_id(&q_ab, q_ab.members, 2));
  assert_true(gang__lh_new_id(&q_ab, q_abc.members, 3)); /* grew */
  assert_true(gang__lh_new_id(&q_abc, q_ab.members, 2)); /* shrank */
  assert_true(gang__lh_new_id(&q_ab, q_ac.members, 2));  /* replaced */
  /* The same members, one reporting a failed commit: rebuild. */
  gang__lh_quorum again = prev_of(0, ab, 2);
  again.members[1].commit_failures = 1;
  assert_true(gang__lh_new_id(&q_ab, again.members, 2));
  /* Steps and world sizes are not membership. */
  again.members[1].commit_failures = 0;
  again.members[0].step = 99;
  assert_false(gang__lh_new_id(&q_ab, again.members, 2));
  gang__lh_quorum_fini(&again);

  /* A run of quorums as the lighthouse numbers them: ids only grow, and a
   * membership never gets back an id it had. */
  const gang__lh_quorum *seq[] = {&q_ab, &q_ab, &q_abc, &q_ab, &q_ac, &q_ab};
  int64_t id = 0, ids[6];
  const gang__lh_quorum *last = NULL;
  for (int i = 0; i < 6; i++) {
    if (gang__lh_new_id(last, seq[i]->members, seq[i]->n))
      id++;
    ids[i] = id;
    last = seq[i];
  }
  int64_t want[] = {1, 1, 2, 3, 4, 5};
  for (int i = 0; i < 6; i++)
    assert_int_equal(ids[i], want[i]);
  gang__lh_quorum_fini(&q_ab);
  gang__lh_quorum_fini(&q_abc);
  gang__lh_quorum_fini(&q_ac);
}

/* ---- Records ------------------------------------------------------------- */

static gang_status member_dec(const char *text, size_t len,
                              gang__lh_member *m) {
  char *exact = malloc(len ? len : 1);
  memcpy(exact, text, len);
  gang_status s = gang__lh_member_decode(exact, len, m);
  free(exact);
  return s;
}

static gang_status quorum_dec(const char *text, size_t len,
                              gang__lh_quorum *q) {
  char *exact = malloc(len ? len : 1);
  memcpy(exact, text, len);
  gang_status s = gang__lh_quorum_decode(exact, len, q);
  free(exact);
  return s;
}

static void member_eq(const gang__lh_member *a, const gang__lh_member *b) {
  assert_string_equal(a->replica_id, b->replica_id);
  assert_int_equal(a->step, b->step);
  assert_int_equal(a->world_size, b->world_size);
  assert_int_equal(a->shrink_only, b->shrink_only);
  assert_int_equal(a->commit_failures, b->commit_failures);
  assert_int_equal(a->commit_quorum, b->commit_quorum);
  assert_true(a->commit_inc == b->commit_inc);
}

static void test_round_trips(void **state) {
  (void)state;
  gang__lh_member m = {"trainer:4f2a-9c", INT64_MAX, 8, true, 3, 77,
                       UINT64_MAX},
                  back;
  char buf[512];
  size_t n = gang__lh_member_encode(&m, buf, sizeof buf);
  assert_true(n > 0 && n < sizeof buf);
  assert_gang_ok(member_dec(buf, n, &back));
  member_eq(&m, &back);
  /* A longest id fits. */
  memset(m.replica_id, 'x', GANG_LH_ID_MAX - 1);
  m.replica_id[GANG_LH_ID_MAX - 1] = '\0';
  n = gang__lh_member_encode(&m, buf, sizeof buf);
  assert_gang_ok(member_dec(buf, n, &back));
  assert_string_equal(back.replica_id, m.replica_id);

  const char *ids[] = {"a:1", "b:2", m.replica_id};
  gang__lh_quorum q = prev_of(INT64_MAX, ids, 3), qb;
  q.incarnation = UINT64_MAX;
  q.round = 12345;
  q.notices = 31;
  q.members[1].step = 7;
  q.members[2].commit_failures = 2;
  q.members[2].commit_inc = 0x0123456789abcdefull;
  q.members[1].commit_quorum = 41;
  q.members[0].shrink_only = true;
  size_t len = 0;
  char *rec = gang__lh_quorum_encode(&q, &len);
  assert_non_null(rec);
  assert_int_equal(strlen(rec), len);
  assert_gang_ok(quorum_dec(rec, len, &qb));
  assert_int_equal(qb.quorum_id, INT64_MAX);
  assert_true(qb.incarnation == UINT64_MAX);
  assert_int_equal(qb.round, 12345);
  assert_int_equal(qb.notices, 31);
  assert_int_equal(qb.n, 3);
  for (int i = 0; i < 3; i++)
    member_eq(&q.members[i], &qb.members[i]);
  /* A record without notices= (an older lighthouse's): every notice
   * counts. */
  char *old = strdup(rec);
  char *at = strstr(old, "notices=31\n");
  assert_non_null(at);
  memmove(at, at + strlen("notices=31\n"),
          strlen(at + strlen("notices=31\n")) + 1);
  gang__lh_quorum_fini(&qb);
  assert_gang_ok(quorum_dec(old, strlen(old), &qb));
  assert_int_equal(qb.notices, 0);
  assert_int_equal(qb.n, 3);
  free(old);
  /* Unknown well-formed keys are skipped (a newer writer's fields). */
  char *more = malloc(len + 64);
  snprintf(more, len + 64, "future_field=x y z\n%s", rec);
  gang__lh_quorum_fini(&qb);
  assert_gang_ok(quorum_dec(more, strlen(more), &qb));
  assert_int_equal(qb.n, 3);
  free(more);
  free(rec);
  gang__lh_quorum_fini(&qb);
  gang__lh_quorum_fini(&q);
  gang__lh_quorum_fini(&q); /* fini twice is fine */
}

/* Up to date: the highest step, then the latest commit of those, ordered
 * by the lighthouse incarnation (its start time) and then the quorum id,
 * so that one step committed in two quorums -- also under two
 * lighthouses, before and after a restart -- is told apart and the later
 * commit wins (the others heal from it). */
static void test_up_to_date(void **state) {
  (void)state;
  const char *ids[] = {"a:1", "b:2", "c:3", "d:4"};
  gang__lh_quorum q = prev_of(9, ids, 4);
  bool up[4];
  int64_t top = -1;
  /* All at step 0, nothing committed: all up to date. */
  assert_int_equal(gang__lh_up_to_date(&q, &top, up), 4);
  assert_int_equal(top, 0);
  /* b and c ahead, at step 12; d at 11. */
  q.members[1].step = q.members[2].step = 12;
  q.members[3].step = 11;
  assert_int_equal(gang__lh_up_to_date(&q, &top, up), 2);
  assert_true(!up[0] && up[1] && up[2] && !up[3] && top == 12);
  /* One lighthouse: c committed step 12 in a later quorum than b. */
  q.members[1].commit_inc = q.members[2].commit_inc = 0x100;
  q.members[1].commit_quorum = 5;
  q.members[2].commit_quorum = 6;
  assert_int_equal(gang__lh_up_to_date(&q, &top, up), 1);
  assert_true(up[2] && !up[1]);
  /* b's commit came under a later lighthouse (restarted since), though
   * its quorum id is smaller: b wins. */
  q.members[1].commit_inc = 0x200;
  q.members[1].commit_quorum = 1;
  assert_int_equal(gang__lh_up_to_date(&q, &top, up), 1);
  assert_true(up[1] && !up[2]);
  /* The same commit: both. */
  q.members[2] = q.members[1];
  snprintf(q.members[2].replica_id, sizeof q.members[2].replica_id, "c:3");
  assert_int_equal(gang__lh_up_to_date(&q, &top, up), 2);
  gang__lh_quorum_fini(&q);
}

static void test_malformed_members(void **state) {
  (void)state;
  const char *ok = "replica_id=a\nstep=1\nworld_size=2\nshrink_only=0\n"
                   "commit_failures=0\n";
  gang__lh_member m;
  assert_gang_ok(member_dec(ok, strlen(ok), &m));
  /* Without the final newline is fine too. */
  assert_gang_ok(member_dec(ok, strlen(ok) - 1, &m));
  char longid[300] = "replica_id=";
  memset(longid + 11, 'x', GANG_LH_ID_MAX);
  strcat(longid, "\nstep=1\nworld_size=2\nshrink_only=0\ncommit_failures=0\n");
  char longline[700] = "note=";
  memset(longline + 5, 'y', 600);
  strcat(longline, "\n");
  strcat(longline, ok);
  const char *bad[] = {
      "",
      "replica_id=a\n",
      "replica_id=a\nstep=1\nworld_size=2\nshrink_only=0\n",
      "replica_id=a\nreplica_id=b\nstep=1\nworld_size=2\nshrink_only=0\n"
      "commit_failures=0\n",
      "replica_id=a\nstep=-1\nworld_size=2\nshrink_only=0\ncommit_failures=0\n",
      "replica_id=a\nstep=99999999999999999999\nworld_size=2\nshrink_only=0\n"
      "commit_failures=0\n",
      "replica_id=a\nstep=9223372036854775808\nworld_size=2\nshrink_only=0\n"
      "commit_failures=0\n",
      "replica_id=a\nstep=1\nworld_size=0\nshrink_only=0\ncommit_failures=0\n",
      "replica_id=a\nstep=1\nworld_size=2\nshrink_only=2\ncommit_failures=0\n",
      "replica_id=a\nstep=1x\nworld_size=2\nshrink_only=0\ncommit_failures=0\n",
      "replica_id=a\nstep=\nworld_size=2\nshrink_only=0\ncommit_failures=0\n",
      "replica_id=a b\nstep=1\nworld_size=2\nshrink_only=0\n"
      "commit_failures=0\n",
      "replica_id=\nstep=1\nworld_size=2\nshrink_only=0\ncommit_failures=0\n",
      "replica_id=a\nstep 1\nworld_size=2\nshrink_only=0\ncommit_failures=0\n",
      "Replica_id=a\nstep=1\nworld_size=2\nshrink_only=0\ncommit_failures=0\n",
      "replica_id=a\n\nstep=1\nworld_size=2\nshrink_only=0\n"
      "commit_failures=0\n",
      "replica_id=a\x01\nstep=1\nworld_size=2\nshrink_only=0\n"
      "commit_failures=0\n",
      "replica_id=\xc3\xa9\nstep=1\nworld_size=2\nshrink_only=0\n"
      "commit_failures=0\n",
      "replica_id=a\nstep=1\nworld_size=2\nshrink_only=0\ncommit_failures=0\n"
      "commit_quorum=-1\n",
      "replica_id=a\nstep=1\nworld_size=2\nshrink_only=0\ncommit_failures=0\n"
      "commit_quorum=1\ncommit_quorum=2\n",
      longid,
      longline,
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gang_status s = member_dec(bad[i], strlen(bad[i]), &m);
    if (s != GANG_PROTOCOL)
      fail_msg("bad member record %zu decoded with status %d", i, s);
    assert_non_null(strstr(gang_last_error(), "lighthouse member record"));
  }
  /* A NUL inside. */
  char nul[64];
  memcpy(nul, "replica_id=a\0b\n", 15);
  assert_int_equal(member_dec(nul, 15, &m), GANG_PROTOCOL);
}

static void test_malformed_quorums(void **state) {
  (void)state;
  const char *head = "quorum_id=3\nincarnation=00000000000000ff\nround=9\n";
  const char *ma = "member=a step=1 world_size=1 shrink_only=0 "
                   "commit_failures=0\n";
  const char *mb = "member=b step=1 world_size=1 shrink_only=0 "
                   "commit_failures=0\n";
  char good[512];
  snprintf(good, sizeof good, "%smembers=2\n%s%s", head, ma, mb);
  gang__lh_quorum q;
  assert_gang_ok(quorum_dec(good, strlen(good), &q));
  assert_int_equal(q.n, 2);
  gang__lh_quorum_fini(&q);
  char bad[24][512];
  int nb = 0;
  snprintf(bad[nb++], 512, "%smembers=3\n%s%s", head, ma, mb); /* count */
  snprintf(bad[nb++], 512, "%smembers=1\n%s%s", head, ma, mb);
  snprintf(bad[nb++], 512, "%smembers=0\n", head);
  snprintf(bad[nb++], 512, "%smembers=65537\n%s", head, ma);
  snprintf(bad[nb++], 512, "%smembers=9\n%s", head, ma);       /* promises */
  snprintf(bad[nb++], 512, "%smembers=2\n%s%s", head, mb, ma); /* order */
  snprintf(bad[nb++], 512, "%smembers=2\n%s%s", head, ma, ma); /* twice */
  snprintf(bad[nb++], 512, "%s%smembers=1\n", head, ma);       /* before */
  snprintf(bad[nb++], 512, "quorum_id=3\nround=9\nmembers=1\n%s", ma);
  snprintf(bad[nb++], 512,
           "quorum_id=3\nincarnation=00000000000000ff0\nround=9\nmembers=1\n%s",
           ma);
  snprintf(bad[nb++], 512,
           "quorum_id=3\nincarnation=xyz\nround=9\nmembers=1\n%s", ma);
  snprintf(bad[nb++], 512, "%squorum_id=4\nmembers=1\n%s", head, ma);
  snprintf(bad[nb++], 512,
           "%smembers=1\nmember=a step=1 world_size=1 "
           "shrink_only=0\n",
           head);
  snprintf(bad[nb++], 512,
           "%smembers=1\nmember=a step=1 step=2 "
           "world_size=1 shrink_only=0 commit_failures=0\n",
           head);
  snprintf(bad[nb++], 512,
           "%smembers=1\nmember=a step world_size=1 "
           "shrink_only=0 commit_failures=0\n",
           head);
  snprintf(bad[nb++], 512,
           "%smembers=1\nmember=a replica_id=b step=1 "
           "world_size=1 shrink_only=0 commit_failures=0\n",
           head);
  snprintf(bad[nb++], 512,
           "%smembers=1\nmember= step=1 world_size=1 "
           "shrink_only=0 commit_failures=0\n",
           head);
  snprintf(bad[nb++], 512,
           "%smembers=1\nmember=a step=1 world_size=1 "
           "shrink_only=0 commit_failures=-1\n",
           head);
  snprintf(bad[nb++], 512,
           "%smembers=1\nmember=a step=1 world_size=1 "
           "shrink_only=0 commit_failures=0 \n",
           head);
  snprintf(bad[nb++], 512,
           "quorum_id=-3\nincarnation=1\nround=9\n"
           "members=1\n%s",
           ma);
  for (int i = 0; i < nb; i++) {
    gang_status s = quorum_dec(bad[i], strlen(bad[i]), &q);
    if (s != GANG_PROTOCOL)
      fail_msg("bad quorum record %d decoded with status %d:\n%s", i, s,
               bad[i]);
    assert_null(q.members);
  }
}

/* Random corruption of valid records: every outcome is OK or PROTOCOL, and
 * nothing reads past the exact-size copy. */
static void test_corruption(void **state) {
  (void)state;
  const char *ids[] = {"a:1", "bb:22", "ccc:333", "dddd:4444"};
  gang__lh_quorum q = prev_of(42, ids, 4);
  size_t len = 0;
  char *rec = gang__lh_quorum_encode(&q, &len);
  gang__lh_member m = {"x:y", 5, 2, false, 1, 4, 9};
  char mrec[256];
  size_t mlen = gang__lh_member_encode(&m, mrec, sizeof mrec);
  unsigned seed = 12345;
  const char alphabet[] = "=\n 0123456789abz-:\x01\xff";
  int ok = 0;
  for (int it = 0; it < 20000; it++) {
    bool quorum = it % 2 == 0;
    const char *src = quorum ? rec : mrec;
    size_t n = quorum ? len : mlen;
    char work[1024];
    memcpy(work, src, n);
    int edits = 1 + rand_r(&seed) % 4;
    for (int e = 0; e < edits; e++) {
      size_t at = (size_t)rand_r(&seed) % n;
      switch (rand_r(&seed) % 3) {
      case 0:
        work[at] = alphabet[rand_r(&seed) % (sizeof alphabet - 1)];
        break;
      case 1:
        n = at; /* truncate */
        break;
      default:
        memmove(work + at, work + at + 1, n - at - 1);
        n--;
      }
      if (n == 0)
        break;
    }
    gang_status s;
    if (quorum) {
      gang__lh_quorum out;
      memset(&out, 0, sizeof out); /* left alone on failure */
      s = quorum_dec(work, n, &out);
      gang__lh_quorum_fini(&out);
    } else {
      gang__lh_member out;
      s = member_dec(work, n, &out);
    }
    assert_true(s == GANG_OK || s == GANG_PROTOCOL);
    ok += s == GANG_OK;
  }
  printf("corruption: %d of 20000 mutated records still decoded\n", ok);
  free(rec);
  gang__lh_quorum_fini(&q);
}

static void test_ids(void **state) {
  (void)state;
  assert_true(gang__lh_id_valid("trainer:4f2a", 12));
  assert_false(gang__lh_id_valid("", 0));
  assert_false(gang__lh_id_valid("a b", 3));
  assert_false(gang__lh_id_valid("a\nb", 3));
  char id[GANG_LH_ID_MAX + 1];
  memset(id, 'i', sizeof id);
  assert_true(gang__lh_id_valid(id, GANG_LH_ID_MAX - 1));
  assert_false(gang__lh_id_valid(id, GANG_LH_ID_MAX));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_all_joined_sorted),
      cmocka_unit_test(test_heartbeat_expiry),
      cmocka_unit_test(test_min_replicas),
      cmocka_unit_test(test_split_brain),
      cmocka_unit_test(test_join_timeout_from_earliest),
      cmocka_unit_test(test_fast_quorum),
      cmocka_unit_test(test_shrink_only),
      cmocka_unit_test(test_new_id),
      cmocka_unit_test(test_round_trips),
      cmocka_unit_test(test_up_to_date),
      cmocka_unit_test(test_malformed_members),
      cmocka_unit_test(test_malformed_quorums),
      cmocka_unit_test(test_corruption),
      cmocka_unit_test(test_ids),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
