// Fused optimizer steps on the CPU (tensor/ops.h): the checks that decide whether a parameter
// qualifies, then one call into the selected instruction set's kernel (cpu/isa/kernels.h).
#include "tinyddp/tensor/cpu/isa/kernels.h"
#include "tinyddp/tensor/ops.h"
#include "tinyddp/tensor/parallel.h"

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
  // Each element's update reads and writes that element only: ranges of it on the intra-op
  // threads give the same bits.
  const auto run = [&](auto args) {
    using T = std::remove_pointer_t<decltype(args.param)>;
    parallel_for(0, args.n, int64_t(1) << 15, [&](int64_t from, int64_t to) {
      cpu::SgdArgs<T> part = args;
      part.param += from;
      part.grad += from;
      if (part.buf != nullptr) part.buf += from;
      part.n = to - from;
      if constexpr (std::is_same_v<T, float>) {
        cpu::isa_kernels().sgd_f32(part);
      } else {
        cpu::isa_kernels().sgd_f64(part);
      }
    });
  };
  if (param.dtype() == kFloat32) {
    run(sgd_args<float>(param, grad, buf, step, first_step));
  } else {
    run(sgd_args<double>(param, grad, buf, step, first_step));
  }
  param.storage().bump_version();
  if (momentum) buf.storage().bump_version();
  return true;
}

}  // namespace tinyddp::tensor
