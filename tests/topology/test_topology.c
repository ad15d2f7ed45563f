/* Topology in one process: fake gangs, the layouts seen from every rank of
 * a fake world (a fake gang of size W simulating rank r gives fake
 * sub-gangs whose rank and size are those a real rank r would get), the
 * error cases, and the current-gangs stack (nesting, threads, defaults,
 * the cached fake fallback). */
#include <pthread.h>
#include <string.h>

#include "harness/harness.h"

#include "gang/gang.h"
#include "gang/mesh.h"
#include "gang/topology.h"

static const gang_device cpu = {GANG_DEVICE_CPU, 0};

static void test_fake_gangs(void **state) {
  (void)state;
  gangs gs;
  assert_gang_ok(gangs_create_fake(cpu, &gs));
  gang_t *all[6] = {gs.root, gs.dp, gs.rdp, gs.sdp, gs.tp, gs.pp};
  for (int i = 0; i < 6; i++) {
    assert_non_null(all[i]);
    assert_int_equal(gang_size(all[i]), 1);
    assert_int_equal(gang_rank(all[i]), 0);
  }
  assert_int_equal(gangs_device(&gs).type, GANG_DEVICE_CPU);
  /* fairseq2's all_sum on a fake gang is value * size. */
  int64_t v = 21;
  assert_gang_ok(gang_all_sum(gs.dp, &v));
  assert_int_equal(v, 21);
  gangs_close(&gs);
  assert_null(gs.root);
  gangs_close(&gs);
  gangs_close(NULL);

  gang_device cuda = {GANG_DEVICE_CUDA, 3};
  assert_gang_ok(gangs_create_fake(cuda, &gs));
  assert_int_equal(gangs_device(&gs).type, GANG_DEVICE_CUDA);
  assert_int_equal(gangs_device(&gs).index, 3);
  gangs_close(&gs);
}

/* Every rank r of a fake world of w: tp rank r % tp, pp rank
 * (r / tp) % pp, dp rank r / (tp * pp), as fairseq2 documents (rank 5 of 8
 * with tp 2 is tp 1/2 and dp 2/4). */
static void test_parallel_layout_every_rank(void **state) {
  (void)state;
  for (int w = 1; w <= 16; w++)
    for (int tp = 1; tp <= w; tp++)
      for (int pp = 1; tp * pp <= w; pp++) {
        if (w % (tp * pp))
          continue;
        int dp = w / (tp * pp);
        for (int r = 0; r < w; r++) {
          gang_t *root;
          assert_gang_ok(gang_create_fake(cpu, r, w, &root));
          gangs gs;
          assert_gang_ok(gangs_create_parallel(root, tp, pp, &gs));
          assert_int_equal(gang_size(gs.tp), tp);
          assert_int_equal(gang_rank(gs.tp), r % tp);
          assert_int_equal(gang_size(gs.pp), pp);
          assert_int_equal(gang_rank(gs.pp), (r / tp) % pp);
          assert_int_equal(gang_size(gs.dp), dp);
          assert_int_equal(gang_rank(gs.dp), r / (tp * pp));
          assert_ptr_equal(gs.rdp, gs.dp);
          assert_int_equal(gang_size(gs.sdp), 1);
          /* fairseq2 tests size 1 first: a world of 1 gets fakes. */
          assert_true((tp == w && w > 1) == (gs.tp == root));
          assert_true((dp == w && w > 1) == (gs.dp == root));
          for (int k = 0; k <= dp; k++) {
            if (k == 1 || (k && dp % k))
              continue;
            gangs fs;
            assert_gang_ok(gangs_create_fsdp(&gs, k, &fs));
            int kk = k ? k : dp, dr = r / (tp * pp);
            assert_int_equal(gang_size(fs.sdp), kk);
            assert_int_equal(gang_rank(fs.sdp), dr % kk);
            assert_int_equal(gang_size(fs.rdp), dp / kk);
            assert_int_equal(gang_rank(fs.rdp), dr / kk);
            /* Either close order works. */
            if (k % 2) {
              gangs_close(&fs);
            } else {
              gangs_close(&gs);
              assert_int_equal(gang_size(fs.dp), dp);
              gangs_close(&fs);
              assert_gang_ok(gangs_create_parallel(root, tp, pp, &gs));
            }
          }
          gangs_close(&gs);
          gang_destroy(root);
        }
      }
  gang_t *r5;
  assert_gang_ok(gang_create_fake(cpu, 5, 8, &r5));
  gangs gs;
  assert_gang_ok(gangs_create_parallel(r5, 2, 1, &gs));
  assert_int_equal(gang_rank(gs.tp), 1);
  assert_int_equal(gang_rank(gs.dp), 2);
  assert_int_equal(gang_size(gs.dp), 4);
  gangs_close(&gs);
  gang_destroy(r5);
}

