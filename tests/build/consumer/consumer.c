/* A program that uses an installed gang: checks the header and library
 * versions agree and that a store round trip works. */
#include <stdio.h>
#include <string.h>

#include <gang/status.h>
#include <gang/store.h>
#include <gang/version.h>

int main(void) {
  int want = GANG_VERSION_MAJOR * 10000 + GANG_VERSION_MINOR * 100 +
             GANG_VERSION_PATCH;
  if (gang_version() != want) {
    fprintf(stderr, "header version %d, library %d\n", want, gang_version());
    return 1;
  }
  gang_store_server *srv = NULL;
  gang_store *st = NULL;
  if (gang_store_server_start(NULL, &srv) != GANG_OK) {
    fprintf(stderr, "server: %s\n", gang_last_error());
    return 1;
  }
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", gang_store_server_port(srv));
  int rc = 1;
  void *v = NULL;
  size_t n = 0;
  if (gang_store_connect(addr, NULL, &st) == GANG_OK &&
      gang_store_set(st, "k", "v1", 2) == GANG_OK &&
      gang_store_get(st, "k", &v, &n) == GANG_OK && n == 2 &&
      memcmp(v, "v1", 2) == 0)
    rc = 0;
  else
    fprintf(stderr, "store round trip failed: %s\n", gang_last_error());
  gang_store_free(v);
  gang_store_close(st);
  gang_store_server_stop(srv);
  printf("consumer: gang %s works\n", gang_version_string());
  return rc;
}
