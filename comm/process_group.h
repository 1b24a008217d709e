// ProcessGroup: a set of ranks and the collectives between them, each returning a Work handle
// at once (the caller is not blocked until it calls wait()). Backends (comm/gloo: CPU tensors,
// and CUDA tensors staged through the host; comm/nccl: CUDA tensors) implement the protected
// side of the interface; DDP sees only this header.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tinyddp/comm/call.h"
#include "tinyddp/comm/completion.h"
#include "tinyddp/comm/store.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::comm {

using tensor::Tensor;

class Future;  // future.h

// The handle of one asynchronous operation.
class Work : public std::enable_shared_from_this<Work> {
 public:
  explicit Work(std::string description) : description_(std::move(description)) {}
  virtual ~Work() = default;

  bool is_completed() const;
  // True when completed without an error.
  bool is_success() const;
  // The failure, or null (also null while still running).
  std::exception_ptr exception() const;
  // Blocks until the operation finishes and rethrows its error. With a timeout, throws
  // TimeoutError if it has not finished by then (the operation itself is not cancelled).
  // Backends on GPUs override the untimed form so that it does not block the host: NCCL's
  // makes the device's compute stream wait for the collective instead (see
  // process_group_nccl.h).
  virtual void wait(std::optional<Millis> timeout = std::nullopt);
  // What the operation is, for messages: "allreduce (rank 1 of 4, 1000 x float32, sum)".
  const std::string& description() const { return description_; }

  // Runs `callback(*this)` once the operation has finished (with or without an error): on the
  // thread that finishes it (a backend's worker), or at once when it has finished already.
  // GPU backends run it at once, after wait() has put it in stream order (NCCL). The
  // callback must not throw and must not wait for later work of the same group (on Gloo it
  // runs on the worker that would run that work). Futures are built on this (future.h).
  virtual void on_finished(std::function<void(const Work&)> callback);

  // For backends: marks the operation finished, with its error if any, and runs the
  // on_finished callbacks. Once: a second call changes nothing.
  void finish(std::exception_ptr error = nullptr);
  // When the host saw it finish (for timelines), or nothing while it is still running (an
  // NCCL collective whose untimed wait() returned may still be running on the GPU).
  std::optional<std::chrono::steady_clock::time_point> finished_at() const;

  // This operation's Future, as torch's Work.get_future(): it completes when the operation
  // does (with its error, if any), holding the tensor the collective wrote: allreduce's one
  // tensor, broadcast's, reduce's, scatter's and reduce_scatter's output, recv's; an undefined
  // tensor for the collectives of lists (allgather, gather, an allreduce of several) and for
  // barrier and send. The same Future while anyone holds it (defined in future.cc).
  std::shared_ptr<Future> get_future();
  // For ProcessGroup's collectives: the tensor get_future's value is.
  void set_result(Tensor result);

 private:
  std::string description_;
  Completion completion_;
  std::mutex future_mutex_;  // result_ and future_
  Tensor result_;
  std::weak_ptr<Future> future_;  // weak: the Future holds the Work once it completes
};

struct ProcessGroupOptions {
  // Bound for connecting and for every collective; past it the operation fails on every rank.
  ProcessGroupOptions& timeout(Millis v) {
    timeout_ = v;
    return *this;
  }
  // The address this rank's Gloo transport binds to (other ranks connect to it).
  ProcessGroupOptions& bind_address(std::string v) {
    bind_address_ = std::move(v);
    return *this;
  }
  // Desync detection (comm/desync_check.h), for the groups init_process_group and
  // new_process_group make (a ProcessGroupWrapper around the backend, which reads this; a
  // backend made directly checks nothing): before each collective's data moves, the ranks
  // compare what they are about to call and all fail with a CollectiveMismatchError if they
  // differ. Unset: on, unless the environment says TINYDDP_DESYNC_CHECK=0. Every rank must
  // choose the same.
  ProcessGroupOptions& check_calls(bool v) {
    check_calls_ = v;
    return *this;
  }
  Millis timeout() const { return timeout_; }
  const std::string& bind_address() const { return bind_address_; }
  std::optional<bool> check_calls() const { return check_calls_; }

 private:
  Millis timeout_{60000};
  std::string bind_address_ = "127.0.0.1";
  std::optional<bool> check_calls_;
};

// What tensors a backend takes; ProcessGroup's checks read it, and so does DDP to place its
// own small collectives.
struct TensorRules {
  bool cpu = true;               // CPU tensors
  bool cuda = false;             // CUDA tensors
  bool contiguous_only = false;  // non-contiguous tensors are refused (else staged)
  bool bool_data = false;        // bool tensors in the collectives that only move data
  // Ends the error for a tensor on a device the backend does not take.
  const char* takes = "the backend takes CPU tensors";

