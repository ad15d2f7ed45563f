/* The lighthouse's internals (gang/ft.h has its public face): the quorum
 * computation, pure and testable; and the client a manager speaks to it
 * with.
 *
 * The lighthouse speaks through an ordinary store server (src/store): its
 * framing, HMAC authentication, caps and deadlines, with no protocol of its
 * own. Replicas write and wait for keys; the lighthouse's thread reads them
 * every tick through a store client of its own, computes quorums and
 * writes them back. The keys (docs/fault-tolerance.md):
 *
 *   lh/incarnation          16 hex digits, set once at start: the start
 *                           time (ms, high 48 bits) and 16 random bits; a
 *                           restarted lighthouse is a new, later one
 *                           (quorum ids restart)
 *   lh/ids                  append log of "<replica_id>\n", one line per
 *                           replica, written at its first heartbeat
 *   lh/hb/<replica_id>      heartbeat counter (store add 1 per beat;
 *                           negative: the replica left)
 *   lh/round                the current round (add 0 reads it)
 *   lh/r/<round>/join/<id>  a replica's join of that round (member record)
 *   lh/r/<round>/quorum     the quorum formed in that round (quorum record)
 *   lh/notice/<k>           k-th failure notice: the replica id whose
 *                           heartbeat expired while it was in the last
 *                           quorum (k = 0, 1, ...)
 *   lh/suspects             append log of "<replica_id>\n": replicas a
 *                           peer saw die (a connection that ended without
 *                           a goodbye); the lighthouse consumes it
 *   rdzv/...                free for replica gangs' rendezvous (the
 *                           manager's replica gang uses
 *                           rdzv/<incarnation>/q<quorum_id>/g<group_rank>)
 *
 * Records are text, one "key=value" per line, so the status page and a
 * person with gang-store can read them. */
#ifndef GANG_FT_LIGHTHOUSE_H
#define GANG_FT_LIGHTHOUSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gang/ft.h"
#include "gang/status.h"

#define GANG_LH_ID_MAX 128

/* What a replica group joins a round with (torchft's QuorumMember). */
typedef struct gang__lh_member {
  char replica_id[GANG_LH_ID_MAX]; /* "name:suffix" */
  int64_t step;                    /* committed steps */
  int world_size;                  /* ranks in the group */
  bool shrink_only;
  int64_t commit_failures; /* consecutive failed commits */
  /* The quorum id its last step was committed in, under this lighthouse
   * incarnation (0: none, or under an earlier one). Two replicas at one
   * step that committed it in different quorums hold different states: a
   * replica stopped after its all_reduce commits in the old quorum while
   * the survivors, told of its death, redo the step in a new one. The
   * newer commit is the one that went on; the others heal from it. The
   * field is optional in records (0 when absent). */
  int64_t commit_quorum;
  /* ... and the incarnation of the lighthouse that formed that quorum
   * (0: none). Incarnations are ordered by the lighthouse's start time
   * (their high 48 bits are its wall clock in ms), so the pair orders
   * commits across lighthouse restarts too: two replicas at one step that
   * committed it in quorums of different lighthouses are told apart, and
   * the later commit wins. Optional in records. */
  uint64_t commit_inc;
} gang__lh_member;

/* A quorum (torchft's Quorum): members sorted by replica_id. */
typedef struct gang__lh_quorum {
  int64_t quorum_id;
  uint64_t incarnation; /* the lighthouse's */
  int64_t round;
  int n;
  gang__lh_member *members; /* malloc'd; gang__lh_quorum_fini frees */
  /* Failure notices the lighthouse had sent when it computed the quorum:
   * those concern earlier quorums (a replica they name that is a member
   * here came back), so a manager takes notices from this one on. 0 in
   * a record without the field: every notice counts. */
  int64_t notices;
} gang__lh_quorum;

void gang__lh_quorum_fini(gang__lh_quorum *q);

/* Record encoding (text lines). Decoding checks every field and length and
 * fails with GANG_PROTOCOL naming what is wrong. */
size_t gang__lh_member_encode(const gang__lh_member *m, char *buf, size_t cap);
gang_status gang__lh_member_decode(const char *buf, size_t len,
                                   gang__lh_member *out);
/* Returns malloc'd text (*len bytes, NUL-terminated); NULL when out of
 * memory. */
char *gang__lh_quorum_encode(const gang__lh_quorum *q, size_t *len);
gang_status gang__lh_quorum_decode(const char *buf, size_t len,
                                   gang__lh_quorum *out);

/* ---- The computation (torchft's quorum_compute), pure ---------------------
 */

typedef struct gang__lh_config {
  int min_replicas;
  int64_t join_timeout_ms;
  int64_t heartbeat_timeout_ms;
} gang__lh_config;

/* A replica the lighthouse knows of. */
typedef struct gang__lh_replica {
  gang__lh_member member; /* the join's record (when joined) */
  int64_t last_beat_ms;   /* when its heartbeat last changed */
  bool joined;            /* joined the current round */
  int64_t joined_ms;      /* when its join was seen */
} gang__lh_replica;

