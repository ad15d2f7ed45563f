/* Flagged steps (src/algo/shm_ll.c) on their own: the members' control
 * pages live in this one process, and the step-line wait that a poll falls
 * back to is replaced below. The multi-rank tests cannot show that a poll
 * waits for every line of every member: between processes the window is a
 * few nanoseconds and ThreadSanitizer does not see across them. Here a
 * line is withheld until the poll has given up and fallen back to the
 * step-line wait, so a poll that returns early (a member skipped, a line
 * not checked, the first flag trusted alone) fails every time. Then peers
 * as threads write their lines with pauses in between while the step polls,
 * for ThreadSanitizer to check the ordering. It links shm_ll.c alone,
 * with the few calls of the shared-memory transport it makes replaced
 * below and in shm_alone.c, and nothing else of the library. */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "algo/shm_algo.h"

/* cmocka.h needs these first. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#define T 21 /* the step under test; ring line 5 */
#define SIG 0x5157a11ull
#define OTHER_SIG (SIG + 1)
#define MAX_MEMBERS 8
#define MAX_LINES (SHM_LL_MAX / SHM_LL_DATA)

static gang__shm_ctl *g_ctl[MAX_MEMBERS];
static int g_size;
static int g_fallbacks; /* calls of the step-line wait */
static int g_held = -1; /* member whose line is withheld, or -1 */
static size_t g_held_line;
static bool g_threaded; /* peers are threads: the wait just polls */

static unsigned char byte_of(int member, size_t k, size_t b) {
  return (unsigned char)(member * 31 + (int)k * 7 + (int)b + T);
}

/* Member's line k of step T, written the way gang__shm_ll_step writes it. */
static void write_line(int member, size_t k, uint64_t sig) {
  shm_ll_line *l = shm_ll_slot(&(gang__shm_chan){.ctl = g_ctl}, member, T);
  unsigned char d[SHM_LL_DATA];
  for (size_t b = 0; b < SHM_LL_DATA; b++)
    d[b] = byte_of(member, k, b);
  memcpy(l[k].data, d, sizeof d);
  atomic_store_explicit(&l[k].flag, shm_ll_flag(T, sig), memory_order_release);
}

static void publish(int member, uint64_t t, uint64_t sig) {
  gang__shm_line *l = &g_ctl[member]->line[GANG_SHM_LINE(t)];
  l->sig = sig;
  atomic_store_explicit(&l->seq, t, memory_order_seq_cst);
}

/* ---- The step-line wait (the rest of src/transport/shm.c that this
 * needs: shm_alone.c) ---- */

/* The step-line wait. Single-threaded, it first releases the withheld
 * line and publishes every peer's step line, as those peers would have;
 * with peer threads it waits for them. */
gang_status gang__shm_wait_slow(gang__shm_chan *c, int member, uint64_t seq) {
  _Atomic uint64_t *s = &c->ctl[member]->line[GANG_SHM_LINE(seq)].seq;
  g_fallbacks++;
  if (g_held >= 0) {
    write_line(g_held, g_held_line, SIG);
    g_held = -1;
    for (int m = 0; m < g_size; m++)
      if (m != c->rank)
        publish(m, seq, SIG);
  }
  while (g_threaded && atomic_load_explicit(s, memory_order_acquire) < seq)
    gang__shm_relax();
  return atomic_load_explicit(s, memory_order_acquire) >= seq ? GANG_OK
                                                              : GANG_TIMEOUT;
}

/* ---- Set-up ---- */

/* A channel of `size` members seen from `rank`, about to take step T: every
 * member has published the steps before, so begin_line does not wait. */
static gang__shm_chan open_chan(int rank, int size, bool oversubscribed) {
  for (int m = 0; m < size; m++) {
    g_ctl[m] = aligned_alloc(64, sizeof(gang__shm_ctl));
    assert_non_null(g_ctl[m]);
    memset(g_ctl[m], 0, sizeof(gang__shm_ctl));
    for (uint64_t s = T - GANG_SHM_LINES + 1; s < T; s++)
      publish(m, s, SIG);
  }
  g_size = size;
  g_fallbacks = 0;
  g_held = -1;
  return (gang__shm_chan){.rank = rank,
                          .size = size,
                          .step = T - 1,
                          .synced = 0,
                          .sig = SIG,
                          .oversubscribed = oversubscribed,
                          .ctl = g_ctl};
}

