/* World info from the environment: every source, every error and the init
 * methods, table-driven. The tables feed variables through
 * gang__world_info_from_envp so the process environment is untouched; a few
 * cases go through the public functions with setenv. The Slurm hostlist
 * grammar is test_hostlist.c. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "harness/harness.h"

#include "gang/env.h"
#include "launch/env_internal.h"

/* ---- sources ------------------------------------------------------------ */

typedef struct {
  const char *label;
  const char *env[24];
  gang_world_source source;
  int rank, world, lrank, lworld, node, nnodes;
  const char *addr;
  int port;
  const char *store;
} ok_case;

#define TR GANG_WORLD_SOURCE_TORCHRUN
#define SL GANG_WORLD_SOURCE_SLURM
#define OM GANG_WORLD_SOURCE_OPENMPI
#define MP GANG_WORLD_SOURCE_MPICH
#define SI GANG_WORLD_SOURCE_SINGLE

static const ok_case ok_cases[] = {
    {"nothing: single process",
     {NULL},
     SI,
     0,
     1,
     0,
     1,
     0,
     1,
     "127.0.0.1",
     0,
     ""},
    {"single with MASTER_*",
     {"MASTER_ADDR=10.0.0.1", "MASTER_PORT=1234", NULL},
     SI,
     0,
     1,
     0,
     1,
     0,
     1,
     "10.0.0.1",
     1234,
     "10.0.0.1:1234"},
    {"torchrun full",
     {"RANK=5", "WORLD_SIZE=8", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=4",
      "GROUP_RANK=1", "MASTER_ADDR=node01", "MASTER_PORT=29500", NULL},
     TR,
     5,
     8,
     1,
     4,
     1,
     2,
     "node01",
     29500,
     "node01:29500"},
    {"torchrun variables with GANG_STORE_ADDR instead of MASTER_*",
     {"RANK=1", "WORLD_SIZE=2", "GANG_STORE_ADDR=10.1.2.3:4000", NULL},
     TR,
     1,
     2,
     0,
     1,
     -1,
     -1,
     "",
     0,
     "10.1.2.3:4000"},
    {"torchrun node derived from local size",
     {"RANK=6", "WORLD_SIZE=8", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=2",
      "MASTER_ADDR=h", "MASTER_PORT=1", NULL},
     TR,
     6,
     8,
     0,
     2,
     3,
     4,
     "h",
     1,
     "h:1"},
    {"torchrun heterogeneous nodes: node unknown",
     {"RANK=4", "WORLD_SIZE=7", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=3",
      "MASTER_ADDR=h", "MASTER_PORT=2", NULL},
     TR,
     4,
     7,
     0,
     3,
     -1,
     -1,
     "h",
     2,
     "h:2"},
    {"torchrun heterogeneous with GROUP_*",
     {"RANK=4", "WORLD_SIZE=7", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=3",
      "GROUP_RANK=1", "GROUP_WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=2",
      NULL},
     TR,
     4,
     7,
     0,
     3,
     1,
     2,
     "h",
     2,
     "h:2"},
    {"torchrun without locality",
     {"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=3", NULL},
     TR,
     1,
     2,
     0,
     1,
     -1,
     -1,
     "h",
     3,
     "h:3"},
    {"torchrun world of one needs no master",
     {"RANK=0", "WORLD_SIZE=1", NULL},
     TR,
     0,
     1,
     0,
     1,
     -1,
     -1,
     "127.0.0.1",
     0,
     ""},
    {"torchrun IPv6 master",
     {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=[::1]", "MASTER_PORT=29500", NULL},
     TR,
     0,
     2,
     0,
     1,
     -1,
     -1,
     "::1",
     29500,
     "[::1]:29500"},
    {"GANG_STORE_ADDR overrides the master for the store",
     {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=5",
      "GANG_STORE_ADDR=s:77", NULL},
     TR,
     0,
     2,
     0,
     1,
     -1,
     -1,
     "h",
     5,
     "s:77"},
    {"torchrun beats slurm and MPI",
     {"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=5",
      "SLURM_PROCID=0", "SLURM_NTASKS=1", "OMPI_COMM_WORLD_RANK=0",
      "OMPI_COMM_WORLD_SIZE=1", NULL},
     TR,
     1,
     2,
     0,
     1,
     -1,
     -1,
     "h",
     5,
     "h:5"},
    {"slurm full",
     {"SLURM_PROCID=5", "SLURM_NTASKS=8", "SLURM_LOCALID=1", "SLURM_NODEID=1",
      "SLURM_NNODES=2", "SLURM_TASKS_PER_NODE=4(x2)",
      "SLURM_JOB_NODELIST=node[01-02]", "SLURM_JOB_ID=123456", NULL},
     SL,
     5,
     8,
     1,
     4,
     1,
     2,
     "node01",
     12000 + 123456 % 20000,
     "node01:15456"},
    {"slurm uneven tasks per node",
     {"SLURM_PROCID=6", "SLURM_NTASKS=7", "SLURM_LOCALID=0", "SLURM_NODEID=2",
      "SLURM_NNODES=3", "SLURM_TASKS_PER_NODE=3(x2),1",
      "SLURM_JOB_NODELIST=gpu3,a[1-2]", "SLURM_JOB_ID=7", NULL},
     SL,
     6,
     7,
     0,
     1,
     2,
     3,
     "gpu3",
     12007,
     "gpu3:12007"},
    {"slurm step variables win over job variables",
     {"SLURM_PROCID=1", "SLURM_NTASKS=16", "SLURM_STEP_NUM_TASKS=2",
      "SLURM_LOCALID=1", "SLURM_NODEID=0", "SLURM_NNODES=4",
      "SLURM_STEP_NUM_NODES=1", "SLURM_TASKS_PER_NODE=4(x4)",
      "SLURM_STEP_TASKS_PER_NODE=2", "SLURM_JOB_NODELIST=n[1-4]",
      "SLURM_STEP_NODELIST=n3", "SLURM_JOB_ID=5", NULL},
     SL,
     1,
     2,
     1,
     2,
     0,
     1,
     "n3",
     12005,
     "n3:12005"},
    {"slurm MASTER_* override nodelist and job id",
     {"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_NTASKS_PER_NODE=2",
      "SLURM_LOCALID=0", "SLURM_NODEID=0", "SLURM_NNODES=1",
      "SLURM_JOB_NODELIST=n1", "SLURM_JOB_ID=5", "MASTER_ADDR=m",
      "MASTER_PORT=999", NULL},
     SL,
     0,
     2,
     0,
     2,
     0,
     1,
     "m",
     999,
     "m:999"},
    {"slurm even split without a per-node list",
     {"SLURM_PROCID=3", "SLURM_NTASKS=4", "SLURM_LOCALID=1", "SLURM_NODEID=1",
      "SLURM_NNODES=2", "SLURM_JOB_NODELIST=x", "SLURM_JOB_ID=0", NULL},
     SL,
     3,
     4,
     1,
     2,
     1,
     2,
     "x",
     12000,
     "x:12000"},
    {"slurm single task needs no nodelist or job id",
     {"SLURM_PROCID=0", "SLURM_NTASKS=1", NULL},
     SL,
     0,
     1,
     0,
     1,
     -1,
     -1,
     "127.0.0.1",
     0,
     ""},
    {"slurm agreeing with PMI (srun --mpi=pmi2)",
     {"SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_NNODES=1", "SLURM_LOCALID=1",
      "SLURM_NODEID=0", "SLURM_JOB_NODELIST=a", "SLURM_JOB_ID=1", "PMI_RANK=1",
      "PMI_SIZE=2", NULL},
     SL,
     1,
     2,
     1,
     2,
     0,
     1,
     "a",
     12001,
     "a:12001"},
    {"mpirun inside an sbatch script: MPI wins over Slurm",
     {"SLURM_PROCID=0", "SLURM_NTASKS=8", "SLURM_JOB_NODELIST=a",
      "SLURM_JOB_ID=1", "OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=4",
      "OMPI_COMM_WORLD_LOCAL_RANK=3", "OMPI_COMM_WORLD_LOCAL_SIZE=4", NULL},
     OM,
     3,
     4,
     3,
     4,
     0,
     1,
     "127.0.0.1",
     0,
     ""},
    {"openmpi multi-node without master",
     {"OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=4",
      "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=2", NULL},
     OM,
     3,
     4,
     1,
     2,
     -1,
     -1,
     "",
     0,
     ""},
    {"openmpi with MASTER_*",
     {"OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=4",
      "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=2",
      "MASTER_ADDR=hostA", "MASTER_PORT=4000", NULL},
     OM,
     3,
     4,
     1,
     2,
     -1,
     -1,
     "hostA",
     4000,
     "hostA:4000"},
    {"mpich",
     {"PMI_RANK=2", "PMI_SIZE=3", "MPI_LOCALRANKID=2", "MPI_LOCALNRANKS=3",
      "MASTER_PORT=4001", NULL},
     MP,
     2,
     3,
     2,
     3,
     0,
     1,
     "127.0.0.1",
     4001,
     "127.0.0.1:4001"},
    {"mpich without locality",
     {"PMI_RANK=0", "PMI_SIZE=3", NULL},
     MP,
     0,
     3,
     0,
     1,
     -1,
     -1,
     "",
     0,
     ""},
};

static void check_ok_case(const ok_case *c) {
  gang_world_info w = GANG_WORLD_INFO_INIT;
  gang_status st = gang__world_info_from_envp(c->env, &w);
  if (st != GANG_OK)
    fail_msg("%s: %s", c->label, gang_last_error());
#define EQ(field, want)                                                        \
  if ((w.field) != (want))                                                     \
  fail_msg("%s: " #field " is %d, want %d", c->label, (int)(w.field),          \
           (int)(want))
  EQ(source, c->source);
  EQ(rank, c->rank);
  EQ(world_size, c->world);
  EQ(local_rank, c->lrank);
  EQ(local_world_size, c->lworld);
  EQ(node_rank, c->node);
  EQ(num_nodes, c->nnodes);
  EQ(master_port, c->port);
  EQ(size, sizeof w);
#undef EQ
  if (strcmp(w.master_addr, c->addr) != 0)
    fail_msg("%s: master_addr '%s', want '%s'", c->label, w.master_addr,
             c->addr);
  if (strcmp(w.store_addr, c->store) != 0)
    fail_msg("%s: store_addr '%s', want '%s'", c->label, w.store_addr,
             c->store);
  assert_string_equal(w.init_method, "env://");
}

static void test_sources(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof ok_cases / sizeof ok_cases[0]; i++)
    check_ok_case(&ok_cases[i]);
}

