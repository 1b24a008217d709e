// Gradient clipping (clip_grad.h, as torch.nn.utils.clip_grad): clip_grad_norm_ (the total norm over every
// gradient, each scaled by max_norm / (total + 1e-6) when above) and clip_grad_value_.
#include "tinyddp/nn/clip_grad.h"

#include <algorithm>
#include <cmath>

namespace tinyddp::nn {

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  TDDP_CHECK(norm_type >= 1, "clip_grad_norm_: norm_type must be >= 1 or infinity, got {}", norm_type);
  TDDP_CHECK(max_norm >= 0, "clip_grad_norm_: max_norm must not be negative, got {}", max_norm);
  tensor::NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    TDDP_CHECK(!is_stand_in(p),
               "clip_grad_norm_: parameter {} is a shard fully_shard keeps for its module: the total norm needs every "
               "rank's shards; use ddp::clip_sharded_grad_norm_(params, max_norm, pg)",
               i);
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return tensor::scalar_tensor(0.0);
  // Each gradient's norm as a one-element tensor in its dtype, then the norm of those. A
  // 16-bit tensor's norm is summed in float32 and rounded once, as PyTorch's norm kernel does.
  const bool inf = std::isinf(norm_type);
  const auto norm = [&](const Tensor& x) {
    if (inf) return tensor::max(tensor::abs(x));
    const Tensor wide = tensor::is_16bit_float(x.dtype()) ? x.to(tensor::kFloat32) : x;
    const Tensor n = norm_type == 2
                         ? tensor::sqrt(tensor::sum(tensor::mul(wide, wide)))
                         : tensor::pow(tensor::sum(tensor::pow(tensor::abs(wide), norm_type)), 1.0 / norm_type);
    return n.to(x.dtype());
  };
  const Tensor& first = grads.front();
  // One dtype and device, the 2-norm: every gradient's norm from one list op (tensor/fused.h: on a
  // GPU two launches for all, and the scaling below a few), the same composition elsewhere.
  const bool listed = norm_type == 2 && std::all_of(grads.begin(), grads.end(), [&](const Tensor& g) {
                        return g.dtype() == first.dtype() && g.device() == first.device();
                      });
  Tensor total;
  if (listed) {
    total = norm(tensor::foreach_norm(grads));
  } else {
    std::vector<Tensor> norms;
    for (const Tensor& g : grads) norms.push_back(norm(g).to(first.dtype()).to(first.device()).reshape({1}));
    total = norm(tensor::cat(norms, 0));
  }
  if (error_if_nonfinite) {
    const double value = total.to(tensor::kFloat64).item<double>();
    TDDP_CHECK(std::isfinite(value),
               "clip_grad_norm_: the total norm of order {} of the gradients is {}, so they cannot be clipped "
               "(error_if_nonfinite)",
               norm_type, value);
  }
  // PyTorch: clamp(max_norm / (total + 1e-6), max = 1), where a number over a tensor is the
  // tensor's reciprocal times the number; every step a tensor op in the norm's dtype.
  const Tensor shifted = tensor::add(total, 1e-6);
  const Tensor one = tensor::ones_like(shifted);
  const Tensor coef = tensor::minimum(tensor::mul(tensor::div(one, shifted), max_norm), one);
  if (listed) {
    tensor::foreach_mul_(grads, coef);
  } else {
    for (const Tensor& g : grads) g.mul_(coef.to(g.dtype()).to(g.device()));
  }
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  TDDP_CHECK(clip_value >= 0, "clip_grad_value_: clip_value must not be negative, got {}", clip_value);
  tensor::NoGradGuard no_grad;
  for (const Tensor& p : params) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    // clamp(g, -c, c): the bounds as tensors of g's dtype on its device (no host copy);
    // minimum and maximum keep NaN, as clamp does.
    const Tensor high = tensor::full({}, clip_value, tensor::TensorOptions().dtype(g.dtype()).device(g.device()));
    g.copy_(tensor::maximum(tensor::minimum(g, high), tensor::neg(high)));
  }
}

}  // namespace tinyddp::nn
