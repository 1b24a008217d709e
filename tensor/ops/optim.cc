// Fused optimizer steps (tensor/ops.h): the checks that decide whether a parameter qualifies
// (the CPU backend has the one fused kernel, cpu/optim.cc), the momentum buffer's allocation,
// and the version counters the update bumps.
#include "tinyddp/tensor/cpu/backend.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::tensor {

namespace {

bool fusable(const Tensor& t, const Tensor& param) {
  return t.is_cpu() && t.is_contiguous() && t.dtype() == param.dtype() && t.sizes() == param.sizes();
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
  cpu::sgd_step(param, grad, buf, step, first_step);
  param.storage().bump_version();
  if (momentum) buf.storage().bump_version();
  return true;
}

}  // namespace tinyddp::tensor