/* Decides whether the joined replicas make a quorum at `now_ms`, given the
 * previous quorum (NULL: none yet):
 *  1. healthy = heartbeat younger than the timeout; candidates = healthy
 *     joined replicas, by replica_id;
 *  2. if any candidate is shrink_only and there is a previous quorum, only
 *     its members stay;
 *  3. fast quorum: every previous member is a healthy candidate: done, with
 *     any newcomers (min_replicas and the join timeout are skipped);
 *  4. fewer healthy joined replicas than min_replicas: wait;
 *  5. split-brain guard: healthy joined <= healthy heartbeating / 2: wait;
 *     (4 and 5 count before step 2's filter, as torchft does: a shrink_only
 *     quorum may then be smaller than min_replicas, but newcomers it keeps
 *     out cannot hold it up for ever)
 *  6. a healthy replica has not joined and the earliest join is younger
 *     than the join timeout: wait for it;
 *  7. done.
 * reps' ids are unique; prev's members are sorted by id, as every quorum
 * is. On a quorum, *members (malloc'd, sorted by id, *n of them) and true;
 * otherwise false and *why says what it waits for (for the status page). */
bool gang__lh_compute(const gang__lh_config *cfg, const gang__lh_replica *reps,
                      int nreps, const gang__lh_quorum *prev, int64_t now_ms,
                      gang__lh_member **members, int *n, char *why,
                      size_t why_cap);

/* Whether a quorum of `members` takes a new id after `prev`: its id list
 * changed, or a member reports commit failures. */
bool gang__lh_new_id(const gang__lh_quorum *prev,
                     const gang__lh_member *members, int n);

/* The members of q that are up to date (torchft's max-step members, with
 * the commit check of gang__lh_member.commit_quorum): at the highest step,
 * and among those, committed in the latest quorum (incarnation, then
 * quorum id); the others heal from them. up[i] for each member; returns
 * how many, and the highest step in *max_step. Pure. */
int gang__lh_up_to_date(const gang__lh_quorum *q, int64_t *max_step, bool *up);

/* ---- The client ---------------------------------------------------------- */

/* A client is one store connection: one thread at a time (a manager keeps
 * one per thread: its heartbeat, its quorum, its notice watcher). */
typedef struct gang__lh_client gang__lh_client;

/* Connects to the lighthouse at "host:port" (its store), with `timeout_ms`
 * for the connection and as the default deadline of every call. */
gang_status gang__lh_connect(const char *addr, int64_t timeout_ms,
                             gang__lh_client **out);
void gang__lh_close(gang__lh_client *c);

/* The lighthouse's incarnation (read at connect). */
uint64_t gang__lh_incarnation(const gang__lh_client *c);

/* One heartbeat of replica `id` (the first also registers it). */
gang_status gang__lh_heartbeat(gang__lh_client *c, const char *id);

/* Replica `id` leaves: the lighthouse counts it dead at its next tick
 * (no heartbeat timeout), sends the failure notice if it was in the last
 * quorum, and leaves it out of the next. Its heartbeats after this count
 * for nothing. */
gang_status gang__lh_leave(gang__lh_client *c, const char *id);

/* Reports replica `id` lost: a member of its quorum saw its connection end
 * without a goodbye (it crashed). The lighthouse's store server reports the
 * same on its own when a connection that beat for `id` closes. If `id` is
 * counted alive and its heartbeat counter does not move for
 * GANG__LH_SUSPECT_MS, the lighthouse counts it dead then, instead of after
 * its heartbeat timeout; a replica that still beats is unaffected. */
gang_status gang__lh_suspect(gang__lh_client *c, const char *id);

/* Joins the current round as `me` (also a heartbeat) and waits up to
 * timeout_ms for a quorum that includes it; a round whose quorum left it
 * out is joined again. *out receives the quorum (gang__lh_quorum_fini). */
gang_status gang__lh_join(gang__lh_client *c, const gang__lh_member *me,
                          int64_t timeout_ms, gang__lh_quorum *out);

/* A notice that kills a replica group from the status page (a drill):
 * this prefix, then its id (ids have no spaces). */
#define GANG__LH_KILL "!kill "

/* Waits up to timeout_ms for failure notice *cursor (0 first); on one,
 * copies the dead replica's id to id[0..cap), advances *cursor and returns
 * GANG_OK; GANG_TIMEOUT when none came. *kill (may be NULL: such notices
 * are then passed over as malformed) says the notice asks replica `id` to
 * kill itself instead (gang_lighthouse_options.allow_kill). */
gang_status gang__lh_next_notice(gang__lh_client *c, int64_t *cursor, char *id,
                                 size_t cap, int64_t timeout_ms, bool *kill);

/* Ends the client's connection from any thread: its call in flight (a
 * long wait for a notice) and every later one fail at once. NULL is fine;
 * c must not be closed meanwhile. */
void gang__lh_interrupt(gang__lh_client *c, const char *why);

/* How long a manager's notice watcher waits for the next notice in one
 * request: long, since each wait that ends empty costs the lighthouse a
 * reply (1000 replicas at 500 ms were 2000 a second); the manager's
 * destruction interrupts it. */
#define GANG__LH_NOTICE_WAIT_MS 30000

/* "host:port" of the lighthouse's store, for replica gangs' rendezvous
 * under rdzv/. */
const char *gang__lh_addr(const gang__lh_client *c);

#endif
