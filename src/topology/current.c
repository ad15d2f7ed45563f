/* Current gangs: what training code on this thread should use for a
 * device, without threading a gangs value through every call (fairseq2's
 * set_gangs / get_current_gangs / set_default_gangs / get_default_gangs).
 *
 * Process-wide state lives here and only here (STYLE rule 11): the default
 * gangs per device and the cached fake gangs per device, under one lock.
 * Per-thread state is a stack created on the first push of each thread
 * (fairseq2 created its thread-local list at import, so threads other than
 * the main one crashed) and freed when it empties or the thread exits. */
#include "gang/topology.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

typedef struct entry {
  gang_device device;
  gangs gs;
} entry;

typedef struct table {
  entry *items;
  int n, cap;
} table;

/* The thread's pushes, newest last; entries for all devices interleave,
 * and a lookup takes the newest one for its device, which is what
 * per-device stacks give when pushes and pops nest. */
static _Thread_local table *t_stack;
/* What gangs_current returns: a copy, so the caller's pointer stays valid
 * while the stack or the defaults change underneath. */
static _Thread_local gangs t_result;

static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_key;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static table g_defaults; /* guarded by g_mu */
static table g_fakes;    /* guarded by g_mu; never freed (the cache) */

static void stack_free(void *p) {
  table *t = p;
  if (t != NULL)
    free(t->items);
  free(t);
}

static void make_key(void) { pthread_key_create(&g_key, stack_free); }

static bool same_device(gang_device a, gang_device b) {
  /* CPU has no meaningful index ("cpu" in torch); CUDA devices differ by
   * index. */
  return a.type == b.type && (a.type == GANG_DEVICE_CPU || a.index == b.index);
}

static int find(const table *t, gang_device device) {
  for (int i = t->n - 1; i >= 0; i--)
    if (same_device(t->items[i].device, device))
      return i;
  return -1;
}

static gang_status append(table *t, gang_device device, const gangs *gs) {
  if (t->n == t->cap) {
    int cap = t->cap ? 2 * t->cap : 4;
    entry *items = realloc(t->items, sizeof *items * (size_t)cap);
    if (items == NULL)
      return gang__error(GANG_NO_MEMORY, "current gangs: out of memory");
    t->items = items;
    t->cap = cap;
  }
  t->items[t->n++] = (entry){device, *gs};
  return GANG_OK;
}

gang_status gangs_push_current(const gangs *gs) {
  const char *fn = "gangs_push_current";
  GANG_ARG_CHECK(gs != NULL, fn, "gangs is NULL");
  GANG_ARG_CHECK(gs->root != NULL, fn, "gangs has no root gang");
  if (t_stack == NULL) {
    pthread_once(&g_key_once, make_key);
    table *t = calloc(1, sizeof *t);
    if (t == NULL)
      return gang__error(GANG_NO_MEMORY, "%s: out of memory", fn);
    /* Registered so a thread that exits with pushes left frees them. */
    if (pthread_setspecific(g_key, t) != 0) {
      free(t);
      return gang__error(GANG_NO_MEMORY, "%s: no thread-specific slot", fn);
    }
    t_stack = t;
  }
  gang_status st = append(t_stack, gangs_device(gs), gs);
  if (st != GANG_OK && t_stack->n == 0) {
    pthread_setspecific(g_key, NULL);
    stack_free(t_stack);
    t_stack = NULL;
  }
  return st;
}

gang_status gangs_pop_current(void) {
  if (t_stack == NULL || t_stack->n == 0)
    return gang__error(GANG_INVALID_USAGE,
                       "gangs_pop_current: this thread has no current gangs "
                       "pushed");
  if (--t_stack->n == 0) {
    /* An empty stack holds nothing worth keeping: free it, so a thread
     * whose pushes balance leaves no memory behind. */
    pthread_setspecific(g_key, NULL);
    stack_free(t_stack);
    t_stack = NULL;
  }
  return GANG_OK;
}

gang_status gangs_set_default(const gangs *gs) {
  const char *fn = "gangs_set_default";
  if (gs != NULL)
    GANG_ARG_CHECK(gs->root != NULL, fn, "gangs has no root gang");
  gang_status st = GANG_OK;
  pthread_mutex_lock(&g_mu);
  if (gs == NULL) {
    free(g_defaults.items);
    memset(&g_defaults, 0, sizeof g_defaults);
  } else {
    int i = find(&g_defaults, gangs_device(gs));
    if (i >= 0)
      g_defaults.items[i].gs = *gs;
    else
      st = append(&g_defaults, gangs_device(gs), gs);
  }
  pthread_mutex_unlock(&g_mu);
  return st;
}

const gangs *gangs_current(gang_device device) {
  if (t_stack != NULL) {
    int i = find(t_stack, device);
    if (i >= 0) {
      t_result = t_stack->items[i].gs;
      return &t_result;
    }
  }
  pthread_mutex_lock(&g_mu);
  int i = find(&g_defaults, device);
  if (i >= 0) {
    t_result = g_defaults.items[i].gs;
  } else {
    /* The fallback is one cached set per device, so every call (and
     * every thread) sees the same fake gang objects, as fairseq2's tests
     * expect of get_default_gangs. */
    i = find(&g_fakes, device);
    if (i < 0) {
      gangs fake;
      if (gangs_create_fake(device, &fake) == GANG_OK) {
        if (append(&g_fakes, device, &fake) == GANG_OK)
          i = g_fakes.n - 1;
        else
          gangs_close(&fake);
      }
    }
    if (i >= 0)
      t_result = g_fakes.items[i].gs;
    else
      memset(&t_result, 0, sizeof t_result);
  }
  pthread_mutex_unlock(&g_mu);
  /* The caller borrows; it must not close what it was lent. */
  t_result.owner = NULL;
  return &t_result;
}