static void expect_arg_error(gang_status st, const char *a, const char *b) {
  assert_int_equal(st, GANG_INVALID_ARGUMENT);
  const char *e = gang_last_error();
  if ((a && !strstr(e, a)) || (b && !strstr(e, b)))
    fail_msg("detail '%s' lacks '%s' or '%s'", e, a ? a : "", b ? b : "");
}

static void test_errors(void **state) {
  (void)state;
  gang_t *root;
  assert_gang_ok(gang_create_fake(cpu, 0, 8, &root));
  gangs gs = {0}, fs = {0};
  expect_arg_error(gangs_create_parallel(root, 3, 1, &gs), "(8)", "is 3");
  expect_arg_error(gangs_create_parallel(root, 0, 1, &gs), "tp_size", "0");
  expect_arg_error(gangs_create_parallel(root, 2, 0, &gs), "pp_size", "0");
  expect_arg_error(gangs_create_parallel(root, 2, 3, &gs), "pp_size (3)",
                   "(8)");
  expect_arg_error(gangs_create_parallel(root, 4, 4, &gs), "tp_size (4)",
                   "pp_size (4)");
  expect_arg_error(gangs_create_parallel(NULL, 1, 1, &gs), "root", NULL);
  assert_null(gs.root);
  assert_gang_ok(gangs_create_parallel(root, 1, 1, &gs));
  expect_arg_error(gangs_create_fsdp(&gs, 1, &fs), "greater than 1", "1");
  expect_arg_error(gangs_create_fsdp(&gs, 3, &fs), "(8)", "is 3");
  expect_arg_error(gangs_create_fsdp(&gs, -2, &fs), "-2", NULL);
  expect_arg_error(gangs_create_fsdp(&gs, 16, &fs), "(8)", "16");
  gangs empty = {0};
  expect_arg_error(gangs_create_fsdp(&empty, 2, &fs), "dp", NULL);
  assert_null(fs.root);
  gangs_close(&gs);

  /* Meshes. */
  gang_mesh *m = NULL;
  int s24[2] = {2, 4}, s23[2] = {2, 3}, s0[2] = {2, 0};
  const char *dt[2] = {"dp", "tp"}, *dd[2] = {"dp", "dp"}, *de[2] = {"dp", ""};
  expect_arg_error(gang_mesh_create(root, s23, 2, dt, &m), "(2, 3)", "8");
  expect_arg_error(gang_mesh_create(root, s0, 2, dt, &m), "shape[1]", "0");
  expect_arg_error(gang_mesh_create(root, s24, 0, dt, &m), "ndim", "0");
  expect_arg_error(gang_mesh_create(root, s24, 17, dt, &m), "ndim", "17");
  expect_arg_error(gang_mesh_create(root, s24, 2, dd, &m), "'dp'",
                   "used twice");
  expect_arg_error(gang_mesh_create(root, s24, 2, de, &m), "names[1]", "empty");
  int dup[4] = {0, 1, 1, 2}, big[2] = {0, 8};
  int s4[1] = {4}, s2[1] = {2}, s16[1] = {16};
  expect_arg_error(gang_mesh_create_from_ranks(root, dup, s4, 1, dt, &m),
                   "rank 1", "twice");
  expect_arg_error(gang_mesh_create_from_ranks(root, big, s2, 1, dt, &m),
                   "ranks[1] = 8", NULL);
  int r16[16] = {0};
  expect_arg_error(gang_mesh_create_from_ranks(root, r16, s16, 1, dt, &m),
                   "16 positions", "8 ranks");
  assert_null(m);

  assert_gang_ok(gang_mesh_create(root, s24, 2, dt, &m));
  gang_t *g;
  expect_arg_error(gang_mesh_group(m, "cp", &g), "'cp'", "dp, tp");
  expect_arg_error(gang_mesh_group(m, NULL, &g), "2 dimensions", NULL);
  expect_arg_error(gang_mesh_group_at(m, 2, &g), "[0, 2)", "2");
  expect_arg_error(gang_mesh_group_at(m, -1, &g), "-1", NULL);
  assert_int_equal(gang_mesh_local_rank(m, "xx"), -1);
  assert_non_null(strstr(gang_last_error(), "'xx'"));
  gang_mesh *s = NULL;
  const char *cp[1] = {"cp"}, *twice[2] = {"tp", "tp"};
  expect_arg_error(gang_mesh_slice(m, cp, 1, &s), "'cp'", "dp, tp");
  expect_arg_error(gang_mesh_slice(m, twice, 2, &s), "'tp'", "twice");
  expect_arg_error(gang_mesh_slice(m, dt, 0, &s), "0", NULL);
  expect_arg_error(gang_mesh_flatten(m, "dp", &g), "'dp'", "already");
  assert_gang_ok(gang_mesh_flatten(m, "world", &g));
  assert_int_equal(gang_size(g), 8);
  gang_mesh *one;
  assert_gang_ok(gang_mesh_slice(m, &dt[1], 1, &one));
  expect_arg_error(gang_mesh_flatten(one, "world", &g), "'world'",
                   "other dimensions");
  expect_arg_error(gang_mesh_slice(m, (const char *[]){"world"}, 1, &s),
                   "'world'", "flattened");
  gang_t *tp, *same;
  assert_gang_ok(gang_mesh_flatten(one, NULL, &same)); /* 1-D: itself */
  assert_gang_ok(gang_mesh_group(m, "tp", &tp));
  assert_ptr_equal(same, tp);
  assert_null(s);
  gang_mesh_destroy(one);
  gang_mesh_destroy(m);
  /* An unnamed mesh goes by index only. */
  assert_gang_ok(gang_mesh_create(root, s24, 2, NULL, &m));
  assert_null(gang_mesh_names(m));
  expect_arg_error(gang_mesh_slice(m, dt, 1, &s), "without dimension names",
                   NULL);
  expect_arg_error(gang_mesh_flatten(m, NULL, &g), "without dimension names",
                   NULL);
  assert_gang_ok(gang_mesh_group_at(m, 1, &g));
  assert_int_equal(gang_size(g), 4);
  gang_mesh_destroy(m);
  gang_mesh_destroy(NULL);

  /* Helpers. */
  double v[1];
  const char *nm[1] = {NULL};
  expect_arg_error(gang_all_reduce_dict(root, nm, v, 1, GANG_SUM), "names[0]",
                   NULL);
  expect_arg_error(gang_broadcast_flag(root, NULL, 0), "flag", NULL);
  expect_arg_error(gang_all_sum(NULL, NULL), "gang", NULL);
  gang_destroy(root);

  /* Current gangs. */
  expect_arg_error(gangs_push_current(NULL), "NULL", NULL);
  expect_arg_error(gangs_push_current(&empty), "root", NULL);
  assert_int_equal(gangs_pop_current(), GANG_INVALID_USAGE);
  assert_non_null(strstr(gang_last_error(), "no current gangs"));
}

