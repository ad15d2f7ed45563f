/* Store authentication: mutual HMAC-SHA256 challenge-response.
 *
 * Both sides send a fresh 32-byte random nonce (client in its hello, server
 * in its hello). Each side then proves knowledge of the shared secret with
 *   proof = HMAC-SHA256(secret, label || nonce_client || nonce_server)
 * where label names the direction ("gang-store v1 server proof" or
 * "gang-store v1 client proof"). Binding both nonces defeats replay (the
 * other side's nonce is new every time); binding the direction defeats
 * reflection (a proof the server made cannot be sent back as the client's).
 * The secret itself never crosses the wire. Proofs are compared in constant
 * time. Uses OpenSSL libcrypto (HMAC, RAND_bytes, CRYPTO_memcmp).
 * All functions are thread-safe. */
#ifndef GANG_STORE_AUTH_H
#define GANG_STORE_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gang/status.h"
#include "proto.h"

typedef enum gang__auth_dir {
  GANG_AUTH_SERVER_PROOF = 0,
  GANG_AUTH_CLIENT_PROOF = 1
} gang__auth_dir;

/* Fills out with cryptographically random bytes. GANG_SYSTEM if the CSPRNG
 * fails (never silently weaker randomness). */
gang_status gang__auth_random(uint8_t *out, size_t n);

/* Computes a proof for direction `dir`. secret may have any length >= 1.
 * GANG_INTERNAL if libcrypto fails. */
gang_status gang__auth_proof(const char *secret, gang__auth_dir dir,
                             const uint8_t nonce_client[GANG_STORE_NONCE_BYTES],
                             const uint8_t nonce_server[GANG_STORE_NONCE_BYTES],
                             uint8_t out[GANG_STORE_MAC_BYTES]);

/* Constant-time check that `got` is the expected proof. */
bool gang__auth_check(const char *secret, gang__auth_dir dir,
                      const uint8_t nonce_client[GANG_STORE_NONCE_BYTES],
                      const uint8_t nonce_server[GANG_STORE_NONCE_BYTES],
                      const uint8_t got[GANG_STORE_MAC_BYTES]);

/* A key for HMAC-SHA256 tags of messages outside the store's handshake
 * (the lighthouse's heartbeat datagrams): made once, so that a tag costs
 * the hashing and not the key's setup. One thread at a time. */
typedef struct gang__auth_key gang__auth_key;
gang_status gang__auth_key_new(const char *secret, gang__auth_key **out);
void gang__auth_key_free(gang__auth_key *k);
/* HMAC-SHA256(secret, label || msg), the label keeping these tags apart
 * from the proofs. GANG_INTERNAL if libcrypto fails. */
gang_status gang__auth_mac(gang__auth_key *k, const char *label,
                           const void *msg, size_t n,
                           uint8_t out[GANG_STORE_MAC_BYTES]);

/* Constant-time comparison of n bytes. */
bool gang__auth_equal(const void *a, const void *b, size_t n);

/* Reads a secret file (--secret-file of the tools): its first line, the
 * newline not part of it, at most 4095 bytes. *out is malloc'd (the
 * caller zeroes and frees it). GANG_INVALID_ARGUMENT naming the file when
 * it cannot be read or holds no secret. */
gang_status gang__auth_secret_file(const char *path, char **out);

#endif
