// ProcessGroupNccl: the ProcessGroup for CUDA tensors, on NCCL (the library PyTorch uses for
// GPU collectives). One process per GPU: a rank's communicator is created on the device of
// the first tensor it passes (LOCAL_RANK's device, in a launched job), and every later tensor
// must be on that device.
//
// How one collective runs, step by step:
// 1. The caller's work so far is on the device's compute stream (tensor/cuda_runtime/runtime.h): an
//    event is recorded there, and the group's own NCCL stream waits on it, so the collective
//    reads the tensors only after the kernels that wrote them.
// 2. The NCCL call is queued on the NCCL stream, and an end event after it. The tensors are
//    marked as used by the NCCL stream (record_stream), so the caching allocator does not
//    hand their memory out again before the collective has finished with it.
// 3. Work::wait() (untimed) makes the compute stream wait on the end event and returns at
//    once: the host is never blocked inside backward, and kernels queued after wait() see
//    the result. Work::wait(timeout), barrier()'s wait and is_completed() observe completion
//    on the host.
// 4. A watchdog thread polls the end events and NCCL's asynchronous error state. A collective
//    that has not finished within the group's timeout (a rank died, or skipped it) makes the
//    watchdog abort the communicator: every pending Work fails with an error naming the
//    collective, and every later call on the group throws that error at once. Every live rank
//    reaches the same state through its own watchdog.
//
// 5. Inside a CUDA graph's capture (tensor/cuda.h, CudaGraph) a collective is queued the same
//    way, so NCCL's kernels become nodes of the graph, and the NCCL stream joins the capture
//    until the compute stream waits for the end event. The watchdog does not see it (a
//    captured event cannot be queried); the graph's replays are checked and watched instead:
//    a replay on a failed group is refused, and one that does not finish within the timeout
//    aborts the communicator as in step 4. A captured Work is waited for inside the capture
//    only; barrier() and the group's first collective cannot be captured
//    (communicator_graphs.cc).
//
// The desync check (desync_check.h), when ProcessGroupWrapper wraps this group (as
// init_process_group does), runs on the calling thread before a collective is queued: the
// ranks swap their call records on a small Gloo group the wrapper makes (CPU, over the same
// store), so a mismatch fails every rank's call before any data moves and no CUDA stream
// waits for the check; the host waits until every rank has issued the call.
//
// Setup is bounded too: each rank announces itself in the store and waits for the others
// (a rank that never shows up is named in a TimeoutError), rank 0 publishes NCCL's unique id
// there, and the communicator is created in NCCL's non-blocking mode so that the wait for it
// can be abandoned (and the communicator aborted) at the timeout.
//
// dtypes: float32, float64, float16, bfloat16, int64 (and bool for the collectives that only
// move data). Tensors must be contiguous. NCCL has no tags: send/recv pairs match in the
// order they are issued, as in PyTorch. In a build without CUDA the constructor throws.
#pragma once

#include <functional>
#include <memory>
#include <mutex>

#include "tinyddp/comm/process_group.h"

namespace tinyddp::comm {

namespace detail {
class NcclCommunicator;
}

// CUDA tensors only, contiguous (NCCL reads and writes them in place), bool for moving data.
inline constexpr TensorRules kNcclTensors{/*cpu=*/false, /*cuda=*/true, /*contiguous_only=*/true, /*bool_data=*/true,
                                          "the NCCL backend takes CUDA tensors (use gloo for CPU tensors)"};

class ProcessGroupNccl final : public ProcessGroup {
 public:
  ProcessGroupNccl(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options = {});
  // Waits (up to the timeout) for pending collectives, then releases the communicator.
  ~ProcessGroupNccl() override;

  // Aborts the communicator: pending collectives fail with `reason`, and so does every later
  // call on this group (as the watchdog does at a timeout).
  void abort(const std::string& reason);
  // For tests: `fn` runs inside every launch after the collective is queued, before its Work
  // is registered (see launch() in the .cc).
  void set_after_queued_for_testing(std::function<void()> fn);

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
  // Every tensor on the device the communicator was created on.
  void check_placement(const Tensor& t, const char* op, const std::string& what) const override;
  // At the first collective: the ranks' rendezvous (the communicator's, NcclCommunicator::join).
  // The constructor waits for no other rank.
  void prepare_calls() override;

 private:
  // gather (to_root) or scatter.
  std::shared_ptr<Work> root_exchange(bool to_root, const Tensor& mine, const std::vector<Tensor>& at_root, int root,
                                      std::string what);
  // send (sending) or recv.
  std::shared_ptr<Work> point_to_point(bool sending, const Tensor& tensor, int peer, std::string what);

  std::unique_ptr<detail::NcclCommunicator> impl_;
};

}  // namespace tinyddp::comm
