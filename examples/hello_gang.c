/* hello_gang: the gang the way fairseq2's documentation uses it.
 *
 * Every rank joins the world gang (from the environment: gangrun, torchrun,
 * Slurm or MPI variables), makes a sub-gang of the even and of the odd
 * ranks, and runs all_reduce, broadcast, all_gather and barrier on them,
 * checking each result. Rank by rank, each prints a short report.
 *
 *   gangrun --nproc-per-node 4 hello_gang
 *   hello_gang --fake 4     the same code on a fake gang of 4 in one process
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gang/env.h>
#include <gang/gang.h>

#define CHECK(call)                                                            \
  do {                                                                         \
    gang_status st_ = (call);                                                  \
    if (st_ != GANG_OK) {                                                      \
      fprintf(stderr, "%s failed: %s (%s)\n", #call, gang_strerror(st_),       \
              gang_last_error());                                              \
      return 1;                                                                \
    }                                                                          \
  } while (0)

/* The demo proper: runs on any gang, real or fake. */
static int demo(gang_t *world, const char *where) {
  int rank = gang_rank(world), size = gang_size(world);

  /* all_reduce: the sum of every rank's number, and the largest. */
  double mine = rank + 1.0;
  double sum = mine, max = mine;
  CHECK(gang_all_reduce(world, &sum, 1, GANG_FLOAT64, GANG_SUM));
  CHECK(gang_all_reduce(world, &max, 1, GANG_FLOAT64, GANG_MAX));

  /* broadcast: rank 0 picks a seed for everyone. */
  int64_t seed = rank == 0 ? 20261122 : -1;
  CHECK(gang_broadcast(world, &seed, 1, GANG_INT64, 0));

  /* all_gather: everyone learns everyone's pid and number. (On a fake
   * gang every simulated rank holds this rank's data, so the checks below
   * are written against what was gathered, not against rank numbers.) */
  int32_t pid = (int32_t)getpid();
  int32_t *pids = calloc((size_t)size, sizeof *pids);
  double *numbers = calloc((size_t)size, sizeof *numbers);
  CHECK(gang_all_gather(world, pids, &pid, 1, GANG_INT32));
  CHECK(gang_all_gather(world, numbers, &mine, 1, GANG_FLOAT64));

  /* A sub-gang of the ranks of my parity (fairseq2's create_gang takes
   * the list; every rank calls it, non-members get NULL). */
  int *members = calloc((size_t)size, sizeof *members);
  int n = 0;
  for (int r = rank % 2; r < size; r += 2)
    members[n++] = r;
  gang_t *parity = NULL;
  CHECK(gang_create_subgang(world, members, n, &parity));
  double parity_sum = mine;
  CHECK(gang_all_reduce(parity, &parity_sum, 1, GANG_FLOAT64, GANG_SUM));
  CHECK(gang_barrier(world));

  double want_sum = 0, want_max = numbers[0], want_parity = 0;
  for (int r = 0; r < size; r++) {
    want_sum += numbers[r];
    want_max = numbers[r] > want_max ? numbers[r] : want_max;
  }
  for (int i = 0; i < n; i++)
    want_parity += numbers[members[i]];
  int ok = sum == want_sum && max == want_max && seed == 20261122 &&
           pids[rank] == pid && parity_sum == want_parity;

  /* Print in rank order: one rank at a time between barriers. */
  for (int r = 0; r < size; r++) {
    if (r == rank) {
      printf("rank %d/%d (%s, pid %d): sum %.0f max %.0f seed %lld, "
             "%s sub-gang rank %d/%d sums to %.0f, pids",
             rank, size, where, (int)pid, sum, max, (long long)seed,
             rank % 2 ? "odd" : "even", gang_rank(parity), gang_size(parity),
             parity_sum);
      for (int i = 0; i < size; i++)
        printf("%s%d", i ? "," : " ", (int)pids[i]);
      printf(" -> %s\n", ok ? "all checks pass" : "WRONG");
      fflush(stdout);
    }
    CHECK(gang_barrier(world));
  }
  gang_destroy(parity);
  free(members);
  free(pids);
  free(numbers);
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--fake") == 0) {
    int size = atoi(argv[2]);
    gang_device cpu = {GANG_DEVICE_CPU, 0};
    gang_t *g = NULL;
    CHECK(gang_create_fake(cpu, 0, size, &g));
    int rc = demo(g, "fake gang, one process");
    gang_destroy(g);
    return rc;
  }
  if (argc != 1) {
    fprintf(stderr, "usage: hello_gang [--fake SIZE]\n");
    return 2;
  }
  gang_world_info info = GANG_WORLD_INFO_INIT;
  CHECK(gang_world_info_from_env(&info));
  gang_t *world = NULL;
  CHECK(gang_create_default(NULL, &world));
  char where[160];
  snprintf(where, sizeof where, "%s, local rank %d/%d",
           gang_world_source_name(info.source), info.local_rank,
           info.local_world_size);
  int rc = demo(world, where);
  gang_destroy(world);
  return rc;
}
