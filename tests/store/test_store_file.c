/* The file-backed store: every operation and prefix view (store_cases.c),
 * many processes updating one file at once (exact counts), a rendezvous of
 * N processes, deadlines, corrupted and truncated files, and the argument
 * checks of the generic layer. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness/harness.h"
#include "store_cases.h"

#include "core/bytes.h"
#include "core/clock.h"
#include "gang/store.h"

/* A fresh directory per test, removed with its files by rm_dir. */
typedef struct {
  char dir[64];
  char path[128];
} tmp_store;

static void tmp_init(tmp_store *t) {
  const char *base = getenv("TMPDIR");
  snprintf(t->dir, sizeof t->dir, "%s/gangfsXXXXXX", base ? base : "/tmp");
  assert_non_null(mkdtemp(t->dir));
  snprintf(t->path, sizeof t->path, "%s/store", t->dir);
}

static void tmp_fini(tmp_store *t) {
  unlink(t->path);
  assert_int_equal(rmdir(t->dir), 0);
}

static gang_store *open_file(const char *path, int64_t timeout_ms) {
  gang_store_options o = GANG_STORE_OPTIONS_INIT;
  o.timeout_ms = timeout_ms;
  gang_store *st = NULL;
  assert_gang_ok(gang_store_file_open(path, &o, &st));
  return st;
}

static int64_t ms_since(int64_t t0) { return (gang__now_ns() - t0) / 1000000; }

static void test_all_ops(void **state) {
  (void)state;
  tmp_store t;
  tmp_init(&t);
  gang_store *st = open_file(t.path, 5000);
  sc_all_ops(st);
  sc_all_ops(st); /* again, on a file that already holds a log */
  gang_store_close(st);
  /* Reopening replays the log to the same state. */
  st = open_file(t.path, 5000);
  sc_expect_val(st, "ops1.a", "bye");
  sc_expect_val(st, "ops2.log", "abcd");
  int64_t n;
  assert_gang_ok(gang_store_num_keys(st, &n));
  assert_int_equal(n, 2 * 8); /* a bin ctr c log cs m1 m2 per case */
  gang_store_close(st);
  tmp_fini(&t);
}

static void test_prefix_views(void **state) {
  (void)state;
  tmp_store t;
  tmp_init(&t);
  gang_store *st = open_file(t.path, 5000);
  sc_prefix_views(st);
  /* the same cases through a "file://" handle and through a view */
  char addr[160];
  snprintf(addr, sizeof addr, "file://%s", t.path);
  gang_store *fh = NULL;
  assert_gang_ok(gang_store_connect(addr, NULL, &fh));
  sc_prefix_views(fh);
  gang_store *view;
  assert_gang_ok(gang_store_prefix(fh, "outer", &view));
  sc_all_ops(view);
  sc_prefix_views(view);
  gang_store_close(view);
  /* The two handles on one path see each other's writes. */
  assert_gang_ok(gang_store_set(fh, "shared", "yes", 3));
  sc_expect_val(st, "shared", "yes");
  gang_store_close(fh);
  gang_store_close(st);
  tmp_fini(&t);
}

/* ---- many processes ----------------------------------------------------- */

#define ADD_PROCS 8
#define ADD_ITERS 1000

static int add_rank(int rank, int size, void *arg) {
  (void)size;
  gang_store *st = NULL;
  RCHECK_OK(gang_store_file_open(arg, NULL, &st));
  int64_t prev = 0;
  char me[2] = {(char)('a' + rank), 0};
  for (int i = 0; i < ADD_ITERS; i++) {
    int64_t v = 0;
    RCHECK_OK(gang_store_add(st, "ctr", 1, &v));
    /* Others' adds interleave, but our own see a strictly rising count. */
    RCHECK(v > prev && v <= ADD_PROCS * ADD_ITERS);
    prev = v;
    if (i % 10 == 0)
      RCHECK_OK(gang_store_append(st, "log", me, 1));
  }
  gang_store_close(st);
  return 0;
}

