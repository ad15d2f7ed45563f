/* What the lighthouse's files share beyond lighthouse.h: the key names,
 * the replica id rule, and the status the quorum thread (lighthouse.c)
 * publishes for the HTTP thread (lh_http.c) to render.
 *
 * The status is the one piece of state two threads touch: the quorum
 * thread replaces its contents under `mu` once per tick, the HTTP thread
 * renders it under `mu` on a request. Everything else of the lighthouse
 * belongs to the quorum thread alone. */
#ifndef GANG_FT_LH_IMPL_H
#define GANG_FT_LH_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gang/store.h"
#include "lh_beats.h"
#include "lighthouse.h"

/* Keys (lighthouse.h lists them with their meaning). */
#define GANG__LH_KEY_INCARNATION "lh/incarnation"
#define GANG__LH_KEY_IDS "lh/ids"
#define GANG__LH_KEY_SUSPECTS "lh/suspects"
/* A replica a peer reported lost that has not beaten for this long is
 * dead, without waiting for its heartbeat timeout (3 beats at the
 * managers' default 100 ms; never more than half the timeout). */
#define GANG__LH_SUSPECT_MS 300
#define GANG__LH_KEY_ROUND "lh/round"
/* "udp" when the lighthouse counts heartbeat datagrams (lh_beats.c). */
#define GANG__LH_KEY_BEAT "lh/beat"
/* Written once by the lighthouse when it has counted a datagram of the
 * replica: the client's datagrams get through. */
#define GANG__LH_KEY_UDP "lh/udp/%s"
#define GANG__LH_KEY_HB_PREFIX "lh/hb/"
#define GANG__LH_KEY_HB GANG__LH_KEY_HB_PREFIX "%s"
/* Added to a heartbeat counter by a replica that leaves: a negative
 * counter is a replica gone at once (no heartbeat timeout to wait). */
#define GANG__LH_LEFT (INT64_MIN / 2)
#define GANG__LH_KEY_JOIN "lh/r/%lld/join/%s"
#define GANG__LH_KEY_QUORUM "lh/r/%lld/quorum"
#define GANG__LH_KEY_NOTICE "lh/notice/%lld"
/* Heartbeats sent without an answer between two answered ones: an
 * answered beat every 10 s at the managers' default 100 ms (lh_client.c;
 * a join's beat is always answered). The answer tells a client whether
 * the lighthouse forgot its id; a lighthouse that closed the connection
 * is seen at the next beat anyway. */
#define GANG__LH_QUIET_BEATS 99
/* Until a client's datagrams are seen to arrive (lh/udp/<id>), one beat in
 * 5 is answered, and after that many answered beats without them, the
 * client beats over the store: 1.5 s at 100 ms, a third of the default
 * heartbeat timeout, so that a network that drops UDP costs no replica. */
#define GANG__LH_PROBE_BEATS 4
#define GANG__LH_UDP_PROBES 3
/* Room for any of them with a valid id. */
#define GANG__LH_KEY_CAP (GANG_LH_ID_MAX + 64)

/* Most members a quorum record may carry: far beyond any job (one per
 * replica group), small enough that a hostile count cannot make a decoder
 * allocate much. */
#define GANG__LH_MAX_MEMBERS 65536

/* Whether text[0..len) is a replica id: 1..GANG_LH_ID_MAX-1 printable
 * ASCII bytes without spaces. Ids go into keys, record lines (spaces
 * separate fields) and the status page, so nothing else is let in. */
bool gang__lh_id_valid(const char *text, size_t len);

/* Milliseconds on the monotonic clock (heartbeat ages, join times). */
int64_t gang__lh_now_ms(void);

/* ---- Status (quorum thread -> HTTP thread) ------------------------------ */

#define GANG__LH_HISTORY 10  /* quorum changes the status page shows */
#define GANG__LH_EVENTS 64   /* events it keeps, newest first */
#define GANG__LH_SAMPLES 600 /* chart points: 10 min at one a second */

