/* A process-group gang and the host it runs on, with real processes:
 * malformed settings (an error naming them on every rank), single copy
 * forced where the kernel refuses it, the congestion control of
 * connections that stay on this host (and, as parts of their own that a
 * machine may lack, one set by name and ranks on a non-loopback address),
 * and ranks of one host that count its CPUs differently. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <linux/capability.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include "harness/harness.h"

#include "gang/gang.h"
#include "gang/store.h"
#include "gang_impl.h"
#include "pg.h"
#include "transport/fabric.h"

static int g_round;

static gang_t *join(int rank, int size, int64_t timeout_ms) {
  return gt_join("faults", g_round, rank, size, timeout_ms, 0);
}

/* ---- A malformed setting is an error naming it, on every rank ---------- */

/* arg: the setting's expected text in the error. */
static int bad_setting_rank(int rank, int size, void *arg) {
  char addr[160];
  snprintf(addr, sizeof addr, "127.0.0.1:%d/faults%d", gt_store_port(),
           g_round);
  gang_options o = GANG_OPTIONS_INIT;
  o.timeout_ms = 20000;
  gang_t *g = NULL;
  RCHECK(gang_create_with_store(&o, addr, rank, size, &g) ==
         GANG_INVALID_ARGUMENT);
  RCHECK(g == NULL);
  fprintf(stderr, "rank %d: %s\n", rank, gang_last_error());
  RCHECK(strstr(gang_last_error(), (const char *)arg) != NULL);
  return 0;
}

static void test_bad_shm_cma_setting(void **state) {
  (void)state;
  setenv("GANG_SHM_CMA", "sometimes", 1);
  g_round++;
  int rc = gt_run_ranks(2, bad_setting_rank, "GANG_SHM_CMA='sometimes'", 60000);
  unsetenv("GANG_SHM_CMA");
  assert_int_equal(rc, 0);
}

/* ---- Single copy forced where the kernel refuses it -------------------- */

/* Drops CAP_SYS_PTRACE from this process's effective set (root has it,
 * and with it reads any process's memory). */
static void drop_ptrace_capability(void) {
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2];
  RCHECK(syscall(SYS_capget, &h, d) == 0);
  d[CAP_SYS_PTRACE / 32].effective &= ~(1u << (CAP_SYS_PTRACE % 32));
  RCHECK(syscall(SYS_capset, &h, d) == 0);
}

/* With GANG_SHM_CMA=1 on both ranks, rank 1 makes itself non-dumpable
 * while the gang is made and rank 0 gives up CAP_SYS_PTRACE, so rank 0's
 * probe of rank 1 is refused as a container's ptrace rules would refuse
 * it. The gang must still work, staged, and both ranks must say so with
 * a warning (rank 0 with the failed read's reason): the setting asked for
 * single copy by name. Each rank reads its own stderr back from a memfd
 * it put there while the gang was made. */
static int refused_rank(int rank, int size, void *arg) {
  (void)arg;
  if (rank == 0)
    drop_ptrace_capability();
  else
    RCHECK(prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0);
  int log = memfd_create("stderr", MFD_CLOEXEC), saved = dup(2);
  RCHECK(log >= 0 && saved >= 0 && dup2(log, 2) == 2);
  gang_t *g = join(rank, size, 20000);
  RCHECK(dup2(saved, 2) == 2);
  close(saved);
  if (rank == 1)
    RCHECK(prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) == 0);
  char said[4096] = "";
  ssize_t got = pread(log, said, sizeof said - 1, 0);
  close(log);
  RCHECK(got >= 0);
  said[got] = '\0';
  fprintf(stderr, "rank %d said while joining: %s\n", rank, said);
  RCHECK(strstr(said, "GANG_SHM_CMA=1 asks for single copy, but") != NULL);
  if (rank == 0)
    RCHECK(strstr(said, "process_vm_readv from local rank 1") != NULL);
  size_t n = (size_t)1 << 20; /* floats: 4 MiB */
  float *a = malloc(n * sizeof *a);
  RCHECK(a != NULL);
  for (size_t i = 0; i < n; i++)
    a[i] = rank == 0 ? (float)(i % 1009) : -1.0f;
  RCHECK_OK(gang_broadcast(g, a, n, GANG_FLOAT32, 0));
  RCHECK(gt_ran(g, "staged", "single copy refused"));
  for (size_t i = 0; i < n; i++)
    RCHECK(a[i] == (float)(i % 1009));
  free(a);
  gang_destroy(g);
  return 0;
}