static void test_concurrent_add(void **state) {
  (void)state;
  tmp_store t;
  tmp_init(&t);
  assert_int_equal(gt_run_ranks(ADD_PROCS, add_rank, t.path, 60000), 0);
  gang_store *st = open_file(t.path, 5000);
  char want[16];
  snprintf(want, sizeof want, "%d", ADD_PROCS * ADD_ITERS);
  sc_expect_val(st, "ctr", want);
  /* Every append landed whole: 100 letters from each rank. */
  void *v;
  size_t n;
  assert_gang_ok(gang_store_get(st, "log", &v, &n));
  assert_int_equal(n, ADD_PROCS * ADD_ITERS / 10);
  int count[ADD_PROCS] = {0};
  for (size_t i = 0; i < n; i++) {
    int r = ((char *)v)[i] - 'a';
    assert_true(r >= 0 && r < ADD_PROCS);
    count[r]++;
  }
  for (int r = 0; r < ADD_PROCS; r++)
    assert_int_equal(count[r], ADD_ITERS / 10);
  gang_store_free(v);
  gang_store_close(st);
  tmp_fini(&t);
}

typedef struct {
  gang_store *st;
  int id;
  int ok;
} thr_arg;

static void *add_thread(void *arg) {
  thr_arg *a = arg;
  a->ok = 1;
  for (int i = 0; i < 500 && a->ok; i++)
    a->ok = gang_store_add(a->st, "t", 1, NULL) == GANG_OK;
  return NULL;
}

/* Two handles on one file in one process, used from two threads each: the
 * locks must exclude handles of the same process (why flock, not fcntl). */
