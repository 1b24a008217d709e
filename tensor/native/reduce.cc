// Reductions (sum, mean, norm, max, argmax, min, argmin, var, std, amax, amin, logsumexp, all,
// any) and softmax / log_softmax, each forward beside its backward formula.
#include "tinyddp/tensor/ops.h"

#include <algorithm>
#include <cmath>

#include "tinyddp/tensor/graph.h"
#include "tinyddp/tensor/native/checks.h"

namespace tinyddp::tensor {

using namespace detail;

namespace {

// Wraps and de-duplicates reduction dims.
Shape reduction_dims(const Tensor& x, const Shape& dims, const char* op) {
  Shape wrapped;
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, x.dim(), op);
    for (int64_t seen : wrapped) {
      TDDP_CHECK(seen != w, "{}: dim {} appears multiple times in the list of dims {}", op, w, format_shape(dims));
    }
    wrapped.push_back(w);
  }
  return wrapped;
}

}  // namespace

namespace {
// grad_out (the reduced shape) -> grad_out broadcast back over `input_shape`, the reduced
// dims (sorted) restored as size 1 first when keepdim was false.
Tensor expand_reduced(const Tensor& g, const Shape& input_shape, const Shape& dims, bool keepdim) {
  Tensor kept = g;
  if (!keepdim && !input_shape.empty()) {
    Shape keep_shape = input_shape;
    for (int64_t d = 0; d < static_cast<int64_t>(input_shape.size()); ++d) {
      if (dims.empty() || std::find(dims.begin(), dims.end(), d) != dims.end()) keep_shape[d] = 1;
    }
    kept = g.reshape(keep_shape);
  }
  return kept.expand(input_shape);
}
}  // namespace

Tensor sum(const Tensor& x) { return sum(x, {}, false); }
Tensor sum(const Tensor& x, DimList dim_list, bool keepdim) {
  const Shape& dims = dim_list;
  check_defined(x, "sum", "x");
  check_kernel_device(x, "sum");
  const Shape wrapped = reduction_dims(x, dims, "sum");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = backend_for(x.device(), "sum").sum(x, wrapped, keepdim);
  }
  // grad_out: reduced shape -> grad_x: grad_out broadcast over x's shape
  if (needs_grad(x)) {
    record_op("SumBackward", out, {x}, [shape = x.sizes(), wrapped, keepdim](const Tensor& g) {
      return std::vector<Tensor>{expand_reduced(g, shape, wrapped, keepdim)};
    });
  }
  return out;
}

Tensor mean(const Tensor& x) { return mean(x, {}, false); }
Tensor mean(const Tensor& x, DimList dim_list, bool keepdim) {
  const Shape& dims = dim_list;
  check_defined(x, "mean", "x");
  TDDP_CHECK(x.is_floating_point(),
             "mean: could not infer output dtype; input dtype must be floating point, got {} (convert with .to())",
             dtype_name(x.dtype()));
  check_kernel_device(x, "mean");
  const Shape wrapped = reduction_dims(x, dims, "mean");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = backend_for(x.device(), "mean").mean(x, wrapped, keepdim);
  }
  // grad_x = grad_out broadcast over x's shape / (number of elements averaged)
  if (needs_grad(x)) {
    const int64_t count = out.numel() == 0 ? 0 : x.numel() / out.numel();
    record_op("MeanBackward", out, {x}, [shape = x.sizes(), wrapped, keepdim, count](const Tensor& g) {
      return std::vector<Tensor>{div(expand_reduced(g, shape, wrapped, keepdim), static_cast<double>(count))};
    });
  }
  return out;
}

Tensor norm(const Tensor& x, double p, DimList dim_list, bool keepdim) {
  const Shape& dims = dim_list;
  check_defined(x, "norm", "x");
  TDDP_CHECK(x.is_floating_point(), "norm: expected a floating-point input, got dtype {}", dtype_name(x.dtype()));
  TDDP_CHECK(p == 1.0 || p == 2.0, "norm: p = {} is not supported (p = 1 and p = 2 are)", p);
  if (p == 1.0) return sum(abs(x), dims, keepdim);
  const Shape wrapped = reduction_dims(x, dims, "norm");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = sqrt(sum(mul(x, x), wrapped, keepdim));
  }
  // grad_x = grad_out x / norm, 0 where the norm is 0 (x is 0 there too)
  if (needs_grad(x)) {
    record_op("NormBackward", out, {x},
              [sx = SavedTensor(x), so = SavedTensor(out, true), shape = x.sizes(), wrapped, keepdim](const Tensor& g) {
                const Tensor n = expand_reduced(so.get("NormBackward"), shape, wrapped, keepdim);
                const Tensor scaled = masked_fill(div(sx.get("NormBackward"), n), eq(n, 0.0), 0.0);
                return std::vector<Tensor>{mul(expand_reduced(g, shape, wrapped, keepdim), scaled)};
              });
  }
  return out;
}

