// clip_grad_norm_: see utils.h.
#include "tinyddp/nn/utils.h"

#include <cmath>

namespace tinyddp::nn {

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  TDDP_CHECK(norm_type >= 1, "clip_grad_norm_: norm_type must be >= 1 or infinity, got {}", norm_type);
  TDDP_CHECK(max_norm >= 0, "clip_grad_norm_: max_norm must not be negative, got {}", max_norm);
  tensor::NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return 0.0;
  // Each gradient's norm as a one-element tensor in its dtype, then the norm of those.
  const bool inf = std::isinf(norm_type);
  const auto norm = [&](const Tensor& x) {
    if (inf) return tensor::max(tensor::abs(x));
    if (norm_type == 2) return tensor::sqrt(tensor::sum(tensor::mul(x, x)));
    return tensor::pow(tensor::sum(tensor::pow(tensor::abs(x), norm_type)), 1.0 / norm_type);
  };
  std::vector<Tensor> norms;
  for (const Tensor& g : grads)
    norms.push_back(norm(g).to(grads.front().dtype()).to(grads.front().device()).reshape({1}));
  const double total = norm(tensor::cat(norms, 0)).to(tensor::kFloat64).item<double>();
  TDDP_CHECK(!error_if_nonfinite || std::isfinite(total),
             "clip_grad_norm_: the total norm of order {} of the gradients is {}, so they cannot be clipped "
             "(error_if_nonfinite)",
             norm_type, total);
  // PyTorch: clamp(max_norm / (total + 1e-6), max = 1), where a number over a tensor is the
  // tensor's reciprocal times the number, in the tensor's dtype.
  double coef;
  if (grads.front().dtype() == tensor::kFloat64) {
    coef = std::min(1.0 / (total + 1e-6) * max_norm, 1.0);
  } else {
    const float recip = 1.0f / (static_cast<float>(total) + static_cast<float>(1e-6));
    coef = std::min(recip * static_cast<float>(max_norm), 1.0f);
  }
  for (const Tensor& g : grads) g.mul_(coef);
  return total;
}

}  // namespace tinyddp::nn
