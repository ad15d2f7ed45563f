/* A real lighthouse in this process, replicas as threads with clients of
 * their own (lh_replica.c): a quorum forms and keeps its id while its
 * members stay, takes a new one on a commit failure; a replica that stops
 * heartbeating is dropped and a failure notice names it within the
 * heartbeat timeout and a tick or two; the split-brain guard holds (2 of 4
 * heartbeating wait, 2 of 3 do not); a stopped and restarted lighthouse is
 * a new incarnation; old rounds are collected. test_lh_hostile.c has the
 * status page and hostile input.
 *
 * Timings are printed (and bounded loosely, for sanitizer builds on a busy
 * machine): first quorum, fast quorum, time to notice a dead replica. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/harness.h"
#include "lh_replica.h"
#include "store/store_cases.h"

#include "core/clock.h"
#include "gang/store.h"

/* ---- Cases ----------------------------------------------------------------
 */

static void test_quorum_forms_and_keeps_id(void **state) {
  (void)state;
  /* Through an authenticated store, as a job would run it: the lighthouse
   * and its clients take the secret from the environment. Set while no
   * thread of ours runs. */
  setenv("GANG_STORE_SECRET", "lighthouse-test-secret", 1);
  gang_lighthouse *lh = lh_start(0, 3, 20000, NULL);
  replica r[3];
  const char *ids[] = {"rep-c:1", "rep-a:2", "rep-b:3"};
  for (int i = 0; i < 3; i++)
    replica_start(&r[i], lh, ids[i]);
  double first = round_all(r, 3, 0);
  assert_int_equal(r[0].q.quorum_id, 1);
  assert_string_equal(ids_of(&r[0].q), "rep-a:2,rep-b:3,rep-c:1");
  assert_true(r[0].q.incarnation == gang__lh_incarnation(r[0].jc));
  assert_int_equal(r[0].q.members[0].world_size, 2);
  assert_int_equal(r[0].q.members[0].step, 10);
  int64_t round0 = r[0].q.round;
  /* The same members again and again: the same id, a new round each. */
  double sum = 0, worst = 0;
  int rounds = 20;
  for (int k = 0; k < rounds; k++) {
    double t = round_all(r, 3, 0);
    sum += t;
    worst = t > worst ? t : worst;
    assert_int_equal(r[0].q.quorum_id, 1);
    assert_int_equal(r[0].q.round, round0 + 1 + k);
  }
  printf("first quorum of 3: %.1f ms; fast quorum (same members): mean %.1f "
         "ms, worst %.1f ms over %d rounds (tick %d ms)\n",
         first, sum / rounds, worst, rounds, TICK);
  assert_true(first < 5000);
  /* A member that failed to commit: the quorum takes a new id, once. */
  round_all(r, 3, 1);
  assert_int_equal(r[0].q.quorum_id, 2);
  assert_int_equal(r[0].q.members[0].commit_failures, 0);
  round_all(r, 3, 0);
  assert_int_equal(r[0].q.quorum_id, 2);
  for (int i = 0; i < 3; i++)
    replica_free(&r[i]);
  gang_lighthouse_stop(lh);
  unsetenv("GANG_STORE_SECRET");
}

/* Waits for failure notices until `want` arrives; returns when. */
static int64_t await_notice(gang__lh_client *c, int64_t *cursor,
                            const char *want) {
  char id[GANG_LH_ID_MAX];
  for (;;) {
    assert_gang_ok(gang__lh_next_notice(c, cursor, id, sizeof id, 10000, NULL));
    if (strcmp(id, want) == 0)
      return gang__now_ns();
  }
}

/* A lighthouse (join timeout 30 s) and replicas "a", "b", "dies" in its
 * first quorum. */
static gang_lighthouse *three_in_quorum(replica r[3]) {
  gang_lighthouse *lh = lh_start(0, 1, 30000, NULL);
  const char *ids[] = {"a", "b", "dies"};
  for (int i = 0; i < 3; i++)
    replica_start(&r[i], lh, ids[i]);
  round_all(r, 3, 0);
  return lh;
}

