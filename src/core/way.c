/* Choosing between two ways by timing both (way.h). */
#include "way.h"

#include <string.h>

int gang__way_class(size_t first, size_t bytes) {
  int k = 0;
  for (size_t b = bytes / first / 2; b != 0 && k < GANG__WAY_CLASSES - 1;
       b >>= 1)
    k++;
  return k;
}

double gang__way_typical(const gang__way_book *b, int k, int way) {
  int n = b->n[k][way];
  float v[GANG__WAY_SAMPLES];
  for (int i = 0; i < n; i++)
    v[i] = b->ns_mib[k][way][i];
  for (int i = 1; i < n; i++) /* insertion sort of at most 5 */
    for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
      float x = v[j];
      v[j] = v[j - 1];
      v[j - 1] = x;
    }
  return n == 0 ? 0 : v[n / 2];
}

/* Times each way needs before the record chooses. */
static int trials(const gang__way_book *b) {
  return b->trials > 0 ? b->trials : GANG__WAY_TRIALS;
}

int gang__way_proposal(const gang__way_book *b, int k, bool retry) {
  if (b->n[k][0] < trials(b))
    return 0;
  if (b->n[k][1] < trials(b))
    return 1;
  int best = gang__way_typical(b, k, 1) < gang__way_typical(b, k, 0) ? 1 : 0;
  return retry && b->calls % GANG__WAY_RETRY >= GANG__WAY_RETRY - 2 ? 1 - best
                                                                    : best;
}

int gang__way_due(const gang__way_book *b, int k) {
  uint32_t phase = b->class_calls[k] % GANG__WAY_RETRY;
  if (b->n[k][0] < trials(b))
    return 0;
  if (b->n[k][1] < trials(b))
    return 1;
  if (b->agreed[k] == 0 || phase == 0)
    return -1;
  if (phase >= GANG__WAY_RETRY - 2 && !b->settled[k])
    return 1 - (b->agreed[k] - 1); /* the other way, again */
  return b->agreed[k] - 1;
}

void gang__way_set_agreed(gang__way_book *b, int k, int way) {
  b->agreed[k] = (uint8_t)(way + 1);
}

void gang__way_forget(gang__way_book *b, int k) {
  b->n[k][0] = b->n[k][1] = 0;
  b->prev[k] = b->agreed[k] = b->settled[k] = 0;
  b->class_calls[k] = 0;
}

void gang__way_learn(gang__way_book *b, int k, int way, int64_t wall,
                     size_t bytes) {
  b->calls++;
  if (bytes == 0)
    return;
  b->class_calls[k]++;
  /* The first call after the other way (or the first at this size:
   * 11-13 ms against 0.5-1.3 for 8 MiB blocks of shared memory) is not
   * kept. */
  bool after_same = b->prev[k] == way + 1;
  b->prev[k] = (uint8_t)(way + 1);
  if (!after_same)
    return;
  uint8_t *n = &b->n[k][way];
  float *v = b->ns_mib[k][way];
  if (*n == GANG__WAY_SAMPLES) { /* drop the oldest */
    memmove(v, v + 1, (GANG__WAY_SAMPLES - 1) * sizeof *v);
    (*n)--;
  }
  v[(*n)++] = (float)((double)wall / ((double)bytes / 1048576.0));
}
