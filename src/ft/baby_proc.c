/* The subprocess gang's child process as the parent handles it: finding the
 * gang-baby program, starting it, the shared memory both map, and ending
 * it. baby.c decides when; this file knows how.
 *
 * The child is started with posix_spawn, which is fork+exec done safely in
 * a process with threads (nothing runs in the child between the two but
 * the file actions) and without copying the parent's page tables, which
 * matters for a training process of many gigabytes. No SIGCHLD handler:
 * the library must not take the process's signals, so the parent learns of
 * a death from the socket (the child's end closes with it) and reaps that
 * child alone. It signals and reaps through a pidfd where the kernel has
 * them: if someone else reaps the child (SIGCHLD ignored, a waitpid(-1)),
 * its pid may go to another process, which a kill by pid would hit. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "baby.h"
#include "core/clock.h"
#include "core/error.h"

extern char **environ;

/* ---- Finding the program ------------------------------------------------ */

static bool runnable(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* Where gang-baby is: GANG_BABY_PATH (a wrong one is an error, not a
 * reason to start some other build's program), else the libexec path of
 * the install this library was built for, else beside the library itself
 * (an install moved elsewhere, or a program linked statically). */
static gang_status find_helper(char *out, size_t cap) {
  const char *env = getenv("GANG_BABY_PATH");
  if (env != NULL && *env != '\0') {
    if (strlen(env) >= cap || !runnable(env))
      return gang__error(GANG_NOT_FOUND,
                         "gang_ft_configure: GANG_BABY_PATH is '%s', which is "
                         "not an executable file (it names the gang-baby "
                         "program the subprocess gang runs)",
                         env);
    memcpy(out, env, strlen(env) + 1);
    return GANG_OK;
  }
  char tried[3][PATH_MAX];
  int n = 0;
#ifdef GANG_BABY_LIBEXEC
  snprintf(tried[n++], PATH_MAX, "%s", GANG_BABY_LIBEXEC);
#endif
  Dl_info info;
  if (dladdr((void *)(uintptr_t)&gang__baby_spawn, &info) != 0 &&
      info.dli_fname != NULL) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", info.dli_fname);
    char *slash = strrchr(dir, '/');
    if (slash != NULL)
      *slash = '\0';
    else
      snprintf(dir, sizeof dir, ".");
#ifdef GANG_BABY_FROM_LIBDIR
    snprintf(tried[n++], PATH_MAX, "%.3800s/%s", dir, GANG_BABY_FROM_LIBDIR);
#endif
    snprintf(tried[n++], PATH_MAX, "%.3800s/gang-baby", dir);
  }
  for (int i = 0; i < n; i++)
    if (strlen(tried[i]) < cap && runnable(tried[i])) {
      memcpy(out, tried[i], strlen(tried[i]) + 1);
      return GANG_OK;
    }
  char list[3 * 300] = "";
  size_t used = 0;
  for (int i = 0; i < n && used < sizeof list; i++) {
    int k = snprintf(list + used, sizeof list - used, "%s'%.280s'",
                     i ? ", " : "", tried[i]);
    used += k > 0 ? (size_t)k : 0;
  }
  return gang__error(GANG_NOT_FOUND,
                     "gang_ft_configure: the gang-baby program of the "
                     "subprocess gang was not found (tried %s); set "
                     "GANG_BABY_PATH to it",
                     n ? list : "nothing: no libexec path and no library path");
}

/* ---- Starting it -------------------------------------------------------- */

gang_status gang__baby_spawn(baby_proc *p) {
  *p = (baby_proc){
      .pid = -1, .pidfd = -1, .sock = -1, .memfd = -1, .wstatus = -1};
  GANG_CHECK(find_helper(p->path, sizeof p->path));
  /* Both ends close on exec: an unrelated program started by another
   * thread must not keep the child's end open, or the parent would never
   * see it close. The child's copy is made inheritable by the file
   * actions alone. */
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    return gang__error_errno(GANG_SYSTEM, errno,
                             "gang_ft_configure: socketpair for gang-baby");
  int mfd = memfd_create("gang-baby", MFD_CLOEXEC);
  if (mfd < 0) {
    int err = errno;
    close(sv[0]);
    close(sv[1]);
    return gang__error_errno(GANG_SYSTEM, err,
                             "gang_ft_configure: memfd_create for gang-baby");
  }
  char a_sock[16], a_mem[16];
  snprintf(a_sock, sizeof a_sock, "%d", sv[1]);
  snprintf(a_mem, sizeof a_mem, "%d", mfd);
  char *argv[] = {p->path, "--baby-fds", a_sock, a_mem, NULL};
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  /* dup2 onto itself clears close-on-exec (POSIX 2017, glibc 2.29). */
  posix_spawn_file_actions_adddup2(&fa, sv[1], sv[1]);
  posix_spawn_file_actions_adddup2(&fa, mfd, mfd);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 34)
  /* Descriptors some other code opened without close-on-exec (peer
   * sockets, files) would otherwise live on in the child. */
  int top = sv[1] > mfd ? sv[1] : mfd;
  posix_spawn_file_actions_addclosefrom_np(&fa, top + 1);
#endif
  /* The caller's threads may block signals; the child starts with none
   * blocked, so an operator's SIGTERM reaches it. */
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, p->path, &fa, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(sv[1]);
  if (rc != 0) {
    close(sv[0]);
    close(mfd);
    return gang__error_errno(GANG_SYSTEM, rc,
                             "gang_ft_configure: starting '%s'", p->path);
  }
  p->pid = pid;
  p->sock = sv[0];
  p->memfd = mfd;
#ifdef SYS_pidfd_open
  /* Ours until we reap it, so this pid is still the child. Close on exec
   * by itself. */
  p->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
#endif
  return GANG_OK;
}