typedef struct {
  const char *env[16];
  const char *want[3]; /* substrings of the detail */
} err_case;

static const err_case err_cases[] = {
    /* torchrun */
    {{"RANK=0", NULL}, {"WORLD_SIZE is not set", "RANK='0'"}},
    {{"WORLD_SIZE=2", NULL}, {"RANK is not set", "WORLD_SIZE='2'"}},
    {{"LOCAL_RANK=0", NULL}, {"WORLD_SIZE is not set", "LOCAL_RANK"}},
    {{"RANK=x", "WORLD_SIZE=2", NULL}, {"RANK='x'", "not an integer"}},
    {{"RANK=1 ", "WORLD_SIZE=2q", NULL}, {"WORLD_SIZE='2q'"}},
    {{"RANK=-1", "WORLD_SIZE=2", NULL}, {"RANK='-1'", "out of range"}},
    {{"RANK=2", "WORLD_SIZE=2", NULL}, {"RANK='2'", "less than WORLD_SIZE=2"}},
    {{"RANK=0", "WORLD_SIZE=0", NULL}, {"WORLD_SIZE='0'", "out of range"}},
    {{"RANK=0", "WORLD_SIZE=99999999999", NULL}, {"WORLD_SIZE='99999999999'"}},
    {{"RANK=0", "WORLD_SIZE=", NULL}, {"WORLD_SIZE=''"}},
    {{"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "MASTER_ADDR=h",
      "MASTER_PORT=1", NULL},
     {"LOCAL_WORLD_SIZE is not set", "LOCAL_RANK='0'"}},
    {{"RANK=0", "WORLD_SIZE=2", "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=h",
      "MASTER_PORT=1", NULL},
     {"LOCAL_RANK is not set"}},
    {{"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=2", "LOCAL_WORLD_SIZE=2",
      "MASTER_ADDR=h", "MASTER_PORT=1", NULL},
     {"LOCAL_RANK='2'", "LOCAL_WORLD_SIZE=2"}},
    {{"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=3",
      "MASTER_ADDR=h", "MASTER_PORT=1", NULL},
     {"LOCAL_WORLD_SIZE='3'", "WORLD_SIZE=2"}},
    {{"RANK=0", "WORLD_SIZE=4", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=2",
      "GROUP_RANK=2", "MASTER_ADDR=h", "MASTER_PORT=1", NULL},
     {"GROUP_RANK='2'", "number of nodes, 2"}},
    {{"RANK=0", "WORLD_SIZE=4", "GROUP_WORLD_SIZE=5", "MASTER_ADDR=h",
      "MASTER_PORT=1", NULL},
     {"GROUP_WORLD_SIZE='5'"}},
    {{"RANK=0", "WORLD_SIZE=2", "MASTER_PORT=1", NULL},
     {"MASTER_ADDR is not set", "WORLD_SIZE='2'"}},
    {{"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=h", NULL},
     {"MASTER_PORT is not set"}},
    {{"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=0", NULL},
     {"MASTER_PORT='0'", "1..65535"}},
    {{"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=65536", NULL},
     {"MASTER_PORT='65536'"}},
    {{"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=", "MASTER_PORT=1", NULL},
     {"MASTER_ADDR is set but empty"}},
    {{"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=a b", "MASTER_PORT=1", NULL},
     {"MASTER_ADDR='a b'"}},
    {{"RANK=0", "WORLD_SIZE=1", "GANG_RESTART_COUNT=-2", NULL},
     {"GANG_RESTART_COUNT='-2'"}},
    {{"RANK=0", "WORLD_SIZE=1", "GANG_STORE_ADDR=", NULL},
     {"GANG_STORE_ADDR is set but empty"}},
    /* Slurm */
    {{"SLURM_PROCID=0", NULL}, {"SLURM_NTASKS is not set", "SLURM_PROCID"}},
    {{"SLURM_PROCID=3", "SLURM_NTASKS=2", NULL},
     {"SLURM_PROCID='3'", "SLURM_NTASKS=2"}},
    {{"SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_STEP_NUM_TASKS=1", NULL},
     {"SLURM_PROCID='1'", "SLURM_STEP_NUM_TASKS=1"}},
    {{"SLURM_PROCID=a", "SLURM_NTASKS=2", NULL}, {"SLURM_PROCID='a'"}},
    {{"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_NODEID=2", "SLURM_NNODES=2",
      NULL},
     {"SLURM_NODEID='2'", "SLURM_NNODES=2"}},
    {{"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_NNODES=3", NULL},
     {"SLURM_NNODES='3'"}},
    {{"SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_NODEID=1", "SLURM_NNODES=2",
      "SLURM_TASKS_PER_NODE=2", NULL},
     {"SLURM_TASKS_PER_NODE='2'", "no entry for node 1"}},
    {{"SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_NODEID=0", "SLURM_NNODES=2",
      "SLURM_TASKS_PER_NODE=2(y2)", NULL},
     {"SLURM_TASKS_PER_NODE='2(y2)'"}},
    {{"SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_NODEID=0", "SLURM_NNODES=2",
      "SLURM_TASKS_PER_NODE=8(x2)", NULL},
     {"SLURM_TASKS_PER_NODE", "more than SLURM_NTASKS=4"}},
    {{"SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_NODEID=0", "SLURM_NNODES=2",
      "SLURM_LOCALID=2", "SLURM_TASKS_PER_NODE=2(x2)", NULL},
     {"SLURM_LOCALID='2'", "runs 2 tasks"}},
    {{"SLURM_PROCID=0", "SLURM_NTASKS=3", "SLURM_NNODES=2", "SLURM_LOCALID=0",
      NULL},
     {"SLURM_TASKS_PER_NODE is not set", "cannot tell"}},
    {{"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_JOB_ID=1", NULL},
     {"SLURM_JOB_NODELIST is not set"}},
    {{"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_JOB_NODELIST=a[1-", NULL},
     {"SLURM_JOB_NODELIST='a[1-'"}},
    {{"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_JOB_NODELIST=a", NULL},
     {"neither MASTER_PORT nor SLURM_JOB_ID"}},
    {{"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_JOB_NODELIST=a",
      "SLURM_JOB_ID=12_3", NULL},
     {"SLURM_JOB_ID='12_3'"}},
    {{"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_JOB_NODELIST=a",
      "MASTER_PORT=x", NULL},
     {"MASTER_PORT='x'"}},
    /* Open MPI / MPICH */
    {{"OMPI_COMM_WORLD_RANK=0", NULL},
     {"OMPI_COMM_WORLD_SIZE is not set", "OMPI_COMM_WORLD_RANK='0'"}},
    {{"OMPI_COMM_WORLD_SIZE=2", NULL}, {"OMPI_COMM_WORLD_RANK is not set"}},
    {{"OMPI_COMM_WORLD_RANK=2", "OMPI_COMM_WORLD_SIZE=2", NULL},
     {"OMPI_COMM_WORLD_RANK='2'"}},
    {{"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2",
      "OMPI_COMM_WORLD_LOCAL_RANK=0", NULL},
     {"OMPI_COMM_WORLD_LOCAL_SIZE is not set"}},
    {{"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2",
      "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=1", NULL},
     {"OMPI_COMM_WORLD_LOCAL_RANK='1'"}},
    {{"PMI_RANK=0", "PMI_SIZE=x", NULL}, {"PMI_SIZE='x'"}},
    {{"PMI_RANK=0", "PMI_SIZE=2", "MPI_LOCALNRANKS=3", "MPI_LOCALRANKID=0",
      NULL},
     {"MPI_LOCALNRANKS='3'", "PMI_SIZE=2"}},
    {{"PMI_SIZE=2", "MPI_LOCALRANKID=0", NULL}, {"PMI_RANK is not set"}},
    /* single */
    {{"MASTER_PORT=70000", NULL}, {"MASTER_PORT='70000'"}},
};