static void test_forced_single_copy_refused(void **state) {
  (void)state;
  setenv("GANG_SHM_CMA", "1", 1);
  g_round++;
  int rc = gt_run_ranks(2, refused_rank, NULL, 60000);
  unsetenv("GANG_SHM_CMA");
  assert_int_equal(rc, 0);
}

static void test_bad_tcp_congestion_setting(void **state) {
  (void)state;
  const char *bad[] = {"no-such-cc", "a-name-longer-than-sixteen"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    setenv("GANG_TCP_CONGESTION", bad[i], 1);
    char want[64];
    snprintf(want, sizeof want, "GANG_TCP_CONGESTION='%s'", bad[i]);
    g_round++;
    int rc = gt_run_ranks(2, bad_setting_rank, want, 60000);
    unsetenv("GANG_TCP_CONGESTION");
    assert_int_equal(rc, 0);
  }
}

/* ---- The congestion control of connections that stay on this host ------ */

/* arg: the congestion control the connection to the peer must use. The
 * ranks meet over 127.0.0.1, so by default (auto) it is reno, whatever the
 * system's; the gang must still work. Unless GANG_TCP_PIECE is set, the
 * connection's exchanges move in 128 KiB pieces under bbr and 512 KiB
 * ones otherwise. */
static int cc_rank(int rank, int size, void *arg) {
  gang_t *g = join(rank, size, 20000);
  gang__fabric *f = gang__pg_fabric(g);
  int fd = gang__fabric_peer_fd(f, 1 - rank);
  RCHECK(fd >= 0);
  char cc[16] = "";
  socklen_t len = sizeof cc - 1;
  RCHECK(getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, &len) == 0);
  size_t piece = gang__fabric_peer_piece(f, 1 - rank);
  fprintf(stderr, "rank %d: %s, pieces of %zu (want %s)\n", rank, cc, piece,
          (const char *)arg);
  RCHECK(strcmp(cc, (const char *)arg) == 0);
  if (getenv("GANG_TCP_PIECE") != NULL)
    RCHECK(piece == 3000);
  else
    RCHECK(piece ==
           (strcmp(cc, "bbr") == 0 ? (size_t)128 << 10 : (size_t)512 << 10));
  float x[4] = {1, 2, 3, (float)rank};
  RCHECK_OK(gang_all_reduce(g, x, 4, GANG_FLOAT32, GANG_SUM));
  RCHECK(x[0] == 2 && x[3] == 1);
  gang_destroy(g);
  return 0;
}

/* The system's default, as new sockets get it. */
static void system_cc(char *out, size_t cap) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  socklen_t len = (socklen_t)cap - 1;
  memset(out, 0, cap);
  assert_int_equal(getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, out, &len), 0);
  close(fd);
}

/* Whether this user may set congestion control `name` on a socket; if
 * not, *err says why. */
static bool cc_allowed(const char *name, int *err) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  bool ok = fd >= 0 && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name,
                                  (socklen_t)strlen(name)) == 0;
  *err = errno;
  if (fd >= 0)
    close(fd);
  return ok;
}

/* "=<name>" (GANG_SOCKET_IFNAME's exact form) of the first up IPv4
 * interface that is not a loopback one; false if there is none. */
static bool other_interface(char *out, size_t cap) {
  struct ifaddrs *all = NULL;
  if (getifaddrs(&all) != 0)
    return false;
  bool found = false;
  for (struct ifaddrs *i = all; i != NULL && !found; i = i->ifa_next)
    if (i->ifa_addr != NULL && i->ifa_addr->sa_family == AF_INET &&
        (i->ifa_flags & IFF_UP) && !(i->ifa_flags & IFF_LOOPBACK)) {
      snprintf(out, cap, "=%s", i->ifa_name);
      found = true;
    }
  freeifaddrs(all);
  return found;
}

