/* Fuzz target for the store wire protocol and the server's request
 * execution, without sockets. The first input byte picks a mode:
 *   0: a stream of request frames ([u32 len][u8 op][body]) is split the
 *      way the server splits it, decoded under small caps, executed
 *      against a kv (waits park, then time out), and every reply the kv
 *      produced is decoded again as the client would;
 *   1: the rest is a reply body for op = byte 1 with nkeys = byte 2 and
 *      status = byte 3, decoded as the client does;
 *   2: the rest is a client hello and a server hello.
 * Built with libFuzzer (fuzz/CMakeLists.txt) and replayed from
 * fuzz/corpus/fuzz_store_frame in every build. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "store/kv.h"
#include "store/proto.h"

/* The code under test is compiled into this file, so the replay built by
 * any compiler runs exactly these sources (the fuzz build instruments
 * every object of libgang too, CMakeLists.txt). These definitions take
 * precedence over the archive's, whose proto.o and kv.o are then not
 * linked. */
#include "../src/store/kv.c"
#include "../src/store/proto.c"

static void noop_wake(void *owner, void *ctx) {
  (void)owner;
  (void)ctx;
}

static const gang__store_caps caps = {64, 4096, 64, 16384};

/* Decodes every reply frame in out as the client would. */
static void check_replies(const gang__store_req *req, const uint8_t *p,
                          size_t n) {
  while (n >= GANG_STORE_FRAME_HDR) {
    uint32_t len;
    uint8_t rc;
    gang__store_frame_header(p, n, &len, &rc);
    if (len < 1 || 4 + (size_t)len > n)
      abort(); /* the server built a frame that does not parse */
    gang__store_rep rep;
    if (gang__store_rep_decode(req->op, req->nkeys, rc, p + 5, len - 1, &caps,
                               &rep) != 0 &&
        rc != GANG_STORE_RC_TOO_LARGE)
      abort(); /* a reply our own client would reject */
    gang__store_rep_fini(&rep);
    p += 4 + (size_t)len;
    n -= 4 + (size_t)len;
  }
  if (n != 0)
    abort();
}

static void run_frames(const uint8_t *p, size_t n) {
  gang__kv *kv = gang__kv_create(&caps, 1 << 20, noop_wake, NULL);
  if (kv == NULL)
    return;
  gang__kv_park parks[4];
  memset(parks, 0, sizeof parks);
  int np = 0;
  while (n >= GANG_STORE_FRAME_HDR) {
    uint32_t len;
    uint8_t op;
    gang__store_frame_header(p, n, &len, &op);
    if (len < 1 || len > caps.max_frame || 4 + (size_t)len > n)
      break; /* the server closes here */
    gang__store_req req;
    if (gang__store_req_decode(op, p + 5, len - 1, &caps, &req) == 0) {
      gang__store_buf out = {0};
      /* Keep up to four requests parked, to exercise wake-ups. */
      gang__kv_park *pk = &parks[np % 4];
      gang__kv_unpark(kv, pk);
      pk->owner = pk;
      gang__kv_result r = gang__kv_exec(kv, &req, np % 3 == 0, pk, &out);
      np++;
      if (r == GANG_KV_DONE)
        check_replies(&req, out.p, out.len);
      gang__store_buf_free(&out);
    }
    gang__store_req_fini(&req);
    p += 4 + (size_t)len;
    n -= 4 + (size_t)len;
  }
  for (int i = 0; i < 4; i++)
    gang__kv_unpark(kv, &parks[i]);
  gang__kv_destroy(kv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  switch (data[0] % 3) {
  case 0:
    run_frames(data + 1, size - 1);
    break;
  case 1:
    if (size >= 4) {
      gang__store_rep rep;
      gang__store_rep_decode(data[1], data[2], data[3], data + 4, size - 4,
                             &caps, &rep);
      gang__store_rep_fini(&rep);
    }
    break;
  case 2:
    if (size >= 1 + GANG_STORE_SERVER_HELLO_BYTES) {
      gang__store_client_hello ch;
      gang__store_server_hello sh;
      gang__store_client_hello_decode(data + 1, &ch);
      gang__store_server_hello_decode(data + 1, &sh);
      uint8_t back[GANG_STORE_SERVER_HELLO_BYTES];
      gang__store_server_hello_encode(&sh, back);
      if (memcmp(back, data + 1, GANG_STORE_SERVER_HELLO_BYTES) != 0)
        abort(); /* the server hello must round-trip exactly */
    }
    break;
  }
  return 0;
}
