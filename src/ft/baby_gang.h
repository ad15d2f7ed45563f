/* The parent half of the subprocess gang: its state, shared by the files
 * that make it up. baby_works.c runs works (posting, answers, shared
 * memory); baby.c is the gang's life (create, configure, abort, destroy)
 * and its table of operations. Everything here is used with
 * baby_gang.mu held. */
#ifndef GANG_FT_BABY_GANG_H
#define GANG_FT_BABY_GANG_H

#include "baby.h"

typedef struct baby_child {
  baby_proc p;
  TAILQ_HEAD(, gang_work) queue; /* posted, not completed, in order */
  uint64_t next_seq;
  size_t tail;      /* end of the newest region: the next one starts here */
  bool reading;     /* a thread reads answers without the lock */
  int sending;      /* threads waiting to send without the lock */
  bool retired;     /* replaced (configure) */
  bool dead;        /* killed or exited, and reaped */
  gang_status fate; /* what its works fail with once dead */
  char why[640];
  struct baby_child *next;
} baby_child;

typedef struct baby_gang {
  pthread_mutex_t mu;
  pthread_cond_t cv;   /* a reader finished (CLOCK_MONOTONIC) */
  baby_child *current; /* NULL: unconfigured */
  baby_child *retired; /* replaced ones with works outstanding */
  gang_options opts;
  char host[256];
} baby_gang;

/* A work's state, in its inline_state. */
typedef struct baby_work {
  baby_child *ch;
  uint64_t seq;
  size_t off, len;         /* its region of the memfd */
  size_t out_off, out_len; /* where its result lies */
} baby_work;

_Static_assert(sizeof(baby_work) <= sizeof(((gang_work *)0)->inline_state),
               "a work's state fits in the work");

/* Kills ch (if it is not dead already) and records why its works fail. */
void gang__baby_kill_child(baby_child *ch, gang_status fate, const char *fmt,
                           ...) GANG_PRINTF(3, 4);

/* Fails every queued work of a dead child with its fate. */
void gang__baby_fail_all(baby_child *ch);

/* Frees a retired child nothing refers to any more. */
void gang__baby_drop_if_idle(baby_gang *b, baby_child *ch);

/* The operations on works (gang__ops). */
gang_status gang__baby_post(gang_t *g, const gang__coll *c, gang_work *w);
gang_status gang__baby_wait(gang_work *w, int64_t deadline);
void gang__baby_test(gang_work *w);

#endif
