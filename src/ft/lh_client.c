/* The client a manager speaks to the lighthouse with (lighthouse.h): one
 * store connection and the key schema, nothing else. Heartbeats are adds
 * on a counter; a quorum is a join record written under the current round
 * and a wait for that round's quorum record; failure notices are numbered
 * keys waited for in turn.
 *
 * Waits go in slices of at most a second, so that a wait for a round
 * whose quorum has been collected (the lighthouse deletes old rounds)
 * moves on to the current round instead of sitting out its deadline, and
 * so that the replica keeps heartbeating while it waits. */
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/hostport.h"
#include "core/log.h"
#include "core/settings.h"
#include "core/sock.h"
#include "gang/store.h"
#include "lh_impl.h"
#include "store/server.h"

#define SLICE_MS 1000

struct gang__lh_client {
  gang_store *st;
  char addr[GANG_SOCK_PEER_CAP];
  uint64_t incarnation;
  int64_t timeout_ms;
  char registered[GANG_LH_ID_MAX]; /* the id this client put in lh/ids */
  int64_t answered;                /* the counter in the last answered beat */
  int quiet_beats;                 /* beats sent since, unanswered */
  int store_adds;                  /* ... of them adds to the store */
  bool udp_ok;         /* the lighthouse counted this client's datagrams */
  int udp_probes;      /* answered beats that found them not counted yet */
  int udp;             /* connected to the lighthouse's beat socket; -1: none */
  gang__auth_key *key; /* tags datagrams; NULL: none */
};

/* A get that waits at most timeout_ms (0: not at all); the handle's
 * deadline is the client's again afterwards. */
static gang_status get_within(gang__lh_client *c, const char *key,
                              int64_t timeout_ms, void **v, size_t *n) {
  gang_store_set_timeout(c->st, timeout_ms < 0 ? 0 : timeout_ms);
  gang_status s = gang_store_get(c->st, key, v, n);
  gang_store_set_timeout(c->st, c->timeout_ms);
  return s;
}

static gang_status parse_incarnation(const char *v, size_t n, uint64_t *out) {
  if (n != 16)
    return GANG_PROTOCOL;
  uint64_t x = 0;
  for (size_t i = 0; i < n; i++) {
    char ch = v[i];
    int d = ch >= '0' && ch <= '9'   ? ch - '0'
            : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                                     : -1;
    if (d < 0)
      return GANG_PROTOCOL;
    x = x << 4 | (uint64_t)d;
  }
  *out = x;
  return GANG_OK;
}

/* When the lighthouse counts heartbeat datagrams (lh/beat), a UDP socket
 * connected to it; without one, beats go over the store. */
static void open_udp(gang__lh_client *c, const gang__hostport *hp) {
  void *v = NULL;
  size_t n = 0;
  if (get_within(c, GANG__LH_KEY_BEAT, 0, &v, &n) != GANG_OK)
    return;
  bool udp = n == 3 && memcmp(v, "udp", 3) == 0;
  gang_store_free(v);
  const char *secret = gang__setting_str(GANG_SETTING_STORE_SECRET);
  if (!udp ||
      (*secret != '\0' && gang__auth_key_new(secret, &c->key) != GANG_OK))
    return;
  char port[16];
  snprintf(port, sizeof port, "%d", hp->port);
  struct addrinfo hints = {.ai_socktype = SOCK_DGRAM,
                           .ai_flags = AI_NUMERICSERV};
  struct addrinfo *res = NULL;
  if (getaddrinfo(hp->host, port, &hints, &res) != 0)
    return;
  for (struct addrinfo *a = res; a != NULL && c->udp < 0; a = a->ai_next) {
    c->udp =
        socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (c->udp >= 0 && connect(c->udp, a->ai_addr, a->ai_addrlen) != 0) {
      close(c->udp);
      c->udp = -1;
    }
  }
  freeaddrinfo(res);
}

