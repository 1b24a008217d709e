// NcclCommunicator's side of CUDA graphs (communicator.h: Captured): a collective queued during a
// capture is replayed by the graph, and the graph's replays are checked and watched instead.
#include <fmt/format.h>

#include "tinyddp/comm/nccl/communicator.h"
#include "tinyddp/tensor/cuda_runtime/runtime.h"

namespace tinyddp::comm::detail {

using tensor::cuda::DeviceGuard;

void NcclCommunicator::note_captured(int device, const std::string& description) {
  const uint64_t capture = tensor::cuda::capture_id(device);
  if (!captured_ || captured_->capture != capture) {
    captured_ = std::make_shared<Captured>();
    captured_->capture = capture;
    tensor::cuda::on_graph_replay(device, [alive = std::weak_ptr<Alive>(alive_), captured = captured_,
                                           device](const tensor::cuda::ReplayLaunch& launch) {
      const std::shared_ptr<Alive> held = alive.lock();
      std::unique_lock<std::mutex> lock;
      if (held) lock = std::unique_lock<std::mutex>(held->mutex);
      TDDP_CHECK(held && held->comm != nullptr,
                 "CudaGraph::replay: the graph holds {} collective(s) captured on a ProcessGroupNccl that has been "
                 "destroyed (the first: {}); keep the group until the graph is reset",
                 captured->descriptions.size(), captured->descriptions.front());
      held->comm->replay_captured(*captured, device, launch);
    });
  }
  captured_->descriptions.push_back(description);
}

void NcclCommunicator::replay_captured(const Captured& captured, int device, const tensor::cuda::ReplayLaunch& launch) {
  std::unique_lock<std::mutex> comm_lock(comm_mutex_);  // no abort between the check and the launch
  try {
    throw_if_broken();
  } catch (const std::exception& e) {
    throw Error(fmt::format(
        "CudaGraph::replay: refused: the graph holds {} collective(s) (the first: {}) on a ProcessGroupNccl that has "
        "failed: {}",
        captured.descriptions.size(), captured.descriptions.front(), e.what()));
  }
  launch();
  // The replay's end, watched as one collective: past the timeout the watchdog aborts the
  // communicator, whose kernels in the graph then exit, and every later call fails.
  DeviceGuard guard(device);
  cudaEvent_t end = nullptr;
  TDDP_CUDA_CHECK(cudaEventCreateWithFlags(&end, cudaEventDisableTiming));
  TDDP_CUDA_CHECK(cudaEventRecord(end, tensor::cuda::compute_stream(device)));
  watch(fmt::format("a replay of a CUDA graph holding {} collective(s) (the first: {})", captured.descriptions.size(),
                    captured.descriptions.front()),
        device, end);
  comm_lock.unlock();
  wake_cv_.notify_all();
}

}  // namespace tinyddp::comm::detail
