/* Store behaviour that every backend must show, written against a plain
 * gang_store* so the same cases run over the TCP client, a "host:port/prefix"
 * handle, the file store and "file://" handles (test_store_file.c,
 * test_store_conformance.c). Each case uses keys under its own fresh prefix,
 * so it runs on a store that already holds other keys. cmocka assertions:
 * call from the test process, not from gt_run_ranks children. */
#ifndef GANG_TESTS_STORE_CASES_H
#define GANG_TESTS_STORE_CASES_H

#include "gang/store.h"

/* Every operation, including binary values, counters, compare_set's four
 * cases, delete, append, multi_set/multi_get and zero-timeout waits. */
void sc_all_ops(gang_store *st);

/* Prefix views: keys land under "prefix/", nested views join prefixes,
 * every operation maps its keys, a view's timeout names the key, closing a
 * view leaves its parent usable. */
void sc_prefix_views(gang_store *st);

/* Asserts that get(key) returns exactly `want` (and a NUL after it). */
void sc_expect_val(gang_store *st, const char *key, const char *want);

/* Creates and joins one thread. ThreadSanitizer starts a helper thread of
 * its own with the process's first thread, which the leak check would count
 * against the first test that starts one; call this before the tests. */
void sc_prime_threads(void);

/* Hostile input over raw sockets, for any server that speaks the store
 * protocol without authentication on 127.0.0.1:`port` (the store server,
 * the lighthouse): a raw connection past the hello, and a check that
 * `good` still sets and gets "good/<i>". */
int sc_ready_conn(int port);
void sc_still_serving(gang_store *good, int i);

/* Wrong magic, unknown opcodes, bad and oversize lengths, truncated
 * frames, keys and values over the caps (key cap 8 KiB, value cap
 * `max_value`), too many keys, a hundred peers promising frames they never
 * send: each bad connection is closed alone and `good` keeps working.
 * Returns how many keys it set through `good` ("good/<i>"); nothing a bad
 * connection sent reaches the store. */
int sc_hostile_frames(int port, size_t max_value, gang_store *good);

/* A reader that pipelines 200 gets of a 256 KiB value ("big", set through
 * `good`) and never reads, and 300 peers each stuck one byte into the body
 * of a frame that announces 512 KiB, while `good` keeps working. Returns
 * how much this process's RSS grew (KiB) while the 300 were connected: a
 * server in this process must not allocate what a frame only announces. */
long sc_hostile_slow(int port, gang_store *good);

#endif