gang_status gang__lh_connect(const char *addr, int64_t timeout_ms,
                             gang__lh_client **out) {
  GANG_ARG_CHECK(addr != NULL, "gang__lh_connect", "addr is NULL");
  GANG_ARG_CHECK(out != NULL, "gang__lh_connect", "out is NULL");
  GANG_ARG_CHECK(timeout_ms > 0, "gang__lh_connect",
                 "timeout_ms %" PRId64 " is not positive", timeout_ms);
  gang__hostport hp;
  gang_status s = gang__hostport_parse(addr, 0, &hp, NULL);
  if (s != GANG_OK)
    return gang__error_wrap(s, "gang__lh_connect: lighthouse address '%s'",
                            addr);
  gang__lh_client *c = calloc(1, sizeof *c);
  if (c == NULL)
    return gang__error(GANG_NO_MEMORY, "gang__lh_connect: no memory");
  gang__sock_peer_name(hp.host, hp.port, c->addr, sizeof c->addr);
  c->timeout_ms = timeout_ms;
  c->udp = -1;
  gang_store_options so = GANG_STORE_OPTIONS_INIT;
  so.timeout_ms = timeout_ms;
  so.connect_timeout_ms = timeout_ms;
  s = gang_store_connect(c->addr, &so, &c->st);
  if (s != GANG_OK) {
    free(c);
    return gang__error_wrap(s, "lighthouse %s", addr);
  }
  void *v = NULL;
  size_t n = 0;
  s = gang_store_get(c->st, GANG__LH_KEY_INCARNATION, &v, &n);
  if (s == GANG_TIMEOUT)
    s = gang__error_wrap(s, "lighthouse %s: is it a lighthouse?", c->addr);
  else if (s == GANG_OK && parse_incarnation(v, n, &c->incarnation) != GANG_OK)
    s = gang__error(GANG_PROTOCOL,
                    "lighthouse %s: lh/incarnation is not 16 hex digits: is "
                    "it a lighthouse?",
                    c->addr);
  else if (s != GANG_OK)
    s = gang__error_wrap(s, "lighthouse %s", c->addr);
  gang_store_free(v);
  if (s != GANG_OK) {
    gang__lh_close(c);
    return s;
  }
  open_udp(c, &hp);
  *out = c;
  return GANG_OK;
}

void gang__lh_close(gang__lh_client *c) {
  if (c == NULL)
    return;
  gang_store_close(c->st);
  if (c->udp >= 0)
    close(c->udp);
  gang__auth_key_free(c->key);
  free(c);
}

void gang__lh_interrupt(gang__lh_client *c, const char *why) {
  if (c != NULL)
    gang__store_interrupt(c->st, why);
}

uint64_t gang__lh_incarnation(const gang__lh_client *c) {
  return c ? c->incarnation : 0;
}

const char *gang__lh_addr(const gang__lh_client *c) { return c ? c->addr : ""; }

/* The arguments every call naming a replica checks. */
static gang_status check_client_id(const gang__lh_client *c, const char *id,
                                   const char *fn) {
  GANG_ARG_CHECK(c != NULL, fn, "client is NULL");
  GANG_ARG_CHECK(id != NULL && gang__lh_id_valid(id, strlen(id)), fn,
                 "id is not a replica id (1..127 printable bytes, no spaces)");
  return GANG_OK;
}

/* Sends a beat datagram; false when datagrams cannot go (refused: no
 * beat socket there any more), and the client then beats over the store
 * from now on. */
static bool send_datagram(gang__lh_client *c, const char *id) {
  uint8_t buf[GANG__LH_BEAT_CAP];
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t seq = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
  size_t n =
      gang__lh_beat_encode(buf, sizeof buf, c->incarnation, seq, id, c->key);
  ssize_t w = n > 0 ? send(c->udp, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL) : -1;
  if (w == (ssize_t)n || (n > 0 && (errno == EAGAIN || errno == EINTR)))
    return true; /* sent, or lost as the network may lose it */
  close(c->udp);
  c->udp = -1;
  return false;
}

/* After an answered beat while datagrams are unconfirmed: the lighthouse
 * writes lh/udp/<id> once it has counted one. Without it after
 * GANG__LH_UDP_PROBES answered beats, they do not get through (a firewall
 * that drops UDP says nothing): over the store from now on. */
