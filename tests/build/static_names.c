/* A program that links libgang.a and defines names a program may well
 * have of its own -- the generic names gang's internals once used
 * (algo_*, fabric_*, shm_*, fs_*, store_conn_*, topo__*, and the types
 * conn and pg). It must link (no duplicate definitions) and its gang must
 * work (no internal silently replaced by the program's function). */
#include <stdio.h>

#include "gang/gang.h"

typedef struct conn {
  int fd;
} conn;
typedef struct pg {
  int id;
} pg;

int algo_select(void) { return -1; }
int algo_name(void) { return -1; }
int algo_sendrecv(void) { return -1; }
int fabric_pull(void) { return -1; }
int fabric_deliver(void) { return -1; }
int shm_allreduce(void) { return -1; }
int shm_barrier(void) { return -1; }
int fs_lookup(void) { return -1; }
int store_conn_open(void) { return -1; }
int topo__group_size(void) { return -1; }

int main(void) {
  conn c = {algo_select() + algo_name() + algo_sendrecv()};
  pg p = {fabric_pull() + fabric_deliver() + shm_allreduce() + shm_barrier() +
          fs_lookup() + store_conn_open() + topo__group_size()};
  gang_t *g = NULL;
  if (gang_create_with_store(NULL, "127.0.0.1:1/static-names", 0, 1, &g) !=
      GANG_OK) {
    fprintf(stderr, "gang_create_with_store: %s\n", gang_last_error());
    return 1;
  }
  float x[4] = {1, 2, 3, 4};
  gang_status st = gang_all_reduce(g, x, 4, GANG_FLOAT32, GANG_SUM);
  if (st == GANG_OK)
    st = gang_barrier(g);
  gang_destroy(g);
  if (st != GANG_OK || x[3] != 4.0f) {
    fprintf(stderr, "the gang did not work: %s\n", gang_status_name(st));
    return 1;
  }
  printf("linked with libgang.a beside its own %d %d: ok\n", c.fd, p.id);
  return 0;
}
