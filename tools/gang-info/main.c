/* gang-info: prints the version, the build options, every GANG_* setting
 * with its documentation, default and the value in force in this
 * environment, and the table that chooses collective algorithms (with
 * GANG_ALGO's overrides). Exits 1 if any setting in the environment is
 * malformed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/select.h"
#include "core/config.h"
#include "core/reduce.h"
#include "gang/config.h"
#include "gang/version.h"

#ifndef GANG_BUILD_TYPE
#define GANG_BUILD_TYPE "unknown"
#endif
#ifndef GANG_BUILD_SANITIZE
#define GANG_BUILD_SANITIZE ""
#endif

static void usage(FILE *out) {
  fprintf(out, "usage: gang-info [--algorithms] [--help]\n"
               "       gang-info --cost COLL ALGO BYTES MEMBERS ALPHA_US "
               "GBPS [PER_HOST [ONE_GBPS]]\n"
               "Prints gang's version, build options, settings and the table\n"
               "that chooses collective algorithms; --algorithms: only the "
               "table\n"
               "and where the link model switches (docs/algorithms.md quotes "
               "it).\n");
}

/* The selection table with GANG_ALGO's overrides, and the link model's
 * switches; 1 if GANG_ALGO is malformed. */
static int print_algorithms(void) {
  algo_choice choice;
  if (gang__algo_choice_parse(gang__setting_str(GANG_SETTING_ALGO), &choice) !=
      GANG_OK) {
    printf("%s\n", gang_last_error());
    gang__algo_table_print(stdout, NULL);
    return 1;
  }
  gang__algo_table_print(stdout, &choice);
  int64_t us = 0, bw = 0;
  if (gang__setting_int(GANG_SETTING_NET_LATENCY_US, &us) == GANG_OK &&
      gang__setting_int(GANG_SETTING_NET_BANDWIDTH, &bw) == GANG_OK && us > 0 &&
      bw > 0)
    gang__algo_model_print(stdout, (double)us * 1000, 1e9 / (double)bw);
  return 0;
}

/* --cost: the link model's time (us) of a TCP algorithm for one call:
 * BYTES as the table counts them (the buffer for all_reduce and broadcast,
 * one member's block otherwise), alpha in us, bandwidth in GB/s, and
 * optionally the members per host (MEMBERS a multiple of it: hosts with
 * shared memory, which prices the two-level form and a host's shared link
 * over flat TCP), and the bandwidth of one flow alone (GB/s, at least
 * GBPS; a tree's steps with fewer senders than hosts get between the two).
 * The members are on several hosts (algo_facts.spread): the model prices
 * links between hosts. Prints "none" for an algorithm the model does not
 * price.
 * For bench/compare's prediction beside each measured cell. */
static int print_cost(int argc, char **argv) {
  algo_coll coll = ALGO_COLL_COUNT;
  algo_id algo = ALGO_COUNT;
  for (int c = 0; c < ALGO_COLL_COUNT; c++)
    if (strcmp(argv[0], gang__algo_coll_name((algo_coll)c)) == 0)
      coll = (algo_coll)c;
  for (int a = 0; a < ALGO_COUNT; a++)
    if (strcmp(argv[1], gang__algo_name((algo_id)a)) == 0)
      algo = (algo_id)a;
  char *end[6];
  double bytes = strtod(argv[2], &end[0]), members = strtod(argv[3], &end[1]);
  double alpha = strtod(argv[4], &end[2]), gbps = strtod(argv[5], &end[3]);
  double per = argc > 6 ? strtod(argv[6], &end[4]) : 1;
  double one = argc > 7 ? strtod(argv[7], &end[5]) : gbps;
  int bad = coll == ALGO_COLL_COUNT || algo == ALGO_COUNT;
  for (int i = 0; i < argc - 2; i++)
    bad |= *end[i] != '\0' || end[i] == argv[2 + i];
  if (bad || bytes < 0 || members < 1 || alpha <= 0 || gbps <= 0 || per < 1 ||
      per > members || (int)members % (int)per != 0 || one < gbps) {
    fprintf(stderr, "gang-info --cost: want a collective and an algorithm "
                    "as gang-info --algorithms names them, bytes >= 0, "
                    "members >= 1, alpha (us) and bandwidth (GB/s) > 0, "
                    "members per host (optional) dividing members, and one "
                    "flow's bandwidth (optional) at least the bandwidth\n");
    return 2;
  }
  algo_facts f = {.bytes = (size_t)bytes,
                  .count = SIZE_MAX,
                  .size = (int)members,
                  .alpha_ns = alpha * 1000,
                  .beta_ns = 1 / gbps,
                  .beta_one_ns = 1 / one,
                  .spread = true};
  if (per > 1 && per < members) {
    f.per_host = (int)per;
    f.hosts = (int)(members / per);
  }
  double ns = gang__algo_cost(coll, algo, &f);
  if (ns > 0)
    printf("%.6g\n", ns / 1000);
  else
    printf("none\n");
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--algorithms") == 0)
    return print_algorithms();
  if (argc >= 8 && argc <= 10 && strcmp(argv[1], "--cost") == 0)
    return print_cost(argc - 2, argv + 2);
  if (argc > 1) {
    int help = strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0;
    usage(help ? stdout : stderr);
    return help ? 0 : 2;
  }
  printf("gang %s\n", gang_version_string());
  printf("build: %s%s%s, C11, %s\n", GANG_BUILD_TYPE,
         GANG_BUILD_SANITIZE[0] ? ", sanitize=" : "", GANG_BUILD_SANITIZE,
         __VERSION__);
  printf("reduce kernels: %s\n", gang__reduce_isa());
  printf("\nsettings (environment variable, type, default -> in force):\n");
  int bad = 0;
  for (int i = 0; i < gang_setting_count(); i++) {
    gang_setting_info info;
    if (gang_setting_describe(i, &info) != GANG_OK)
      continue;
    printf("  %-22s %-8s default '%s' -> %s%s\n", info.name, info.type,
           info.default_value, info.effective,
           info.env_value ? " (from environment)" : "");
    /* The text is Markdown (docs/settings.md is made from it): drop the
     * backticks on a terminal. */
    fputs("      ", stdout);
    for (const char *c = info.doc; *c; c++)
      if (*c != '`')
        putchar(*c);
    putchar('\n');
    if (info.parse_status != GANG_OK) {
      printf("      error: %s\n", gang_last_error());
      bad = 1;
    }
  }
  printf("\n");
  return print_algorithms() | bad;
}