static gang_status check_datagrams(gang__lh_client *c, const char *id) {
  char key[GANG__LH_KEY_CAP];
  snprintf(key, sizeof key, GANG__LH_KEY_UDP, id);
  void *v = NULL;
  size_t n = 0;
  gang_status s = get_within(c, key, 0, &v, &n);
  gang_store_free(v);
  if (s == GANG_OK) {
    c->udp_ok = true;
    return GANG_OK;
  }
  if (s != GANG_TIMEOUT)
    return s;
  if (++c->udp_probes >= GANG__LH_UDP_PROBES) {
    GANG_INFO(FT,
              "lighthouse %s: its heartbeat datagrams do not arrive: '%s' "
              "beats over the store",
              c->addr, id);
    close(c->udp);
    c->udp = -1;
  }
  return GANG_OK;
}

/* A heartbeat; `answered` asks for the lighthouse's answer, which also
 * registers the id again if the lighthouse forgot it. Most beats are not
 * answered (an answer costs the lighthouse as much again as the beat: it
 * wakes the replica, and 1000 replicas beat 10000 times a second): they
 * are datagrams when the lighthouse takes them (one answered beat in 5
 * until they are seen to arrive, one in 100 after), else adds the store
 * does not answer. */
static gang_status beat(gang__lh_client *c, const char *id, bool answered) {
  GANG_CHECK(check_client_id(c, id, "gang__lh_heartbeat"));
  char key[GANG__LH_KEY_CAP];
  snprintf(key, sizeof key, GANG__LH_KEY_HB, id);
  bool known = strcmp(c->registered, id) == 0;
  int quiet =
      c->udp >= 0 && !c->udp_ok ? GANG__LH_PROBE_BEATS : GANG__LH_QUIET_BEATS;
  if (!answered && known && c->quiet_beats < quiet) {
    gang_status s = GANG_OK;
    /* A datagram says nothing of a lighthouse that went away: its store
     * connection does. */
    if (c->udp >= 0)
      s = gang__store_probe(c->st);
    if (s == GANG_OK && (c->udp < 0 || !send_datagram(c, id))) {
      s = gang__store_add_quiet(c->st, key, 1);
      c->store_adds++;
    }
    if (s != GANG_OK)
      return gang__error_wrap(s, "lighthouse %s: heartbeat of '%s'", c->addr,
                              id);
    c->quiet_beats++;
    return GANG_OK;
  }
  int64_t beats = 0;
  gang_status s = gang_store_add(c->st, key, 1, &beats);
  /* The store's counter grows by at least this client's beats that went
   * to it while the lighthouse knows the id: one that is lower started
   * again, because the lighthouse forgot a long-silent id (and deleted its
   * counter). Either way the id is registered (again). */
  bool reset = beats < c->answered + c->store_adds + 1;
  bool sent_datagrams = c->quiet_beats > c->store_adds;
  if (s == GANG_OK) {
    c->answered = beats;
    c->quiet_beats = 0;
    c->store_adds = 0;
  }
  if (s == GANG_OK && (reset || !known)) {
    char line[GANG_LH_ID_MAX + 1];
    int n = snprintf(line, sizeof line, "%s\n", id);
    s = gang_store_append(c->st, GANG__LH_KEY_IDS, line, (size_t)n);
    if (s == GANG_OK)
      snprintf(c->registered, sizeof c->registered, "%s", id);
  }
  if (s == GANG_OK && c->udp >= 0 && !c->udp_ok && sent_datagrams)
    s = check_datagrams(c, id);
  if (s != GANG_OK)
    return gang__error_wrap(s, "lighthouse %s: heartbeat of '%s'", c->addr, id);
  return GANG_OK;
}

gang_status gang__lh_heartbeat(gang__lh_client *c, const char *id) {
  return beat(c, id, false);
}

gang_status gang__lh_leave(gang__lh_client *c, const char *id) {
  GANG_CHECK(check_client_id(c, id, "gang__lh_leave"));
  char key[GANG__LH_KEY_CAP];
  snprintf(key, sizeof key, GANG__LH_KEY_HB, id);
  int64_t beats = 0;
  gang_status s = gang_store_add(c->st, key, GANG__LH_LEFT, &beats);
  if (s != GANG_OK)
    return gang__error_wrap(s, "lighthouse %s: leave of '%s'", c->addr, id);
  return GANG_OK;
}

