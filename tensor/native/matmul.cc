// Matrix products: mm, matmul (batched, broadcasting) and linear, each forward beside its
// backward formula.
#include "tinyddp/tensor/ops.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <tuple>

#include "tinyddp/tensor/autocast.h"
#include "tinyddp/tensor/graph.h"
#include "tinyddp/tensor/native/checks.h"

namespace tinyddp::tensor {

using namespace detail;

namespace {

// out = a @ b on the tensors' device (checked by the caller).
void run_mm(const Tensor& out, const Tensor& a, const Tensor& b) { backend_for(out.device(), "mm").mm(out, a, b); }

// left @ right (2-D), computed so that the result has the memory layout of `like`: when
// `like` is a transposed view of a contiguous matrix (Linear's weight.t()), the product is
// computed as (right^T @ left^T)^T. The view's own backward then hands the parameter a
// contiguous gradient, which AccumulateGrad adopts without a transposing copy.
Tensor mm_in_layout_of(const Tensor& left, const Tensor& right, const Tensor& like) {
  const bool transposed =
      like.dim() == 2 && like.size(0) > 1 && like.size(1) > 1 && like.stride(0) == 1 && like.stride(1) == like.size(0);
  return transposed ? mm(right.t(), left.t()).t() : mm(left, right);
}

// Linear's weight gradient g2^T x2 (x2 undefined: not wanted) and, when wanted, its bias's
// gradient, the sum of g2's rows: from one product where the backend sums the bias's gradient
// inside it (not for create_graph, whose gradients are recorded ops), else apart.
std::tuple<Tensor, Tensor> weight_and_bias_grads(const Tensor& g2, const Tensor& x2, bool need_bias) {
  if (x2.defined() && need_bias && !GradMode::is_enabled() && g2.dtype() == x2.dtype() && g2.size(0) > 0) {
    if (auto both = backend_for(g2.device(), "linear").mm_bias_grad(g2, x2)) return *both;
  }
  return {x2.defined() ? mm(g2.t(), x2) : Tensor(), need_bias ? sum(g2, {0}) : Tensor()};
}

}  // namespace

Tensor mm(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  if (autocast_args(CastPolicy::kLowerPrecision, {&a, &b})) return mm(a, b);
  check_pair(a, b, "mm");
  check_not_bool(a, "mm", "a");
  TDDP_CHECK(a.dim() == 2, "mm: 'a' must be a matrix (2-D), got shape {}", format_shape(a.sizes()));
  TDDP_CHECK(b.dim() == 2, "mm: 'b' must be a matrix (2-D), got shape {}", format_shape(b.sizes()));
  TDDP_CHECK(a.size(1) == b.size(0), "mm: shapes {} and {} cannot be multiplied ({} != {})", format_shape(a.sizes()),
             format_shape(b.sizes()), a.size(1), b.size(0));
  check_kernel_device(a, "mm");
  const Tensor out = new_output({a.size(0), b.size(1)}, a.dtype(), a.device());
  {
    NoGradGuard no_grad;
    run_mm(out, a, b);
  }
  // grad_out: [n, m], a: [n, k], b: [k, m] -> grad_a = grad_out b^T: [n, k], grad_b = a^T grad_out: [k, m]
  if (needs_grad(a, b)) {
    const bool need_a = a.requires_grad(), need_b = b.requires_grad();
    record_op("MmBackward", out, {a, b}, [sa = SavedTensor(a), sb = SavedTensor(b), need_a, need_b](const Tensor& g) {
      const Tensor& av = sa.get("MmBackward");
      const Tensor& bv = sb.get("MmBackward");
      return std::vector<Tensor>{need_a ? mm_in_layout_of(g, bv.t(), av) : Tensor(),
                                 need_b ? mm_in_layout_of(av.t(), g, bv) : Tensor()};
    });
  }
  return out;
}

namespace {
// matmul's forward on matrices (vectors already unsqueezed): [..., n, k] x [..., k, m].
Tensor batched_mm(const Tensor& a2, const Tensor& b2) {
  const int64_t n = a2.size(-2), k = a2.size(-1), m = b2.size(-1);
  if (a2.dim() == 2 && b2.dim() == 2) return mm(a2, b2);
  if (b2.dim() == 2 && a2.is_contiguous()) {
    // [..., n, k] x [k, m]: fold the batch into the rows of one GEMM.
    Shape out_shape(a2.sizes().begin(), a2.sizes().end() - 1);
    out_shape.push_back(m);
    return mm(a2.reshape({-1, k}), b2).view(out_shape);
  }
  const Shape batch_a(a2.sizes().begin(), a2.sizes().end() - 2);
  const Shape batch_b(b2.sizes().begin(), b2.sizes().end() - 2);
  const Shape batch = broadcast_shapes(batch_a, batch_b, "matmul");
  Shape a_shape = batch, b_shape = batch, out_shape = batch;
  a_shape.insert(a_shape.end(), {n, k});
  b_shape.insert(b_shape.end(), {k, m});
  out_shape.insert(out_shape.end(), {n, m});
  const Tensor ae = a2.expand(a_shape);
  const Tensor be = b2.expand(b_shape);
  check_not_bool(a2, "matmul", "a");
  check_kernel_device(a2, "matmul");
  const Tensor out = new_output(out_shape, a2.dtype(), a2.device());
  // One call where a kernel serves the whole batch, else matrix by matrix.
  if (backend_for(out.device(), "matmul").bmm(out, ae, be)) return out;
  const int64_t count = shape_numel(batch);
  for (int64_t i = 0; i < count; ++i) {
    // Select batch entry i (row-major over the batch dims) from all three tensors.
    Tensor sa = ae, sb = be, so = out;
    int64_t rest = i;
    for (int64_t d = static_cast<int64_t>(batch.size()) - 1; d >= 0; --d) {
      const int64_t index = rest % batch[d];
      rest /= batch[d];
      sa = sa.select(d, index);
      sb = sb.select(d, index);
      so = so.select(d, index);
    }
    run_mm(so, sa, sb);
  }
  return out;
}
}  // namespace

Tensor detail::summing_matmul(const Tensor& a, const Tensor& b) {
  if (a.is_floating_point() || (a.is_cpu() && b.is_cpu())) return matmul(a, b);
  return matmul(a.to(kCPU), b.to(kCPU)).to(a.device());
}

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  if (autocast_args(CastPolicy::kLowerPrecision, {&a, &b})) return matmul(a, b);
  check_pair(a, b, "matmul");
  TDDP_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both arguments need at least 1 dimension, got shapes {} and {}",
             format_shape(a.sizes()), format_shape(b.sizes()));
  // Vectors become matrices for the product and lose that dim again afterwards. The views are
  // recorded: saved for backward, they keep their history for a double backward.
  const Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  const Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  TDDP_CHECK(a2.size(-1) == b2.size(-2), "matmul: shapes {} and {} cannot be multiplied ({} != {})",
             format_shape(a.sizes()), format_shape(b.sizes()), a2.size(-1), b2.size(-2));
  Tensor out2;
  {
    NoGradGuard no_grad;
    out2 = batched_mm(a2, b2);
  }
  Tensor out = out2;
  if (a.dim() == 1) out = out.squeeze(-2);
  if (b.dim() == 1) out = out.squeeze(-1);
  // grad_out: [..., n, m] (vector dims restored) -> grad_a = grad_out b^T, grad_b = a^T grad_out,
  // each summed over broadcast batch dims back to its input's shape.
  if (needs_grad(a, b)) {
    const bool need_a = a.requires_grad(), need_b = b.requires_grad();
    record_op(
        "MatmulBackward", out, {a, b},
        [sa = SavedTensor(a2), sb = SavedTensor(b2), a_shape = a.sizes(), b_shape = b.sizes(), a2_shape = a2.sizes(),
         b2_shape = b2.sizes(), out2_shape = out2.sizes(), need_a, need_b](const Tensor& g) {
          const Tensor g2 = g.reshape(out2_shape);
          const Tensor& av = sa.get("MatmulBackward");
          const Tensor& bv = sb.get("MatmulBackward");
          Tensor ga, gb;
          if (av.dim() == 2 && bv.dim() == 2) {  // plain matrices: gradients in each input's layout
            if (need_a) ga = mm_in_layout_of(g2, bv.t(), av).reshape(a_shape);
            if (need_b) gb = mm_in_layout_of(av.t(), g2, bv).reshape(b_shape);
          } else {
            if (need_a) ga = sum_to_size(matmul(g2, bv.transpose(-1, -2)), a2_shape).reshape(a_shape);
            if (need_b) gb = sum_to_size(matmul(av.transpose(-1, -2), g2), b2_shape).reshape(b_shape);
          }
          return std::vector<Tensor>{ga, gb};
        });
  }
  return out;
}