static void test_dead_replica_noticed(void **state) {
  (void)state;
  replica r[3];
  gang_lighthouse *lh = three_in_quorum(r);
  assert_int_equal(r[0].q.quorum_id, 1);
  gang__lh_client *watch;
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", gang_lighthouse_port(lh));
  assert_gang_ok(gang__lh_connect(addr, CLIENT_MS, &watch));
  int64_t cursor = 0;
  /* No notice while everyone lives. */
  char id[GANG_LH_ID_MAX];
  assert_int_equal(gang__lh_next_notice(watch, &cursor, id, sizeof id, 0, NULL),
                   GANG_TIMEOUT);
  assert_int_equal(cursor, 0);
  /* The survivors join the next round; the other goes silent. The join
   * timeout is 30 s: only its heartbeat expiring lets the round close. */
  join_start(&r[0], 11, 0, false, 20000);
  join_start(&r[1], 11, 0, false, 20000);
  int64_t last = replica_silence(&r[2]);
  int64_t noticed = await_notice(watch, &cursor, "dies");
  assert_int_equal(cursor, 1);
  join_ok(&r[0]);
  join_ok(&r[1]);
  double notice_ms = (double)(noticed - last) / 1e6;
  double drop_ms = (double)(gang__now_ns() - last) / 1e6;
  printf("dead replica: failure notice %.1f ms after its last heartbeat, "
         "quorum without it by %.1f ms (heartbeat timeout %d ms, tick %d "
         "ms)\n",
         notice_ms, drop_ms, HB_TIMEOUT, TICK);
  assert_true(notice_ms >= HB_TIMEOUT - 5);
  /* timeout + a tick for the beat to be seen + a tick to see it expire,
   * and room for a sanitizer build on a shared machine */
  assert_true(notice_ms <= HB_TIMEOUT + 2 * TICK + 500);
  assert_string_equal(ids_of(&r[0].q), "a,b");
  assert_int_equal(r[0].q.quorum_id, 2);
  assert_int_equal(r[1].q.quorum_id, 2);
  /* One notice per death, not one per tick. */
  assert_int_equal(
      gang__lh_next_notice(watch, &cursor, id, sizeof id, 3 * TICK, NULL),
      GANG_TIMEOUT);
  gang__lh_close(watch);
  for (int i = 0; i < 3; i++)
    replica_free(&r[i]);
  gang_lighthouse_stop(lh);
}

/* A slow-ticking lighthouse (join timeout 30 s) whose replica "dies" got
 * a failure notice (stopped past the heartbeat timeout) and was left out
 * of the quorum of "a" and "b": the start of the tests of a replica that
 * comes back and dies again. */
typedef struct noticed_once {
  gang_lighthouse *lh;
  replica r[3];
  gang__lh_client *watch;
  int64_t cursor;
} noticed_once;

enum { SLOW_TICK = 600 };

static void noticed_once_start(noticed_once *s) {
  s->lh = lh_start_tick(0, 1, 30000, NULL, SLOW_TICK);
  const char *ids[] = {"a", "b", "dies"};
  for (int i = 0; i < 3; i++)
    replica_start(&s->r[i], s->lh, ids[i]);
  round_all(s->r, 3, 0);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", gang_lighthouse_port(s->lh));
  assert_gang_ok(gang__lh_connect(addr, CLIENT_MS, &s->watch));
  s->cursor = 0;
  join_start(&s->r[0], 11, 0, false, 20000);
  join_start(&s->r[1], 11, 0, false, 20000);
  replica_silence(&s->r[2]);
  await_notice(s->watch, &s->cursor, "dies");
  join_ok(&s->r[0]);
  join_ok(&s->r[1]);
  assert_string_equal(ids_of(&s->r[0].q), "a,b");
}

/* "dies" dies (the store server reports its connections closed) and its
 * peers join at once: the quorum of the three forms at that tick. Returns
 * when it died. */
static int64_t noticed_once_dies(noticed_once *s) {
  gang__lh_close(s->r[2].hb);
  gang__lh_close(s->r[2].jc);
  s->r[2].hb = s->r[2].jc = NULL;
  int64_t died = gang__now_ns();
  join_start(&s->r[0], 12, 0, false, 20000);
  join_start(&s->r[1], 12, 0, false, 20000);
  join_ok(&s->r[0]);
  join_ok(&s->r[1]);
  assert_string_equal(ids_of(&s->r[0].q), "a,b,dies");
  return died;
}

