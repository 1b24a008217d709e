// Host buffers for ProcessGroupGloo's collectives (staging.h): a dense host copy of each
// tensor (after the work queued before it, for CUDA tensors), and the result written back.
#include "tinyddp/comm/gloo/staging.h"

#include "tinyddp/comm/flatten.h"

namespace tinyddp::comm::detail {

namespace {
thread_local const std::vector<tensor::cuda::StreamMark>* running_marks = nullptr;
}  // namespace

void set_running_marks(const std::vector<tensor::cuda::StreamMark>* marks) { running_marks = marks; }

Tensor host_dense(const Tensor& t) {
  if (t.is_cpu()) return t.contiguous();
  if (running_marks != nullptr) {
    for (const tensor::cuda::StreamMark& mark : *running_marks) {
      if (mark.device() == t.device().index) return tensor::cuda::to_host_after(t, mark);
    }
  }
  return t.to(tensor::kCPU);
}

void Staged::write_back() const {
  if (!buffer.is_same(original)) original.copy_(buffer, /*non_blocking=*/true);
  original.storage().bump_version();
}

Tensor flatten_all(const std::vector<Tensor>& list) {
  int64_t total = 0;
  for (const Tensor& t : list) total += t.numel();
  Tensor flat = tensor::empty({total}, list.front().dtype());
  std::vector<Tensor> on_host;
  for (const Tensor& t : list) on_host.push_back(t.is_cpu() ? t : host_dense(t));
  flatten_into(on_host, flat);
  return flat;
}

}  // namespace tinyddp::comm::detail