static void test_errors(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof err_cases / sizeof err_cases[0]; i++) {
    const err_case *c = &err_cases[i];
    gang_world_info w = GANG_WORLD_INFO_INIT;
    w.rank = 4242; /* must stay untouched */
    gang_status st = gang__world_info_from_envp(c->env, &w);
    if (st != GANG_INVALID_ARGUMENT)
      fail_msg("case %zu (%s...): status %d, want INVALID_ARGUMENT", i,
               c->env[0], st);
    for (int k = 0; k < 3 && c->want[k]; k++)
      if (strstr(gang_last_error(), c->want[k]) == NULL)
        fail_msg("case %zu: detail '%s' lacks '%s'", i, gang_last_error(),
                 c->want[k]);
    assert_int_equal(w.rank, 4242);
  }
}

static void test_struct_size(void **state) {
  (void)state;
  gang_world_info w = GANG_WORLD_INFO_INIT;
  const char *env[] = {NULL};
  w.size = 8;
  assert_int_equal(gang__world_info_from_envp(env, &w), GANG_INVALID_ARGUMENT);
  assert_non_null(strstr(gang_last_error(), "info->size"));
  assert_int_equal(gang__world_info_from_envp(env, NULL),
                   GANG_INVALID_ARGUMENT);
  /* A caller with a bigger (future) struct gets its size kept. */
  struct {
    gang_world_info w;
    char more[64];
  } big;
  memset(&big, 0x5a, sizeof big);
  big.w.size = sizeof big;
  assert_gang_ok(gang__world_info_from_envp(env, &big.w));
  assert_int_equal(big.w.size, sizeof big);
  assert_int_equal(big.w.world_size, 1);
  assert_int_equal((unsigned char)big.more[10], 0x5a);
}