Tensor max(const Tensor& x) {
  check_defined(x, "max", "x");
  TDDP_CHECK(x.numel() > 0, "max: expected a non-empty tensor, got shape {} (specify a dim to reduce an empty tensor)",
             format_shape(x.sizes()));
  check_kernel_device(x, "max");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = std::get<0>(backend_for(x.device(), "max").max(x, {}, false));
  }
  // grad_x: grad_out shared evenly among the elements equal to the maximum (all NaNs if NaN)
  if (needs_grad(x)) {
    record_op("MaxBackward", out, {x}, [sx = SavedTensor(x), so = SavedTensor(out, true)](const Tensor& g) {
      const Tensor& xv = sx.get("MaxBackward");
      const Tensor& best = so.get("MaxBackward");
      const bool nan = std::isnan(best.item<double>());
      const Tensor mask = (nan ? ne(xv, xv) : eq(xv, best)).to(g.dtype());
      return std::vector<Tensor>{mul(mask, div(g, sum(mask)))};
    });
  }
  return out;
}

std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  check_defined(x, "max", "x");
  const int64_t d = wrap_dim(dim, x.dim(), "max");
  TDDP_CHECK(x.dim() == 0 || x.sizes()[d] > 0, "max: cannot reduce over dimension {} of size 0 (shape {})", d,
             format_shape(x.sizes()));
  check_kernel_device(x, "max");
  Tensor values, indices;
  {
    NoGradGuard no_grad;
    std::tie(values, indices) = backend_for(x.device(), "max").max(x, {d}, keepdim);
  }
  // grad_x: zeros except grad_out at each maximum's index along `d`
  if (needs_grad(x)) {
    record_op("MaxBackward", values, {x}, [shape = x.sizes(), d, keepdim, si = SavedTensor(indices)](const Tensor& g) {
      if (shape.empty()) return std::vector<Tensor>{g};
      const Tensor idx = keepdim ? si.get("MaxBackward") : si.get("MaxBackward").unsqueeze(d);
      Shape position_shape(shape.size(), 1);
      position_shape[d] = shape[d];
      const Tensor positions = arange(shape[d], TensorOptions().device(g.device())).view(position_shape);
      const Tensor hit = eq(positions, idx).to(g.dtype());  // broadcasts to x's shape
      const Tensor g_kept = keepdim ? g : g.unsqueeze(d);
      return std::vector<Tensor>{mul(hit.expand(shape), g_kept)};
    });
  }
  return {values, indices};
}

Tensor argmax(const Tensor& x) {
  check_defined(x, "argmax", "x");
  TDDP_CHECK(x.numel() > 0, "argmax: expected a non-empty tensor, got shape {}", format_shape(x.sizes()));
  check_kernel_device(x, "argmax");
  NoGradGuard no_grad;
  return std::get<1>(backend_for(x.device(), "argmax").max(x, {}, false));
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  NoGradGuard no_grad;
  return std::get<1>(max(x, dim, keepdim));
}

