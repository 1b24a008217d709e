// Fused optimizer steps on the CPU (tensor/ops.h): the checks that decide whether a parameter
// qualifies, then one call into the selected instruction set's kernel (cpu/isa/kernels.h).
#include "tinyddp/tensor/cpu/isa/kernels.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::tensor {

namespace {

bool fusable(const Tensor& t, const Tensor& param) {
  return t.is_cpu() && t.is_contiguous() && t.dtype() == param.dtype() && t.sizes() == param.sizes();
}

template <typename T>
cpu::SgdArgs<T> sgd_args(const Tensor& param, const Tensor& grad, const Tensor& buf, const SgdStep& step,
                         bool first_step) {
  cpu::SgdArgs<T> args;
  args.param = param.data_ptr<T>();
  args.grad = grad.data_ptr<T>();
  args.buf = buf.defined() ? buf.data_ptr<T>() : nullptr;
  args.n = param.numel();
  args.lr = step.lr, args.momentum = step.momentum, args.dampening = step.dampening;
  args.weight_decay = step.weight_decay, args.nesterov = step.nesterov, args.first_step = first_step;
  return args;
}

}  // namespace

bool fused_sgd_step_(const Tensor& param, const Tensor& grad, Tensor* momentum_buffer, const SgdStep& step) {
  if (!param.defined() || !grad.defined()) return false;
  if (param.dtype() != kFloat32 && param.dtype() != kFloat64) return false;
  if (!param.is_cpu() || !param.is_contiguous() || !fusable(grad, param)) return false;
  const bool momentum = step.momentum != 0;
  const bool first_step = momentum && !momentum_buffer->defined();
  if (momentum && !first_step && !fusable(*momentum_buffer, param)) return false;
  if (first_step) *momentum_buffer = empty_like(param);
  const Tensor buf = momentum ? *momentum_buffer : Tensor();
  if (param.dtype() == kFloat32) {
    cpu::isa_kernels().sgd_f32(sgd_args<float>(param, grad, buf, step, first_step));
  } else {
    cpu::isa_kernels().sgd_f64(sgd_args<double>(param, grad, buf, step, first_step));
  }
  param.storage().bump_version();
  if (momentum) buf.storage().bump_version();
  return true;
}

}  // namespace tinyddp::tensor