static void test_run_id_restart(void **state) {
  (void)state;
  gang_world_info w = GANG_WORLD_INFO_INIT;
  const char *e1[] = {"TORCHELASTIC_RUN_ID=tr", "TORCHELASTIC_RESTART_COUNT=2",
                      NULL};
  assert_gang_ok(gang__world_info_from_envp(e1, &w));
  assert_string_equal(w.run_id, "tr");
  assert_int_equal(w.restart_count, 2);
  const char *e2[] = {"GANG_RUN_ID=g",        "TORCHELASTIC_RUN_ID=tr",
                      "GANG_RESTART_COUNT=3", "TORCHELASTIC_RESTART_COUNT=2",
                      "SLURM_JOB_ID=9",       NULL};
  assert_gang_ok(gang__world_info_from_envp(e2, &w));
  assert_string_equal(w.run_id, "g");
  assert_int_equal(w.restart_count, 3);
}

/* torchrun's agent holds MASTER_PORT with a torch TCPStore and says so:
 * the store address is then in torch's protocol; GANG_STORE_ADDR (gangrun)
 * still wins, and any other value of the variable changes nothing. */
static void test_torchrun_agent_store(void **state) {
  (void)state;
  gang_world_info w = GANG_WORLD_INFO_INIT;
  const char *e1[] = {"RANK=1",
                      "WORLD_SIZE=2",
                      "MASTER_ADDR=10.0.0.1",
                      "MASTER_PORT=29500",
                      "TORCHELASTIC_USE_AGENT_STORE=True",
                      NULL};
  assert_gang_ok(gang__world_info_from_envp(e1, &w));
  assert_string_equal(w.store_addr, "torch://10.0.0.1:29500");
  const char *e2[] = {"RANK=1",
                      "WORLD_SIZE=2",
                      "MASTER_ADDR=::1",
                      "MASTER_PORT=29500",
                      "TORCHELASTIC_USE_AGENT_STORE=True",
                      NULL};
  assert_gang_ok(gang__world_info_from_envp(e2, &w));
  assert_string_equal(w.store_addr, "torch://[::1]:29500");
  const char *e3[] = {"RANK=1",
                      "WORLD_SIZE=2",
                      "MASTER_ADDR=10.0.0.1",
                      "MASTER_PORT=29500",
                      "TORCHELASTIC_USE_AGENT_STORE=False",
                      NULL};
  assert_gang_ok(gang__world_info_from_envp(e3, &w));
  assert_string_equal(w.store_addr, "10.0.0.1:29500");
  const char *e4[] = {"RANK=1",
                      "WORLD_SIZE=2",
                      "MASTER_ADDR=10.0.0.1",
                      "MASTER_PORT=29500",
                      "TORCHELASTIC_USE_AGENT_STORE=True",
                      "GANG_STORE_ADDR=10.0.0.1:30000",
                      NULL};
  assert_gang_ok(gang__world_info_from_envp(e4, &w));
  assert_string_equal(w.store_addr, "10.0.0.1:30000");
}