namespace {
Tensor softmax_impl(const Tensor& x, int64_t dim, bool log, const char* op) {
  check_defined(x, op, "x");
  TDDP_CHECK(x.is_floating_point(), "{}: expected a floating-point tensor, got dtype {}", op, dtype_name(x.dtype()));
  const int64_t d = wrap_dim(dim, x.dim(), op);
  check_kernel_device(x, op);
  const Tensor out = new_output(x.sizes(), x.dtype(), x.device());
  {
    NoGradGuard no_grad;
    backend_for(x.device(), op).softmax(out, x, d, log);
  }
  if (!needs_grad(x)) return out;
  if (log) {
    // y = log_softmax(x): grad_x = grad_out - exp(y) * sum(grad_out, d)
    record_op("LogSoftmaxBackward", out, {x}, [so = SavedTensor(out, true), d](const Tensor& g) {
      return std::vector<Tensor>{sub(g, mul(exp(so.get("LogSoftmaxBackward")), sum(g, {d}, true)))};
    });
  } else {
    // y = softmax(x): grad_x = y * (grad_out - sum(grad_out * y, d))
    record_op("SoftmaxBackward", out, {x}, [so = SavedTensor(out, true), d](const Tensor& g) {
      const Tensor& y = so.get("SoftmaxBackward");
      return std::vector<Tensor>{mul(y, sub(g, sum(mul(g, y), {d}, true)))};
    });
  }
  return out;
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, false, "softmax"); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, true, "log_softmax"); }

// min as max of the mirrored values: neg for floating tensors (exact; NaN stays NaN, so it
// still wins), -1 - x for int64 (exact for every value, where neg would overflow at the
// most negative one). The gradient flows back through neg and max.
namespace {
Tensor mirrored(const Tensor& x, const char* op) {
  check_defined(x, op, "x");
  TDDP_CHECK(x.dtype() != kBool, "{}: not defined for bool tensors", op);
  return x.is_floating_point() ? neg(x) : sub(full_like(x, -1.0), x);
}
}  // namespace

Tensor min(const Tensor& x) {
  const Tensor m = max(mirrored(x, "min"));
  return x.is_floating_point() ? neg(m) : sub(full_like(m, -1.0), m);
}

std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  const auto [m, indices] = max(mirrored(x, "min"), dim, keepdim);
  return {x.is_floating_point() ? neg(m) : sub(full_like(m, -1.0), m), indices};
}

Tensor argmin(const Tensor& x) { return argmax(mirrored(x, "argmin")); }

Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) { return argmax(mirrored(x, "argmin"), dim, keepdim); }

// ---- statistics and extrema over several dims (composites of the kernels above) ----------------

namespace {
// The shape `x` reduces to over the wrapped `dims` (all when empty) with keepdim.
Shape kept_shape(const Tensor& x, const Shape& wrapped) {
  Shape shape = x.sizes();
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (wrapped.empty() || std::find(wrapped.begin(), wrapped.end(), d) != wrapped.end()) shape[d] = 1;
  }
  return shape;
}
// The shape without the reduced dims (keepdim false).
Shape dropped_shape(const Tensor& x, const Shape& wrapped) {
  Shape shape;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (!wrapped.empty() && std::find(wrapped.begin(), wrapped.end(), d) == wrapped.end()) shape.push_back(x.size(d));
  }
  return shape;
}
Tensor reshaped_result(const Tensor& kept, const Tensor& x, const Shape& wrapped, bool keepdim) {
  return keepdim ? kept : kept.reshape(dropped_shape(x, wrapped));
}

// amax / amin: the extreme over `dims` one dim at a time; the gradient shared evenly among
// the elements equal to it, as PyTorch's.
Tensor extreme(const Tensor& x, DimList dim_list, bool keepdim, bool largest, const char* op, const char* node) {
  check_defined(x, op, "x");
  const Shape wrapped = reduction_dims(x, dim_list, op);
  Tensor kept;
  {
    NoGradGuard no_grad;
    kept = x;
    for (int64_t d = 0; d < x.dim(); ++d) {
      if (!wrapped.empty() && std::find(wrapped.begin(), wrapped.end(), d) == wrapped.end()) continue;
      TDDP_CHECK(x.size(d) > 0, "{}: cannot reduce dim {} of size 0 (shape {})", op, d, format_shape(x.sizes()));
      kept = std::get<0>(largest ? max(kept, d, true) : min(kept, d, true));
    }
  }
  const Tensor out = reshaped_result(kept, x, wrapped, keepdim);
  if (needs_grad(x)) {
    record_op(node, out, {x}, [sx = SavedTensor(x), sk = SavedTensor(kept), wrapped, node, keepdim](const Tensor& g) {
      const Tensor& xv = sx.get(node);
      const Tensor mask = eq(xv, sk.get(node)).to(g.dtype());
      const Tensor share = div(mask, sum(mask, wrapped, true));
      return std::vector<Tensor>{mul(expand_reduced(g, xv.sizes(), wrapped, keepdim), share)};
    });
  }
  return out;
}