static void test_congestion_control_on_this_host(void **state) {
  (void)state;
  char sys[16];
  system_cc(sys, sizeof sys);
  g_round++;
  assert_int_equal(gt_run_ranks(2, cc_rank, "reno", 60000), 0);
  setenv("GANG_TCP_CONGESTION", "system", 1);
  g_round++;
  int rc = gt_run_ranks(2, cc_rank, sys, 60000);
  unsetenv("GANG_TCP_CONGESTION");
  assert_int_equal(rc, 0);
  /* A name is set on every connection (reno is always allowed), and a
   * piece the user sets is every connection's. */
  setenv("GANG_TCP_CONGESTION", "reno", 1);
  setenv("GANG_TCP_PIECE", "3000", 1);
  g_round++;
  rc = gt_run_ranks(2, cc_rank, "reno", 60000);
  unsetenv("GANG_TCP_CONGESTION");
  unsetenv("GANG_TCP_PIECE");
  assert_int_equal(rc, 0);
}

/* The parts that need what a machine may lack run as ctest entries of
 * their own (main's argument), skipped visibly where they cannot run:
 *
 *   cc=<name>    a name other than auto's reno (cubic: 512 KiB pieces;
 *                bbr: 128 KiB), whatever the system's default, where
 *                this user may set it (GANG_TEST_REQUIRE_CC lists those
 *                scripts/test.sh knows to be settable);
 *   own-address  ranks that publish a non-loopback address of this host
 *                connect to it through the loopback device from that
 *                same address: still this host, so reno. In a network
 *                namespace of the test's own (root), else on an interface
 *                of the machine's (GANG_TEST_REQUIRE_NETNS). */
static const char *g_cc;
static char g_ifname[IF_NAMESIZE + 2];

static void test_named_congestion_control(void **state) {
  (void)state;
  setenv("GANG_TCP_CONGESTION", g_cc, 1);
  g_round++;
  int rc = gt_run_ranks(2, cc_rank, (void *)g_cc, 60000);
  unsetenv("GANG_TCP_CONGESTION");
  assert_int_equal(rc, 0);
}

static void test_own_address_is_this_host(void **state) {
  (void)state;
  print_message("GANG_SOCKET_IFNAME=%s\n", g_ifname);
  setenv("GANG_SOCKET_IFNAME", g_ifname, 1);
  g_round++;
  int rc = gt_run_ranks(2, cc_rank, "reno", 60000);
  unsetenv("GANG_SOCKET_IFNAME");
  assert_int_equal(rc, 0);
}

/* ---- Ranks of one host that see different machines --------------------- */

/* Rank 0 may run on one CPU only, so it counts its host (two ranks) as
 * oversubscribed where rank 1 does not; rank 1 alone forces single copy.
 * Both choose algorithms from these, so they must agree (through the
 * store) or their steps would not line up: large broadcast, all_gather
 * and reduce_scatter, checked. They agree on single copy where the two
 * ranks have two CPUs between them (the probe allows it and nobody is
 * oversubscribed), which must be what ran: staged copies on both ranks
 * would pass without testing the agreement. arg: the algorithms that
 * must run, the broadcast's (two_ends: single copy between two members),
 * the all_gather's (staged_or_single_copy: two members measure both at its
 * 4 MiB blocks, an entry only a host with a CPU per member takes) and the
 * reduce_scatter's (the same measuring entry); staged on a single CPU. */