static void noticed_once_free(noticed_once *s) {
  gang__lh_close(s->watch);
  for (int i = 0; i < 3; i++)
    replica_free(&s->r[i]);
  gang_lighthouse_stop(s->lh);
}

/* A replica that got a failure notice, came back, was taken into a quorum
 * and then died must get a second notice: the survivors configuring that
 * quorum wait on it. With a slow tick, a death reported by the store
 * server at the tick that forms the quorum (woken by the peers' joins) is
 * confirmed at the next one: no tick in between sees the replica both
 * healthy and a member of the last quorum. */
static void test_notice_again_after_a_return(void **state) {
  (void)state;
  noticed_once s;
  noticed_once_start(&s);
  /* It comes back: a join (which beats) that gives up waiting, and a tick
   * to read it. Its peers are not there yet. */
  join_start(&s.r[2], 12, 0, false, 200);
  assert_int_equal(join_wait(&s.r[2]), GANG_TIMEOUT);
  gt_nap_ms(SLOW_TICK + 100);
  int64_t died = noticed_once_dies(&s);
  int64_t noticed = await_notice(s.watch, &s.cursor, "dies");
  double notice_ms = (double)(noticed - died) / 1e6;
  printf("replica back from a notice, in a quorum and dead: second notice "
         "%.1f ms after it died (suspect grace %d ms, tick %d ms)\n",
         notice_ms, GANG__LH_SUSPECT_MS, SLOW_TICK);
  assert_int_equal(s.cursor, 2);
  assert_true(notice_ms <= GANG__LH_SUSPECT_MS + 2 * SLOW_TICK + 500);
  noticed_once_free(&s);
}

/* A replica back from a stop that dies at once: the store server's report
 * of its closed connections can reach the lighthouse at the same tick as
 * its first beat since the stop, or before it. The report must count (the
 * replica was only not yet seen alive again), or the quorum that took it
 * back waits out the heartbeat timeout. */
static void test_report_before_the_beat(void **state) {
  (void)state;
  noticed_once s;
  noticed_once_start(&s);
  /* Back: a join (which beats first) that gives up at once, and dead, all
   * between two ticks. */
  join_start(&s.r[2], 12, 0, false, 20);
  assert_int_equal(join_wait(&s.r[2]), GANG_TIMEOUT);
  int64_t died = noticed_once_dies(&s);
  int64_t noticed = await_notice(s.watch, &s.cursor, "dies");
  double notice_ms = (double)(noticed - died) / 1e6;
  printf("replica back from a stop and dead at once: notice %.1f ms after "
         "its connections closed (suspect grace %d ms, heartbeat timeout %d "
         "ms, tick %d ms)\n",
         notice_ms, GANG__LH_SUSPECT_MS, HB_TIMEOUT, SLOW_TICK);
  /* The report's grace and a tick, not the heartbeat timeout. */
  assert_true(notice_ms < HB_TIMEOUT);
  noticed_once_free(&s);
}

/* A replica whose process dies right after a heartbeat (a group killed
 * just after it started: its join and first beats come in a burst): the
 * store server reports its connections' departure, and the lighthouse
 * must count it dead after the suspect grace, not after the heartbeat
 * timeout -- the beat it sent just before dying is no sign of life. */