gang_status gang__lh_suspect(gang__lh_client *c, const char *id) {
  GANG_CHECK(check_client_id(c, id, "gang__lh_suspect"));
  char line[GANG_LH_ID_MAX + 1];
  int n = snprintf(line, sizeof line, "%s\n", id);
  gang_status s =
      gang_store_append(c->st, GANG__LH_KEY_SUSPECTS, line, (size_t)n);
  if (s != GANG_OK)
    return gang__error_wrap(s, "lighthouse %s: report of '%s'", c->addr, id);
  return GANG_OK;
}

static bool includes(const gang__lh_quorum *q, const char *id) {
  for (int i = 0; i < q->n; i++)
    if (strcmp(q->members[i].replica_id, id) == 0)
      return true;
  return false;
}

static gang_status read_round(gang__lh_client *c, int64_t *round) {
  gang_status s = gang_store_add(c->st, GANG__LH_KEY_ROUND, 0, round);
  if (s == GANG_OK && *round < 0)
    s = gang__error(GANG_PROTOCOL, "lh/round is %" PRId64, *round);
  return s;
}

static gang_status join(gang__lh_client *c, int64_t round,
                        const gang__lh_member *me, const char *rec,
                        size_t len) {
  char key[GANG__LH_KEY_CAP];
  snprintf(key, sizeof key, GANG__LH_KEY_JOIN, (long long)round,
           me->replica_id);
  return gang_store_set(c->st, key, rec, len);
}

/* Waits for round `round`'s quorum until `deadline`, in slices. *q gets
 * it (GANG_OK); *next is set instead (GANG_OK, q->n == 0) when that round
 * is gone and the current one is to be joined. */
static gang_status await_round(gang__lh_client *c, const gang__lh_member *me,
                               int64_t round, int64_t deadline,
                               gang__lh_quorum *q, int64_t *next) {
  char key[GANG__LH_KEY_CAP];
  snprintf(key, sizeof key, GANG__LH_KEY_QUORUM, (long long)round);
  *next = -1;
  for (;;) {
    int64_t left = (deadline - gang__now_ns()) / 1000000;
    if (left <= 0)
      return GANG_TIMEOUT;
    void *v = NULL;
    size_t n = 0;
    gang_status s =
        get_within(c, key, left < SLICE_MS ? left : SLICE_MS, &v, &n);
    if (s == GANG_OK) {
      s = gang__lh_quorum_decode(v, n, q);
      gang_store_free(v);
      if (s == GANG_OK && q->incarnation != c->incarnation) {
        gang__lh_quorum_fini(q);
        s = gang__error(GANG_PROTOCOL,
                        "%s holds a quorum of another lighthouse (incarnation "
                        "%016" PRIx64 ", this one is %016" PRIx64 ")",
                        key, q->incarnation, c->incarnation);
      }
      return s;
    }
    if (s != GANG_TIMEOUT)
      return s;
    GANG_CHECK(beat(c, me->replica_id, true));
    int64_t now_round;
    GANG_CHECK(read_round(c, &now_round));
    if (now_round > round + GANG__LH_GC_ROUNDS) {
      /* The lighthouse keeps a round's quorum that many rounds: if it is
       * not there now, it was collected, and this round is over for us. */
      bool here = false;
      GANG_CHECK(gang_store_check(c->st, (const char *const[]){key}, 1, &here));
      if (!here) {
        *next = now_round;
        return GANG_OK;
      }
    }
  }
}