static void test_handles_in_one_process(void **state) {
  (void)state;
  tmp_store t;
  tmp_init(&t);
  gang_store *h[2] = {open_file(t.path, 5000), open_file(t.path, 5000)};
  pthread_t th[4];
  thr_arg args[4];
  for (int i = 0; i < 4; i++) {
    args[i] = (thr_arg){h[i % 2], i, 0};
    assert_int_equal(pthread_create(&th[i], NULL, add_thread, &args[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    assert_true(args[i].ok);
  }
  sc_expect_val(h[0], "t", "2000");
  sc_expect_val(h[1], "t", "2000");
  gang_store_close(h[0]);
  gang_store_close(h[1]);
  tmp_fini(&t);
}

#define RDV_PROCS 6

/* Each rank publishes its key, then waits for everyone's and reads them
 * all: the rendezvous that file:// init methods perform. */
static int rendezvous_rank(int rank, int size, void *arg) {
  gang_store *root = NULL, *st = NULL;
  gang_store_options o = GANG_STORE_OPTIONS_INIT;
  o.timeout_ms = 30000;
  char addr[160];
  snprintf(addr, sizeof addr, "file://%s", (const char *)arg);
  RCHECK_OK(gang_store_connect(addr, &o, &root));
  RCHECK_OK(gang_store_prefix(root, "rdv", &st));
  char key[32], val[64];
  snprintf(key, sizeof key, "rank%d", rank);
  snprintf(val, sizeof val, "addr-of-%d-pid-%d", rank, (int)getpid());
  RCHECK_OK(gang_store_set(st, key, val, strlen(val)));
  char names[RDV_PROCS][32];
  const char *keys[RDV_PROCS];
  for (int r = 0; r < size; r++) {
    snprintf(names[r], sizeof names[r], "rank%d", r);
    keys[r] = names[r];
  }
  RCHECK_OK(gang_store_wait(st, keys, (size_t)size, -1));
  void *vals[RDV_PROCS];
  size_t lens[RDV_PROCS];
  RCHECK_OK(gang_store_multi_get(st, keys, (size_t)size, vals, lens));
  for (int r = 0; r < size; r++) {
    char want[32];
    snprintf(want, sizeof want, "addr-of-%d-pid-", r);
    RCHECK(lens[r] > strlen(want) && memcmp(vals[r], want, strlen(want)) == 0);
    gang_store_free(vals[r]);
  }
  /* A barrier on a counter: everyone arrives, the last one releases. */
  int64_t n = 0;
  RCHECK_OK(gang_store_add(st, "arrived", 1, &n));
  if (n == size)
    RCHECK_OK(gang_store_set(st, "go", "1", 1));
  void *go;
  size_t gl;
  RCHECK_OK(gang_store_get(st, "go", &go, &gl));
  gang_store_free(go);
  gang_store_close(st);
  gang_store_close(root);
  return 0;
}

static void test_rendezvous(void **state) {
  (void)state;
  tmp_store t;
  tmp_init(&t);
  assert_int_equal(gt_run_ranks(RDV_PROCS, rendezvous_rank, t.path, 60000), 0);
  gang_store *st = open_file(t.path, 5000);
  sc_expect_val(st, "rdv/arrived", "6");
  gang_store_close(st);
  tmp_fini(&t);
}

/* A waiter in another process is woken by each kind of write. */
static int late_writer(int rank, int size, void *arg) {
  (void)size;
  gang_store *st = NULL;
  RCHECK_OK(gang_store_file_open(arg, NULL, &st));
  if (rank == 0) {
    /* The waiter announces it is about to wait; write only after that. */
    void *v;
    size_t n;
    RCHECK_OK(gang_store_get(st, "waiting", &v, &n));
    gang_store_free(v);
    const char *k[] = {"w2", "w3"};
    const void *vv[] = {"2", "3"};
    size_t l[] = {1, 1};
    RCHECK_OK(gang_store_add(st, "w0", 1, NULL));
    RCHECK_OK(gang_store_append(st, "w1", "x", 1));
    RCHECK_OK(gang_store_multi_set(st, k, vv, l, 2));
  } else {
    RCHECK_OK(gang_store_set(st, "waiting", "1", 1));
    const char *keys[] = {"w0", "w1", "w2", "w3"};
    int64_t t0 = gang__now_ns();
    RCHECK_OK(gang_store_wait(st, keys, 4, 20000));
    RCHECK(ms_since(t0) < 10000);
  }
  gang_store_close(st);
  return 0;
}

static void test_wait_across_processes(void **state) {
  (void)state;
  tmp_store t;
  tmp_init(&t);
  assert_int_equal(gt_run_ranks(2, late_writer, t.path, 30000), 0);
  tmp_fini(&t);
}

/* ---- deadlines ---------------------------------------------------------- */

/* Scheduling on two cores shared with other tests: a sanitized build
 * beside a full suite once took longer than 150 ms past the interval. A
 * deadline ignored would still show (the handle's own is 300 ms, the
 * default minutes), and the handle-wide change below is to a longer
 * timeout, so its lower bound tells it from the old one. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SCHED_SLACK_MS 400
#else
#define SCHED_SLACK_MS 150
#endif

static void check_deadline(int64_t got_ms, int64_t want_ms) {
  /* The poll interval is at most 50 ms, so the call returns within one
   * interval of the deadline (plus scheduling on a busy machine). */
  if (got_ms < want_ms || got_ms > want_ms + 50 + SCHED_SLACK_MS)
    fail_msg("timed out after %lld ms, wanted %lld", (long long)got_ms,
             (long long)want_ms);
}

static void test_timeouts(void **state) {
  (void)state;
  tmp_store t;
  tmp_init(&t);
  gang_store *st = open_file(t.path, 300);
  void *v;
  size_t n;
  int64_t t0 = gang__now_ns();
  assert_int_equal(gang_store_get(st, "missing", &v, &n), GANG_TIMEOUT);
  check_deadline(ms_since(t0), 300);
  assert_non_null(strstr(gang_last_error(), "'missing'"));
  assert_non_null(strstr(gang_last_error(), t.path));

  assert_gang_ok(gang_store_set(st, "k", "v", 1));
  const char *keys[] = {"k", "the_key", "other"};
  t0 = gang__now_ns();
  assert_int_equal(gang_store_wait(st, keys, 3, 100), GANG_TIMEOUT);
  check_deadline(ms_since(t0), 100);
  assert_non_null(strstr(gang_last_error(), "'the_key', 'other'"));
  assert_non_null(strstr(gang_last_error(), "2 of 3"));
  assert_null(strstr(gang_last_error(), "'k'"));

  void *vals[3] = {0};
  size_t lens[3];
  t0 = gang__now_ns();
  assert_int_equal(gang_store_multi_get(st, keys, 3, vals, lens), GANG_TIMEOUT);
  check_deadline(ms_since(t0), 300);
  assert_null(vals[0]); /* nothing set on failure */

  /* Many missing keys: the detail lists a few and says there are more. */
  char names[20][16];
  const char *many[20];
  for (int i = 0; i < 20; i++) {
    snprintf(names[i], sizeof names[i], "m%02d", i);
    many[i] = names[i];
  }
  assert_int_equal(gang_store_wait(st, many, 20, 0), GANG_TIMEOUT);
  assert_non_null(strstr(gang_last_error(), "20 of 20"));
  assert_non_null(strstr(gang_last_error(), "..."));
  assert_null(strstr(gang_last_error(), "'m19'"));

  /* A handle-wide timeout change applies; the handle still works. */
  assert_gang_ok(gang_store_set_timeout(st, 800));
  t0 = gang__now_ns();
  assert_int_equal(gang_store_get(st, "missing", &v, &n), GANG_TIMEOUT);
  check_deadline(ms_since(t0), 800);
  sc_expect_val(st, "k", "v");
  gang_store_close(st);
  tmp_fini(&t);
}

/* ---- corrupted files ---------------------------------------------------- */

/* Writes a store with two records, returns the offsets of each record. */
static void make_store(const char *path, long *rec2, long *end) {
  gang_store *st = open_file(path, 1000);
  assert_gang_ok(gang_store_set(st, "first", "11111", 5));
  struct stat sb;
  assert_int_equal(stat(path, &sb), 0);
  *rec2 = (long)sb.st_size;
  assert_gang_ok(gang_store_set(st, "second", "22222", 5));
  assert_int_equal(stat(path, &sb), 0);
  *end = (long)sb.st_size;
  gang_store_close(st);
}

static void poke(const char *path, long off, const void *bytes, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  assert_true(fd >= 0);
  assert_int_equal(pwrite(fd, bytes, n, off), (ssize_t)n);
  close(fd);
}

static void expect_open_fails(const char *path, gang_status want,
                              const char *detail) {
  gang_store *st = NULL;
  gang_status s = gang_store_file_open(path, NULL, &st);
  if (s != want || strstr(gang_last_error(), detail) == NULL)
    fail_msg("open: got %s '%s', wanted %s mentioning '%s'",
             gang_status_name(s), gang_last_error(), gang_status_name(want),
             detail);
  assert_null(st);
}

static void test_corrupted(void **state) {
  (void)state;
  tmp_store t;
  tmp_init(&t);
  long rec2, end;
  const char *p = t.path;

  /* not a store file at all */
  poke(p, 0, "hello world, not a store file", 29);
  expect_open_fails(p, GANG_PROTOCOL, "bad magic");
  unlink(p);
  int fd = open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
  assert_int_equal(write(fd, "GANG", 4), 4);
  close(fd);
  expect_open_fails(p, GANG_PROTOCOL, "too short for the header");
  unlink(p);

  /* another format version */
  make_store(p, &rec2, &end);
  uint8_t ver[4];
  gang__put_u32(ver, 99);
  poke(p, 8, ver, 4);
  expect_open_fails(p, GANG_PROTOCOL, "version 99");
  unlink(p);

  /* a truncated last record (a writer killed mid-write) */
  make_store(p, &rec2, &end);
  assert_int_equal(truncate(p, end - 3), 0);
  expect_open_fails(p, GANG_PROTOCOL, "truncated record");
  assert_int_equal(truncate(p, rec2 + 10), 0); /* inside the header */
  expect_open_fails(p, GANG_PROTOCOL, "stray bytes");
  unlink(p);

  /* a huge value length: refused before any allocation */
  make_store(p, &rec2, &end);
  uint8_t big[8];
  gang__put_u64(big, (uint64_t)1 << 60);
  poke(p, rec2 + 16, big, 8);
  expect_open_fails(p, GANG_PROTOCOL, "value length out of range");
  /* a value length within the cap but beyond the end of the file */
  gang__put_u64(big, 1 << 20);
  poke(p, rec2 + 16, big, 8);
  expect_open_fails(p, GANG_PROTOCOL, "truncated record");
  unlink(p);

  /* a huge or zero key length */
  make_store(p, &rec2, &end);
  uint8_t kl[4];
  gang__put_u32(kl, 0xffffffffu);
  poke(p, rec2 + 4, kl, 4);
  expect_open_fails(p, GANG_PROTOCOL, "key length out of range");
  gang__put_u32(kl, 0);
  poke(p, rec2 + 4, kl, 4);
  expect_open_fails(p, GANG_PROTOCOL, "key length out of range");
  unlink(p);

  /* a flipped byte in a value, an unknown operation, reserved bits */
  make_store(p, &rec2, &end);
  poke(p, end - 1, "X", 1);
  expect_open_fails(p, GANG_PROTOCOL, "checksum mismatch");
  poke(p, end - 1, "2", 1);
  poke(p, rec2, "\x09", 1);
  expect_open_fails(p, GANG_PROTOCOL, "unknown operation");
  poke(p, rec2, "\x01\x01", 2);
  expect_open_fails(p, GANG_PROTOCOL, "reserved bytes");
  poke(p, rec2, "\x01\x00", 2);
  gang_store *ok = open_file(p, 1000); /* repaired: opens again */
  sc_expect_val(ok, "second", "22222");

  /* garbage appended while a handle is open: the next call fails cleanly,
   * a waiting get does not hang, and neither does a write */
  fd = open(p, O_WRONLY | O_APPEND | O_CLOEXEC);
  uint8_t junk[64];
  memset(junk, 0xee, sizeof junk);
  assert_int_equal(write(fd, junk, sizeof junk), (ssize_t)sizeof junk);
  close(fd);
  void *v;
  size_t n;
  assert_int_equal(gang_store_get(ok, "never", &v, &n), GANG_PROTOCOL);
  assert_non_null(strstr(gang_last_error(), "corrupted record at offset"));
  assert_int_equal(gang_store_set(ok, "k", "v", 1), GANG_PROTOCOL);
  int64_t nk;
  assert_int_equal(gang_store_num_keys(ok, &nk), GANG_PROTOCOL);
  gang_store_close(ok);

  /* a file shrunk under an open handle */
  unlink(p);
  make_store(p, &rec2, &end);
  ok = open_file(p, 1000);
  assert_int_equal(truncate(p, rec2), 0);
  assert_int_equal(gang_store_num_keys(ok, &nk), GANG_PROTOCOL);
  assert_non_null(strstr(gang_last_error(), "shrank"));
  gang_store_close(ok);
  unlink(p);

  /* paths that cannot be a store */
  expect_open_fails(t.dir, GANG_INVALID_ARGUMENT, t.dir);
  char nodir[160];
  snprintf(nodir, sizeof nodir, "%s/no/such/dir", t.dir);
  expect_open_fails(nodir, GANG_INVALID_ARGUMENT, "no/such/dir");
  tmp_fini(&t);
}

/* Random damage, many times over: every outcome must be success or a clean
 * GANG_PROTOCOL (or TIMEOUT for a get of a key the damage removed) -- no
 * crash, no sanitizer report, no allocation beyond the caps. */
static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static void test_random_damage(void **state) {
  (void)state;
  tmp_store t;
  tmp_init(&t);
  gang_store *st = open_file(t.path, 1000);
  const char *mk[] = {"m1", "m2", "m3"};
  const void *mv[] = {"a", "bb", "ccc"};
  const size_t ml[] = {1, 2, 3};
  assert_gang_ok(gang_store_multi_set(st, mk, mv, ml, 3));
  assert_gang_ok(gang_store_add(st, "ctr", 41, NULL));
  assert_gang_ok(gang_store_append(st, "log", "xy", 2));
  assert_gang_ok(gang_store_append(st, "log", "z", 1));
  assert_gang_ok(gang_store_delete(st, "m2", NULL));
  assert_gang_ok(gang_store_set(st, "k", "value", 5));
  gang_store_close(st);
  FILE *f = fopen(t.path, "rb");
  assert_non_null(f);
  uint8_t good[1024];
  size_t glen = fread(good, 1, sizeof good, f);
  fclose(f);
  assert_true(glen > 16 && glen < sizeof good);

  uint64_t seed = 0x9e3779b97f4a7c15ull;
  int opened = 0, refused = 0;
  for (int iter = 0; iter < 1500; iter++) {
    uint8_t buf[1200];
    size_t len = glen;
    memcpy(buf, good, glen);
    int nmut = 1 + (int)(rng_next(&seed) % 3);
    for (int m = 0; m < nmut; m++) {
      uint64_t r = rng_next(&seed);
      size_t at = (size_t)(rng_next(&seed) % len);
      switch (r % 5) {
      case 0: /* flip one byte */
        buf[at] ^= (uint8_t)(1 + r % 255);
        break;
      case 1: /* a random 32-bit field (key lengths, checksums) */
        if (at + 4 <= len)
          gang__put_u32(buf + at, (uint32_t)(r >> 8));
        break;
      case 2: /* a random or huge 64-bit field (value lengths) */
        if (at + 8 <= len)
          gang__put_u64(buf + at, (r & 256) ? r >> 3 : (r >> 40));
        break;
      case 3: /* truncate */
        len = at;
        break;
      default: /* append garbage */
        for (int i = 0; i < 40 && len < sizeof buf; i++)
          buf[len++] = (uint8_t)rng_next(&seed);
        break;
      }
      if (len == 0)
        break;
    }
    int fd = open(t.path, O_WRONLY | O_TRUNC | O_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, buf, len), (ssize_t)len);
    close(fd);
    gang_store_options o = GANG_STORE_OPTIONS_INIT;
    o.timeout_ms = 1;
    gang_store *h = NULL;
    gang_status s = gang_store_file_open(t.path, &o, &h);
    if (s != GANG_OK) {
      if (s != GANG_PROTOCOL)
        fail_msg("iteration %d: open gave %s: %s", iter, gang_status_name(s),
                 gang_last_error());
      refused++;
      continue;
    }
    opened++;
    int64_t n;
    assert_gang_ok(gang_store_num_keys(h, &n));
    void *v = NULL;
    size_t vl;
    s = gang_store_get(h, "log", &v, &vl);
    assert_true(s == GANG_OK || s == GANG_TIMEOUT);
    gang_store_free(v);
    /* A damaged-but-valid log still takes writes and replays them. */
    assert_gang_ok(gang_store_add(h, "fresh", 1, NULL));
    sc_expect_val(h, "fresh", "1");
    gang_store_close(h);
  }
  /* Both outcomes were exercised (a log cut at a record boundary is still
   * a valid log). */
  assert_true(refused > 1000);
  assert_true(opened > 0);
  tmp_fini(&t);
}

/* ---- argument checks ---------------------------------------------------- */

static void expect_invalid(gang_status s, const char *detail) {
  if (s != GANG_INVALID_ARGUMENT || strstr(gang_last_error(), detail) == NULL)
    fail_msg("got %s '%s', wanted INVALID_ARGUMENT mentioning '%s'",
             gang_status_name(s), gang_last_error(), detail);
}

static void test_argument_errors(void **state) {
  (void)state;
  tmp_store t;
  tmp_init(&t);
  gang_store *st = open_file(t.path, 1000), *out = NULL;
  void *v;
  size_t n;
  bool b;
  expect_invalid(gang_store_set(st, NULL, "v", 1), "key is NULL or empty");
  expect_invalid(gang_store_set(st, "", "v", 1), "key is NULL or empty");
  expect_invalid(gang_store_set(st, "k", NULL, 3), "value is NULL");
  expect_invalid(gang_store_set(NULL, "k", "v", 1), "store is NULL");
  expect_invalid(gang_store_get(st, NULL, &v, &n), "key is NULL");
  expect_invalid(gang_store_get(st, "k", NULL, &n), "value or len is NULL");
  expect_invalid(gang_store_add(st, "", 1, NULL), "key is NULL or empty");
  expect_invalid(gang_store_delete(st, NULL, &b), "key is NULL");
  expect_invalid(gang_store_check(st, NULL, 2, &b), "keys is NULL");
  const char *bad[] = {"ok", NULL};
  expect_invalid(gang_store_wait(st, bad, 2, 10), "key is NULL");
  expect_invalid(gang_store_num_keys(st, NULL), "n is NULL");
  expect_invalid(gang_store_compare_set(st, "k", "x", 1, "y", 1, &v, NULL),
                 "current and clen");
  expect_invalid(gang_store_prefix(st, "", &out), "prefix is empty");
  expect_invalid(gang_store_prefix(st, NULL, &out), "prefix is empty");
  expect_invalid(gang_store_prefix(NULL, "p", &out), "parent is NULL");
  assert_null(out);
  /* the file store's own caps */
  char longkey[9000];
  memset(longkey, 'k', sizeof longkey - 1);
  longkey[sizeof longkey - 1] = '\0';
  expect_invalid(gang_store_set(st, longkey, "v", 1), "exceeds the cap");
  expect_invalid(gang_store_file_open("", NULL, &out), "path is empty");
  expect_invalid(gang_store_file_open(NULL, NULL, &out), "path is empty");

  /* malformed addresses, each named in the detail */
  static const struct {
    const char *addr, *detail;
  } addrs[] = {
      {"host", "expected host:port"},      {"host:0", "not in 1..65535"},
      {"host:99999", "not in 1..65535"},   {"host:-1", "not in 1..65535"},
      {"host:12ab", "not in 1..65535"},    {"host:", "missing or bad port"},
      {":1234", "empty or overlong host"}, {"[::1", "expected [ipv6]:port"},
      {"[::1]", "expected [ipv6]:port"},   {"tcp://host", "expected host:port"},
      {"file://", "path is empty"},
  };
  for (size_t i = 0; i < sizeof addrs / sizeof addrs[0]; i++) {
    gang_status s = gang_store_connect(addrs[i].addr, NULL, &out);
    expect_invalid(s, addrs[i].detail);
    const char *shown = addrs[i].addr;
    if (strncmp(shown, "tcp://", 6) == 0)
      shown += 6;
    if (strncmp(shown, "file://", 7) != 0)
      assert_non_null(strstr(gang_last_error(), shown));
    assert_null(out);
  }
  expect_invalid(gang_store_connect("", NULL, &out), "addr is empty");
  expect_invalid(gang_store_connect(NULL, NULL, &out), "addr is empty");
  expect_invalid(gang_store_connect("h:1", NULL, NULL), "out is NULL");
  /* the handle is unharmed by all of that */
  assert_gang_ok(gang_store_set(st, "k", "v", 1));
  sc_expect_val(st, "k", "v");
  gang_store_close(st);
  tmp_fini(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_all_ops),        GT_TEST(test_prefix_views),
      GT_TEST(test_concurrent_add), GT_TEST(test_handles_in_one_process),
      GT_TEST(test_rendezvous),     GT_TEST(test_wait_across_processes),
      GT_TEST(test_timeouts),       GT_TEST(test_corrupted),
      GT_TEST(test_random_damage),  GT_TEST(test_argument_errors),
  };
  sc_prime_threads();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
