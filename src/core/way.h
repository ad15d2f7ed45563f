/* Choosing between two ways of running a call by timing both: the record
 * one member keeps for one kind of call, and the rules every member
 * applies to it alike. Three places use it: shared-memory members
 * choosing between staged chunks and single copy (src/algo/shm_way.c),
 * two TCP members choosing between recursive doubling and
 * halving-doubling for all_reduce (src/algo/allreduce_measured.c), and
 * TCP members timing the link model's choice against its rival where it
 * misses its price or the two are priced alike (src/algo/tcp_timed.c).
 * How the members agree on a choice is theirs; what they time and when
 * they try the other way is here.
 *
 * Calls fall in size classes (the kind's first class, then each doubling,
 * the last holding everything above). Per class and way the record keeps
 * the last GANG__WAY_SAMPLES times in ns per MiB, but only of calls whose
 * class's previous call took the same way: a way's first call pays for
 * what is cold or what the other way left in the caches. So a class runs
 * GANG__WAY_TRIALS + 1 calls of way 0, as many of way 1, then the way
 * whose times have the lower median (one slow call must not decide), and
 * the other again in two calls of every GANG__WAY_RETRY, as the
 * machine's state changes. Every member makes the same calls and so
 * counts the same, which lets the trials' and retries' ways follow from
 * the counts without a word between the members. */
#ifndef GANG_CORE_WAY_H
#define GANG_CORE_WAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GANG__WAY_CLASSES 11
#define GANG__WAY_SAMPLES 5
#define GANG__WAY_TRIALS 3
#define GANG__WAY_RETRY 128

typedef struct gang__way_book {
  float ns_mib[GANG__WAY_CLASSES][2][GANG__WAY_SAMPLES];
  uint8_t n[GANG__WAY_CLASSES][2];   /* times kept of each way */
  uint8_t prev[GANG__WAY_CLASSES];   /* the last call's way + 1, 0: none */
  uint8_t agreed[GANG__WAY_CLASSES]; /* last agreed way + 1, 0: none */
  uint32_t calls;                    /* calls of the kind so far */
  uint32_t class_calls[GANG__WAY_CLASSES]; /* calls with bytes, by class */
  /* Times of each way kept before the first choice, at most
   * GANG__WAY_SAMPLES (0: GANG__WAY_TRIALS). */
  uint8_t trials;
  /* Per class, set by the members alike: the agreed way won by so much
   * that the other is not tried again (no retries). */
  uint8_t settled[GANG__WAY_CLASSES];
} gang__way_book;

/* The class of a call of `bytes` where the first class ends below
 * 2 * first. */
int gang__way_class(size_t first, size_t bytes);

/* The median of way's times in class k (ns per MiB), 0 with none. */
double gang__way_typical(const gang__way_book *b, int k, int way);

/* This member's proposal for the next call in class k: the trials' way
 * while either has fewer than GANG__WAY_TRIALS times, else the faster by
 * the median, or (with `retry`, on the last two of every GANG__WAY_RETRY
 * calls of the kind) the slower. */
int gang__way_proposal(const gang__way_book *b, int k, bool retry);

/* For members that agree only when a choice is due: the way of the next
 * call in class k where it follows from the counts (a trial, a retry or
 * the way last agreed), or -1 where the members must agree now and tell
 * the book so (gang__way_set_agreed). */
int gang__way_due(const gang__way_book *b, int k);
void gang__way_set_agreed(gang__way_book *b, int k, int way);

/* Forgets class k: its times, its last and agreed ways, its calls (the
 * two ways it chose between changed). */
void gang__way_forget(gang__way_book *b, int k);

/* Keeps a finished call's time: `wall` ns for `bytes` (0: counts the call
 * of the kind, keeps nothing) taken by `way`. */
void gang__way_learn(gang__way_book *b, int k, int way, int64_t wall,
                     size_t bytes);

#endif
