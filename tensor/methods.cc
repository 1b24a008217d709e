// The Tensor methods of methods.inc, each calling the free function of its name, and the few
// spelled differently (T, cuda). An in-place method writes the function's result into this
// tensor with copy_ (which refuses, under grad mode, a tensor in the graph).
#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/ops.h"
#include "tinyddp/tensor/random.h"

namespace tinyddp::tensor {

namespace {
// New tensors' options: `options` where set, else `t`'s dtype and device (torch's new_zeros).
TensorOptions like(const Tensor& t, const TensorOptions& options = {}) {
  return TensorOptions(options.dtype_or(t.dtype())).device(options.device_or(t.device()));
}
}  // namespace

#define TDDP_METHOD(result, name, params, def_params, call) \
  result Tensor::name def_params const { return ::tinyddp::tensor::call; }
#define TDDP_INPLACE(name, params, def_params, call) \
  const Tensor& Tensor::name def_params const { return copy_(::tinyddp::tensor::call); }
#include "tinyddp/tensor/methods.inc"
#undef TDDP_METHOD
#undef TDDP_INPLACE

Tensor Tensor::T() const {
  Shape reversed;
  for (int64_t d = dim() - 1; d >= 0; --d) reversed.push_back(d);
  return permute(reversed);
}

Tensor Tensor::cuda(bool non_blocking) const { return to(Device::cuda(cuda::current_device()), non_blocking); }

}  // namespace tinyddp::tensor