static void close_chan(void) {
  for (int m = 0; m < g_size; m++)
    free(g_ctl[m]);
}

/* Whether every other member's data of step T arrived intact. */
static bool gathered_ok(gang__shm_chan *c, size_t bytes) {
  unsigned char got[SHM_LL_MAX];
  for (int m = 0; m < c->size; m++) {
    if (m == c->rank)
      continue;
    gang__shm_ll_gather(got, c, m, T, bytes);
    for (size_t b = 0; b < bytes; b++)
      if (got[b] != byte_of(m, b / SHM_LL_DATA, b % SHM_LL_DATA))
        return false;
  }
  return true;
}

static void check_gathered(gang__shm_chan *c, size_t bytes) {
  if (!gathered_ok(c, bytes))
    fail_msg("%d members, rank %d, %zu bytes: wrong data gathered", c->size,
             c->rank, bytes);
}

static size_t lines_of(size_t bytes) {
  return (bytes + SHM_LL_DATA - 1) / SHM_LL_DATA;
}

/* Writes every other member's lines of step T but member `held_m`'s line
 * `held_k` (held_m -1: all of them). */
static void write_peers(int rank, int size, size_t lines, int held_m,
                        size_t held_k) {
  for (int m = 0; m < size; m++)
    for (size_t k = 0; m != rank && k < lines; k++)
      if (m != held_m || k != held_k)
        write_line(m, k, SIG);
}

/* Runs `fn` for 2 to 8 members, every rank, 1 to 16 lines (full and with
 * one byte in the last), spinning and oversubscribed. */
static void each_case(void (*fn)(int rank, int size, size_t bytes, bool over)) {
  for (int size = 2; size <= MAX_MEMBERS; size++)
    for (int rank = 0; rank < size; rank++)
      for (size_t lines = 1; lines <= MAX_LINES; lines++)
        for (int over = 0; over < 2; over++) {
          fn(rank, size, lines * SHM_LL_DATA, over);
          fn(rank, size, (lines - 1) * SHM_LL_DATA + 1, over);
        }
}

/* ---- Tests ---- */

static void complete_case(int rank, int size, size_t bytes, bool over) {
  gang__shm_chan c = open_chan(rank, size, over);
  write_peers(rank, size, lines_of(bytes), -1, 0);
  unsigned char src[SHM_LL_MAX] = {0};
  uint64_t t = 0;
  assert_int_equal(gang__shm_ll_step(&c, src, bytes, &t), GANG_OK);
  assert_int_equal(t, T);
  /* Everything was there: the poll alone finishes, even with 4 spins. */
  assert_int_equal(g_fallbacks, 0);
  check_gathered(&c, bytes);
  close_chan();
}

/* Every peer's lines already written: the poll finds them without the
 * step lines, and the data is the step's. */
__attribute__((unused)) static void
test_complete_lines_need_no_fallback(void **state) {
  (void)state;
  each_case(complete_case);
}

static void held_case(int rank, int size, size_t bytes, bool over) {
  size_t lines = lines_of(bytes);
  size_t held[3] = {0, lines / 2, lines - 1};
  for (int p = 0; p < size; p++)
    for (int i = 0; p != rank && i < 3; i++) {
      gang__shm_chan c = open_chan(rank, size, over);
      write_peers(rank, size, lines, p, held[i]);
      g_held = p;
      g_held_line = held[i];
      unsigned char src[SHM_LL_MAX] = {0};
      uint64_t t = 0;
      gang_status st = gang__shm_ll_step(&c, src, bytes, &t);
      if (st != GANG_OK || g_held != -1)
        fail_msg("%d members, rank %d, %zu bytes, oversubscribed %d: "
                 "member %d's line %zu withheld, the step returned %d %s",
                 size, rank, bytes, over, p, held[i], st,
                 g_held != -1 ? "before it was written" : "");
      check_gathered(&c, bytes);
      close_chan();
    }
}

/* One line of one peer (its first, a middle one or its last) is written
 * only once the poll has given up: the step must not return before. */