gang_status gang__lh_join(gang__lh_client *c, const gang__lh_member *me,
                          int64_t timeout_ms, gang__lh_quorum *out) {
  GANG_ARG_CHECK(c != NULL && me != NULL && out != NULL, "gang__lh_join",
                 "client, me or out is NULL");
  size_t idn = strnlen(me->replica_id, GANG_LH_ID_MAX);
  GANG_ARG_CHECK(gang__lh_id_valid(me->replica_id, idn), "gang__lh_join",
                 "me->replica_id is not a replica id (1..127 printable bytes, "
                 "no spaces)");
  GANG_ARG_CHECK(me->step >= 0 && me->commit_failures >= 0 &&
                     me->world_size >= 1,
                 "gang__lh_join",
                 "me has step %" PRId64 ", world_size %d, commit_failures "
                 "%" PRId64 " (need >= 0, >= 1, >= 0)",
                 me->step, me->world_size, me->commit_failures);
  if (timeout_ms < 0)
    timeout_ms = c->timeout_ms;
  int64_t t0 = gang__now_ns(), deadline = gang__deadline_in_ms(timeout_ms);
  char rec[512];
  size_t len = gang__lh_member_encode(me, rec, sizeof rec);
  /* Answered: a replica back from a long silence, whose id the
   * lighthouse forgot, is registered again before its join is read. */
  gang_status s = beat(c, me->replica_id, true);
  int64_t round = -1;
  if (s == GANG_OK)
    s = read_round(c, &round);
  while (s == GANG_OK) {
    s = join(c, round, me, rec, len);
    if (s != GANG_OK)
      break;
    gang__lh_quorum q;
    memset(&q, 0, sizeof q);
    int64_t next;
    s = await_round(c, me, round, deadline, &q, &next);
    if (s != GANG_OK)
      break;
    if (next >= 0) {
      round = next;
      continue;
    }
    if (includes(&q, me->replica_id)) {
      *out = q;
      return GANG_OK;
    }
    /* Left out (it joined too late, or shrink_only kept it out): the next
     * round, even before lh/round says so, rather than this one again. */
    gang__lh_quorum_fini(&q);
    s = read_round(c, &next);
    round = next > round ? next : round + 1;
  }
  if (s == GANG_TIMEOUT)
    return gang__error(GANG_TIMEOUT,
                       "lighthouse %s: no quorum including '%s' within "
                       "%" PRId64 " ms (waited for lh/r/%" PRId64 "/quorum)",
                       c->addr, me->replica_id, (gang__now_ns() - t0) / 1000000,
                       round);
  return gang__error_wrap(s, "lighthouse %s: quorum of '%s'", c->addr,
                          me->replica_id);
}

gang_status gang__lh_next_notice(gang__lh_client *c, int64_t *cursor, char *id,
                                 size_t cap, int64_t timeout_ms, bool *kill) {
  GANG_ARG_CHECK(c != NULL && cursor != NULL && id != NULL && cap > 0,
                 "gang__lh_next_notice", "client, cursor or id is NULL");
  GANG_ARG_CHECK(*cursor >= 0, "gang__lh_next_notice",
                 "*cursor %" PRId64 " is negative", *cursor);
  if (timeout_ms < 0)
    timeout_ms = c->timeout_ms;
  char key[GANG__LH_KEY_CAP];
  snprintf(key, sizeof key, GANG__LH_KEY_NOTICE, (long long)*cursor);
  void *v = NULL;
  size_t n = 0;
  gang_status s = get_within(c, key, timeout_ms, &v, &n);
  if (s == GANG_TIMEOUT && gang__store_broken(c->st))
    /* Not the lighthouse's "none yet": it stayed silent (stopped) past
     * the wait and its grace, and the connection is unusable. */
    return gang__error(GANG_PEER_LOST,
                       "lighthouse %s: waiting for failure notice %" PRId64
                       ": %s",
                       c->addr, *cursor, gang_last_error());
  if (s == GANG_TIMEOUT)
    return gang__error(GANG_TIMEOUT,
                       "lighthouse %s: no failure notice %" PRId64
                       " within %" PRId64 " ms",
                       c->addr, *cursor, timeout_ms);
  if (s != GANG_OK)
    return gang__error_wrap(s, "lighthouse %s: failure notice %" PRId64,
                            c->addr, *cursor);
  /* A malformed notice is passed over, so that the next call reads the
   * one after it rather than this one forever. */
  (*cursor)++;
  const size_t kp = sizeof GANG__LH_KILL - 1;
  bool killing = kill != NULL && n > kp && memcmp(v, GANG__LH_KILL, kp) == 0;
  if (kill != NULL)
    *kill = killing;
  if (killing) {
    memmove(v, (char *)v + kp, n - kp);
    n -= kp;
  }
  if (!gang__lh_id_valid(v, n)) {
    gang_store_free(v);
    return gang__error(GANG_PROTOCOL,
                       "lighthouse %s: failure notice %" PRId64
                       " is not a replica id",
                       c->addr, *cursor - 1);
  }
  size_t k = n < cap - 1 ? n : cap - 1;
  memcpy(id, v, k);
  id[k] = '\0';
  gang_store_free(v);
  return GANG_OK;
}
