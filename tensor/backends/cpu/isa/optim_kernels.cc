// The fused optimizer steps of one instruction set (isa/kernels.h: sgd_f32, adam_f32, ...),
// built twice beside kernels.cc, in the same namespace isa_<name>: each element's update in
// one pass, the float operations of PyTorch's single-tensor step in its order, each rounded
// to T (-ffp-contract=off: no fused multiply-add the source does not write), so the same bits
// as the optimizer's op-by-op path.
#include <cmath>

#include "tinyddp/tensor/backends/cpu/isa/isa_macros.h"
#include "tinyddp/tensor/backends/cpu/isa/kernel_parts.h"
#include "tinyddp/tensor/backends/cpu/isa/kernels.h"

namespace tinyddp::tensor::cpu {
namespace TINYDDP_ISA_NAMESPACE {
namespace {

// The float operations of torch.optim.SGD's single-tensor step, in its order, each rounded to
// T. The options are template parameters so that each variant is a branch-free loop.
template <typename T, bool kWeightDecay, bool kMomentum, bool kNesterov, bool kFirst>
void sgd_loop(const SgdArgs<T>& s) {
  T* __restrict p = s.param;
  const T* __restrict g = s.grad;
  T* __restrict buf = s.buf;
  const T wd = static_cast<T>(s.weight_decay);
  const T momentum = static_cast<T>(s.momentum);
  const T keep = static_cast<T>(1 - s.dampening);
  const T step = static_cast<T>(-s.lr);
  for (int64_t i = 0; i < s.n; ++i) {
    T d = g[i];
    if constexpr (kWeightDecay) d = d + wd * p[i];
    if constexpr (kMomentum) {
      const T b = kFirst ? d : static_cast<T>(buf[i] * momentum) + keep * d;
      buf[i] = b;
      d = kNesterov ? d + momentum * b : b;
    }
    p[i] = p[i] + step * d;
  }
}

// torch.optim.Adam's step (nn/optim.cc's Adam::step_group and update, op by op): AdamW's decay
// of the weights or Adam's L2 term in the gradient, the moments, then p += (-step_size * m) /
// (sqrt(v) / sqrt(bias_correction2) + eps); with kDeviceNumbers (capturable Adam: AdamArgs's
// numbers from tensors) p += m / (sqrt(v) / denom_scale + eps_term), the decay's factor `keep`
// AdamArgs's where it has one. The options are template parameters, as sgd_loop's.
template <typename T, bool kDecay, bool kDecoupled, bool kMaximize, bool kDeviceNumbers>
void adam_loop(const AdamArgs<T>& s) {
  const AdamStep& a = s.step;
  T* __restrict p = s.param;
  const T* __restrict g = s.grad;
  T* __restrict m = s.exp_avg;
  T* __restrict v = s.exp_avg_sq;
  const double bias_correction1 = 1 - std::pow(a.beta1, static_cast<double>(a.step));
  const double bias_correction2 = 1 - std::pow(a.beta2, static_cast<double>(a.step));
  const T keep = s.has_keep ? s.keep : static_cast<T>(1 - a.lr * a.weight_decay);
  const T decay = static_cast<T>(a.weight_decay);
  const T beta1 = static_cast<T>(a.beta1), rest1 = static_cast<T>(1 - a.beta1);
  const T beta2 = static_cast<T>(a.beta2), rest2 = static_cast<T>(1 - a.beta2);
  const T root2 = static_cast<T>(std::sqrt(bias_correction2)), eps = static_cast<T>(a.eps);
  const T step = static_cast<T>(-(a.lr / bias_correction1));
  for (int64_t i = 0; i < s.n; ++i) {
    T d = kMaximize ? -g[i] : g[i];
    T w = p[i];
    if constexpr (kDecay && kDecoupled) w = w * keep;
    if constexpr (kDecay && !kDecoupled) d = d + decay * w;
    const T first = static_cast<T>(m[i] * beta1) + rest1 * d;
    const T second = static_cast<T>(v[i] * beta2) + static_cast<T>(d * rest2) * d;
    if constexpr (kDeviceNumbers) {
      p[i] = w + first / (std::sqrt(second) / s.denom_scale + s.eps_term);
    } else {
      const T denom = std::sqrt(second) / root2 + eps;
      p[i] = w + static_cast<T>(first * step) / denom;
    }
    m[i] = first;
    v[i] = second;
  }
}

}  // namespace

template <typename T>
void sgd(const SgdArgs<T>& s) {
  const bool wd = s.weight_decay != 0;
  if (s.momentum == 0) {
    (wd ? sgd_loop<T, true, false, false, false> : sgd_loop<T, false, false, false, false>)(s);
    return;
  }
  using Loop = void (*)(const SgdArgs<T>&);
  // [weight decay][nesterov][first step]
  static constexpr Loop kLoops[2][2][2] = {
      {{sgd_loop<T, false, true, false, false>, sgd_loop<T, false, true, false, true>},
       {sgd_loop<T, false, true, true, false>, sgd_loop<T, false, true, true, true>}},
      {{sgd_loop<T, true, true, false, false>, sgd_loop<T, true, true, false, true>},
       {sgd_loop<T, true, true, true, false>, sgd_loop<T, true, true, true, true>}}};
  kLoops[wd][s.nesterov][s.first_step](s);
}

template <typename T>
void adam(const AdamArgs<T>& s) {
  using Loop = void (*)(const AdamArgs<T>&);
  // [weight decay][decoupled][maximize], for the host's numbers and the device's
  static constexpr Loop kHost[2][2][2] = {
      {{adam_loop<T, false, false, false, false>, adam_loop<T, false, false, true, false>},
       {adam_loop<T, false, true, false, false>, adam_loop<T, false, true, true, false>}},
      {{adam_loop<T, true, false, false, false>, adam_loop<T, true, false, true, false>},
       {adam_loop<T, true, true, false, false>, adam_loop<T, true, true, true, false>}}};
  static constexpr Loop kDevice[2][2][2] = {
      {{adam_loop<T, false, false, false, true>, adam_loop<T, false, false, true, true>},
       {adam_loop<T, false, true, false, true>, adam_loop<T, false, true, true, true>}},
      {{adam_loop<T, true, false, false, true>, adam_loop<T, true, false, true, true>},
       {adam_loop<T, true, true, false, true>, adam_loop<T, true, true, true, true>}}};
  (s.device_numbers ? kDevice : kHost)[s.step.weight_decay != 0][s.step.decoupled][s.step.maximize](s);
}

template void sgd<float>(const SgdArgs<float>&);
template void sgd<double>(const SgdArgs<double>&);
template void adam<float>(const AdamArgs<float>&);
template void adam<double>(const AdamArgs<double>&);

}  // namespace TINYDDP_ISA_NAMESPACE
}  // namespace tinyddp::tensor::cpu