/* ---- Shared memory ------------------------------------------------------ */

gang_status gang__baby_grow(baby_proc *p, size_t cap) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  if (cap > SIZE_MAX - page || cap > (size_t)INT64_MAX)
    return gang__error(GANG_NO_MEMORY, "gang-baby: %zu bytes of shared memory",
                       cap);
  cap = (cap + page - 1) / page * page;
  if (cap <= p->cap)
    return GANG_OK;
  /* fallocate, not ftruncate alone: memory that is not there must be an
   * error now, not a SIGBUS when a copy first touches the page. */
  int err = posix_fallocate(p->memfd, 0, (off_t)cap);
  if (err != 0)
    return gang__error_errno(GANG_NO_MEMORY, err,
                             "gang-baby: growing the shared memory to %zu "
                             "bytes",
                             cap);
  void *m = p->map != NULL ? mremap(p->map, p->cap, cap, MREMAP_MAYMOVE)
                           : mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_SHARED,
                                  p->memfd, 0);
  if (m == MAP_FAILED)
    return gang__error_errno(GANG_NO_MEMORY, errno,
                             "gang-baby: mapping %zu bytes of shared memory",
                             cap);
  p->map = m;
  p->cap = cap;
  return GANG_OK;
}

/* ---- Ending it ---------------------------------------------------------- */

static void reap(baby_proc *p) {
  if (p->pid <= 0 || p->reaped)
    return;
  int r;
  siginfo_t si;
  memset(&si, 0, sizeof si);
  bool by_fd = p->pidfd >= 0;
  for (;;) {
    r = by_fd ? waitid(P_PIDFD, (id_t)p->pidfd, &si, WEXITED)
              : waitid(P_PID, (id_t)p->pid, &si, WEXITED);
    if (r == 0 || errno == ECHILD || (errno == EINVAL && !by_fd))
      break;
    if (errno == EINVAL) /* a kernel with pidfd_open but not P_PIDFD */
      by_fd = false;
  }
  /* ECHILD: someone else reaped it (SIGCHLD ignored, or a waitpid(-1)). */
  if (r == 0 && si.si_code == CLD_EXITED)
    p->wstatus = (si.si_status & 0xff) << 8; /* as waitpid has it */
  else if (r == 0)
    p->wstatus = si.si_status & 0x7f;
  else
    p->wstatus = -1;
  p->reaped = true;
}

void gang__baby_kill(baby_proc *p) {
  bool alive = p->pid > 0 && !p->reaped;
  if (alive) {
#ifdef SYS_pidfd_send_signal
    if (p->pidfd >= 0)
      (void)syscall(SYS_pidfd_send_signal, p->pidfd, SIGKILL, NULL, 0);
    else
#endif
      kill(p->pid, SIGKILL);
  }
  /* After the signal: a child that saw its stream end first would start
   * leaving by itself and be killed halfway (a sanitizer's leak check at
   * exit then leaves its helper process behind). The shutdown is for
   * threads of ours polling the socket. */
  if (p->sock >= 0)
    shutdown(p->sock, SHUT_RDWR);
  if (alive)
    reap(p);
}

void gang__baby_stop(baby_proc *p, int64_t deadline) {
  if (p->pid <= 0 || p->reaped)
    return;
  if (p->sock >= 0 && shutdown(p->sock, SHUT_WR) == 0) {
    for (;;) {
      struct pollfd pf = {p->sock, POLLIN, 0};
      int r = poll(&pf, 1, gang__deadline_poll_ms(deadline));
      if (r < 0 && errno == EINTR)
        continue;
      if (r <= 0)
        break;
      /* A reply nobody waits for, or the end of the child's stream: its
       * end closes only when it exits, so the SIGKILL in gang__baby_kill
       * then finds it on its way out and does not change its status. */
      uint8_t b[BABY_MSG_MAX];
      ssize_t n = recv(p->sock, b, sizeof b, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
        break;
    }
  }
  gang__baby_kill(p);
}

void gang__baby_describe_exit(const baby_proc *p, char *buf, size_t cap) {
  int st = p->wstatus;
  if (!p->reaped)
    snprintf(buf, cap, "still running");
  else if (st == -1)
    snprintf(buf, cap,
             "exit status unknown (reaped elsewhere: is SIGCHLD ignored?)");
  else if (WIFEXITED(st))
    snprintf(buf, cap, "exited with status %d", WEXITSTATUS(st));
  else if (WIFSIGNALED(st)) {
    const char *name = sigdescr_np(WTERMSIG(st));
    snprintf(buf, cap, "killed by signal %d (%s)", WTERMSIG(st),
             name ? name : "unknown");
  } else
    snprintf(buf, cap, "wait status 0x%x", (unsigned)st);
}

void gang__baby_release(baby_proc *p) {
  if (p->map != NULL)
    munmap(p->map, p->cap);
  if (p->memfd >= 0)
    close(p->memfd);
  if (p->sock >= 0)
    close(p->sock);
  if (p->pidfd >= 0)
    close(p->pidfd);
  p->pidfd = -1;
  p->map = NULL;
  p->cap = 0;
  p->memfd = -1;
  p->sock = -1;
}
