// gang-bench's measurement for Gloo (Debian's libgloo-dev, TCP transport),
// for bench/compare. The driver, values, checks and output are bench/lib's;
// here are only the calls.
//
// Ranks are started by the caller with RANK and WORLD_SIZE set, and meet
// through Gloo's file store in GLOO_STORE_DIR (a fresh directory per run;
// this Gloo has no TCP store). Every rank connects to every other over
// 127.0.0.1 (GLOO_HOST to change it).
//
// Gloo has several all_reduce algorithms; -A picks which to measure, each
// in turn per size: ring, ring_chunked, halving_doubling, bcube (the
// algorithm classes) and allreduce_ring, allreduce_bcube (gloo::allreduce,
// the options API PyTorch's ProcessGroupGloo calls). Without -A:
// allreduce_ring.
//
// Algorithm objects and option structs are built once per row (setup,
// untimed), as a framework caches them; the timed call is run().
// Placements: the algorithm classes work in place, so out of place is a
// copy plus the call (as gang-bench measures gang's all_reduce); the
// options API takes distinct buffers natively. reduce_scatter is Gloo's
// ReduceScatterHalvingDoubling, in place, which leaves each rank's block at
// the start of the buffer, as MPI_IN_PLACE does (out of place: copy in,
// call, copy the start out); reading it at the rank's offset found the
// right values only where nothing had overwritten them there (2 ranks
// below 64 MiB). all_to_all in
// place goes through a staging buffer, as gang-bench does for gang.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_bcube.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/config.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include "bench.h"