typedef struct gang__lh_status_rep {
  char id[GANG_LH_ID_MAX];
  bool has_member; /* step and world_size come from a join seen */
  int64_t step;
  int world_size;
  int64_t last_beat_ms; /* monotonic; INT64_MIN: never */
  bool joined;          /* joined the current round */
  bool in_quorum;       /* member of the last quorum */
  bool healthy;         /* heartbeat within the timeout at the publish */
} gang__lh_status_rep;

typedef struct gang__lh_status_quorum {
  int64_t quorum_id, round;
  int64_t wall_ms; /* when it formed, Unix time in ms */
  int n;
  char (*ids)[GANG_LH_ID_MAX]; /* malloc'd */
} gang__lh_status_quorum;

/* What an operator wants to see happen: a quorum change (members in and
 * out), a replica lost (its heartbeat expired) or back, a failure notice,
 * a member that heals (behind the quorum's step), a replica killed from
 * the page. */
typedef struct gang__lh_status_event {
  int64_t wall_ms; /* Unix time */
  char kind[12];   /* quorum, lost, back, notice, heal, new, kill */
  char text[240];
} gang__lh_status_event;

/* One point of the chart: the last quorum's step (its members' highest)
 * and its size. */
typedef struct gang__lh_status_sample {
  int64_t wall_ms, step;
  int members;
} gang__lh_status_sample;

typedef struct gang__lh_status {
  pthread_mutex_t mu;
  uint64_t incarnation;
  int min_replicas;
  int64_t join_timeout_ms, heartbeat_timeout_ms, quorum_tick_ms;
  int64_t quorum_id; /* 0 before the first quorum */
  int64_t round;
  char waiting[256]; /* why the current round has no quorum yet */
  gang__lh_status_rep *reps;
  int nreps, cap;
  gang__lh_status_quorum hist[GANG__LH_HISTORY]; /* [0] is the newest */
  int nhist;
  /* Rings: entry k of all time at [k % size]; n counts all time. */
  gang__lh_status_event events[GANG__LH_EVENTS];
  int64_t nevents;
  gang__lh_status_sample samples[GANG__LH_SAMPLES];
  int64_t nsamples;
  bool allow_kill; /* the page may kill a replica (drills) */
  /* Kills asked for by the page, sent by the next tick (lh_tick.c). */
  char kills[8][GANG_LH_ID_MAX];
  int nkills;
} gang__lh_status;

/* Adds an event (the caller holds s->mu). */
void gang__lh_status_add_event(gang__lh_status *s, int64_t wall_ms,
                               const char *kind, const char *fmt, ...)
    GANG_PRINTF(4, 5);

/* Unix time in ms (the page's clock; heartbeats use gang__lh_now_ms). */
int64_t gang__lh_wall_ms(void);

void gang__lh_status_init(gang__lh_status *s);
void gang__lh_status_fini(gang__lh_status *s);

/* Renders the status as JSON (/status) or HTML (/); the caller holds
 * s->mu. Returns malloc'd text (*len bytes, NUL-terminated) or NULL when
 * out of memory. */
char *gang__lh_status_json(const gang__lh_status *s, int64_t now_ms,
                           size_t *len);
char *gang__lh_status_html(const gang__lh_status *s, int64_t now_ms,
                           size_t *len);

/* ---- HTTP status server (lh_http.c) ------------------------------------- */

typedef struct gang__lh_http gang__lh_http;

/* Listens on host:port (port 0: any free port) and serves `status`
 * (borrowed: it must outlive the server) from a thread of its own. */
gang_status gang__lh_http_start(const char *host, int port,
                                gang__lh_status *status, gang__lh_http **out);
int gang__lh_http_port(const gang__lh_http *h);
/* Closes every connection, joins the thread, frees it (NULL is fine). */
void gang__lh_http_stop(gang__lh_http *h);

/* ---- The lighthouse (lighthouse.c: thread, start, stop; lh_tick.c: what
 * a tick reads and writes). Only its thread touches it after start. ---- */