static void test_helpers_on_fake(void **state) {
  (void)state;
  gang_t *g;
  assert_gang_ok(gang_create_fake(cpu, 2, 4, &g));
  int flag = 5;
  assert_gang_ok(gang_broadcast_flag(g, &flag, 2));
  assert_int_equal(flag, 1);
  int64_t n = 3;
  assert_gang_ok(gang_all_sum(g, &n));
  assert_int_equal(n, 12); /* fairseq2: value * size on a fake gang */
  double x = 0.5;
  assert_gang_ok(gang_all_sum_f64(g, &x));
  assert_true(x == 2.0);
  const char *names[2] = {"a", "b"};
  double v[2] = {1.5, -2};
  assert_gang_ok(gang_all_reduce_dict(g, names, v, 2, GANG_SUM));
  assert_true(v[0] == 6 && v[1] == -8);
  assert_gang_ok(gang_all_reduce_dict(g, names, v, 2, GANG_MEAN));
  assert_true(v[0] == 6 && v[1] == -8);
  gang_destroy(g);
}

/* ---- Current gangs ------------------------------------------------------- */

static void test_current_nesting(void **state) {
  (void)state;
  gangs a, b;
  assert_gang_ok(gangs_create_fake(cpu, &a));
  assert_gang_ok(gangs_create_fake(cpu, &b));
  gang_device cuda0 = {GANG_DEVICE_CUDA, 0}, cuda1 = {GANG_DEVICE_CUDA, 1};
  gangs c;
  assert_gang_ok(gangs_create_fake(cuda1, &c));

  /* Nothing pushed, no default: the cached fake gangs, the same objects on
   * every call, never a caller's. */
  const gangs *f = gangs_current(cpu);
  gang_t *fake_root = f->root;
  assert_non_null(fake_root);
  assert_int_equal(gang_size(f->tp), 1);
  assert_null(f->owner);
  assert_ptr_equal(gangs_current(cpu)->root, fake_root);
  gang_device cpu7 = {GANG_DEVICE_CPU, 7};
  assert_ptr_equal(gangs_current(cpu7)->root, fake_root); /* index ignored */
  gang_t *cuda_fake = gangs_current(cuda0)->root;
  assert_ptr_not_equal(cuda_fake, fake_root);
  assert_int_equal(gang_get_device(cuda_fake).type, GANG_DEVICE_CUDA);

  assert_gang_ok(gangs_push_current(&a));
  assert_ptr_equal(gangs_current(cpu)->root, a.root);
  assert_gang_ok(gangs_push_current(&c)); /* another device */
  assert_ptr_equal(gangs_current(cpu)->root, a.root);
  assert_ptr_equal(gangs_current(cuda1)->root, c.root);
  assert_ptr_equal(gangs_current(cuda0)->root, cuda_fake);
  assert_gang_ok(gangs_push_current(&b));
  assert_ptr_equal(gangs_current(cpu)->root, b.root);
  assert_gang_ok(gangs_pop_current());
  assert_ptr_equal(gangs_current(cpu)->root, a.root);
  assert_gang_ok(gangs_pop_current());
  assert_int_equal(gang_get_device(gangs_current(cuda1)->root).index, 1);
  assert_ptr_not_equal(gangs_current(cuda1)->root, c.root);
  assert_ptr_equal(gangs_current(cpu)->root, a.root);
  assert_gang_ok(gangs_pop_current());
  assert_ptr_equal(gangs_current(cpu)->root, fake_root);
  assert_int_equal(gangs_pop_current(), GANG_INVALID_USAGE);

  /* The default sits under the thread's pushes. */
  assert_gang_ok(gangs_set_default(&a));
  assert_ptr_equal(gangs_current(cpu)->root, a.root);
  assert_gang_ok(gangs_push_current(&b));
  assert_ptr_equal(gangs_current(cpu)->root, b.root);
  assert_gang_ok(gangs_pop_current());
  assert_ptr_equal(gangs_current(cpu)->root, a.root);
  assert_gang_ok(gangs_set_default(&b)); /* replaces */
  assert_ptr_equal(gangs_current(cpu)->root, b.root);
  assert_ptr_equal(gangs_current(cuda0)->root, cuda_fake);
  assert_gang_ok(gangs_set_default(NULL));
  assert_ptr_equal(gangs_current(cpu)->root, fake_root);
  gangs_close(&a);
  gangs_close(&b);
  gangs_close(&c);
}