/* The public entry point reads the real environment. */
static void test_public_env(void **state) {
  (void)state;
  static const char *vars[] = {
      "RANK",        "WORLD_SIZE",  "LOCAL_RANK", "LOCAL_WORLD_SIZE",
      "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK"};
  char *saved[7];
  for (int i = 0; i < 7; i++) {
    const char *v = getenv(vars[i]);
    saved[i] = v ? strdup(v) : NULL;
  }
  setenv("RANK", "2", 1);
  setenv("WORLD_SIZE", "3", 1);
  setenv("LOCAL_RANK", "2", 1);
  setenv("LOCAL_WORLD_SIZE", "3", 1);
  setenv("MASTER_ADDR", "localhost", 1);
  setenv("MASTER_PORT", "29501", 1);
  unsetenv("GROUP_RANK");
  gang_world_info w = GANG_WORLD_INFO_INIT;
  gang_status st = gang_world_info_from_env(&w);
  gang_world_info t = GANG_WORLD_INFO_INIT;
  gang_status st2 = gang_world_info_from_init_method(NULL, -1, -1, &t);
  setenv("MASTER_PORT", "nope", 1);
  gang_world_info u = GANG_WORLD_INFO_INIT;
  gang_status st3 = gang_world_info_from_env(&u);
  for (int i = 0; i < 7; i++) {
    if (saved[i])
      setenv(vars[i], saved[i], 1);
    else
      unsetenv(vars[i]);
    free(saved[i]);
  }
  assert_gang_ok(st);
  assert_int_equal(w.source, GANG_WORLD_SOURCE_TORCHRUN);
  assert_int_equal(w.rank, 2);
  assert_int_equal(w.node_rank, 0);
  assert_int_equal(w.num_nodes, 1);
  assert_string_equal(w.store_addr, "localhost:29501");
  assert_gang_ok(st2);
  assert_int_equal(t.rank, 2);
  assert_int_equal(st3, GANG_INVALID_ARGUMENT);
}