__attribute__((unused)) static void
test_poll_waits_for_every_line(void **state) {
  (void)state;
  each_case(held_case);
}

static void mismatch_case(int rank, int size, size_t bytes, bool over) {
  size_t lines = lines_of(bytes);
  for (int p = 0; p < size; p++) {
    if (p == rank)
      continue;
    gang__shm_chan c = open_chan(rank, size, over);
    for (int m = 0; m < size; m++) {
      if (m == rank)
        continue;
      for (size_t k = 0; k < lines; k++)
        write_line(m, k, m == p ? OTHER_SIG : SIG);
      publish(m, T, m == p ? OTHER_SIG : SIG);
    }
    unsigned char src[SHM_LL_MAX] = {0};
    uint64_t t = 0;
    assert_int_equal(gang__shm_ll_step(&c, src, bytes, &t), GANG_MISMATCH);
    close_chan();
  }
}

/* A peer whose lines belong to another call (another signature) is never
 * taken for this one: the step falls back and reports the mismatch. */
__attribute__((unused)) static void
test_other_call_is_a_mismatch(void **state) {
  (void)state;
  each_case(mismatch_case);
}

typedef struct peer {
  pthread_t th;
  int member;
  size_t lines;
  unsigned seed;
} peer;

static void *peer_main(void *arg) {
  peer *p = arg;
  for (size_t k = 0; k < p->lines; k++) {
    write_line(p->member, k, SIG);
    for (unsigned n = (unsigned)rand_r(&p->seed) % 64; n > 0; n--)
      gang__shm_relax();
  }
  publish(p->member, T, SIG);
  return NULL;
}

/* Rounds of the threaded test. Member counts cycle over 2..MAX_MEMBERS
 * and, each count's turn, its ranks: 1000 rounds hold every (count, rank)
 * pair at least 17 times, with sizes spread over 1..SHM_LL_MAX in 37-byte
 * steps (about 4 s under ThreadSanitizer). */
#define LL_ROUNDS 1000

/* Peers as threads write their lines while the step polls; the data read
 * must be theirs (and ThreadSanitizer checks the ordering). */
static void test_lines_written_meanwhile(void **state) {
  (void)state;
  g_threaded = true;
  for (int round = 0; round < LL_ROUNDS; round++) {
    int size = 2 + round % (MAX_MEMBERS - 1);
    int rank = round / (MAX_MEMBERS - 1) % size;
    size_t bytes = 1 + (size_t)round * 37 % SHM_LL_MAX;
    gang__shm_chan c = open_chan(rank, size, round % 2);
    peer peers[MAX_MEMBERS];
    for (int m = 0; m < size; m++) {
      if (m == rank)
        continue;
      peers[m] = (peer){.member = m,
                        .lines = lines_of(bytes),
                        .seed = (unsigned)(round * MAX_MEMBERS + m)};
      assert_int_equal(pthread_create(&peers[m].th, NULL, peer_main, &peers[m]),
                       0);
    }
    unsigned char src[SHM_LL_MAX] = {0};
    uint64_t t = 0;
    gang_status st = gang__shm_ll_step(&c, src, bytes, &t);
    /* Read before the joins, which would order everything anyway. */
    bool ok = st == GANG_OK && gathered_ok(&c, bytes);
    for (int m = 0; m < size; m++)
      if (m != rank)
        pthread_join(peers[m].th, NULL);
    if (!ok)
      fail_msg("round %d: %d members, rank %d, %zu bytes: status %d or "
               "wrong data",
               round, size, rank, bytes, st);
    close_chan();
  }
  g_threaded = false;
}

int main(void) {
  const struct CMUnitTest tests[] = {
  /* The exhaustive cases run on one thread: ThreadSanitizer has nothing to
   * look at there (the other builds run them), only in the threaded one. */
#if !defined(__SANITIZE_THREAD__)
    cmocka_unit_test(test_complete_lines_need_no_fallback),
    cmocka_unit_test(test_poll_waits_for_every_line),
    cmocka_unit_test(test_other_call_is_a_mismatch),
#endif
    cmocka_unit_test(test_lines_written_meanwhile),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