Tensor linear(const Tensor& input_in, const Tensor& weight_in, const Tensor& bias_in) {
  Tensor input = input_in, weight = weight_in, bias = bias_in;
  if (autocast_args(CastPolicy::kLowerPrecision, {&input, &weight, &bias})) return linear(input, weight, bias);
  check_defined(input, "linear", "input");
  check_defined(weight, "linear", "weight");
  check_same_dtype(input, weight, "linear", "input", "weight");
  check_same_device(input, weight, "linear", "input", "weight");
  check_not_bool(input, "linear", "input");
  TDDP_CHECK(weight.dim() == 2, "linear: 'weight' must be 2-D [out, in], got shape {}", format_shape(weight.sizes()));
  const int64_t in_features = weight.size(1), out_features = weight.size(0);
  TDDP_CHECK(input.dim() >= 1 && input.size(-1) == in_features,
             "linear: input of shape {} does not end in in_features {} (weight shape {})", format_shape(input.sizes()),
             in_features, format_shape(weight.sizes()));
  if (bias.defined()) {
    check_same_dtype(input, bias, "linear", "input", "bias");
    check_same_device(input, bias, "linear", "input", "bias");
    TDDP_CHECK(bias.dim() == 1 && bias.size(0) == out_features, "linear: 'bias' must have shape [{}], got {}",
               out_features, format_shape(bias.sizes()));
  }
  check_kernel_device(input, "linear");
  Shape out_shape = input.sizes();
  out_shape.back() = out_features;
  // x2 is recorded (it is saved for the weight's gradient and keeps its history for a double
  // backward); the product is not.
  const Tensor x2 = input.dim() == 2 ? input : input.reshape({-1, in_features});
  Tensor out;
  {
    NoGradGuard no_grad;
    const Tensor out2 = new_output({x2.size(0), out_features}, input.dtype(), input.device());
    // x2 [n, in] @ weight^T [in, out] (+ bias)
    if (bias.defined()) {
      backend_for(out2.device(), "linear").addmm(out2, bias, x2, weight.t());
    } else {
      run_mm(out2, x2, weight.t());
    }
    out = out2.reshape(out_shape);
  }
  // grad_out: [n, out] -> grad_input = grad_out @ weight: [n, in],
  // grad_weight = grad_out^T @ input: [out, in] (contiguous), grad_bias = sum over rows: [out]
  if (needs_grad({&input, &weight, &bias})) {
    const bool need_input = input.requires_grad(), need_weight = weight.requires_grad();
    const bool need_bias = bias.defined() && bias.requires_grad();
    record_op("LinearBackward", out, {input, weight, bias},
              [sx = SavedTensor(need_weight ? x2 : Tensor()), sw = SavedTensor(need_input ? weight : Tensor()),
               in_shape = input.sizes(), out_features, need_input, need_weight, need_bias,
               weight_key = std::weak_ptr<TensorImpl>(weight.impl_ptr())](const Tensor& g) {
                const Tensor g2 = g.reshape({-1, out_features});
                Tensor x = need_weight ? sx.get("LinearBackward") : Tensor();
                // A sink (graph.h) may take the weight's product instead (a weight still alive:
                // the sink compares it with its parameters).
                if (WeightGradientSink* sink = weight_gradient_sink(); x.defined() && sink != nullptr) {
                  const std::shared_ptr<TensorImpl> w = weight_key.lock();
                  if (w != nullptr && sink->take(w.get(), g2, x)) x = Tensor();
                }
                auto [grad_weight, grad_bias] = weight_and_bias_grads(g2, x, need_bias);
                return std::vector<Tensor>{need_input ? mm(g2, sw.get("LinearBackward")).reshape(in_shape) : Tensor(),
                                           grad_weight, grad_bias};
              });
  }
  return out;
}