namespace {

// The types and operations the algorithms here are instantiated for:
// gang-bench's half, bfloat16 and int16 are left out, and avg (gang's MEAN),
// which Gloo does not have.
const bench_program kProgram = {
    "gloo_bench",
    "gang-bench's measurement of one collective for Gloo; start one "
    "process\nper rank with RANK, WORLD_SIZE and GLOO_STORE_DIR set "
    "(bench/compare does).\n",
    1u << BENCH_FLOAT | 1u << BENCH_DOUBLE | 1u << BENCH_INT8 |
        1u << BENCH_UINT8 | 1u << BENCH_INT32 | 1u << BENCH_UINT32 |
        1u << BENCH_INT64 | 1u << BENCH_UINT64,
    1u << BENCH_SUM | 1u << BENCH_PROD | 1u << BENCH_MIN | 1u << BENCH_MAX,
    1,
};

const char *const kAlgos[] = {"ring",  "ring_chunked",   "halving_doubling",
                              "bcube", "allreduce_ring", "allreduce_bcube"};
constexpr int kNumAlgos = sizeof kAlgos / sizeof kAlgos[0];

struct State {
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  const bench_args *args = nullptr;
  // The row's plan, built by setup.
  std::unique_ptr<gloo::Algorithm> algo;
  std::unique_ptr<gloo::AllreduceOptions> ar;
  std::unique_ptr<gloo::AllgatherOptions> ag;
  std::unique_ptr<gloo::BroadcastOptions> bc;
  std::unique_ptr<gloo::AlltoallOptions> aa;
  std::unique_ptr<gloo::BarrierOptions> bar;
  unsigned char *work = nullptr; // where an in-place algorithm runs
};

int algo_index(const State *st, const bench_call *c) {
  const char *name = c->algo >= 0 ? st->args->algos[c->algo] : "allreduce_ring";
  for (int k = 0; k < kNumAlgos; k++)
    if (std::strcmp(name, kAlgos[k]) == 0)
      return k;
  return -1;
}

template <typename T> const gloo::ReductionFunction<T> *fn_of(bench_op op) {
  switch (op) {
  case BENCH_PROD:
    return gloo::ReductionFunction<T>::product;
  case BENCH_MIN:
    return gloo::ReductionFunction<T>::min;
  case BENCH_MAX:
    return gloo::ReductionFunction<T>::max;
  default:
    return gloo::ReductionFunction<T>::sum;
  }
}

// The options API's element-wise reduction: out[i] = a[i] op b[i].
template <typename T, int OP>
void reduce_fn(void *out, const void *a, const void *b, size_t n) {
  T *o = static_cast<T *>(out);
  const T *x = static_cast<const T *>(a), *y = static_cast<const T *>(b);
  for (size_t i = 0; i < n; i++) {
    if (OP == BENCH_PROD)
      o[i] = x[i] * y[i];
    else if (OP == BENCH_MIN)
      o[i] = y[i] < x[i] ? y[i] : x[i];
    else if (OP == BENCH_MAX)
      o[i] = y[i] > x[i] ? y[i] : x[i];
    else
      o[i] = x[i] + y[i];
  }
}

template <typename T> gloo::AllreduceOptions::Func func_of(bench_op op) {
  switch (op) {
  case BENCH_PROD:
    return reduce_fn<T, BENCH_PROD>;
  case BENCH_MIN:
    return reduce_fn<T, BENCH_MIN>;
  case BENCH_MAX:
    return reduce_fn<T, BENCH_MAX>;
  default:
    return reduce_fn<T, BENCH_SUM>;
  }
}

template <typename T> int setup_t(State *st, const bench_call *c) {
  auto &ctx = st->ctx;
  const int n = ctx->size, r = ctx->rank;
  T *recv = reinterpret_cast<T *>(c->recv);
  T *send = reinterpret_cast<T *>(c->send);
  const int count = static_cast<int>(c->s.count);
  const size_t per = c->s.per;
  switch (c->coll) {
  case BENCH_ALL_REDUCE: {
    int k = algo_index(st, c);
    if (k >= 4) { // options API: native placements
      st->ar.reset(new gloo::AllreduceOptions(ctx));
      st->ar->setAlgorithm(k == 4 ? gloo::AllreduceOptions::Algorithm::RING
                                  : gloo::AllreduceOptions::Algorithm::BCUBE);
      if (!c->inplace)
        st->ar->setInput(send, c->s.count);
      st->ar->setOutput(recv, c->s.count);
      st->ar->setReduceFunction(func_of<T>(c->op));
      return 0;
    }
    std::vector<T *> ptrs{recv};
    const gloo::ReductionFunction<T> *fn = fn_of<T>(c->op);
    if (k == 0)
      st->algo.reset(new gloo::AllreduceRing<T>(ctx, ptrs, count, fn));
    else if (k == 1)
      st->algo.reset(new gloo::AllreduceRingChunked<T>(ctx, ptrs, count, fn));
    else if (k == 2)
      st->algo.reset(
          new gloo::AllreduceHalvingDoubling<T>(ctx, ptrs, count, fn));
    else
      st->algo.reset(new gloo::AllreduceBcube<T>(ctx, ptrs, count, fn));
    return 0;
  }
  case BENCH_REDUCE_SCATTER: {
    st->work = c->inplace ? c->recv : c->stage;
    std::vector<T *> ptrs{reinterpret_cast<T *>(st->work)};
    std::vector<int> elems(static_cast<size_t>(n), static_cast<int>(per));
    st->algo.reset(new gloo::ReduceScatterHalvingDoubling<T>(
        ctx, ptrs, count, elems, fn_of<T>(c->op)));
    return 0;
  }
  case BENCH_ALL_GATHER:
    st->ag.reset(new gloo::AllgatherOptions(ctx));
    st->ag->setInput(c->inplace ? recv + static_cast<size_t>(r) * per : send,
                     per);
    st->ag->setOutput(recv, c->s.count);
    return 0;
  case BENCH_BROADCAST:
    st->bc.reset(new gloo::BroadcastOptions(ctx));
    st->bc->setRoot(c->root);
    if (!c->inplace && r == c->root)
      st->bc->setInput(send, c->s.count);
    st->bc->setOutput(recv, c->s.count);
    return 0;
  case BENCH_ALL_TO_ALL:
    st->aa.reset(new gloo::AlltoallOptions(ctx));
    st->aa->setInput(c->inplace ? reinterpret_cast<T *>(c->stage) : send,
                     c->s.count);
    st->aa->setOutput(recv, c->s.count);
    return 0;
  case BENCH_BARRIER:
    st->bar.reset(new gloo::BarrierOptions(ctx));
    return 0;
  default:
    return 1;
  }
}

int gloo_setup(void *p, const bench_call *c) {
  State *st = static_cast<State *>(p);
  if (c->coll == BENCH_ALL_REDUCE && algo_index(st, c) < 0) {
    std::fprintf(stderr, "gloo_bench: -A: unknown algorithm '%s'\n",
                 st->args->algos[c->algo]);
    return 1;
  }
  try {
    switch (c->dtype) {
    case BENCH_FLOAT:
      return setup_t<float>(st, c);
    case BENCH_DOUBLE:
      return setup_t<double>(st, c);
    case BENCH_INT8:
      return setup_t<int8_t>(st, c);
    case BENCH_UINT8:
      return setup_t<uint8_t>(st, c);
    case BENCH_INT32:
      return setup_t<int32_t>(st, c);
    case BENCH_UINT32:
      return setup_t<uint32_t>(st, c);
    case BENCH_INT64:
      return setup_t<int64_t>(st, c);
    default:
      return setup_t<uint64_t>(st, c);
    }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "gloo_bench: setting up %s: %s\n",
                 bench_coll_name(c->coll), e.what());
    return 1;
  }
}

