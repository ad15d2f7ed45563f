/* The TCP store client's state, shared by its two files: tcp_client.c
 * (calls and the operations) and tcp_connect.c (connecting and the
 * handshake). */
#ifndef GANG_STORE_TCP_CLIENT_H
#define GANG_STORE_TCP_CLIENT_H

#include <pthread.h>
#include <stdbool.h>

#include "core/sock.h"
#include "proto.h"
#include "store_impl.h"

typedef struct tcp_client {
  /* fd is closed under fd_mu (and the handle's lock), so that an
   * interrupt from another thread never shuts down a reused number. */
  pthread_mutex_t fd_mu;
  bool interrupted; /* gang__store_interrupt: calls fail with why */
  char why[256];
  int fd;
  char peer[GANG_SOCK_PEER_CAP];
  gang__store_caps caps; /* the server's, from its hello */
  bool quiet;            /* the server takes add_quiet */
  gang__store_buf out;   /* request being sent */
  gang__store_buf in;    /* reply being received */
  gang_status broken;    /* GANG_OK while usable */
  gang__store_spin spin; /* before sleeping for a reply */
  char broken_msg[512];
} tcp_client;

static inline tcp_client *impl_of(gang_store *st) { return st->impl; }

/* gang__store_ops.open and .close of the TCP backend (tcp_connect.c). */
gang_status gang__tcp_open(const gang__store_target *at,
                           const gang_store_options *opts, int64_t timeout_ms,
                           void **impl);
void gang__tcp_close(gang_store *st);

#endif
