/* A store server in a process of its own, for the fault benchmarks:
 * forked before the benchmark starts any thread, so the child holds no
 * lock another thread had, and apart from the ranks it serves, so a rank
 * killed or stopped does not take the store with it. */
#ifndef GANG_BENCH_STORE_PROC_H
#define GANG_BENCH_STORE_PROC_H

#include <unistd.h>

#include "gang/store.h"

/* Starts the server (no secret) on a free port: its pid, and the port in
 * *port (-1 when it did not start). Stop it with kill and waitpid. */
static inline pid_t bench_store_start(int *port) {
  int fds[2];
  if (pipe(fds) != 0)
    return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    gang_store_server *srv = NULL;
    gang_store_server_options o = GANG_STORE_SERVER_OPTIONS_INIT;
    o.secret = "";
    int p = -1;
    if (gang_store_server_start(&o, &srv) == GANG_OK)
      p = gang_store_server_port(srv);
    if (write(fds[1], &p, sizeof p) != sizeof p)
      _exit(1);
    for (;;)
      pause();
  }
  close(fds[1]);
  if (read(fds[0], port, sizeof *port) != sizeof *port)
    *port = -1;
  close(fds[0]);
  return pid;
}

#endif