#define GANG__LH_CALL_MS 5000      /* deadline of the thread's store calls */
#define GANG__LH_GC_ROUNDS 16      /* quorum records kept for late readers */
#define GANG__LH_MAX_REPLICAS 4096 /* ids tracked at once */
/* Slots of the id -> index table (a power of two, twice the ids). */
#define GANG__LH_INDEX_SLOTS (2 * GANG__LH_MAX_REPLICAS)

/* What the thread keeps per replica beyond gang__lh_replica. */
typedef struct gang__lh_extra {
  int64_t beats;      /* last counter read; -1: not read yet */
  int64_t seen_ms;    /* when the id was registered */
  bool bad_join;      /* this round's join record was malformed */
  bool noticed;       /* a failure notice went out since it was last healthy */
  bool has_member;    /* reps[i].member holds a join seen in some round */
  int64_t join_round; /* the round of the join it is joined with */
  int64_t suspect_ms; /* a peer reported it lost then (0: none) */
  int64_t suspect_beats; /* ... when its counter read this */
  bool in_prev;  /* a member of the last quorum (set when either changes) */
  bool udp_seen; /* lh/udp/<id> written */
} gang__lh_extra;

struct gang_lighthouse {
  gang__lh_config cfg;
  int64_t tick_ms;
  gang_store_server *srv;
  gang__lh_beats *beats; /* heartbeats by datagram; NULL: none */
  gang_store *st; /* NULL after a failure: reconnected at the next tick */
  char self[300]; /* "host:port" of its own server */
  char *secret;   /* NULL: GANG_STORE_SECRET */
  gang__lh_http *http;
  gang__lh_status status;
  pthread_t thread;
  bool running;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stop;
  uint64_t incarnation;
  int64_t round, quorum_id, notices;
  gang__lh_quorum prev; /* n == 0: no quorum yet */
  gang__lh_replica *reps;
  gang__lh_extra *ext; /* beside reps, which gang__lh_compute takes */
  int nreps;
  int *index;       /* GANG__LH_INDEX_SLOTS: reps' indices by id, -1 empty */
  bool index_stale; /* reps changed since it was built */
  size_t ids_off;   /* bytes of lh/ids already read */
  int64_t last_warn_ms;
  int64_t last_tick_ms;  /* when the last tick ended (0: none yet) */
  int64_t beats_read_ms; /* when the counters were last read (0: never) */
  char why[256];
};

/* ---- What a tick reads (lh_read.c) ---- */

/* reps' index of replica `id`, -1 when unknown (a hash table, rebuilt
 * after index_stale). */
int gang__lh_find(gang_lighthouse *L, const char *id);
/* Whether reps[i] beat within the heartbeat timeout. */
bool gang__lh_healthy(const gang_lighthouse *L, int i, int64_t now);
/* Whether `id` is a member of the last quorum. */
bool gang__lh_in_prev(const gang_lighthouse *L, const char *id);
/* bsearch's comparison of an id with a gang__lh_member. */
int gang__lh_cmp_member_id(const void *key, const void *m);
/* Every heartbeat counter, and every join that may be there, in one read
 * each. */
gang_status gang__lh_read_beats(gang_lighthouse *L, int64_t now);
gang_status gang__lh_read_joins(gang_lighthouse *L, int64_t now);

/* One tick: reads ids, heartbeats and joins, sends failure notices,
 * forms and publishes a quorum when there is one. A failed store call
 * ends it (the caller replaces the connection). */
gang_status gang__lh_tick(gang_lighthouse *L);

/* The join keys worth waiting for until the next tick: those still
 * missing of the last quorum's members, when all of them are healthy (a
 * fast quorum is possible: it forms as soon as the last of them joins)
 * and there are at most GANG__LH_FAST_MAX members (a wait parks on every
 * missing key and ends every tick: with more, the cost grows with them
 * each tick, and the tick itself decides within one). Returns how many,
 * in *keys (malloc'd, GANG__LH_KEY_CAP bytes each); 0 when none. */
#define GANG__LH_FAST_MAX 64
int gang__lh_fast_keys(gang_lighthouse *L, int64_t now, char **keys);

/* Copies the thread's view into L->status for the status page. */
void gang__lh_publish_status(gang_lighthouse *L);

#endif
