/* The subprocess ("baby") gang (gang/ft.h, gang_baby_create; torchft's
 * ProcessGroupBaby): what its two halves share. The parent half (baby.c,
 * baby_proc.c) is a gang_t in the caller's process; the child half
 * (baby_child.c, run by the gang-baby program) owns the real gang.
 *
 * The protocol, all of it here and in baby_wire.c:
 *
 *   The parent starts `gang-baby --baby-fds <sock> <memfd>` with
 *   posix_spawn. <sock> is the child's end of a SOCK_SEQPACKET socketpair,
 *   <memfd> the buffers both map (named "gang-baby").
 *
 *   Every message is one packet of at most BABY_MSG_MAX bytes, little-endian,
 *   opening with magic, version and kind; a larger packet arrives truncated
 *   and is refused, so nothing is ever allocated from a length on the wire.
 *
 *     parent -> child  HELLO  once: rank, size, rendezvous timeout, device,
 *                             host and store address
 *     child -> parent  READY  once: gang_create_with_store's status, detail
 *     parent -> child  POST   one per work, in posting order: the collective,
 *                             where its input and output lie in the memfd,
 *                             and the memfd's length (when it grew, the
 *                             child maps it again)
 *     child -> parent  DONE   one per POST, in the same order: status, detail
 *
 *   The end of the parent's stream (it closed its end, or died) ends the
 *   child: it destroys its gang, which says goodbye to the peers, and exits
 *   0; with works still in flight it aborts them first.
 *
 * The parent copies inputs into the memfd when it posts and results out
 * when the DONE arrives; the child runs the collective in place there. */
#ifndef GANG_FT_BABY_H
#define GANG_FT_BABY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gang/gang_impl.h"

#define BABY_MAGIC 0x59424247u /* "GBBY" */
#define BABY_VERSION 1
#define BABY_MSG_MAX 2048
#define BABY_ADDR_MAX 1024 /* store address */
#define BABY_HOST_MAX 255
#define BABY_DETAIL_MAX 1000
#define BABY_ALIGN 64 /* regions start on a cache line */

enum { BABY_HELLO = 1, BABY_READY = 2, BABY_POST = 3, BABY_DONE = 4 };

typedef struct baby_hello {
  int32_t rank, size;
  int64_t timeout_ms; /* the child's rendezvous */
  int32_t device_type, device_index;
  char store_addr[BABY_ADDR_MAX + 1];
  char host[BABY_HOST_MAX + 1]; /* "" = auto */
} baby_hello;

typedef struct baby_post {
  uint64_t seq;
  uint32_t kind, dtype, op;
  int32_t root, peer, tag;
  uint64_t count;
  uint64_t in_off, in_len;   /* what the collective reads, when apart */
  uint64_t out_off, out_len; /* what it writes (in place: reads too) */
  uint64_t counts_off;       /* all_to_all_v: out_counts then in_counts */
  uint64_t map_len;          /* the memfd's length now */
} baby_post;

/* READY (seq 0) and DONE. */
typedef struct baby_reply {
  uint64_t seq;
  uint32_t status;
  char detail[BABY_DETAIL_MAX + 1];
} baby_reply;

/* ---- Wire (baby_wire.c) ------------------------------------------------- */

/* Encoders write one message into buf (BABY_MSG_MAX bytes) and return its
 * length. Strings longer than their cap are cut. */
size_t gang__baby_put_hello(uint8_t *buf, const baby_hello *h);
size_t gang__baby_put_post(uint8_t *buf, const baby_post *p);
size_t gang__baby_put_reply(uint8_t *buf, int kind, const baby_reply *r);

/* Decoders check magic, version, kind and length: GANG_PROTOCOL with a
 * detail saying what was wrong. *kind receives the message's kind. */
gang_status gang__baby_kind(const uint8_t *buf, size_t n, int *kind);
gang_status gang__baby_get_hello(const uint8_t *buf, size_t n, baby_hello *h);
gang_status gang__baby_get_post(const uint8_t *buf, size_t n, baby_post *p);
gang_status gang__baby_get_reply(const uint8_t *buf, size_t n, int kind,
                                 baby_reply *r);

/* Bytes a collective reads apart from its output (*in) and writes (*out)
 * in the memfd, for a gang of `size`; all_to_all_v needs the element
 * totals of its counts. In-place kinds (all_reduce, broadcast, all_gather
 * with its input in its own slot) have *in = 0. Both halves use it: the
 * parent to lay regions out, the child to check them. */
gang_status gang__baby_need(const baby_post *p, int size, size_t tin,
                            size_t tout, size_t *in, size_t *out);

/* ---- The child's process, seen from the parent (baby_proc.c) ------------ */

typedef struct baby_proc {
  pid_t pid;          /* -1: none */
  int pidfd;          /* the child itself, so a kill can never reach
                         another process that got its pid; -1 if the
                         kernel has no pidfd */
  bool reaped;        /* waited for: pid is no longer ours */
  int sock;           /* the parent's end; -1 when closed */
  int memfd;          /* -1 when closed */
  unsigned char *map; /* the parent's mapping of memfd */
  size_t cap;         /* its length (the memfd's) */
  int wstatus;        /* waitpid's status once reaped; -1: unknown */
  char path[4096];    /* the program that was started */
} baby_proc;

/* Finds gang-baby (GANG_BABY_PATH; else the libexec path compiled in; else
 * beside the library) and starts it with a fresh memfd and socketpair. A
 * missing program is GANG_NOT_FOUND naming every path tried. On failure p
 * holds nothing. Not async: takes a few hundred microseconds. */
gang_status gang__baby_spawn(baby_proc *p);

/* Grows the memfd to at least `cap` bytes and maps it again in the parent
 * (offsets stay valid: the pages are the file's). */
gang_status gang__baby_grow(baby_proc *p, size_t cap);

/* SIGKILL, then waitpid: the child is gone when this returns. Wakes any
 * thread polling p->sock (shutdown). Safe on a reaped child, and the way
 * to reap one whose end closed (it died; the SIGKILL then finds it on its
 * way out and leaves its status alone). */
void gang__baby_kill(baby_proc *p);

/* Ends the child kindly: closes the parent's stream so it destroys its gang
 * (peers get a goodbye, not a crash) and waits for it to exit until
 * `deadline`, then kills it. Reaped when this returns. */
void gang__baby_stop(baby_proc *p, int64_t deadline);

/* "exited with status 3", "killed by signal 9 (Killed)". */
void gang__baby_describe_exit(const baby_proc *p, char *buf, size_t cap);

/* Unmaps and closes; the child must be reaped. */
void gang__baby_release(baby_proc *p);

/* ---- The child (baby_child.c) ------------------------------------------- */

/* main() of the gang-baby program. */
int gang__baby_child_main(int argc, char **argv);

#endif
