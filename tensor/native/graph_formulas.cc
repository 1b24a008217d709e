// Backward formulas from recorded ops (graph_formulas.h): what the fused backward kernels
// compute, written so that autograd records it (double backward).
#include "tinyddp/tensor/native/graph_formulas.h"

#include <cmath>

#include "tinyddp/tensor/graph.h"

namespace tinyddp::tensor::detail {

Tensor embed_slice(const Tensor& g, const Shape& shape, std::function<Tensor(const Tensor&)> slice) {
  Tensor grad;
  {
    NoGradGuard no_grad;
    grad = zeros(shape, TensorOptions().dtype(g.dtype()).device(g.device()));
    slice(grad).copy_(g);
  }
  if (needs_grad(g)) {
    record_op("SliceBackwardBackward", grad, {g},
              [slice = std::move(slice)](const Tensor& gg) { return std::vector<Tensor>{slice(gg)}; });
  }
  return grad;
}

Tensor restride(const Tensor& t, const Geometry& write, const Geometry& read, int64_t span) {
  Tensor result;
  {
    NoGradGuard no_grad;
    const Tensor buffer = zeros({span}, TensorOptions().dtype(t.dtype()).device(t.device()));
    accumulate_into(buffer.as_strided(write.sizes, write.strides, write.offset), t);
    result = buffer.as_strided(read.sizes, read.strides, read.offset).clone();
  }
  if (needs_grad(t)) {
    record_op("AsStridedBackwardBackward", result, {t},
              [write, read, span](const Tensor& gg) { return std::vector<Tensor>{restride(gg, read, write, span)}; });
  }
  return result;
}

NormalizedGrad normalized_backward(const Tensor& g, const Tensor& x, const Tensor& scale, const Shape& dims,
                                   double eps) {
  const Tensor centered = sub(x, mean(x, dims, true));
  const Tensor rstd = 1.0 / sqrt(add(mean(mul(centered, centered), dims, true), eps));
  const Tensor xhat = mul(centered, rstd);
  const Tensor dxhat = scale.defined() ? mul(g, scale) : g;
  const Tensor inner = sub(sub(dxhat, mean(dxhat, dims, true)), mul(xhat, mean(mul(dxhat, xhat), dims, true)));
  return {mul(rstd, inner), xhat};
}

// Exact: gelu' = Phi(x) + x phi(x), so gelu'' = phi(x) (2 - x^2). Tanh form, gelu = x (1 + t) / 2
// with t = tanh(u), u = c (x + k x^3): gelu'' = (1 - t^2) (u' - x t u'^2 + x u'' / 2), where
// u' = c (1 + 3 k x^2) and u'' = 6 c k x.
Tensor gelu_second_derivative(const Tensor& x, bool tanh_form) {
  const Tensor x2 = mul(x, x);
  if (!tanh_form) return mul(mul(exp(mul(x2, -0.5)), 1.0 / std::sqrt(2.0 * M_PI)), 2.0 - x2);
  const double c = std::sqrt(2.0 / M_PI), k = 0.044715;
  const Tensor t = tanh(mul(add(x, mul(mul(x, x2), k)), c));
  const Tensor du = mul(add(mul(x2, 3.0 * k), 1.0), c);
  const Tensor inner = add(sub(du, mul(mul(x, t), mul(du, du))), mul(x2, 3.0 * c * k));
  return mul(1.0 - mul(t, t), inner);
}

}  // namespace tinyddp::tensor::detail
