/* Broadcast over shared memory.
 *
 *   small (≤ 1 KiB): the root's step line (≤ 40 bytes) or small slot of
 *     the step carries the data; the root may run up to GANG_SHM_LINES - 1
 *     broadcasts ahead of its slowest reader.
 *   slotted (up to an eighth of a staging buffer): the root copies it
 *     into its slot of the step; the root may run up to GANG_SHM_LINES - 1
 *     broadcasts ahead of its slowest reader, as a small one. Back-to-back
 *     4 KiB broadcasts in a host's part of 4 hosts x 2 (500 us one way,
 *     8 ranks on 2 CPUs) took 7-17 us per call this way, 14-162 us
 *     staged, where each call waits for the reader of the last one.
 *   staged: per chunk, the root stages it and publishes; each other member
 *     copies it out and publishes. The root waits for everyone only before
 *     reusing a buffer, so it runs at most one chunk ahead of the slowest
 *     reader and copy-in overlaps copy-out.
 *   single copy (larger buffers, when allowed): the root publishes
 *     its buffer's address; the others pull it with process_vm_readv and
 *     publish; the root returns once all have. One copy per reader. With
 *     two members the root would idle, so it pushes the first half
 *     (process_vm_writev) while the other pulls the second: two cores
 *     copy at once. */
#include <string.h>

#include "shm_algo.h"

static gang_status bcast_small(gang__shm_chan *c, void *buf, size_t bytes,
                               int root) {
  uint64_t t = ++c->step;
  if (c->rank == root) {
    GANG_CHECK(gang__shm_begin_line(c, t));
    memcpy(gang__shm_slot(c, root, t, bytes), buf, bytes);
    gang__shm_publish(c, t);
  } else {
    gang__shm_note_lean(c, t); /* so a slotted step of its own after it
                                  need not wait for everyone */
    GANG_CHECK(gang__shm_wait(c, root, t));
    memcpy(buf, gang__shm_slot(c, root, t, bytes), bytes);
    gang__shm_publish(c, t);
  }
  return GANG_OK;
}

/* Two members: both copy, the root pushing the first half into the
 * other's buffer while it pulls the second. */
static gang_status bcast_two_ends(gang__shm_chan *c, void *buf, size_t bytes,
                                  int root) {
  uint64_t t = ++c->step;
  GANG_CHECK(gang__shm_begin(c, t));
  gang__shm_pub_in(c, buf);
  gang__shm_publish(c, t);
  GANG_CHECK(gang__shm_wait_all(c, t));
  int peer = 1 - c->rank;
  size_t half = bytes / 2;
  if (c->rank == root)
    GANG_CHECK(
        gang__shm_write_remote(c, peer, c->ctl[peer]->pub.in, buf, half));
  else
    GANG_CHECK(gang__shm_read_remote(c, root, (unsigned char *)buf + half,
                                     c->ctl[root]->pub.in + half,
                                     bytes - half));
  uint64_t t2 = ++c->step;
  gang__shm_publish(c, t2);
  return gang__shm_wait_all(c, t2);
}

static gang_status bcast_single_copy(gang__shm_chan *c, void *buf, size_t bytes,
                                     int root) {
  uint64_t t = ++c->step;
  if (c->rank == root) {
    GANG_CHECK(gang__shm_begin(c, t));
    gang__shm_pub_in(c, buf);
    gang__shm_publish(c, t);
    return gang__shm_wait_all(c, t);
  }
  GANG_CHECK(gang__shm_wait(c, root, t));
  GANG_CHECK(gang__shm_read_remote(c, root, buf, c->ctl[root]->pub.in, bytes));
  gang__shm_publish(c, t);
  return GANG_OK;
}

/* One step through the root's slot of its staging buffer (rule 1'' of
 * shm.h): like a small broadcast, the root runs up to GANG_SHM_LINES - 1
 * steps ahead of its slowest reader instead of one. */
