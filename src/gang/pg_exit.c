/* A process that exits with gangs open -- it returned from main or called
 * exit() without gang_destroy, as most programs end -- leaves its worlds
 * instead of vanishing: an exit handler tells every peer of each world
 * that this rank left (docs/gang.md, "Lifecycle"), so that only what
 * needs this rank fails on them and the rest goes on, as after
 * gang_destroy. A crash (a fatal signal, SIGKILL, abort, _exit) runs no
 * handler: its peers see the connections close and fail, as they must.
 *
 * The store's host (rank 0 without a launcher) also keeps serving the
 * store until its peers have left, at most GANG_STORE_LINGER, since they
 * may still need it (a timeout's diagnosis goes through it).
 *
 * This is one of the library's few process-wide things (the others: the
 * logger's configuration, the flight recorder's registry, the store's
 * retired servers, src/store/server.c): the list of
 * live worlds, its lock and the handler, installed once with atexit. In
 * a forked child the list is its parent's: the handler leaves only the
 * worlds this process made. */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"
#include "pg_internal.h"
#include "store/server.h"

static pthread_mutex_t list_mu = PTHREAD_MUTEX_INITIALIZER;
static TAILQ_HEAD(, pg_world) worlds = TAILQ_HEAD_INITIALIZER(worlds);
static pthread_once_t install_once = PTHREAD_ONCE_INIT;

/* A world that failed: its peers were told, and may be asking the store
 * who reached what; it waits for their diagnoses as gang_destroy does. */
static void keep_store_failed(pg_world *w) {
  gang__pg_diag_linger(w);
  gang__store_server_wait_idle(w->server, 50, 2 * w->diag_budget_ms);
}

/* Makes every world of this process leave; the store's host retires its
 * server (src/store/server.h: it serves the clients it has until they
 * leave, at most GANG_STORE_LINGER) after taking its own client off, and
 * the process then waits for its retired servers (those gang_destroy
 * retired too), reading its peers' connections meanwhile so that none is
 * left blocked writing to it. */
static void leave_all(void) {
  pid_t me = getpid();
  pthread_mutex_lock(&list_mu);
  pg_world *w;
  TAILQ_FOREACH(w, &worlds, live) {
    if (w->pid != me || w->fabric == NULL)
      continue;
    bool left = gang__fabric_leave(w->fabric, GANG__LEAVE_EXIT);
    if (w->server == NULL)
      continue;
    if (!left) {
      keep_store_failed(w);
      continue;
    }
    gang__store_interrupt(w->store, "its process is exiting");
    int clients = gang__store_server_clients(w->server);
    if (clients > 0)
      GANG_INFO(INIT,
                "rank %d exits with its gangs open and hosts the store: it "
                "serves it until its %d client(s) have left (at most "
                "GANG_STORE_LINGER)",
                w->store_host, clients);
    gang__store_server_retire(w->server, w->linger_ms);
    w->server = NULL; /* the server's own now */
  }
  /* Servers retired by gang_destroy earlier are waited for too. */
  while (gang__store_server_wait_retired(gang__now_ns()) > 0) {
    int64_t step = gang__deadline_in_ms(10);
    bool reading = false;
    TAILQ_FOREACH(w, &worlds, live) {
      if (w->pid == me && w->fabric != NULL &&
          gang__fabric_drain(w->fabric, step) > 0)
        reading = true;
    }
    if (!reading)
      (void)gang__store_server_wait_retired(step);
  }
  pthread_mutex_unlock(&list_mu);
}

static void install(void) {
  if (atexit(leave_all) != 0)
    GANG_WARN(INIT, "cannot register the exit handler: a process that exits "
                    "with gangs open will look to its peers as if it crashed");
}

void gang__pg_exit_add(pg_world *w) {
  pthread_once(&install_once, install);
  pthread_mutex_lock(&list_mu);
  TAILQ_INSERT_TAIL(&worlds, w, live);
  w->listed = true;
  pthread_mutex_unlock(&list_mu);
}

void gang__pg_exit_remove(pg_world *w) {
  pthread_mutex_lock(&list_mu);
  if (w->listed)
    TAILQ_REMOVE(&worlds, w, live);
  w->listed = false;
  pthread_mutex_unlock(&list_mu);
}
