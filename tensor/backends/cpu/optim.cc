// The fused SGD and Adam steps on the CPU (CpuBackend::sgd_step, adam_step): the update of each
// element in one pass, in the selected instruction set's kernel (backends/cpu/isa/kernels.h), on
// ranges of the parameter over the intra-op threads.
#include "tinyddp/tensor/backends/cpu/backend.h"
#include "tinyddp/tensor/backends/cpu/isa/kernels.h"
#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/parallel.h"

namespace tinyddp::tensor::cpu {

namespace {

template <typename T>
SgdArgs<T> sgd_args(const Tensor& param, const Tensor& grad, const Tensor& buf, const SgdStep& step, bool first_step) {
  SgdArgs<T> args;
  args.param = param.data_ptr<T>();
  args.grad = grad.data_ptr<T>();
  args.buf = buf.defined() ? buf.data_ptr<T>() : nullptr;
  args.n = param.numel();
  args.lr = step.lr, args.momentum = step.momentum, args.dampening = step.dampening;
  args.weight_decay = step.weight_decay, args.nesterov = step.nesterov, args.first_step = first_step;
  return args;
}

// Each element's update reads and writes that element only: ranges of it on the intra-op
// threads give the same bits.
constexpr int64_t kOptimGrain = int64_t(1) << 15;

template <typename T>
void run(const SgdArgs<T>& args) {
  parallel_for(0, args.n, kOptimGrain, [&](int64_t from, int64_t to) {
    SgdArgs<T> part = args;
    part.param += from;
    part.grad += from;
    if (part.buf != nullptr) part.buf += from;
    part.n = to - from;
    if constexpr (std::is_same_v<T, float>) {
      isa_kernels().sgd_f32(part);
    } else {
      isa_kernels().sgd_f64(part);
    }
  });
}

template <typename T>
void run_adam(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
              const AdamStep& step) {
  parallel_for(0, param.numel(), kOptimGrain, [&](int64_t from, int64_t to) {
    AdamArgs<T> part;
    part.param = param.data_ptr<T>() + from;
    part.grad = grad.data_ptr<T>() + from;
    part.exp_avg = exp_avg.data_ptr<T>() + from;
    part.exp_avg_sq = exp_avg_sq.data_ptr<T>() + from;
    part.n = to - from;
    part.step = step;
    if constexpr (std::is_same_v<T, float>) {
      isa_kernels().adam_f32(part);
    } else {
      isa_kernels().adam_f64(part);
    }
  });
}

}  // namespace

bool CpuBackend::sgd_step(const Tensor& param, const Tensor& grad, Tensor* momentum_buffer, const SgdStep& step) {
  if (param.dtype() != kFloat32 && param.dtype() != kFloat64) return false;
  const bool first_step = momentum_buffer != nullptr && !momentum_buffer->defined();
  if (first_step) *momentum_buffer = empty(param.sizes(), TensorOptions(param.dtype()));
  const Tensor buf = momentum_buffer != nullptr ? *momentum_buffer : Tensor();
  if (param.dtype() == kFloat32) {
    run(sgd_args<float>(param, grad, buf, step, first_step));
  } else {
    run(sgd_args<double>(param, grad, buf, step, first_step));
  }
  return true;
}

bool CpuBackend::adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                           const AdamStep& step) {
  if (param.dtype() == kFloat32) {
    run_adam<float>(param, grad, exp_avg, exp_avg_sq, step);
  } else if (param.dtype() == kFloat64) {
    run_adam<double>(param, grad, exp_avg, exp_avg_sq, step);
  } else {
    return false;
  }
  return true;
}

}  // namespace tinyddp::tensor::cpu