static int cpus_rank(int rank, int size, void *arg) {
  const char *const *want = arg; /* broadcast, all_gather, reduce_scatter */
  if (rank == 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu() < 0 ? 0 : sched_getcpu(), &one);
    RCHECK(sched_setaffinity(0, sizeof one, &one) == 0);
  } else {
    setenv("GANG_SHM_CMA", "1", 1);
  }
  gang_t *g = join(rank, size, 20000);
  size_t n = (size_t)1 << 20; /* floats: 4 MiB */
  float *a = malloc(n * sizeof *a), *all = malloc(2 * n * sizeof *all);
  RCHECK(a != NULL && all != NULL);
  for (size_t i = 0; i < n; i++)
    a[i] = rank == 0 ? (float)(i % 1000) : -1.0f;
  RCHECK_OK(gang_broadcast(g, a, n, GANG_FLOAT32, 0));
  RCHECK(gt_ran(g, want[0], "broadcast"));
  for (size_t i = 0; i < n; i++)
    RCHECK(a[i] == (float)(i % 1000));
  for (size_t i = 0; i < n; i++)
    a[i] = (float)(rank * 7 + (int)(i % 5));
  RCHECK_OK(gang_all_gather(g, all, a, n, GANG_FLOAT32));
  RCHECK(gt_ran(g, want[1], "all_gather"));
  for (int q = 0; q < 2; q++)
    for (size_t i = 0; i < n; i++)
      RCHECK(all[(size_t)q * n + i] == (float)(q * 7 + (int)(i % 5)));
  for (size_t i = 0; i < 2 * n; i++)
    all[i] = (float)(rank + (int)(i % 3));
  RCHECK_OK(gang_reduce_scatter(g, a, all, n, GANG_FLOAT32, GANG_SUM));
  RCHECK(gt_ran(g, want[2], "reduce_scatter"));
  for (size_t i = 0; i < n; i++)
    RCHECK(a[i] == (float)(1 + 2 * (int)(((size_t)rank * n + i) % 3)));
  free(a);
  free(all);
  gang_destroy(g);
  return 0;
}

static void test_ranks_that_count_cpus_differently(void **state) {
  (void)state;
  cpu_set_t mine;
  assert_int_equal(sched_getaffinity(0, sizeof mine, &mine), 0);
  static const char *const single[] = {"two_ends", "staged_or_single_copy",
                                       "staged_or_single_copy"};
  static const char *const staged[] = {"staged", "staged", "staged"};
  const char *const *want = CPU_COUNT(&mine) >= 2 ? single : staged;
  g_round++;
  assert_int_equal(gt_run_ranks(2, cpus_rank, (void *)want, 60000), 0);
}

static int run_part(const char *part) {
  struct CMUnitTest one[1];
  if (strncmp(part, "cc=", 3) == 0) {
    g_cc = part + 3;
    int err = 0;
    if (!cc_allowed(g_cc, &err))
      return gt_cannot_run(
          gt_required("GANG_TEST_REQUIRE_CC", g_cc), "GANG_TEST_REQUIRE_CC",
          "congestion control %s cannot be set here: %s", g_cc, strerror(err));
    one[0] = (struct CMUnitTest)GT_TEST(test_named_congestion_control);
  } else if (strcmp(part, "own-address") == 0) {
    char why[512];
    if (gt_private_netns(why, sizeof why) == 0)
      snprintf(g_ifname, sizeof g_ifname, "=gangt0");
    else if (!other_interface(g_ifname, sizeof g_ifname))
      return gt_cannot_run(
          gt_required("GANG_TEST_REQUIRE_NETNS", "own-address"),
          "GANG_TEST_REQUIRE_NETNS",
          "no up non-loopback IPv4 interface, and no "
          "namespace to make one in (%s)",
          why);
    one[0] = (struct CMUnitTest)GT_TEST(test_own_address_is_this_host);
  } else {
    fprintf(stderr, "test_pg_host: unknown part '%s'\n", part);
    return 2;
  }
  return cmocka_run_group_tests(one, gt_store_group_setup,
                                gt_store_group_teardown);
}

int main(int argc, char **argv) {
  if (argc > 1)
    return run_part(argv[1]);
  const struct CMUnitTest tests[] = {
      GT_TEST(test_bad_shm_cma_setting),
      GT_TEST(test_forced_single_copy_refused),
      GT_TEST(test_bad_tcp_congestion_setting),
      GT_TEST(test_congestion_control_on_this_host),
      GT_TEST(test_ranks_that_count_cpus_differently),
  };
  return cmocka_run_group_tests(tests, gt_store_group_setup,
                                gt_store_group_teardown);
}
