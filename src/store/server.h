/* Internal calls on a store server (gang/store.h's gang_store_server) for
 * the layers above the store: a gang's world hosts one on rank 0 when no
 * launcher does (src/gang/pg_world.c). */
#ifndef GANG_STORE_SERVER_H
#define GANG_STORE_SERVER_H

#include <stdint.h>

#include "gang/store.h"

/* Waits until srv has no parked request (a get or wait for keys that do
 * not exist yet) and has taken up no request for quiet_ms, or until
 * limit_ms has passed. Lets a server about to stop serve clients still in
 * the middle of an exchange with it. NULL returns at once. Any thread. */
void gang__store_server_wait_idle(gang_store_server *srv, int64_t quiet_ms,
                                  int64_t limit_ms);

#endif