typedef struct thread_arg {
  gangs mine;
  gang_t *want_default;
  gang_t *fake_root;
  int iters;
  int fail;
} thread_arg;

static void *thread_main(void *p) {
  thread_arg *t = p;
  for (int i = 0; i < t->iters && !t->fail; i++) {
    /* Before pushing: the process default (or the shared fake). */
    gang_t *base = t->want_default ? t->want_default : t->fake_root;
    if (gangs_current(cpu)->root != base)
      t->fail = 1;
    if (gangs_push_current(&t->mine) != GANG_OK)
      t->fail = 2;
    if (gangs_push_current(&t->mine) != GANG_OK)
      t->fail = 2;
    if (gangs_current(cpu)->root != t->mine.root)
      t->fail = 3;
    if (gangs_pop_current() != GANG_OK ||
        gangs_current(cpu)->root != t->mine.root)
      t->fail = 4;
    if (gangs_pop_current() != GANG_OK || gangs_current(cpu)->root != base)
      t->fail = 5;
  }
  /* A thread that exits with gangs pushed leaves nothing behind (the
   * per-thread stack is freed by the thread-exit destructor). */
  if (gangs_push_current(&t->mine) != GANG_OK)
    t->fail = 6;
  return NULL;
}

static void run_threads(gang_t *want_default) {
  enum { N = 4 };
  thread_arg args[N];
  pthread_t th[N];
  gang_t *fake_root = gangs_current(cpu)->root;
  if (want_default)
    fake_root = NULL;
  for (int i = 0; i < N; i++) {
    memset(&args[i], 0, sizeof args[i]);
    assert_gang_ok(gangs_create_fake(cpu, &args[i].mine));
    args[i].want_default = want_default;
    args[i].fake_root = fake_root;
    args[i].iters = 2000;
  }
  for (int i = 0; i < N; i++)
    assert_int_equal(pthread_create(&th[i], NULL, thread_main, &args[i]), 0);
  /* Meanwhile this thread's own pushes are invisible to the others. */
  gangs mine;
  assert_gang_ok(gangs_create_fake(cpu, &mine));
  for (int i = 0; i < 500; i++) {
    assert_gang_ok(gangs_push_current(&mine));
    assert_ptr_equal(gangs_current(cpu)->root, mine.root);
    assert_gang_ok(gangs_pop_current());
  }
  for (int i = 0; i < N; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(args[i].fail, 0);
    gangs_close(&args[i].mine);
  }
  gangs_close(&mine);
}

