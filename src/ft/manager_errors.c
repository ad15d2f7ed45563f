/* The manager's errors: this step's (the first recorded wins; should_commit
 * reads it, the caller may add its own) and the group's own failure, after
 * which the group must restart. Every other part of the manager records
 * here; this file calls none of them. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "manager_impl.h"

void gang__mgr_record(gang_manager *m, gang_status st, const char *detail) {
  if (st == GANG_OK)
    return;
  pthread_mutex_lock(&m->mu);
  if (m->error == GANG_OK) {
    m->error = st;
    m->timings.error_ns = gang__now_ns();
    snprintf(m->error_text, sizeof m->error_text, "%s", detail);
    GANG_INFO(FT, "replica %s step %" PRId64 ": %s: %s", m->replica_id, m->step,
              gang_status_name(st), detail);
  }
  pthread_mutex_unlock(&m->mu);
}

void gang__mgr_record_replica(gang_manager *m, gang_status st,
                              const char *detail) {
  if (st == GANG_OK)
    return;
  /* Errors of the replica gang name its ranks; say which replica group
   * each rank is (rank r of the replica gang = member r of the quorum). */
  char map[700];
  size_t used = 0;
  pthread_mutex_lock(&m->mu);
  int n = m->q.n;
  used += (size_t)snprintf(map, sizeof map,
                           " [the replica gang of quorum %" PRId64 ":",
                           m->q.quorum_id);
  for (int i = 0; i < n && i < 8 && used < sizeof map; i++)
    used += (size_t)snprintf(map + used, sizeof map - used,
                             "%s rank %d = replica group '%.60s'", i ? "," : "",
                             i, m->q.members[i].replica_id);
  pthread_mutex_unlock(&m->mu);
  if (used < sizeof map)
    snprintf(map + used, sizeof map - used, "%s]", n > 8 ? ", ..." : "");
  char full[1024 + sizeof map];
  snprintf(full, sizeof full, "%s%s", detail, n > 0 ? map : "");
  gang__mgr_record(m, st, full);
}

gang_status gang__mgr_fatal(gang_manager *m, const char *what) {
  char why[600];
  snprintf(why, sizeof why, "%s", gang_last_error());
  pthread_mutex_lock(&m->mu);
  if (m->fatal == GANG_OK) {
    m->fatal = GANG_ABORTED;
    snprintf(m->fatal_text, sizeof m->fatal_text,
             "replica %.128s: the replica group's own gang failed (%.64s: "
             "%.200s): the group cannot go on and must restart",
             m->replica_id, what, why);
    GANG_WARN(FT, "%s", m->fatal_text);
    pthread_cond_broadcast(&m->cv); /* the heartbeat leaves */
  }
  char text[512];
  snprintf(text, sizeof text, "%s", m->fatal_text);
  pthread_mutex_unlock(&m->mu);
  return gang__error(GANG_ABORTED, "%s", text);
}

void gang_manager_report_error(gang_manager *m, gang_status st,
                               const char *detail) {
  if (m != NULL)
    gang__mgr_record(m, st, detail != NULL ? detail : "reported by the caller");
}

gang_status gang_manager_errored(const gang_manager *m, char *detail,
                                 size_t cap) {
  if (m == NULL)
    return GANG_INVALID_ARGUMENT;
  gang_manager *mm = (gang_manager *)m;
  pthread_mutex_lock(&mm->mu);
  gang_status st = mm->error;
  if (detail != NULL && cap > 0)
    snprintf(detail, cap, "%s", mm->error_text);
  pthread_mutex_unlock(&mm->mu);
  return st;
}
