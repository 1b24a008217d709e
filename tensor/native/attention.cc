// causal_softmax (ops.h): attention's scale, causal mask and softmax in one op, its backward
// beside it. The kernels see contiguous [B, M, N] (B: every leading dim).
#include "tinyddp/tensor/graph.h"
#include "tinyddp/tensor/native/checks.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::tensor {

using namespace detail;

Tensor causal_softmax(const Tensor& scores, double scale) {
  check_defined(scores, "causal_softmax", "scores");
  TDDP_CHECK(scores.is_floating_point(), "causal_softmax: expected floating-point scores, got dtype {}",
             dtype_name(scores.dtype()));
  TDDP_CHECK(scores.dim() >= 2 && scores.size(-2) <= scores.size(-1),
             "causal_softmax: expected scores [..., M, N] with M <= N (every row keeps a column), got shape {}",
             format_shape(scores.sizes()));
  check_kernel_device(scores, "causal_softmax");
  const int64_t m = scores.size(-2), n = scores.size(-1), batch = m * n > 0 ? scores.numel() / (m * n) : 0;
  const Tensor out = new_output(scores.sizes(), scores.dtype(), scores.device());
  {
    NoGradGuard no_grad;
    if (out.numel() > 0) {
      backend_for(scores.device(), "causal_softmax")
          .causal_softmax(out.view({batch, m, n}), scores.contiguous().view({batch, m, n}), scale);
    }
  }
  if (!needs_grad(scores)) return out;
  // y = softmax(scale * masked x): grad_x = scale * y * (grad_out - sum(grad_out * y, -1)),
  // 0 where masked (y is 0 there).
  record_op("CausalSoftmaxBackward", out, {scores}, [so = SavedTensor(out, true), scale, batch, m, n](const Tensor& g) {
    const Tensor y = so.get("CausalSoftmaxBackward");
    if (GradMode::is_enabled()) {  // create_graph: the same formula from recorded ops
      return std::vector<Tensor>{mul(mul(y, sub(g, sum(mul(g, y), {-1}, true))), scale)};
    }
    const Tensor grad = new_output(y.sizes(), y.dtype(), y.device());
    if (grad.numel() > 0) {
      backend_for(g.device(), "causal_softmax backward")
          .causal_softmax_backward(grad.view({batch, m, n}), g.contiguous().view({batch, m, n}), y.view({batch, m, n}),
                                   scale);
    }
    return std::vector<Tensor>{grad};
  });
  return out;
}

}  // namespace tinyddp::tensor
