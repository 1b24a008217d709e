// ProcessGroupGloo: the ProcessGroup for CPU tensors, on Gloo's TCP transport (the library
// PyTorch uses for CPU collectives). Collectives run on a worker thread of their own, in the
// order they were issued, so that the caller (e.g. DDP inside backward) is never blocked
// until it waits; a collective issued by a completion callback on that thread runs next.
// dtypes: float32, float64, float16, bfloat16, int64 (reductions are tinyddp's own functions,
// so bfloat16 works too).
//
// The group that wraps this one (ProcessGroupWrapper, whose desync check this group knows
// nothing of) may give each call a hook (CallHook, call.h): the worker runs it just before the
// call's data moves. The hook's records travel on this group's own connections: on two ranks
// the ring's, where a small allreduce's message carries its record ahead of the data (one
// message each way, with a hook or without one); on more, a sum of the records on the
// small-allreduce mesh.
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

  // Two ranks allreduce up to this many bytes in one message each way (pair_allreduce): below
  // it that beats the ring's two round trips, above it the ring's pieces win (bench/README.md,
  // "Allreduce against PyTorch").
  static constexpr int64_t kPairMaxBytes = 192 << 10;

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
  // The ring's form (its first hop carries the values' own bytes), where there is a ring.
  std::shared_ptr<Work> reduce_scatter_widened_impl(const Tensor& sums, const Tensor& values, const Widen& widen,
                                                    Call call) override;
  std::shared_ptr<Work> barrier_impl(Call call) override;
  std::shared_ptr<Work> send_impl(const Tensor& tensor, int dst, int tag, Call call) override;
  std::shared_ptr<Work> recv_impl(const Tensor& tensor, int src, int tag, Call call) override;
  std::shared_ptr<ProcessGroup> create_subgroup(int id, int rank, int size) override;
  // The worker runs each call's hook (Call::hook) just before its data moves.
  bool runs_call_hooks() const override { return true; }
  // exchange_records, for a group of more than one rank whose records fit the small mesh.
  RecordExchange own_record_exchange() override;

 private:
  // Queues `run` for the worker; the returned Work finishes when it has run. The worker first
  // runs the call's hook (Call::hook, if any), unless `run` carries it in its own message
  // (carries_hook: pair_allreduce). For the CUDA tensors among `tensors`, a
  // mark is recorded now on their device's compute stream: the worker copies them to the host
  // once the work queued before the collective has run, not what the caller queues after it
  // (docs/comm.md, "Gloo and CUDA tensors").
  std::shared_ptr<Work> enqueue(Call call, std::function<void(uint32_t tag)> run,
                                const std::vector<Tensor>& tensors = {}, bool carries_hook = false);
  // The hooks' channel (RecordExchange): the records alone, on the ring's connections (two
  // ranks) or the small mesh (more).
  DataFate exchange_records(std::vector<CallHook::Record>& records);
  // A small allreduce on two ranks: one message each way on the ring's connections, the
  // hook's record (zeros without a hook) followed by the data; the hook settles on both
  // records before any tensor changes, and both ranks reduce in rank order.
  void pair_allreduce(const std::vector<Tensor>& tensors, ReduceOp op, int64_t total, CallHook* hook);
  // Whether pair_allreduce takes an allreduce on two ranks (up to kPairMaxBytes, not bools).
  static bool takes_pair(tensor::DType dtype, int64_t numel) {
    return dtype != tensor::kBool && numel * static_cast<int64_t>(tensor::element_size(dtype)) <= kPairMaxBytes;
  }
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
  // Buffers of the worker: size() hook records on the small mesh (exchange_records_by_sum);
  // the two-rank messages (pair_allreduce, the hooks' records), out and in.
  Tensor records_;
  std::vector<char> pair_out_, pair_in_;

  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  struct Item {
    std::shared_ptr<Work> work;
    std::shared_ptr<CallHook> hook;
    bool carries_hook = false;
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
