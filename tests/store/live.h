/* A live in-process store server and clients of it, for store tests (after
 * harness/harness.h): no secret, loopback. */
#ifndef GANG_TESTS_STORE_LIVE_H
#define GANG_TESTS_STORE_LIVE_H

#include <stdio.h>

#include "gang/store.h"

static inline gang_store_server *start_server(void) {
  gang_store_server_options o = GANG_STORE_SERVER_OPTIONS_INIT;
  o.secret = "";
  gang_store_server *srv = NULL;
  assert_gang_ok(gang_store_server_start(&o, &srv));
  assert_true(gang_store_server_port(srv) > 0);
  return srv;
}

/* A client of srv ("host:port" + suffix, a prefix view when it is
 * "/prefix"; NULL for none) with calls' deadline timeout_ms. */
static inline gang_store *connect_to(gang_store_server *srv, const char *suffix,
                                     int64_t timeout_ms) {
  char addr[128];
  snprintf(addr, sizeof addr, "127.0.0.1:%d%s", gang_store_server_port(srv),
           suffix ? suffix : "");
  gang_store_options o = GANG_STORE_OPTIONS_INIT;
  o.timeout_ms = timeout_ms;
  o.secret = "";
  gang_store *st = NULL;
  assert_gang_ok(gang_store_connect(addr, &o, &st));
  return st;
}

#endif