static void test_death_right_after_a_beat(void **state) {
  (void)state;
  replica r[3];
  gang_lighthouse *lh = three_in_quorum(r);
  gang__lh_client *watch;
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", gang_lighthouse_port(lh));
  assert_gang_ok(gang__lh_connect(addr, CLIENT_MS, &watch));
  int64_t cursor = 0;
  join_start(&r[0], 11, 0, false, 20000);
  join_start(&r[1], 11, 0, false, 20000);
  replica_silence(&r[2]);
  /* Let a tick read its counter, then beat and close at once, between two
   * ticks. */
  gt_nap_ms(2 * TICK);
  assert_gang_ok(gang__lh_heartbeat(r[2].hb, "dies"));
  int64_t died = gang__now_ns();
  gang__lh_close(r[2].hb);
  gang__lh_close(r[2].jc);
  r[2].hb = r[2].jc = NULL;
  int64_t noticed = await_notice(watch, &cursor, "dies");
  join_ok(&r[0]);
  join_ok(&r[1]);
  double notice_ms = (double)(noticed - died) / 1e6;
  printf("replica dead right after a beat: failure notice %.1f ms after its "
         "connections closed (suspect grace %d ms, heartbeat timeout %d ms, "
         "tick %d ms)\n",
         notice_ms, GANG__LH_SUSPECT_MS, HB_TIMEOUT, TICK);
  assert_true(notice_ms >= GANG__LH_SUSPECT_MS - 5);
  assert_true(notice_ms < HB_TIMEOUT - 2 * TICK);
  assert_string_equal(ids_of(&r[0].q), "a,b");
  gang__lh_close(watch);
  for (int i = 0; i < 3; i++)
    replica_free(&r[i]);
  gang_lighthouse_stop(lh);
}

static void test_split_brain_guard(void **state) {
  (void)state;
  gang_lighthouse *lh = lh_start(0, 1, 200, NULL);
  replica r[4];
  const char *ids[] = {"a", "b", "c", "d"};
  for (int i = 0; i < 4; i++)
    replica_start(&r[i], lh, ids[i]);
  /* 2 of 4 heartbeating: no quorum, even well past the join timeout. */
  join_start(&r[0], 0, 0, false, 1000);
  join_start(&r[1], 0, 0, false, 1000);
  assert_int_equal(join_wait(&r[0]), GANG_TIMEOUT);
  assert_int_equal(join_wait(&r[1]), GANG_TIMEOUT);
  assert_non_null(strstr(r[0].jerr, "no quorum including 'a'"));
  /* One of the others dies: 2 of the 3 left heartbeating are more than
   * half, and form a quorum (the other one, alive, is left out). */
  join_start(&r[0], 0, 0, false, 20000);
  join_start(&r[1], 0, 0, false, 20000);
  int64_t last = replica_silence(&r[2]);
  join_ok(&r[0]);
  join_ok(&r[1]);
  assert_string_equal(ids_of(&r[0].q), "a,b");
  /* Not before its heartbeat expired. */
  printf("split brain: 2 of 4 waited; 2 of 3 formed a quorum %.1f ms after "
         "the last heartbeat of the one that died\n",
         ms_since(last));
  assert_true(ms_since(last) >= HB_TIMEOUT - 5);
  for (int i = 0; i < 4; i++)
    replica_free(&r[i]);
  gang_lighthouse_stop(lh);
}

static void test_restart_is_new_incarnation(void **state) {
  (void)state;
  gang_lighthouse *lh = lh_start(0, 2, 20000, NULL);
  int port = gang_lighthouse_port(lh);
  replica r[2];
  replica_start(&r[0], lh, "x");
  replica_start(&r[1], lh, "y");
  round_all(r, 2, 0);
  round_all(r, 2, 1);
  assert_int_equal(r[0].q.quorum_id, 2);
  uint64_t inc1 = gang__lh_incarnation(r[0].jc);
  for (int i = 0; i < 2; i++)
    replica_silence(&r[i]);
  gang_lighthouse_stop(lh);
  /* The old connections are dead, with an error, not a hang. */
  assert_int_not_equal(gang__lh_heartbeat(r[0].hb, "x"), GANG_OK);
  for (int i = 0; i < 2; i++)
    replica_free(&r[i]);
  /* Same port, new lighthouse: clients reconnect and ids start again. */
  lh = lh_start(port, 2, 20000, NULL);
  replica_start(&r[0], lh, "x");
  replica_start(&r[1], lh, "y");
  assert_true(gang__lh_incarnation(r[0].jc) != inc1);
  round_all(r, 2, 0);
  assert_int_equal(r[0].q.quorum_id, 1);
  assert_true(r[0].q.incarnation == gang__lh_incarnation(r[0].jc));
  for (int i = 0; i < 2; i++)
    replica_free(&r[i]);
  gang_lighthouse_stop(lh);
}