  bool accepts(const tensor::Device& device) const { return device.type == tensor::DeviceType::kCPU ? cpu : cuda; }
};

// The interface every backend shares. Each public collective checks its arguments once, here
// (tensors against the backend's TensorRules, list lengths, ranks, roots, dtypes, shapes,
// reduce ops), describes the call for errors and timelines, then calls the backend's
// protected *_impl with arguments it may trust and a Call: the call's description and its
// signature, which the desync check compares across ranks (desync_check.h). Adding a backend:
// derive from ProcessGroup, give its name, display name and TensorRules to this constructor,
// override the ten *_impl functions and create_subgroup; the desync check comes from
// ProcessGroupWrapper around it (docs/comm.md, "Adding a backend").
class ProcessGroup {
 public:
  // Throws if rank is not in [0, size). `display_name` starts its error messages
  // ("ProcessGroupGloo allreduce: ..."); `backend` is the short name ("gloo").
  ProcessGroup(int rank, int size, std::string backend, std::string display_name, TensorRules rules);
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& backend() const { return backend_; }
  const TensorRules& tensor_rules() const { return rules_; }

  // Every tensor becomes the reduction over ranks of that tensor; a list is reduced as one
  // (coalesced) buffer. kAvg divides the sum by size() (floating point only).
  std::shared_ptr<Work> allreduce(const std::vector<Tensor>& tensors, ReduceOp op = ReduceOp::kSum);
  std::shared_ptr<Work> allreduce(const Tensor& tensor, ReduceOp op = ReduceOp::kSum) {
    return allreduce(std::vector<Tensor>{tensor}, op);
  }
  // `tensor` takes root's value on every rank.
  std::shared_ptr<Work> broadcast(const Tensor& tensor, int root = 0);
  // outputs[r] receives rank r's input (outputs.size() == size(), each shaped like input).
  std::shared_ptr<Work> allgather(const std::vector<Tensor>& outputs, const Tensor& input);
  // As allgather, but only `root` receives (other ranks pass no outputs).
  std::shared_ptr<Work> gather(const std::vector<Tensor>& outputs, const Tensor& input, int root = 0);
  // Rank r's output receives root's inputs[r] (only root passes inputs).
  std::shared_ptr<Work> scatter(const Tensor& output, const std::vector<Tensor>& inputs, int root = 0);
  // Only root's tensor receives the reduction (other ranks' tensors are left as they are).
  std::shared_ptr<Work> reduce(const Tensor& tensor, int root = 0, ReduceOp op = ReduceOp::kSum);
  // output on rank r = reduction over ranks of inputs[r]. In place, as NCCL's: when output is
  // inputs[rank] itself and the inputs lie end to end in one buffer, the Gloo backend's ring
  // works in that buffer (no copies), and the other inputs are left holding partial sums.
  std::shared_ptr<Work> reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs,
                                       ReduceOp op = ReduceOp::kSum);
  // out[i] = widened in[i] (add: out[i] plus it) for n elements of the two tensors' dtypes.
  using Widen = std::function<void(void* out, const void* in, size_t n, bool add)>;
  // A reduce-scatter whose contributions change dtype on the way (the deterministic option's
  // float32 chunk rounded into int64 sums at one chunk per rank: ddp/exact_sum.h). `values`
  // (this rank's contributions) and `sums` are flat, size() blocks of sums.numel() / size()
  // elements each; block rank() of `sums` ends as the sum over the ranks of their widened
  // values' block rank() (its other blocks are scratch). The Gloo ring carries the values' own
  // bytes on its first hop (on 2 ranks, all of them); other backends widen every block first
  // and reduce-scatter the sums in place.
  std::shared_ptr<Work> reduce_scatter_widened(const Tensor& sums, const Tensor& values, const Widen& widen);
  std::shared_ptr<Work> barrier();
  // Point to point; `tag` pairs a send with its recv.
  std::shared_ptr<Work> send(const Tensor& tensor, int dst, int tag = 0);
  std::shared_ptr<Work> recv(const Tensor& tensor, int src, int tag = 0);

  // A group of the given ranks of this group (sorted, unique). Every rank of this group must
  // call it with the same list, in the same order as other new_group calls; ranks outside
  // the list get nullptr.
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks);

 protected:
  // The backend's side of each collective, called after the checks; `call` describes it
  // ("allreduce (rank 1 of 4, 1000 x float32, sum)") for its Work and errors, with its
  // signature for the desync check.
  virtual std::shared_ptr<Work> allreduce_impl(const std::vector<Tensor>& tensors, ReduceOp op, Call call) = 0;
  virtual std::shared_ptr<Work> broadcast_impl(const Tensor& tensor, int root, Call call) = 0;
  virtual std::shared_ptr<Work> allgather_impl(const std::vector<Tensor>& outputs, const Tensor& input, Call call) = 0;
  virtual std::shared_ptr<Work> gather_impl(const std::vector<Tensor>& outputs, const Tensor& input, int root,
                                            Call call) = 0;
  virtual std::shared_ptr<Work> scatter_impl(const Tensor& output, const std::vector<Tensor>& inputs, int root,
                                             Call call) = 0;
  virtual std::shared_ptr<Work> reduce_impl(const Tensor& tensor, int root, ReduceOp op, Call call) = 0;
  virtual std::shared_ptr<Work> reduce_scatter_impl(const Tensor& output, const std::vector<Tensor>& inputs,
                                                    ReduceOp op, Call call) = 0;
  // The backend's own form of reduce_scatter_widened, or null for the general one.
  virtual std::shared_ptr<Work> reduce_scatter_widened_impl(const Tensor& /*sums*/, const Tensor& /*values*/,
                                                            const Widen& /*widen*/, Call /*call*/) {
    return nullptr;
  }
  virtual std::shared_ptr<Work> barrier_impl(Call call) = 0;
  virtual std::shared_ptr<Work> send_impl(const Tensor& tensor, int dst, int tag, Call call) = 0;
  virtual std::shared_ptr<Work> recv_impl(const Tensor& tensor, int src, int tag, Call call) = 0;
  // This rank's group in new_group: `id` numbers the subgroups made from this group (the
  // same on every rank); `rank` and `size` are this rank's place in it.
  virtual std::shared_ptr<ProcessGroup> create_subgroup(int id, int rank, int size) = 0;
  // A check beyond TensorRules, run on every tensor passed (NCCL: one device per rank).
  virtual void check_placement(const Tensor& /*t*/, const char* /*op*/, const std::string& /*what*/) const {}

  // "<display name> <op>: " for messages.
  std::string prefix(const char* op) const;
  const std::string& display_name() const { return display_name_; }

  // For the group that wraps this backend (ProcessGroupWrapper: the desync check). Whether
  // this backend runs each call's hook (Call::hook) itself, just before the call's data moves,
  // in the order it runs the calls, so that the caller is never blocked for it (Gloo's
  // worker). Default: no; the wrapper then runs its step on the calling thread before the
  // call reaches *_impl.
  virtual bool runs_call_hooks() const { return false; }
  // A channel for the hooks' records on this backend's own connections (called on the thread
  // that runs the hooks), for a backend that runs them; null: the wrapper makes its own.
  virtual RecordExchange own_record_exchange() { return nullptr; }
  // A backend's setup that must come before a collective is checked or run, on the calling
  // thread before anything else (NCCL: the ranks' rendezvous, made at the first collective as
  // PyTorch's is). Its errors throw from the collective. Default: nothing.
  virtual void prepare_calls() {}

  int rank_;
  int size_;

 private:
  // What a collective does with a tensor: reduces it, moves its elements, or sends its bytes.
  enum class Use { kReduce, kMove, kPointToPoint };
  void check_tensor(const Tensor& t, const char* op, const std::string& what, Use use) const;
  void check_like(const Tensor& t, const Tensor& reference, const char* op, const std::string& what) const;
  void check_rank(int r, const char* op, const char* role) const;
  void check_peer(int peer, int tag, const char* op, const char* role) const;
  void check_op(ReduceOp op, const Tensor& t, const char* name) const;
  // gather (list_is_output) and scatter: the root passes one tensor per rank, others none.
  void check_root_list(const std::vector<Tensor>& list, const Tensor& mine, int root, const char* op,
                       bool list_is_output) const;
  std::string describe(const char* op, const Tensor& t, const std::string& extra = "") const;
  // Runs prepare_calls(), then `impl(call)`.
  template <typename Impl>
  std::shared_ptr<Work> dispatch(Call call, Impl impl);

  std::string backend_;
  std::string display_name_;
  TensorRules rules_;
  int groups_created_ = 0;

  // The wrapper hands each checked call to the backend's *_impl.
  friend class ProcessGroupWrapper;
};

// Records (CallHook::Record, one per rank) swapped as a sum: `buffer` (size() records of
// int64, reused) is zeroed, this rank's record written at `rank`, `sum(buffer)` sums it across
// the ranks in place, and every rank's record is read back into `records`.
void exchange_records_by_sum(std::vector<CallHook::Record>& records, int rank, Tensor& buffer,
                             const std::function<void(const Tensor&)>& sum);

}  // namespace tinyddp::comm
