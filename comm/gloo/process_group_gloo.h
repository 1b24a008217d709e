// ProcessGroupGloo: the ProcessGroup for CPU tensors, on Gloo's TCP transport (the library
// PyTorch uses for CPU collectives). Collectives run on a worker thread of their own, in the
// order they were issued, so that the caller (e.g. DDP inside backward) is never blocked
// until it waits; a collective issued by a completion callback on that thread runs next.
// dtypes: float32, float64, float16, bfloat16, int64 (reductions are tinyddp's own functions,
// so bfloat16 works too).
//
// The desync check (desync_check.h), when ProcessGroupWrapper wraps this group, runs on the
// worker, just before each collective's data moves. Its side channel: on two ranks the ring's
// connections, where each call record travels in the same message as a small allreduce's data
// (one message each way, with the check or without it); on more, an exchange of the records on
// the small-allreduce mesh.
//
// CUDA tensors are accepted too, staged through host memory: the worker copies them to the
// host (waiting for the kernels queued on their device, not blocking the caller), runs the
// collective there and queues the results' copies back on the device's compute stream, so
// kernels queued after wait() see them. Slower than NCCL, but it lets several processes share
// one GPU (NCCL refuses two ranks on one device) and lets DDP on GPUs run where NCCL cannot.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <thread>

#include "tinyddp/comm/process_group.h"
#include "tinyddp/tensor/cuda.h"

namespace gloo {
class Context;
namespace transport {
class Device;
}
}  // namespace gloo

namespace tinyddp::comm {

namespace detail {
class PeerAddresses;
class SmallAllreduce;
class TcpRing;
}  // namespace detail

class ProcessGroupGloo final : public ProcessGroup {
 public:
  // Joins the group: every rank calls this with the same store (one group per store; new_group
  // makes sub-namespaces) and size. Fails within options.timeout(), naming the ranks that never
  // arrived, when some rank does not show up. Sets SIGPIPE to be ignored if it has its
  // default action, so that a peer that dies gives an error rather than killing this process.
  ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options = {});
  // Lets queued work finish (each bounded by the timeout), then stops the worker.
  ~ProcessGroupGloo() override;

  const ProcessGroupOptions& options() const { return options_; }

 protected:
  std::shared_ptr<Work> allreduce_impl(const std::vector<Tensor>& tensors, ReduceOp op, Call call) override;
  std::shared_ptr<Work> broadcast_impl(const Tensor& tensor, int root, Call call) override;
  std::shared_ptr<Work> allgather_impl(const std::vector<Tensor>& outputs, const Tensor& input, Call call) override;
  std::shared_ptr<Work> gather_impl(const std::vector<Tensor>& outputs, const Tensor& input, int root,
                                    Call call) override;
  std::shared_ptr<Work> scatter_impl(const Tensor& output, const std::vector<Tensor>& inputs, int root,
                                     Call call) override;
  std::shared_ptr<Work> reduce_impl(const Tensor& tensor, int root, ReduceOp op, Call call) override;
  std::shared_ptr<Work> reduce_scatter_impl(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                                            Call call) override;
  std::shared_ptr<Work> barrier_impl(Call call) override;
  std::shared_ptr<Work> send_impl(const Tensor& tensor, int dst, int tag, Call call) override;
  std::shared_ptr<Work> recv_impl(const Tensor& tensor, int src, int tag, Call call) override;
  std::shared_ptr<ProcessGroup> create_subgroup(int id, int rank, int size) override;
  // The worker runs each call's check (Call::check) just before its data moves.
  bool runs_call_checks() const override { return true; }
  // exchange_call_rows, for a group of more than one rank whose rows fit the small mesh.
  CallCheck::Exchange own_row_exchange() override;