/* A replica that joins twice in one round: the second join replaces the
 * first (torchft's lighthouse replaces the entry). Its commit failures
 * grew in between, so the quorum takes a new id, which the first join
 * alone would not give. */
static void test_second_join_replaces_the_first(void **state) {
  (void)state;
  gang_lighthouse *lh = lh_start(0, 2, 20000, "");
  replica r[2];
  replica_start(&r[0], lh, "twice:1");
  replica_start(&r[1], lh, "once:2");
  round_all(r, 2, 0);
  assert_int_equal(r[0].q.quorum_id, 1);
  int64_t round = r[0].q.round + 1;
  /* r[0] joins (no failures) and waits; r[1] has not joined: no quorum. */
  join_start(&r[0], 10, 0, false, 10000);
  char addr[64], key[GANG__LH_KEY_CAP];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", gang_lighthouse_port(lh));
  gang_store_options so = GANG_STORE_OPTIONS_INIT;
  so.secret = "";
  gang_store *st;
  assert_gang_ok(gang_store_connect(addr, &so, &st));
  snprintf(key, sizeof key, GANG__LH_KEY_JOIN, (long long)round, "twice:1");
  assert_gang_ok(gang_store_wait(st, (const char *const[]){key}, 1, 5000));
  /* The lighthouse takes the first join up at its next tick. */
  gt_nap_ms(4 * TICK);
  /* Its second join of the round, as a client that failed meanwhile. */
  gang__lh_member again = r[0].me;
  again.commit_failures = 1;
  char buf[1024];
  size_t n = gang__lh_member_encode(&again, buf, sizeof buf);
  assert_true(n > 0 && n < sizeof buf);
  assert_gang_ok(gang_store_set(st, key, buf, n));
  gang_store_close(st);
  join_start(&r[1], 10, 0, false, 10000);
  join_ok(&r[0]);
  join_ok(&r[1]);
  assert_int_equal(r[0].q.round, round);
  assert_int_equal(r[0].q.quorum_id, 2); /* the id moved */
  for (int i = 0; i < 2; i++)
    replica_free(&r[i]);
  gang_lighthouse_stop(lh);
}

static void test_old_rounds_collected(void **state) {
  (void)state;
  gang_lighthouse *lh = lh_start(0, 2, 20000, "");
  replica r[2];
  replica_start(&r[0], lh, "p");
  replica_start(&r[1], lh, "q");
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", gang_lighthouse_port(lh));
  gang_store_options so = GANG_STORE_OPTIONS_INIT;
  so.secret = "";
  gang_store *st;
  assert_gang_ok(gang_store_connect(addr, &so, &st));
  int64_t keys = 0, most = 0;
  for (int k = 0; k < 3 * GANG__LH_GC_ROUNDS; k++) {
    round_all(r, 2, 0);
    assert_gang_ok(gang_store_num_keys(st, &keys));
    most = keys > most ? keys : most;
  }
  /* incarnation, ids, round, beat, 2 counters and 2 datagram
   * confirmations, the suspects log, the kept quorums (and a join or two
   * of the next round). */
  printf("after %d rounds: %" PRId64 " keys (most %" PRId64 ")\n",
         3 * GANG__LH_GC_ROUNDS, keys, most);
  assert_true(most <= 9 + GANG__LH_GC_ROUNDS + 1 + 2);
  gang_store_close(st);
  for (int i = 0; i < 2; i++)
    replica_free(&r[i]);
  gang_lighthouse_stop(lh);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_quorum_forms_and_keeps_id),
      GT_TEST(test_dead_replica_noticed),
      GT_TEST(test_death_right_after_a_beat),
      GT_TEST(test_notice_again_after_a_return),
      GT_TEST(test_report_before_the_beat),
      GT_TEST(test_split_brain_guard),
      GT_TEST(test_restart_is_new_incarnation),
      GT_TEST(test_second_join_replaces_the_first),
      GT_TEST(test_old_rounds_collected),
  };
  sc_prime_threads();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
