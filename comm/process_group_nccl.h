// ProcessGroupNccl: the ProcessGroup for CUDA tensors, on NCCL (the library PyTorch uses for
// GPU collectives). One process per GPU: a rank's communicator is created on the device of
// the first tensor it passes (LOCAL_RANK's device, in a launched job), and every later tensor
// must be on that device.
//
// How one collective runs, step by step:
// 1. The caller's work so far is on the device's compute stream (tensor/cuda/runtime.h): an
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

#include "comm/process_group.h"

namespace tinyddp::comm {

class ProcessGroupNccl final : public ProcessGroup {
 public:
  ProcessGroupNccl(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options = {});
  // Waits (up to the timeout) for pending collectives, then releases the communicator.
  ~ProcessGroupNccl() override;

  std::string backend() const override { return "nccl"; }

  std::shared_ptr<Work> allreduce(const std::vector<Tensor>& tensors, ReduceOp op = ReduceOp::kSum) override;
  using ProcessGroup::allreduce;
  std::shared_ptr<Work> broadcast(const Tensor& tensor, int root = 0) override;
  std::shared_ptr<Work> allgather(const std::vector<Tensor>& outputs, const Tensor& input) override;
  std::shared_ptr<Work> gather(const std::vector<Tensor>& outputs, const Tensor& input, int root = 0) override;
  std::shared_ptr<Work> scatter(const Tensor& output, const std::vector<Tensor>& inputs, int root = 0) override;
  std::shared_ptr<Work> reduce(const Tensor& tensor, int root = 0, ReduceOp op = ReduceOp::kSum) override;
  std::shared_ptr<Work> reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs,
                                       ReduceOp op = ReduceOp::kSum) override;
  std::shared_ptr<Work> barrier() override;
  std::shared_ptr<Work> send(const Tensor& tensor, int dst, int tag = 0) override;
  std::shared_ptr<Work> recv(const Tensor& tensor, int src, int tag = 0) override;
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) override;

  // Aborts the communicator: pending collectives fail with `reason`, and so does every later
  // call on this group (as the watchdog does at a timeout).
  void abort(const std::string& reason);
  // For tests: `fn` runs inside every launch after the collective is queued, before its Work
  // is registered (see launch() in the .cc).
  void set_after_queued_for_testing(std::function<void()> fn);

  class Impl;

 private:
  // gather (to_root) or scatter.
  std::shared_ptr<Work> root_exchange(bool to_root, const Tensor& mine, const std::vector<Tensor>& at_root, int root);
  // send (sending) or recv.
  std::shared_ptr<Work> point_to_point(bool sending, const Tensor& tensor, int peer, int tag);

  std::unique_ptr<Impl> impl_;
};

}  // namespace tinyddp::comm