static void test_current_threads(void **state) {
  (void)state;
  run_threads(NULL);
  gangs d;
  assert_gang_ok(gangs_create_fake(cpu, &d));
  assert_gang_ok(gangs_set_default(&d));
  run_threads(d.root);
  assert_gang_ok(gangs_set_default(NULL));
  gangs_close(&d);
}

/* The fallback fake gangs are created once even when many threads ask for
 * a new device at the same moment. */
static void *ask_fake(void *p) {
  gang_device dev = {GANG_DEVICE_CUDA, 42};
  *(gang_t **)p = gangs_current(dev)->root;
  return NULL;
}

static void test_current_fake_once(void **state) {
  (void)state;
  enum { N = 8 };
  pthread_t th[N];
  gang_t *got[N];
  for (int i = 0; i < N; i++)
    assert_int_equal(pthread_create(&th[i], NULL, ask_fake, &got[i]), 0);
  for (int i = 0; i < N; i++)
    pthread_join(th[i], NULL);
  for (int i = 1; i < N; i++)
    assert_ptr_equal(got[i], got[0]);
  assert_non_null(got[0]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_fake_gangs),
      GT_TEST(test_parallel_layout_every_rank),
      GT_TEST(test_errors),
      GT_TEST(test_helpers_on_fake),
      GT_TEST(test_current_nesting),
      GT_TEST(test_current_threads),
      GT_TEST(test_current_fake_once),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
