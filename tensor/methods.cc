// The Tensor methods of methods.inc, each calling the free function of its name, the few
// spelled differently (T, cuda), and the in-place arithmetic and copies. An in-place method
// writes the function's result into this tensor (write_in_place: autograd records it).
#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/graph.h"
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
#define TDDP_INPLACE(name, params, def_params, call)                                                 \
  const Tensor& Tensor::name def_params const {                                                      \
    return ::tinyddp::tensor::write_in_place(*this, #name, [&] { return ::tinyddp::tensor::call; }); \
  }
#include "tinyddp/tensor/methods.inc"
#undef TDDP_METHOD
#undef TDDP_INPLACE

// The arithmetic ones write with their kernels when autograd has nothing to record, and
// otherwise as every in-place op does (write_in_place). 16-bit float tensors combine with a
// scalar in float32 and round once (as out of place).
const Tensor& Tensor::add_(const Tensor& other, double alpha) const {
  if (needs_grad(other) || writes_into_history(*this))
    return write_in_place(*this, "add_", [&] { return tensor::add(*this, other, alpha); });
  add_out(*this, *this, other, alpha, "add_");
  return *this;
}
const Tensor& Tensor::add_(double value) const {
  if (is_16bit_float(dtype())) return copy_(tensor::add(*this, value));
  return add_(scalar_like(*this, value, "add_"), 1.0);
}
const Tensor& Tensor::sub_(const Tensor& other) const { return add_(other, -1.0); }
const Tensor& Tensor::mul_(const Tensor& other) const {
  if (needs_grad(other) || writes_into_history(*this))
    return write_in_place(*this, "mul_", [&] { return tensor::mul(*this, other); });
  mul_out(*this, *this, other, "mul_");
  return *this;
}
const Tensor& Tensor::mul_(double value) const {
  if (is_16bit_float(dtype())) return copy_(tensor::mul(*this, value));
  return mul_(scalar_like(*this, value, "mul_"));
}
const Tensor& Tensor::div_(const Tensor& other) const {
  if (needs_grad(other) || writes_into_history(*this))
    return write_in_place(*this, "div_", [&] { return tensor::div(*this, other); });
  div_out(*this, *this, other, "div_");
  return *this;
}
const Tensor& Tensor::div_(double value) const {
  if (is_16bit_float(dtype())) return copy_(tensor::div(*this, value));
  return div_(scalar_like(*this, value, "div_"));
}

// Under autograd, copying `src` in is the op "src in this tensor's shape, dtype and device":
// the gradient goes to src (summed over what broadcast), none to the values overwritten.
const Tensor& Tensor::copy_(const Tensor& src, bool non_blocking) const {
  if (needs_grad(src) || writes_into_history(*this)) {
    return write_in_place(*this, "copy_", [&] { return src.to(dtype()).to(device(), non_blocking).expand(sizes()); });
  }
  copy_into(*this, src, non_blocking);
  return *this;
}

const Tensor& Tensor::fill_(double value) const {
  // Over a tensor with a history (or a view of one), a constant written as any in-place op.
  if (writes_into_history(*this)) {
    return write_in_place(*this, "fill_", [&] { return full(sizes(), value, like(*this)); });
  }
  fill_out(*this, value);
  return *this;
}

const Tensor& Tensor::zero_() const { return fill_(0.0); }

Tensor Tensor::T() const {
  Shape reversed;
  for (int64_t d = dim() - 1; d >= 0; --d) reversed.push_back(d);
  return permute(reversed);
}

Tensor Tensor::cuda(bool non_blocking) const { return to(Device::cuda(cuda::current_device()), non_blocking); }

}  // namespace tinyddp::tensor