static void test_source_names(void **state) {
  (void)state;
  assert_string_equal(gang_world_source_name(GANG_WORLD_SOURCE_SINGLE),
                      "single");
  assert_string_equal(gang_world_source_name(GANG_WORLD_SOURCE_TORCHRUN),
                      "torchrun");
  assert_string_equal(gang_world_source_name(GANG_WORLD_SOURCE_SLURM), "slurm");
  assert_string_equal(gang_world_source_name(GANG_WORLD_SOURCE_OPENMPI),
                      "openmpi");
  assert_string_equal(gang_world_source_name(GANG_WORLD_SOURCE_MPICH), "mpich");
  assert_string_equal(gang_world_source_name(GANG_WORLD_SOURCE_INIT_METHOD),
                      "init_method");
  assert_string_equal(gang_world_source_name((gang_world_source)99), "unknown");
}

/* ---- init methods ------------------------------------------------------- */

static void test_init_methods(void **state) {
  (void)state;
  const char *none[] = {NULL};
  gang_world_info w = GANG_WORLD_INFO_INIT;

  assert_gang_ok(gang__world_info_from_init_method_envp(
      none, "tcp://10.1.2.3:23456", 1, 4, &w));
  assert_int_equal(w.source, GANG_WORLD_SOURCE_INIT_METHOD);
  assert_string_equal(w.master_addr, "10.1.2.3");
  assert_int_equal(w.master_port, 23456);
  assert_string_equal(w.store_addr, "10.1.2.3:23456");
  assert_string_equal(w.init_method, "tcp://10.1.2.3:23456");
  assert_int_equal(w.rank, 1);
  assert_int_equal(w.world_size, 4);
  assert_int_equal(w.local_world_size, 1);
  assert_int_equal(w.node_rank, -1);

  assert_gang_ok(gang__world_info_from_init_method_envp(
      none, "tcp://[::1]:29500?rank=2&world_size=3&use_libuv=0", -1, -1, &w));
  assert_string_equal(w.master_addr, "::1");
  assert_string_equal(w.store_addr, "[::1]:29500");
  assert_int_equal(w.rank, 2);
  assert_int_equal(w.world_size, 3);

  assert_gang_ok(gang__world_info_from_init_method_envp(
      none, "file:///tmp/gang-rdzv?world_size=2", 0, -1, &w));
  assert_string_equal(w.store_addr, "file:///tmp/gang-rdzv");
  assert_string_equal(w.master_addr, "");
  assert_int_equal(w.master_port, 0);
  assert_int_equal(w.world_size, 2);

  /* Locality from a launcher that describes the same world. */
  const char *sl[] = {"SLURM_PROCID=3",  "SLURM_NTASKS=4",
                      "SLURM_LOCALID=1", "SLURM_NODEID=1",
                      "SLURM_NNODES=2",  "SLURM_JOB_NODELIST=n[1-2]",
                      "SLURM_JOB_ID=42", NULL};
  assert_gang_ok(
      gang__world_info_from_init_method_envp(sl, "tcp://n1:5000", 3, 4, &w));
  assert_int_equal(w.local_rank, 1);
  assert_int_equal(w.local_world_size, 2);
  assert_int_equal(w.node_rank, 1);
  assert_string_equal(w.run_id, "42");
  assert_string_equal(w.store_addr, "n1:5000");

  /* env:// is the environment, with overrides. */
  const char *tr[] = {"RANK=1",
                      "WORLD_SIZE=2",
                      "LOCAL_RANK=1",
                      "LOCAL_WORLD_SIZE=2",
                      "MASTER_ADDR=m",
                      "MASTER_PORT=9",
                      NULL};
  assert_gang_ok(
      gang__world_info_from_init_method_envp(tr, "env://", -1, -1, &w));
  assert_int_equal(w.source, GANG_WORLD_SOURCE_TORCHRUN);
  assert_int_equal(w.local_rank, 1);
  assert_string_equal(w.init_method, "env://");
  assert_gang_ok(gang__world_info_from_init_method_envp(tr, "", 0, 1, &w));
  assert_int_equal(w.rank, 0);
  assert_int_equal(w.world_size, 1);
  assert_int_equal(w.local_world_size, 1);
  assert_gang_ok(
      gang__world_info_from_init_method_envp(tr, "env://?rank=1", -1, -1, &w));
  assert_int_equal(w.local_rank, 1); /* unchanged world keeps locality */

  struct {
    const char *um;
    int rank, size;
    const char *want;
  } bad[] = {
      {"tcp://host", 0, 1, "expected host:port"},
      {"tcp://:80", 0, 1, "empty or overlong host"},
      {"tcp://h:0", 0, 1, "1..65535"},
      {"tcp://h:70000", 0, 1, "1..65535"},
      {"tcp://h:x", 0, 1, "1..65535"},
      {"tcp://::1:80", 0, 1, "expected host:port"},
      {"tcp://[::1]80", 0, 1, "expected [ipv6]:port"},
      {"tcp://h:80", -1, 2, "rank -1 must be given"},
      {"tcp://h:80", 0, -1, "world_size -1 must be given"},
      {"tcp://h:80", 2, 2, "rank 2"},
      {"tcp://h:80?rank=1", 0, 2, "contradicts"},
      {"tcp://h:80?rank=x", -1, 2, "rank='x'"},
      {"tcp://h:80?rank", -1, 2, "not key=value"},
      {"file://relative", 0, 1, "file:///absolute/path"},
      {"file://", 0, 1, "file:///absolute/path"},
      {"udp://h:1", 0, 1, "unsupported scheme"},
      {"env://host:1", -1, -1, "env:// takes no address"},
      {"env://", 5, 2, "rank 5"},
      {"tcp://h:80", 0, 0, "pass -1"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gang_world_info v = GANG_WORLD_INFO_INIT;
    v.rank = 99;
    gang_status st = gang__world_info_from_init_method_envp(
        tr, bad[i].um, bad[i].rank, bad[i].size, &v);
    if (st != GANG_INVALID_ARGUMENT ||
        strstr(gang_last_error(), bad[i].want) == NULL)
      fail_msg("'%s' (%d, %d): status %d detail '%s', want '%s'", bad[i].um,
               bad[i].rank, bad[i].size, st, gang_last_error(), bad[i].want);
    assert_int_equal(v.rank, 99);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      GT_TEST(test_sources),      GT_TEST(test_errors),
      GT_TEST(test_struct_size),  GT_TEST(test_run_id_restart),
      GT_TEST(test_public_env),   GT_TEST(test_source_names),
      GT_TEST(test_init_methods), GT_TEST(test_torchrun_agent_store),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
