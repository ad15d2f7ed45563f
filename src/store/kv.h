/* The store server's data: a hash table of keys and values with memory
 * accounting, parked waiters per key, and the execution of decoded
 * requests into encoded replies. No I/O: the server (server.c) feeds it
 * requests and sends what it returns; the fuzzer drives it directly.
 *
 * Waiting requests (get, wait, multi_get on missing keys) "park": a waiter
 * node is hung on each missing key (creating an absent placeholder entry),
 * and when any of those keys becomes present the kv unparks the request and
 * calls the wake callback with its owner, which re-executes it. Absent
 * entries are freed when their last waiter leaves.
 *
 * Memory: every entry, value and waiter is charged against max_total; the
 * server also charges its connection buffers (gang__kv_charge). A write
 * that would exceed the cap gets a NO_MEMORY reply and changes nothing.
 *
 * Not thread-safe: one server thread owns a kv. */
#ifndef GANG_STORE_KV_H
#define GANG_STORE_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"

typedef struct gang__kv gang__kv;
typedef struct gang__kv_waiter gang__kv_waiter;

/* A request's registration as a waiter; lives in the owner (connection).
 * Zero-initialise; the kv fills it while parked. */
typedef struct gang__kv_park {
  void *owner;
  gang__kv_waiter *nodes;
  uint32_t n;
} gang__kv_park;

typedef void (*gang__kv_wake_fn)(void *owner, void *ctx);

/* Creates an empty kv with the caps used for replies (max_frame) and the
 * memory cap. The hash seed is random (hash flooding). NULL on no memory. */
gang__kv *gang__kv_create(const gang__store_caps *caps, size_t max_total,
                          gang__kv_wake_fn wake, void *ctx);
/* Frees everything. Parked registrations must have been unparked. */
void gang__kv_destroy(gang__kv *kv);

typedef enum gang__kv_result {
  GANG_KV_DONE = 0,   /* reply appended to out */
  GANG_KV_PARKED = 1, /* waiting; park registered, nothing appended */
  GANG_KV_FAILED = 2  /* could not even build an error reply: close */
} gang__kv_result;

/* Executes req. When keys are missing and `expired` is false, parks
 * (registering `park`, whose owner the caller set); when expired, replies
 * TIMEOUT listing the missing keys. */
gang__kv_result gang__kv_exec(gang__kv *kv, const gang__store_req *req,
                              bool expired, gang__kv_park *park,
                              gang__store_buf *out);

/* Removes a parked registration (no-op if not parked). */
void gang__kv_unpark(gang__kv *kv, gang__kv_park *park);

/* Charges (delta > 0) or releases (delta < 0) bytes held outside the table
 * (connection buffers). A charge beyond the cap is refused (returns false)
 * unless `force`. */
bool gang__kv_charge(gang__kv *kv, int64_t delta, bool force);

/* Bytes currently charged, and the cap on them. */
size_t gang__kv_used(const gang__kv *kv);
size_t gang__kv_max(const gang__kv *kv);

#endif
