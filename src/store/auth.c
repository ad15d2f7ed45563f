/* HMAC-SHA256 challenge-response for the store handshake (see auth.h and
 * docs/store-protocol.md). libcrypto does the cryptography: a hand-written
 * HMAC or RNG is exactly the kind of code that should not be new. */
#include "auth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include "core/error.h"

static const char *const labels[2] = {"gang-store v1 server proof",
                                      "gang-store v1 client proof"};

gang_status gang__auth_random(uint8_t *out, size_t n) {
  if (RAND_bytes(out, (int)n) != 1)
    return gang__error(GANG_SYSTEM,
                       "store auth: the OpenSSL random generator failed "
                       "(error %lu)",
                       ERR_get_error());
  return GANG_OK;
}

gang_status gang__auth_proof(const char *secret, gang__auth_dir dir,
                             const uint8_t nonce_client[GANG_STORE_NONCE_BYTES],
                             const uint8_t nonce_server[GANG_STORE_NONCE_BYTES],
                             uint8_t out[GANG_STORE_MAC_BYTES]) {
  const char *label = labels[dir == GANG_AUTH_CLIENT_PROOF];
  size_t ll = strlen(label);
  uint8_t msg[64 + 2 * GANG_STORE_NONCE_BYTES];
  memcpy(msg, label, ll);
  memcpy(msg + ll, nonce_client, GANG_STORE_NONCE_BYTES);
  memcpy(msg + ll + GANG_STORE_NONCE_BYTES, nonce_server,
         GANG_STORE_NONCE_BYTES);
  unsigned int olen = 0;
  if (HMAC(EVP_sha256(), secret, (int)strlen(secret), msg,
           ll + 2 * GANG_STORE_NONCE_BYTES, out, &olen) == NULL ||
      olen != GANG_STORE_MAC_BYTES)
    return gang__error(GANG_INTERNAL, "store auth: HMAC-SHA256 failed");
  return GANG_OK;
}

struct gang__auth_key {
  EVP_MAC *mac;
  EVP_MAC_CTX *ctx; /* keyed; EVP_MAC_init with no key starts a new tag */
};

void gang__auth_key_free(gang__auth_key *k) {
  if (k == NULL)
    return;
  EVP_MAC_CTX_free(k->ctx);
  EVP_MAC_free(k->mac);
  free(k);
}

gang_status gang__auth_key_new(const char *secret, gang__auth_key **out) {
  *out = NULL;
  gang__auth_key *k = calloc(1, sizeof *k);
  if (k == NULL)
    return gang__error(GANG_NO_MEMORY, "auth key: no memory");
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string("digest", (char *)"SHA256", 0),
      OSSL_PARAM_construct_end()};
  k->mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
  k->ctx = k->mac ? EVP_MAC_CTX_new(k->mac) : NULL;
  if (k->ctx == NULL || EVP_MAC_init(k->ctx, (const unsigned char *)secret,
                                     strlen(secret), params) != 1) {
    gang__auth_key_free(k);
    return gang__error(GANG_INTERNAL, "auth key: HMAC-SHA256 (error %lu)",
                       ERR_get_error());
  }
  *out = k;
  return GANG_OK;
}

gang_status gang__auth_mac(gang__auth_key *k, const char *label,
                           const void *msg, size_t n,
                           uint8_t out[GANG_STORE_MAC_BYTES]) {
  size_t olen = 0;
  if (EVP_MAC_init(k->ctx, NULL, 0, NULL) != 1 ||
      EVP_MAC_update(k->ctx, (const unsigned char *)label, strlen(label)) !=
          1 ||
      EVP_MAC_update(k->ctx, msg, n) != 1 ||
      EVP_MAC_final(k->ctx, out, &olen, GANG_STORE_MAC_BYTES) != 1 ||
      olen != GANG_STORE_MAC_BYTES)
    return gang__error(GANG_INTERNAL, "auth mac: HMAC-SHA256 failed");
  return GANG_OK;
}

bool gang__auth_equal(const void *a, const void *b, size_t n) {
  return CRYPTO_memcmp(a, b, n) == 0;
}

bool gang__auth_check(const char *secret, gang__auth_dir dir,
                      const uint8_t nonce_client[GANG_STORE_NONCE_BYTES],
                      const uint8_t nonce_server[GANG_STORE_NONCE_BYTES],
                      const uint8_t got[GANG_STORE_MAC_BYTES]) {
  uint8_t want[GANG_STORE_MAC_BYTES];
  if (gang__auth_proof(secret, dir, nonce_client, nonce_server, want) !=
      GANG_OK)
    return false;
  bool ok = CRYPTO_memcmp(want, got, sizeof want) == 0;
  OPENSSL_cleanse(want, sizeof want);
  return ok;
}

gang_status gang__auth_secret_file(const char *path, char **out) {
  *out = NULL;
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return gang__error(GANG_INVALID_ARGUMENT, "cannot read secret file %s: %s",
                       path, strerror(errno));
  char buf[4096];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *nl = strpbrk(buf, "\r\n");
  if (nl != NULL)
    *nl = '\0';
  n = strlen(buf);
  gang_status st = GANG_OK;
  if (n == 0)
    st = gang__error(GANG_INVALID_ARGUMENT,
                     "secret file %s holds no secret (its first line is "
                     "empty)",
                     path);
  else if ((*out = strdup(buf)) == NULL)
    st = gang__error(GANG_NO_MEMORY, "secret file %s: out of memory", path);
  OPENSSL_cleanse(buf, sizeof buf);
  return st;
}
