// gang as a torch.distributed backend: a c10d::ProcessGroup whose
// collectives hand the tensors' memory to libgang.
//
// The glue is thin on purpose: every collective checks its tensors (CPU,
// contiguous, a dtype gang reduces), posts the gang call (gang_*_post) on
// the tensors' own memory, and returns a Work that waits for it. Nothing
// is copied except where torch's API and gang's differ in layout (reduce's
// non-root ranks, reduce_scatter's input list), and nothing runs on a
// thread of its own: gang's engine makes progress without the caller.
//
// The gang_t comes from the Python package (gang/torch_backend.py), which
// does the rendezvous; the process group either owns it (the backend's
// creator) or borrows it from a Python gang it keeps alive
// (Gang.as_process_group).
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/python.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

extern "C" {
#include "gang/gang.h"
#include "gang/status.h"
}

namespace {

namespace py = pybind11;

[[noreturn]] void fail(gang_status st, const char *op) {
  const char *detail = gang_last_error();
  TORCH_CHECK(false, "gang ", op, " failed (", gang_status_name(st),
              "): ", (detail && *detail) ? detail : gang_strerror(st));
}

gang_dtype dtype_of(const at::Tensor &t) {
  switch (t.scalar_type()) {
  case at::kFloat:
    return GANG_FLOAT32;
  case at::kDouble:
    return GANG_FLOAT64;
  case at::kHalf:
    return GANG_FLOAT16;
  case at::kBFloat16:
    return GANG_BFLOAT16;
  case at::kChar:
    return GANG_INT8;
  case at::kByte:
    return GANG_UINT8;
  case at::kShort:
    return GANG_INT16;
  case at::kInt:
    return GANG_INT32;
  case at::kLong:
    return GANG_INT64;
  case at::kBool:
    return GANG_BOOL;
  default:
    TORCH_CHECK(false, "gang: tensors of dtype ", t.scalar_type(),
                " are not supported");
  }
  return GANG_FLOAT32; // not reached: TORCH_CHECK threw (unoptimised builds
                       // cannot tell)
}

void check_tensor(const at::Tensor &t, const char *what) {
  TORCH_CHECK(t.device().is_cpu(), "gang: ", what,
              " must be a CPU tensor, not on ", t.device());
  TORCH_CHECK(t.is_contiguous(), "gang: ", what, " must be contiguous");
  TORCH_CHECK(!t.is_sparse(), "gang: ", what, " must be dense");
}

gang_reduce_op op_of(const c10d::ReduceOp &op) {
  switch (op) {
  case c10d::ReduceOp::SUM:
    return GANG_SUM;
  case c10d::ReduceOp::AVG:
    return GANG_MEAN;
  case c10d::ReduceOp::PRODUCT:
    return GANG_PRODUCT;
  case c10d::ReduceOp::MIN:
    return GANG_MIN;
  case c10d::ReduceOp::MAX:
    return GANG_MAX;
  default:
    TORCH_CHECK(false, "gang: reduce op ", static_cast<int>(op),
                " is not supported (SUM, AVG, PRODUCT, MIN, MAX are)");
  }
  return GANG_SUM; // not reached: TORCH_CHECK threw
}

// One torch Work over any number of gang works posted by one call. The
// tensors (and any scratch) stay referenced until the works complete; an
// optional `then` runs once after success (copies out of scratch).
class GangWork : public c10d::Work {
public:
  GangWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type), outputs_(std::move(outputs)) {}

  ~GangWork() override {
    // Freeing an unfinished gang work would abort the gang: wait instead.
    for (gang_work *w : works_) {
      gang_work_wait(w, -1);
      gang_work_free(w);
    }
  }

  void add(gang_work *w) { works_.push_back(w); }
  // The process group owns the gang_t the works run on: it must outlive
  // them, whatever order torch drops its references in.
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  std::vector<at::Tensor> keep; // inputs and scratch the works read
  std::vector<void *> ptrs;     // pointer arrays the works read
  std::function<void()> then;

  bool isCompleted() override {
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock())
      return false;
    if (done_)
      return true;
    for (gang_work *w : works_) {
      int d = 0;
      gang_work_test(w, &d);
      if (!d)
        return false;
    }
    return true;
  }

  bool isSuccess() const override { return done_ && !error_; }

  std::exception_ptr exception() const override { return error_; }

  std::vector<at::Tensor> result() override { return outputs_; }

  bool wait(std::chrono::milliseconds timeout) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_)
      finish_locked(timeout == kNoTimeout ? -1 : timeout.count());
    if (error_)
      std::rethrow_exception(error_);
    return true;
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    // DDP's reducer chains on this future; it is completed here, after the
    // collective, so a caller that never calls wait() still sees it done.
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_)
      finish_locked(-1);
    if (!future_) {
      future_ = c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()));
      if (error_)
        future_->setError(error_);
      else
        future_->markCompleted(c10::IValue(outputs_));
    }
    return future_;
  }