// ---- the BLAS-named products (composites of matmul) --------------------------------------------

Tensor bmm(const Tensor& a, const Tensor& b) {
  check_pair(a, b, "bmm");
  TDDP_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected two 3-D tensors, got shapes {} and {}",
             format_shape(a.sizes()), format_shape(b.sizes()));
  TDDP_CHECK(a.size(0) == b.size(0) && a.size(2) == b.size(1),
             "bmm: shapes {} and {} cannot be multiplied (batch sizes must be equal, and {} must equal {})",
             format_shape(a.sizes()), format_shape(b.sizes()), a.size(2), b.size(1));
  return matmul(a, b);
}

Tensor mv(const Tensor& a, const Tensor& v) {
  check_pair(a, v, "mv");
  TDDP_CHECK(a.dim() == 2 && v.dim() == 1 && a.size(1) == v.size(0),
             "mv: expected a matrix [n, m] and a vector [m], got shapes {} and {}", format_shape(a.sizes()),
             format_shape(v.sizes()));
  return matmul(a, v);
}

Tensor dot(const Tensor& a, const Tensor& b) {
  check_pair(a, b, "dot");
  TDDP_CHECK(a.dim() == 1 && b.dim() == 1 && a.size(0) == b.size(0),
             "dot: expected two 1-D tensors of the same size, got shapes {} and {}", format_shape(a.sizes()),
             format_shape(b.sizes()));
  return matmul(a, b);
}

