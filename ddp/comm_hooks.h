// Communication hooks: how a bucket's gradients are reduced. A hook gets the bucket (its flat
// contents, its parameters and their gradients as views of the contents) and returns a
// Future whose wait() gives the bucket's final, averaged contents. Built in, as
// torch.distributed.algorithms.ddp_comm_hooks: allreduce (what the Reducer runs when no hook is
// registered, the division by the world size already done while copying gradients into the
// bucket), and fp16 / bf16 compression (cast, divide, allreduce, then cast back). PowerSGD is in
// powersgd.h.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "tinyddp/comm/flatten.h"
#include "tinyddp/comm/future.h"
#include "tinyddp/comm/process_group.h"

namespace tinyddp::ddp {

using tensor::Tensor;

struct GradBucket {
  size_t index = 0;                       // bucket index (launch order)
  Tensor buffer;                          // the flat contents: this rank's gradients
  std::vector<size_t> parameter_indices;  // which parameters it holds (DDP's parameter indices)
  bool is_last = false;                   // the last bucket of this backward
  std::vector<Tensor> params;             // those parameters
  // No hook registered: the Reducer divided each gradient by the world size (or Join's count
  // of active ranks) while copying it in, so hooks::allreduce only sums. False for a
  // registered hook, which gets the plain gradients, as in PyTorch.
  bool divided = false;

  // The gradients as views of `buffer` with the parameters' shapes: the Reducer's bucket
  // views, built once (comm::flat_views); left empty, gradients() builds them.
  std::vector<Tensor> views;

  // The parameters, and their gradients as views of `buffer` with the parameters' shapes
  // (PyTorch's GradBucket.parameters() and .gradients()).
  const std::vector<Tensor>& parameters() const { return params; }
  std::vector<Tensor> gradients() const { return views.empty() ? comm::flat_views(buffer, params) : views; }
};

// A hook returns a Future (comm/future.h, PyTorch's meaning) whose value is the bucket's
// final, averaged contents; the Reducer waits for it in finalize_backward and copies the
// value into the bucket if it is another tensor.
using comm::Future;
using CommHook = std::function<std::shared_ptr<Future>(GradBucket& bucket)>;

namespace hooks {
// PyTorch's allreduce_hook: the bucket divided by the group size (first, to keep the sum in
// range), then allreduced (sum). DDP runs this hook when none is registered.
CommHook allreduce(std::shared_ptr<comm::ProcessGroup> pg);
// The bucket cast to float16 (divided by the group size first, to keep the sum in range),
// allreduced, and cast back: half the bytes on the wire.
CommHook fp16_compress(std::shared_ptr<comm::ProcessGroup> pg);
// The same with bfloat16 (float32's range, fewer mantissa bits).
CommHook bf16_compress(std::shared_ptr<comm::ProcessGroup> pg);
}  // namespace hooks

}  // namespace tinyddp::ddp