// (x - mean) and the divisor N - correction of var and std over `wrapped`.
std::pair<Tensor, double> centered(const Tensor& x, const Shape& wrapped, int64_t correction) {
  const Tensor c = sub(x, mean(x, wrapped, true));
  const int64_t count = x.numel() == 0 ? 0 : x.numel() / shape_numel(kept_shape(x, wrapped));
  return {c, static_cast<double>(std::max<int64_t>(count - correction, 0))};
}
}  // namespace

Tensor amax(const Tensor& x, DimList dims, bool keepdim) {
  return extreme(x, dims, keepdim, true, "amax", "AmaxBackward");
}
Tensor amin(const Tensor& x, DimList dims, bool keepdim) {
  return extreme(x, dims, keepdim, false, "amin", "AminBackward");
}

Tensor var(const Tensor& x, DimList dims, int64_t correction, bool keepdim) {
  check_defined(x, "var", "x");
  TDDP_CHECK(x.is_floating_point(), "var: expected a floating-point input, got dtype {}", dtype_name(x.dtype()));
  const Shape wrapped = reduction_dims(x, dims, "var");
  const auto [c, divisor] = centered(x, wrapped, correction);
  // the composite's gradient: 2 (x - mean) / (N - correction)
  return div(sum(mul(c, c), wrapped, keepdim), divisor);
}

Tensor std(const Tensor& x, DimList dims, int64_t correction, bool keepdim) {
  check_defined(x, "std", "x");
  TDDP_CHECK(x.is_floating_point(), "std: expected a floating-point input, got dtype {}", dtype_name(x.dtype()));
  const Shape wrapped = reduction_dims(x, dims, "std");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = sqrt(var(x, wrapped, correction, keepdim));
  }
  // grad_x = grad_out (x - mean) / ((N - correction) std), 0 where std is 0 (as PyTorch's)
  if (needs_grad(x)) {
    record_op("StdBackward", out, {x},
              [sx = SavedTensor(x), so = SavedTensor(out, true), wrapped, correction, keepdim](const Tensor& g) {
                const Tensor& xv = sx.get("StdBackward");
                const auto [c, divisor] = centered(xv, wrapped, correction);
                const Tensor s = expand_reduced(so.get("StdBackward"), xv.sizes(), wrapped, keepdim);
                const Tensor factor = masked_fill(div(c, mul(s, divisor)), eq(s, 0.0), 0.0);
                return std::vector<Tensor>{mul(expand_reduced(g, xv.sizes(), wrapped, keepdim), factor)};
              });
  }
  return out;
}

Tensor logsumexp(const Tensor& x, DimList dims, bool keepdim) {
  check_defined(x, "logsumexp", "x");
  const Tensor input = x.is_floating_point() ? x : x.to(kFloat32);
  const Shape wrapped = reduction_dims(input, dims, "logsumexp");
  // log(sum(exp(x - m))) + m with m the maximum (0 where it is infinite), a constant: the
  // gradient is softmax(x) over the dims.
  Tensor m = amax(input.detach(), wrapped, true);
  m = masked_fill(m, isinf(m), 0.0);
  const Tensor kept = add(log(sum(exp(sub(input, m)), wrapped, true)), m);
  return reshaped_result(kept, input, wrapped, keepdim);
}

namespace {
// all / any: whether every (some) element over dims is nonzero, as bool.
Tensor count_truth(const Tensor& x, DimList dims, bool keepdim, bool every, const char* op) {
  check_defined(x, op, "x");
  const Shape wrapped = reduction_dims(x, dims, op);
  NoGradGuard no_grad;
  const Tensor misses = sum((every ? eq(x, 0.0) : ne(x, 0.0)).to(kInt64), wrapped, keepdim);
  return every ? eq(misses, 0.0) : gt(misses, 0.0);
}
}  // namespace

Tensor all(const Tensor& x) { return count_truth(x, {}, false, true, "all"); }
Tensor all(const Tensor& x, DimList dims, bool keepdim) { return count_truth(x, dims, keepdim, true, "all"); }
Tensor any(const Tensor& x) { return count_truth(x, {}, false, false, "any"); }
Tensor any(const Tensor& x, DimList dims, bool keepdim) { return count_truth(x, dims, keepdim, false, "any"); }

}  // namespace tinyddp::tensor