static gang_status bcast_slotted(gang__shm_chan *c, void *buf, size_t bytes,
                                 int root) {
  uint64_t t = ++c->step;
  if (c->rank == root) {
    GANG_CHECK(gang__shm_begin_slot(c, t));
    memcpy(gang__shm_slot_of(c, root, t), buf, bytes);
  } else {
    gang__shm_note_lean(c, t);
    GANG_CHECK(gang__shm_wait(c, root, t));
    memcpy(buf, gang__shm_slot_of(c, root, t), bytes);
  }
  gang__shm_publish(c, t);
  return GANG_OK;
}

static gang_status bcast_staged(gang__shm_chan *c, void *buf, size_t bytes,
                                int root) {
  if (bytes <= c->chunk / GANG_SHM_SLOTS)
    return bcast_slotted(c, buf, bytes, root);
  unsigned char *b = buf;
  for (size_t done = 0; done < bytes; done += c->chunk) {
    size_t n = bytes - done < c->chunk ? bytes - done : c->chunk;
    uint64_t t = ++c->step;
    if (c->rank == root) {
      GANG_CHECK(gang__shm_begin(c, t));
      memcpy(gang__shm_buf(c, root, t), b + done, n);
      gang__shm_publish(c, t);
    } else {
      GANG_CHECK(gang__shm_wait(c, root, t));
      memcpy(b + done, gang__shm_buf(c, root, t), n);
      gang__shm_publish(c, t);
    }
  }
  return GANG_OK;
}

/* ---- The handlers (run.c) ---------------------------------------------- */

/* Runs broadcast `alg` for call k, unless there is nothing to send or
 * nobody to send it to. */
static gang_status run(gang__shm_chan *c, const algo_call *k,
                       gang_status (*alg)(gang__shm_chan *, void *, size_t,
                                          int)) {
  size_t n = k->count * gang_dtype_size(k->dtype);
  return c->size == 1 || n == 0 ? GANG_OK : alg(c, k->out, n, k->root);
}

gang_status gang__shm_bcast_small(gang__shm_chan *c, const algo_call *k) {
  return run(c, k, bcast_small);
}

gang_status gang__shm_bcast_two_ends(gang__shm_chan *c, const algo_call *k) {
  return run(c, k, bcast_two_ends);
}

gang_status gang__shm_bcast_single_copy(gang__shm_chan *c, const algo_call *k) {
  return run(c, k, bcast_single_copy);
}

gang_status gang__shm_bcast_staged(gang__shm_chan *c, const algo_call *k) {
  return run(c, k, bcast_staged);
}

/* Two members, below two ends' own entry: staged or two ends, whichever
 * they measured faster (shm_way.c), agreeing only when a choice is due:
 * a step each call would make the root wait for its reader, where
 * staging lets it run a call ahead. In a host's part of a gang over
 * several hosts, staged: a member's time there is mostly its wait for
 * the leader's network step, which says nothing of the two ways, and two
 * ends hold the leader to its reader at every call (4 hosts x 2, 32 KiB
 * back to back: 120-190 us per call against flat TCP's 27-73). */
gang_status gang__shm_bcast_measured(gang__shm_chan *c, const algo_call *k) {
  size_t n = k->count * gang_dtype_size(k->dtype);
  if (c->size == 1 || n == 0)
    return GANG_OK;
  if (c->size != 2 || c->host_part)
    return bcast_staged(c, k->out, n, k->root);
  int way;
  GANG_CHECK(gang__shm_way_sparse(c, GANG__SHM_WAY_BROADCAST, n, &way));
  GANG_CHECK(way == GANG__SHM_WAY_SINGLE_COPY
                 ? bcast_two_ends(c, k->out, n, k->root)
                 : bcast_staged(c, k->out, n, k->root));
  gang__shm_way_learn(c, GANG__SHM_WAY_BROADCAST, way, n);
  return GANG_OK;
}
