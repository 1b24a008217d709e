// The fused SGD and Adam steps on the CPU (CpuBackend::sgd_step, adam_steps): the update of each
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
void run_adam(const Backend::AdamTensors& t, const AdamStep& step) {
  AdamArgs<T> args;
  args.step = step;
  if (t.denom_scale.defined()) {  // capturable: the numbers' values (this device's memory)
    args.device_numbers = true;
    args.denom_scale = *t.denom_scale.data_ptr<T>();
    args.eps_term = *t.eps_term.data_ptr<T>();
    args.has_keep = t.keep.defined();
    if (args.has_keep) args.keep = *t.keep.data_ptr<T>();
  }
  parallel_for(0, t.param.numel(), kOptimGrain, [&](int64_t from, int64_t to) {
    AdamArgs<T> part = args;
    part.param = t.param.data_ptr<T>() + from;
    part.grad = t.grad.data_ptr<T>() + from;
    part.exp_avg = t.exp_avg.data_ptr<T>() + from;
    part.exp_avg_sq = t.exp_avg_sq.data_ptr<T>() + from;
    part.n = to - from;
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

bool CpuBackend::adam_steps(const std::vector<AdamTensors>& list, const AdamStep& step) {
  if (list.empty()) return true;
  const DType dtype = list[0].param.dtype();
  if (dtype != kFloat32 && dtype != kFloat64) return false;  // (one dtype: tensor/native/optim.cc checks)
  for (const AdamTensors& t : list) {
    if (dtype == kFloat32) {
      run_adam<float>(t, step);
    } else {
      run_adam<double>(t, step);
    }
  }
  return true;
}

}  // namespace tinyddp::tensor::cpu
