// Layer normalisation over the trailing dims (torch.nn.functional.layer_norm), its backward
// beside it: the kernels normalise rows of [M, N] (N: the normalised elements) and return each
// row's mean and rstd, which the backward reuses.
#include "tinyddp/tensor/graph.h"
#include "tinyddp/tensor/native/checks.h"
#include "tinyddp/tensor/native/composite.h"
#include "tinyddp/tensor/native/graph_formulas.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::tensor {

using namespace detail;

namespace {

// weight or bias: undefined, or of normalized_shape with the input's dtype and device.
void check_affine(const Tensor& t, const Tensor& input, const Shape& normalized_shape, const char* name) {
  if (!t.defined()) return;
  check_same_dtype(input, t, "layer_norm", "input", name);
  check_same_device(input, t, "layer_norm", "input", name);
  TDDP_CHECK(t.sizes() == normalized_shape, "layer_norm: expected '{}' of shape {} (normalized_shape), got {}", name,
             format_shape(normalized_shape), format_shape(t.sizes()));
}

void check_layer_norm(const Tensor& input, const Shape& normalized_shape, double eps) {
  check_defined(input, "layer_norm", "input");
  TDDP_CHECK(input.is_floating_point(), "layer_norm: expected a floating-point input, got dtype {}",
             dtype_name(input.dtype()));
  check_kernel_device(input, "layer_norm");
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  bool matches = k >= 1 && k <= input.dim();
  for (int64_t d = 0; matches && d < k; ++d) matches = input.size(input.dim() - k + d) == normalized_shape[d];
  TDDP_CHECK(
      matches,
      "layer_norm: normalized_shape {} must be the input's last dims (and not empty), but the input has shape {}",
      format_shape(normalized_shape), format_shape(input.sizes()));
  TDDP_CHECK(eps >= 0, "layer_norm: eps must be non-negative, got {}", eps);
}

}  // namespace

Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  check_layer_norm(input, normalized_shape, eps);
  check_affine(weight, input, normalized_shape, "weight");
  check_affine(bias, input, normalized_shape, "bias");
  const int64_t n = shape_numel(normalized_shape), rows = n > 0 ? input.numel() / n : 0;
  const DType stat_dtype = input.dtype() == kFloat64 ? kFloat64 : kFloat32;
  const Tensor out = new_output(input.sizes(), input.dtype(), input.device());
  const Tensor mean = new_output({rows}, stat_dtype, input.device());
  const Tensor rstd = new_output({rows}, stat_dtype, input.device());
  // x and w are recorded views (saved for backward, they keep their history for a double
  // backward); the kernel is not.
  const Tensor x = input.contiguous().view({rows, n});
  const Tensor w = weight.defined() ? weight.contiguous().view({n}) : Tensor();
  {
    NoGradGuard no_grad;
    const Tensor b = bias.defined() ? bias.contiguous().view({n}) : Tensor();
    backend_for(input.device(), "layer_norm").layer_norm(out.view({rows, n}), mean, rstd, x, w, b, eps);
  }
  // grad_out [..., N] -> grad_input, grad_weight = sum over rows of grad_out * xhat and
  // grad_bias = sum over rows of grad_out, from the saved mean and rstd (one kernel).
  if (needs_grad({&input, &weight, &bias})) {
    const bool need_input = input.requires_grad(), need_weight = weight.defined() && weight.requires_grad();
    const bool need_bias = bias.defined() && bias.requires_grad();
    record_op("NativeLayerNormBackward", out, {input, weight, bias},
              [sx = SavedTensor(x), sw = SavedTensor(w), mean, rstd, rows, n, eps, in_shape = input.sizes(),
               affine_shape = normalized_shape, need_input, need_weight, need_bias](const Tensor& grad) {
                const Tensor x = sx.get("NativeLayerNormBackward");
                const Tensor w = sw.get("NativeLayerNormBackward");
                const Tensor g = grad.contiguous().view({rows, n});
                if (GradMode::is_enabled()) {  // create_graph: the same formulas from recorded ops
                  const NormalizedGrad d = normalized_backward(g, x, w, {1}, eps);
                  return std::vector<Tensor>{need_input ? d.grad_input.view(in_shape) : Tensor(),
                                             need_weight ? sum(mul(g, d.xhat), {0}).view(affine_shape) : Tensor(),
                                             need_bias ? sum(g, {0}).view(affine_shape) : Tensor()};
                }
                // The backend's kernel writes the input's gradient and, where it can (the CPU's,
                // in the same pass), the weight's and bias's; else those are column sums
                // composed from the ops.
                const Tensor grad_input = need_input ? new_output({rows, n}, g.dtype(), g.device()) : Tensor();
                const Tensor grad_weight = need_weight ? new_output({n}, g.dtype(), g.device()) : Tensor();
                const Tensor grad_bias = need_bias ? new_output({n}, g.dtype(), g.device()) : Tensor();
                if (!backend_for(g.device(), "layer_norm backward")
                         .layer_norm_backward(grad_input, grad_weight, grad_bias, g, x, mean, rstd, w)) {
                  NoGradGuard no_grad;
                  composite::layer_norm_param_grads(grad_weight, grad_bias, g, x, mean, rstd);
                }
                return std::vector<Tensor>{need_input ? grad_input.view(in_shape) : Tensor(),
                                           need_weight ? grad_weight.view(affine_shape) : Tensor(),
                                           need_bias ? grad_bias.view(affine_shape) : Tensor()};
              });
  }
  return out;
}

}  // namespace tinyddp::tensor
