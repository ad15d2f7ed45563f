/* Heartbeats by datagram: the lighthouse's side (a thread that counts
 * them, lh_beats.c) and the datagram both sides make. The wire format is
 * in lh_beats.c and docs/fault-tolerance.md. */
#ifndef GANG_FT_LH_BEATS_H
#define GANG_FT_LH_BEATS_H

#include <stddef.h>
#include <stdint.h>

#include "gang/status.h"
#include "store/auth.h"

typedef struct gang__lh_beats gang__lh_beats;

/* Binds a UDP socket on host:port (the lighthouse's store address) and
 * starts the thread that counts the datagrams of the ids it is told of.
 * secret NULL or "": datagrams carry no tag. */
gang_status gang__lh_beats_start(const char *host, int port, const char *secret,
                                 uint64_t incarnation, gang__lh_beats **out);
/* The UDP port it listens on (port 0 at start: the one it got). */
int gang__lh_beats_port(const gang__lh_beats *b);
/* Stops the thread and frees everything (NULL is fine). */
void gang__lh_beats_stop(gang__lh_beats *b);

/* The ids whose datagrams count: the tick's registered replicas. Any
 * thread; b may be NULL (then nothing happens). */
void gang__lh_beats_add(gang__lh_beats *b, const char *id);
void gang__lh_beats_remove(gang__lh_beats *b, const char *id);
/* counts[i]: datagrams counted so far for the i-th id of ids (n of them,
 * NUL-terminated, `stride` bytes apart); 0 for an unknown id or b NULL. */
void gang__lh_beats_read(gang__lh_beats *b, const char *ids, size_t stride,
                         int n, int64_t *counts);

/* Counts, now and in the caller's thread, every datagram that has
 * arrived: before the tick reads a suspected replica's count, so that a
 * beat it sent just before its connection closed is not counted after
 * (making it look alive). NULL is fine. */
void gang__lh_beats_drain(gang__lh_beats *b);

/* Writes replica `id`'s beat datagram into buf, tagged with key (NULL:
 * no tag); its length, or 0 when it does not fit in cap or the tag cannot
 * be made. */
#define GANG__LH_BEAT_CAP 256
size_t gang__lh_beat_encode(uint8_t *buf, size_t cap, uint64_t incarnation,
                            uint64_t seq, const char *id, gang__auth_key *key);

#endif
