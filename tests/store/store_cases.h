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

#endif