Tensor outer(const Tensor& a, const Tensor& b) {
  check_pair(a, b, "outer");
  TDDP_CHECK(a.dim() == 1 && b.dim() == 1, "outer: expected two 1-D tensors, got shapes {} and {}",
             format_shape(a.sizes()), format_shape(b.sizes()));
  return mul(a.unsqueeze(1), b.unsqueeze(0));
}

namespace {
// beta * input + alpha * product, as PyTorch's addmm family: with beta 0 the input is ignored
// (its NaN and inf do not propagate, and it gets no gradient), its shape still checked.
Tensor scaled_sum(const Tensor& input, const Tensor& product, double beta, double alpha, const char* op) {
  check_defined(input, op, "input");
  TDDP_CHECK(is_expandable_to(input.sizes(), product.sizes()),
             "{}: input of shape {} cannot be broadcast to the product's shape {}", op, format_shape(input.sizes()),
             format_shape(product.sizes()));
  const Tensor scaled = alpha == 1.0 ? product : mul(product, alpha);
  if (beta == 0.0) return scaled;
  return add(beta == 1.0 ? input : mul(input, beta), scaled);
}
}  // namespace

Tensor addmm(const Tensor& input, const Tensor& m1, const Tensor& m2, double beta, double alpha) {
  check_pair(m1, m2, "addmm");
  TDDP_CHECK(m1.dim() == 2 && m2.dim() == 2, "addmm: expected 2-D matrices, got shapes {} and {}",
             format_shape(m1.sizes()), format_shape(m2.sizes()));
  return scaled_sum(input, mm(m1, m2), beta, alpha, "addmm");
}

Tensor baddbmm(const Tensor& input, const Tensor& batch1, const Tensor& batch2, double beta, double alpha) {
  return scaled_sum(input, bmm(batch1, batch2), beta, alpha, "baddbmm");
}

}  // namespace tinyddp::tensor
