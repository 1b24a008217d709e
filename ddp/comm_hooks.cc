// The built-in communication hooks (comm_hooks.h): allreduce (the average: divide, then sum)
// and the fp16 and bf16 compression hooks (cast down, allreduce, cast back into the bucket).
#include "tinyddp/ddp/comm_hooks.h"

#include "tinyddp/tensor/ops.h"

namespace tinyddp::ddp::hooks {

namespace {
CommHook compress(std::shared_ptr<comm::ProcessGroup> pg, tensor::DType wire) {
  return [pg = std::move(pg), wire](GradBucket& bucket) -> std::shared_ptr<Future> {
    tensor::NoGradGuard no_grad;
    const Tensor compressed = bucket.buffer.to(wire).div_(static_cast<double>(pg->size()));
    const Tensor buffer = bucket.buffer;
    return pg->allreduce(compressed)->get_future()->then([buffer](Future& reduced) {
      tensor::NoGradGuard guard;
      buffer.copy_(reduced.value());  // cast back into the bucket
      return buffer;
    });
  };
}
}  // namespace

CommHook allreduce(std::shared_ptr<comm::ProcessGroup> pg) {
  return [pg = std::move(pg)](GradBucket& bucket) -> std::shared_ptr<Future> {
    const Tensor buffer = bucket.buffer;
    if (!bucket.divided) {
      tensor::NoGradGuard no_grad;
      buffer.div_(static_cast<double>(pg->size()));
    }
    return pg->allreduce(buffer)->get_future();
  };
}

CommHook fp16_compress(std::shared_ptr<comm::ProcessGroup> pg) { return compress(std::move(pg), tensor::kFloat16); }
CommHook bf16_compress(std::shared_ptr<comm::ProcessGroup> pg) { return compress(std::move(pg), tensor::kBFloat16); }

}  // namespace tinyddp::ddp::hooks