int gloo_run(void *p, const bench_call *c) {
  State *st = static_cast<State *>(p);
  try {
    switch (c->coll) {
    case BENCH_ALL_REDUCE:
      if (st->ar) {
        gloo::allreduce(*st->ar);
      } else {
        if (!c->inplace)
          std::memcpy(c->recv, c->send, c->s.bytes);
        st->algo->run();
      }
      return 0;
    case BENCH_REDUCE_SCATTER: {
      if (!c->inplace)
        std::memcpy(c->stage, c->send, c->s.bytes);
      st->algo->run();
      if (!c->inplace) {
        size_t block = c->s.per * bench_dtype_size(c->dtype);
        std::memcpy(c->recv, c->stage, block);
      }
      return 0;
    }
    case BENCH_ALL_GATHER:
      gloo::allgather(*st->ag);
      return 0;
    case BENCH_BROADCAST:
      gloo::broadcast(*st->bc);
      return 0;
    case BENCH_ALL_TO_ALL:
      if (c->inplace)
        std::memcpy(c->stage, c->recv, c->s.bytes);
      gloo::alltoall(*st->aa);
      return 0;
    case BENCH_BARRIER:
      gloo::barrier(*st->bar);
      return 0;
    default:
      return 1;
    }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "gloo_bench rank %d: %s: %s\n", st->ctx->rank,
                 bench_coll_name(c->coll), e.what());
    return 1;
  }
}

void gloo_teardown(void *p, const bench_call *) {
  State *st = static_cast<State *>(p);
  st->algo.reset();
  st->ar.reset();
  st->ag.reset();
  st->bc.reset();
  st->aa.reset();
  st->bar.reset();
}

// The driver's own reductions, through the options API in place.
template <typename T, int OP> int reduce_here(State *st, T *v, size_t n) {
  try {
    gloo::AllreduceOptions o(st->ctx);
    o.setOutput(v, n);
    o.setReduceFunction(reduce_fn<T, OP>);
    gloo::allreduce(o);
    return 0;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "gloo_bench: allreduce of timings or counts: %s\n",
                 e.what());
    return 1;
  }
}

int gloo_max_f64(void *p, double *v, size_t n) {
  return reduce_here<double, BENCH_MAX>(static_cast<State *>(p), v, n);
}
int gloo_sum_i64(void *p, int64_t *v, size_t n) {
  return reduce_here<int64_t, BENCH_SUM>(static_cast<State *>(p), v, n);
}
int gloo_min_i64(void *p, int64_t *v, size_t n) {
  return reduce_here<int64_t, BENCH_MIN>(static_cast<State *>(p), v, n);
}
int gloo_barrier(void *p) {
  try {
    gloo::BarrierOptions o(static_cast<State *>(p)->ctx);
    gloo::barrier(o);
    return 0;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "gloo_bench: barrier: %s\n", e.what());
    return 1;
  }
}

int env_int(const char *name, int dflt) {
  const char *s = std::getenv(name);
  return s != nullptr && *s != '\0' ? std::atoi(s) : dflt;
}

} // namespace

int main(int argc, char **argv) {
  bench_args a;
  int rc = bench_parse_args(argc, argv, &kProgram, &a);
  if (rc != 0)
    return rc < 0 ? 0 : rc;
  for (int k = 0; k < a.nalgos; k++) {
    bool known = false;
    for (int j = 0; j < kNumAlgos; j++)
      known = known || std::strcmp(a.algos[k], kAlgos[j]) == 0;
    if (!known) {
      std::fprintf(stderr,
                   "gloo_bench: -A: '%s' is not ring, ring_chunked, "
                   "halving_doubling, bcube, allreduce_ring or "
                   "allreduce_bcube\n",
                   a.algos[k]);
      return 2;
    }
  }
  if (a.nalgos > 0 && a.coll != BENCH_ALL_REDUCE) {
    std::fprintf(stderr, "gloo_bench: -A applies to all_reduce only\n");
    return 2;
  }
  const char *dir = std::getenv("GLOO_STORE_DIR");
  if (dir == nullptr || *dir == '\0') {
    std::fprintf(stderr, "gloo_bench: set GLOO_STORE_DIR to an empty "
                         "directory shared by the ranks (and RANK, "
                         "WORLD_SIZE)\n");
    return 2;
  }
  const int rank = env_int("RANK", 0), size = env_int("WORLD_SIZE", 1);
  const char *host = std::getenv("GLOO_HOST");
  State st;
  st.args = &a;
  try {
    gloo::transport::tcp::attr attr(host != nullptr ? host : "127.0.0.1");
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(dir);
    st.ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    // A peer that dies mid-run ends every call within this, not never.
    st.ctx->setTimeout(
        std::chrono::seconds(env_int("GLOO_BENCH_TIMEOUT", 120)));
    st.ctx->connectFullMesh(store, dev);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "gloo_bench rank %d: cannot connect: %s\n", rank,
                 e.what());
    return 1;
  }
  char lib[32];
  std::snprintf(lib, sizeof lib, "Gloo %d.%d.%d", GLOO_VERSION_MAJOR,
                GLOO_VERSION_MINOR, GLOO_VERSION_PATCH);
  bench_backend b = {};
  b.program = kProgram.name;
  b.library = lib;
  b.rank = rank;
  b.size = size;
  b.ctx = &st;
  b.setup = gloo_setup;
  b.run = gloo_run;
  b.teardown = gloo_teardown;
  b.max_f64 = gloo_max_f64;
  b.sum_i64 = gloo_sum_i64;
  b.min_i64 = gloo_min_i64;
  b.barrier = gloo_barrier;
  b.reduce_scatter_inplace_at_start = 1;
  return bench_run(&b, &a);
}