 private:
  // Queues `run` for the worker; the returned Work finishes when it has run. The worker first
  // runs the call's desync check (Call::check, if any), unless `run` carries the check itself
  // (checks_itself: pair_allreduce). For the CUDA tensors among `tensors`, a
  // mark is recorded now on their device's compute stream: the worker copies them to the host
  // once the work queued before the collective has run, not what the caller queues after it
  // (docs/comm.md, "Gloo and CUDA tensors").
  std::shared_ptr<Work> enqueue(Call call, std::function<void(uint32_t tag)> run,
                                const std::vector<Tensor>& tensors = {}, bool checks_itself = false);
  // The desync check's side channel (CallCheck::Exchange): the rows alone, on the ring's
  // connections (two ranks) or the small mesh (more).
  DataFate exchange_call_rows(std::vector<CallSignature::Row>& rows);
  // A small allreduce on two ranks: one message each way on the ring's connections, the
  // call's row (the desync check's, or zeros without it) followed by the data; the rows are
  // compared (by `check`, when not null) before any tensor changes, and both ranks reduce in
  // rank order.
  void pair_allreduce(const std::vector<Tensor>& tensors, ReduceOp op, int64_t total, const CallSignature& call,
                      CallCheck* check);
  void worker_loop();

  using Clock = std::chrono::steady_clock;
  // The rendezvous: the transport device, the main mesh, and for a group of more than one the
  // small mesh, the ring and the peers' addresses.
  void connect();
  // A full mesh of Gloo connections, rendezvous under `rendezvous_prefix` in the store.
  std::shared_ptr<gloo::Context> connect_mesh(const char* rendezvous_prefix);
  // Whether `e`, raised by an operation that began at `started`, is a timeout (by its type).
  bool timed_out(const std::exception& e, Clock::time_point started) const;
  // The constructor's error when connecting failed: names the ranks that never joined.
  std::exception_ptr rendezvous_failure(const std::exception& e, Clock::time_point started) const;
  // A failed collective's Error (a TimeoutError for a timeout): the Work's description, the
  // message, and the rank behind each peer address Gloo names ("Read timeout
  // [10.0.0.2]:4242" -> "... [10.0.0.2]:4242 (rank 1)").
  std::exception_ptr failure(const Work& work, const std::exception& e, Clock::time_point started) const;
  // Runs a point-to-point operation on a thread of its own (not behind queued collectives).
  std::shared_ptr<Work> start_p2p(std::string description, std::function<void()> run);

  std::shared_ptr<Store> store_;
  ProcessGroupOptions options_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  // Allreduces of up to 64 KiB (used by the worker only; null for a group of one).
  std::unique_ptr<detail::SmallAllreduce> small_allreduce_;
  // Larger allreduces (used by the worker only; null for a group of one).
  std::unique_ptr<detail::TcpRing> tcp_ring_;
  // Which rank is behind each address Gloo's errors print.
  std::unique_ptr<detail::PeerAddresses> peers_;
  // Buffers of the worker: size() encoded rows for the desync check on the small mesh
  // (exchange_rows_by_sum); the
  // two-rank messages (pair_allreduce, the check's rows), out and in.
  Tensor call_rows_;
  std::vector<char> pair_out_, pair_in_;

  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  struct Item {
    std::shared_ptr<Work> work;
    std::optional<CallSignature> signature;
    std::shared_ptr<CallCheck> check;
    bool checks_itself = false;
    std::function<void(uint32_t)> run;
    std::vector<tensor::cuda::StreamMark> marks;  // one per CUDA device the collective reads
  };
  std::deque<Item> queue_;
  // Collectives issued on the worker thread itself (by a Future callback run when a
  // collective finished): they run before queue_, in issue order, so a chain of callbacks
  // runs depth first, in the same order on every rank whenever it was attached (future.h).
  std::deque<Item> chained_;
  bool stopping_ = false;
  std::thread worker_;
  std::mutex p2p_mutex_;
  std::list<std::thread> p2p_threads_;
};

}  // namespace tinyddp::comm