private:
  void finish_locked(int64_t timeout_ms) {
    gang_status first = GANG_OK;
    std::string detail;
    for (gang_work *w : works_) {
      gang_status st = gang_work_wait(w, timeout_ms);
      if (st != GANG_OK && first == GANG_OK) {
        first = st;
        detail = gang_last_error();
      }
      gang_work_free(w);
    }
    works_.clear();
    done_ = true;
    if (first != GANG_OK) {
      error_ = std::make_exception_ptr(
          std::runtime_error(std::string("gang collective failed (") +
                             gang_status_name(first) + "): " + detail));
    } else if (then) {
      then();
    }
    keep.clear();
    ptrs.clear();
  }

  std::mutex mu_;
  std::vector<gang_work *> works_;
  std::vector<at::Tensor> outputs_;
  bool done_ = false;
  std::exception_ptr error_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class GangProcessGroup : public c10d::ProcessGroup {
public:
  // c10d keeps a rank and size fixed at construction (torch's DDP divides
  // by that size): the gang's own, or `told_rank`/`told_size` when given
  // (>= 0; a fault-tolerant group tells torch 1 and scales itself). The
  // collectives themselves follow the gang as it is at each call, so a
  // reconfigurable gang's view stays right across reconfigurations.
  GangProcessGroup(uintptr_t handle, bool owned, py::object keep,
                   int told_rank = -1, int told_size = -1)
      : c10d::ProcessGroup(
            told_rank >= 0
                ? told_rank
                : std::max(0, gang_rank(reinterpret_cast<gang_t *>(handle))),
            told_size >= 0
                ? told_size
                : std::max(1, gang_size(reinterpret_cast<gang_t *>(handle)))),
        g_(reinterpret_cast<gang_t *>(handle)), owned_(owned),
        keep_(std::move(keep)) {}

  ~GangProcessGroup() override {
    if (owned_)
      gang_destroy(g_);
    if (keep_) {
      // After the interpreter is gone there is nothing to release.
      if (Py_IsInitialized()) {
        py::gil_scoped_acquire gil;
        keep_ = py::object();
      } else {
        keep_.release();
      }
    }
  }

  const std::string getBackendName() const override { return "gang"; }

  uintptr_t handle() const { return reinterpret_cast<uintptr_t>(g_); }

  c10::intrusive_ptr<c10d::Work>
  broadcast(std::vector<at::Tensor> &tensors,
            const c10d::BroadcastOptions &opts) override {
    auto work = make(c10d::OpType::BROADCAST, tensors);
    for (auto &t : tensors) {
      check_tensor(t, "broadcast tensor");
      gang_work *w = nullptr;
      gang_status st =
          gang_broadcast_post(g_, t.data_ptr(), t.numel(), dtype_of(t),
                              static_cast<int>(opts.rootRank), &w);
      if (st != GANG_OK)
        fail(st, "broadcast");
      work->add(w);
    }
    return work;
  }

  c10::intrusive_ptr<c10d::Work>
  allreduce(std::vector<at::Tensor> &tensors,
            const c10d::AllreduceOptions &opts) override {
    auto work = make(c10d::OpType::ALLREDUCE, tensors);
    gang_reduce_op op = op_of(opts.reduceOp);
    for (auto &t : tensors) {
      check_tensor(t, "all_reduce tensor");
      gang_work *w = nullptr;
      gang_status st = gang_all_reduce_post(g_, t.data_ptr(), t.numel(),
                                            dtype_of(t), op, &w);
      if (st != GANG_OK)
        fail(st, "all_reduce");
      work->add(w);
    }
    return work;
  }

  c10::intrusive_ptr<c10d::Work>
  allreduce_coalesced(std::vector<at::Tensor> &tensors,
                      const c10d::AllreduceCoalescedOptions &opts) override {
    c10d::AllreduceOptions o;
    o.reduceOp = opts.reduceOp;
    return allreduce(tensors, o);
  }

  c10::intrusive_ptr<c10d::Work>
  reduce(std::vector<at::Tensor> &tensors,
         const c10d::ReduceOptions &opts) override {
    // gang has no rooted reduce: all_reduce, into scratch on the ranks
    // whose tensor torch leaves untouched.
    auto work = make(c10d::OpType::REDUCE, tensors);
    gang_reduce_op op = op_of(opts.reduceOp);
    bool root = gang_rank(g_) == static_cast<int>(opts.rootRank);
    for (auto &t : tensors) {
      check_tensor(t, "reduce tensor");
      at::Tensor buf = root ? t : t.clone();
      work->keep.push_back(buf);
      gang_work *w = nullptr;
      gang_status st = gang_all_reduce_post(g_, buf.data_ptr(), buf.numel(),
                                            dtype_of(buf), op, &w);
      if (st != GANG_OK)
        fail(st, "reduce");
      work->add(w);
    }
    return work;
  }

  c10::intrusive_ptr<c10d::Work>
  allgather(std::vector<std::vector<at::Tensor>> &outputs,
            std::vector<at::Tensor> &inputs,
            const c10d::AllgatherOptions &) override {
    TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1,
                "gang: allgather takes one input tensor per process");
    auto &outs = outputs[0];
    auto &in = inputs[0];
    check_tensor(in, "all_gather input");
    TORCH_CHECK(static_cast<int>(outs.size()) == gang_size(g_),
                "gang: all_gather needs ", gang_size(g_),
                " output tensors, got ", outs.size());
    auto work = make(c10d::OpType::ALLGATHER, outs);
    work->keep.push_back(in);
    for (auto &o : outs) {
      check_tensor(o, "all_gather output");
      TORCH_CHECK(o.numel() == in.numel() &&
                      o.scalar_type() == in.scalar_type(),
                  "gang: all_gather outputs must match the input's size and "
                  "dtype");
      work->ptrs.push_back(o.data_ptr());
    }
    gang_work *w = nullptr;
    gang_status st = gang_all_gather_to_list_post(
        g_, work->ptrs.data(), in.data_ptr(), in.numel(), dtype_of(in), &w);
    if (st != GANG_OK)
      fail(st, "all_gather");
    work->add(w);
    return work;
  }

  c10::intrusive_ptr<c10d::Work>
  _allgather_base(at::Tensor &out, at::Tensor &in,
                  const c10d::AllgatherOptions &) override {
    check_tensor(out, "all_gather_into_tensor output");
    check_tensor(in, "all_gather_into_tensor input");
    TORCH_CHECK(out.numel() == in.numel() * gang_size(g_) &&
                    out.scalar_type() == in.scalar_type(),
                "gang: output must hold size * input elements of its dtype");
    auto work = make(c10d::OpType::_ALLGATHER_BASE, {out});
    work->keep.push_back(in);
    gang_work *w = nullptr;
    gang_status st = gang_all_gather_post(g_, out.data_ptr(), in.data_ptr(),
                                          in.numel(), dtype_of(in), &w);
    if (st != GANG_OK)
      fail(st, "all_gather_into_tensor");
    work->add(w);
    return work;
  }

  c10::intrusive_ptr<c10d::Work>
  reduce_scatter(std::vector<at::Tensor> &outputs,
                 std::vector<std::vector<at::Tensor>> &inputs,
                 const c10d::ReduceScatterOptions &opts) override {
    TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1,
                "gang: reduce_scatter takes one output tensor per process");
    auto &out = outputs[0];
    check_tensor(out, "reduce_scatter output");
    TORCH_CHECK(static_cast<int>(inputs[0].size()) == gang_size(g_),
                "gang: reduce_scatter needs ", gang_size(g_), " input tensors");
    // gang reads one packed input: pack the list (the one copy torch's
    // list form costs).
    at::Tensor packed = at::cat(inputs[0]).contiguous();
    auto work = make(c10d::OpType::REDUCE_SCATTER, outputs);
    work->keep.push_back(packed);
    gang_work *w = nullptr;
    gang_status st = gang_reduce_scatter_post(
        g_, out.data_ptr(), packed.data_ptr(), out.numel(), dtype_of(out),
        op_of(opts.reduceOp), &w);
    if (st != GANG_OK)
      fail(st, "reduce_scatter");
    work->add(w);
    return work;
  }

  c10::intrusive_ptr<c10d::Work>
  _reduce_scatter_base(at::Tensor &out, at::Tensor &in,
                       const c10d::ReduceScatterOptions &opts) override {
    check_tensor(out, "reduce_scatter_tensor output");
    check_tensor(in, "reduce_scatter_tensor input");
    TORCH_CHECK(in.numel() == out.numel() * gang_size(g_),
                "gang: input must hold size * output elements");
    auto work = make(c10d::OpType::_REDUCE_SCATTER_BASE, {out});
    work->keep.push_back(in);
    gang_work *w = nullptr;
    gang_status st =
        gang_reduce_scatter_post(g_, out.data_ptr(), in.data_ptr(), out.numel(),
                                 dtype_of(out), op_of(opts.reduceOp), &w);
    if (st != GANG_OK)
      fail(st, "reduce_scatter_tensor");
    work->add(w);
    return work;
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor &out, at::Tensor &in, std::vector<int64_t> &out_splits,
      std::vector<int64_t> &in_splits, const c10d::AllToAllOptions &) override {
    check_tensor(out, "all_to_all output");
    check_tensor(in, "all_to_all input");
    auto work = make(c10d::OpType::ALLTOALL_BASE, {out});
    work->keep.push_back(in);
    gang_work *w = nullptr;
    gang_status st;
    int n = gang_size(g_);
    TORCH_CHECK(n > 0, "gang: all_to_all on a gang that is not configured");
    if (out_splits.empty() && in_splits.empty()) {
      TORCH_CHECK(in.numel() % n == 0 && out.numel() == in.numel(),
                  "gang: all_to_all tensors must split evenly");
      st = gang_all_to_all_post(g_, out.data_ptr(), in.data_ptr(),
                                in.numel() / n, dtype_of(in), &w);
    } else {
      // torch's splits count rows of dim 0; gang counts elements.
      int64_t row_in = in.size(0) ? in.numel() / in.size(0) : 0;
      int64_t row_out = out.size(0) ? out.numel() / out.size(0) : 0;
      auto counts = std::make_shared<std::vector<size_t>>(2 * n);
      for (int i = 0; i < n; i++) {
        (*counts)[i] =
            in_splits.empty() ? in.numel() / n : in_splits[i] * row_in;
        (*counts)[n + i] =
            out_splits.empty() ? out.numel() / n : out_splits[i] * row_out;
      }
      work->then = [counts] {};
      st = gang_all_to_all_v_post(g_, out.data_ptr(), counts->data() + n,
                                  in.data_ptr(), counts->data(), dtype_of(in),
                                  &w);
      // the counts are read at post time and kept by the lambda until then
    }
    if (st != GANG_OK)
      fail(st, "all_to_all");
    work->add(w);
    return work;
  }

  c10::intrusive_ptr<c10d::Work>
  barrier(const c10d::BarrierOptions &) override {
    auto work = make(c10d::OpType::BARRIER, {});
    gang_work *w = nullptr;
    gang_status st = gang_barrier_post(g_, &w);
    if (st != GANG_OK)
      fail(st, "barrier");
    work->add(w);
    return work;
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &tensors, int dst,
                                      int tag) override {
    auto work = make(c10d::OpType::SEND, tensors);
    for (auto &t : tensors) {
      check_tensor(t, "send tensor");
      gang_work *w = nullptr;
      gang_status st =
          gang_send_post(g_, t.data_ptr(), t.nbytes(), dst, tag, &w);
      if (st != GANG_OK)
        fail(st, "send");
      work->add(w);
    }
    return work;
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &tensors, int src,
                                      int tag) override {
    auto work = make(c10d::OpType::RECV, tensors);
    for (auto &t : tensors) {
      check_tensor(t, "recv tensor");
      gang_work *w = nullptr;
      gang_status st =
          gang_recv_post(g_, t.data_ptr(), t.nbytes(), src, tag, &w);
      if (st != GANG_OK)
        fail(st, "recv");
      work->add(w);
    }
    return work;
  }

private:
  c10::intrusive_ptr<GangWork> make(c10d::OpType type,
                                    std::vector<at::Tensor> outputs) {
    auto work =
        c10::make_intrusive<GangWork>(getRank(), type, std::move(outputs));
    work->pg = c10::intrusive_ptr<c10d::ProcessGroup>::reclaim_copy(this);
    return work;
  }

  gang_t *g_;
  bool owned_;
  py::object keep_;
};

} // namespace

PYBIND11_MODULE(_gang_torch, m) {
  m.doc() = "gang's torch.distributed ProcessGroup (see gang.torch_backend)";
  py::class_<GangProcessGroup, c10d::ProcessGroup,
             c10::intrusive_ptr<GangProcessGroup>>(m, "GangProcessGroup")
      .def(py::init([](uintptr_t handle, bool owned, py::object keep,
                       int told_rank, int told_size) {
             return c10::make_intrusive<GangProcessGroup>(
                 handle, owned, std::move(keep), told_rank, told_size);
           }),
           py::arg("handle"), py::arg("owned"), py::arg("keep") = py::none(),
           py::arg("told_rank") = -1, py::arg("told_size") = -1)
      .def_property_readonly("handle", &GangProcessGroup::handle);
}
