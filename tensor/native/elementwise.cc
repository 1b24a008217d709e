// Elementwise ops: binary arithmetic (broadcasting; gradients summed back to each input's
// shape with sum_to_size), comparisons (not differentiable: bool results), unary functions
// and pow, each forward beside its backward formula (recorded via graph.h).
#include "tinyddp/tensor/ops.h"

#include <algorithm>
#include <cmath>

#include "tinyddp/tensor/graph.h"
#include "tinyddp/tensor/native/checks.h"
#include "tinyddp/tensor/native/graph_formulas.h"

namespace tinyddp::tensor {

using namespace detail;

namespace {

// PyTorch's promotion between floating dtypes: float64 over float32 over the 16-bit ones,
// float16 with bfloat16 giving float32 (autocast's bfloat16 results meet float32 ones, as a
// residual stream does). The cast is an op of its own, so each gradient returns in its
// input's dtype. Other mixes are left to the dtype check.
DType promoted_float(DType a, DType b) { return a == kFloat64 || b == kFloat64 ? kFloat64 : kFloat32; }
void promote_floats(Tensor& a, Tensor& b) {
  if (!a.defined() || !b.defined() || a.dtype() == b.dtype() || !a.is_floating_point() || !b.is_floating_point()) {
    return;
  }
  const DType dtype = promoted_float(a.dtype(), b.dtype());
  a = a.to(dtype);
  b = b.to(dtype);
}

void run_binary(BinaryOp kind, const Tensor& out, const Tensor& a, const Tensor& b, double alpha, const char* op) {
  NoGradGuard no_grad;
  backend_for(out.device(), op).binary(kind, out, a, b, alpha);
}

// Shared checks of the out-variants: out = kind(a, b) with out already allocated.
void binary_out(BinaryOp kind, const Tensor& out, const Tensor& a, const Tensor& b, double alpha, const char* op) {
  check_pair(a, b, op);
  check_defined(out, op, "out");
  check_same_device(out, a, op, "out", "a");
  check_same_dtype(out, a, op, "out", "a");
  check_not_bool(a, op, "a");
  const Shape shape = broadcast_shapes(a.sizes(), b.sizes(), op);
  TDDP_CHECK(shape == out.sizes(), "{}: output with shape {} doesn't match the broadcast shape {} of {} and {}", op,
             format_shape(out.sizes()), format_shape(shape), format_shape(a.sizes()), format_shape(b.sizes()));
  check_writable(out, op);
  check_in_place(out, out.is_same(a) ? &b : &a, op);
  check_in_place(out, &b, op);
  run_binary(kind, out, detach_from_output(a, out), detach_from_output(b, out), alpha, op);
  out.storage().bump_version();
}

Tensor binary(BinaryOp kind, const Tensor& a, const Tensor& b, double alpha, const char* op) {
  check_pair(a, b, op);
  check_not_bool(a, op, "a");
  const Tensor out = new_output(broadcast_shapes(a.sizes(), b.sizes(), op), a.dtype(), a.device());
  run_binary(kind, out, a, b, alpha, op);
  return out;
}

void check_alpha(const Tensor& a, double alpha, const char* op) {
  TDDP_CHECK(a.is_floating_point() || alpha == std::trunc(alpha),
             "{}: for integral input tensors, alpha must be an integer, got {}", op, alpha);
}

Tensor compare(CompareOp kind, const Tensor& a, const Tensor& b, const char* op) {
  check_pair(a, b, op);
  const Tensor out = new_output(broadcast_shapes(a.sizes(), b.sizes(), op), kBool, a.device());
  NoGradGuard no_grad;
  backend_for(out.device(), op).compare(kind, out, a, b);
  return out;
}

Tensor compare_scalar(CompareOp kind, const Tensor& a, double b, const char* op) {
  check_defined(a, op, "a");
  const Tensor s =
      a.dtype() == kBool ? scalar_tensor(b, TensorOptions(kBool).device(a.device())) : scalar_like(a, b, op);
  return compare(kind, a.to(s.dtype()), s, op);
}

Tensor run_unary(UnaryOp kind, const Tensor& x, const char* op) {
  NoGradGuard no_grad;
  const Tensor out = new_output(x.sizes(), x.dtype(), x.device());
  backend_for(x.device(), op).unary(kind, out, x);
  return out;
}

// neg, abs, relu: any numeric dtype, result of the same dtype.
Tensor numeric_unary(UnaryOp kind, const Tensor& x, const char* op) {
  check_defined(x, op, "x");
  check_not_bool(x, op, "x");
  return run_unary(kind, x, op);
}

// exp, log, sqrt, tanh, sigmoid: integers compute in float32, as in PyTorch. The input is
// made contiguous so that every layout takes the same (vectorised) code path.
Tensor floating_unary(UnaryOp kind, const Tensor& x, const char* op) {
  check_defined(x, op, "x");
  NoGradGuard no_grad;
  const Tensor input = x.is_floating_point() ? x : x.to(kFloat32);
  return run_unary(kind, input.contiguous(), op);
}

}  // namespace

// ---- binary arithmetic ---------------------------------------------------------------------
// Gradients of broadcasting ops are summed back to each input's shape (sum_to_size).

Tensor scalar_like(const Tensor& t, double value, const char* op) {
  check_defined(t, op, "a");
  DType dtype = t.dtype();
  if (dtype == kInt64 && !(std::isfinite(value) && value == std::trunc(value))) dtype = kFloat32;
  if (is_16bit_float(dtype)) dtype = kFloat32;  // the scalar is not rounded to 16 bits
  return scalar_tensor(value, TensorOptions().dtype(dtype).device(t.device()));
}

Tensor sum_to_size(const Tensor& grad, const Shape& shape) {
  TDDP_CHECK(is_expandable_to(shape, grad.sizes()),
             "sum_to_size: shape {} cannot be broadcast to the gradient's shape {}", format_shape(shape),
             format_shape(grad.sizes()));
  if (grad.sizes() == shape) return grad;
  const int64_t lead = grad.dim() - static_cast<int64_t>(shape.size());
  Shape dims;
  for (int64_t d = 0; d < grad.dim(); ++d) {
    if (d < lead || (shape[d - lead] == 1 && grad.sizes()[d] != 1)) dims.push_back(d);
  }
  return dims.empty() ? grad.view(shape) : sum(grad, dims, true).view(shape);
}

namespace {
// f(a, scalar) as PyTorch combines a tensor with a Python number: in the scalar's compute
// dtype (see scalar_like), with 16-bit float results rounded back once at the end.
template <typename F>
Tensor with_scalar(const Tensor& a, double value, const char* op, F f) {
  const Tensor s = scalar_like(a, value, op);
  const Tensor result = f(a.to(s.dtype()), s);
  return is_16bit_float(a.dtype()) ? result.to(a.dtype()) : result;
}

// a + alpha * b, shared by add and sub.
Tensor add_scaled(const Tensor& a_in, const Tensor& b_in, double alpha, const char* op, const char* node) {
  Tensor a = a_in, b = b_in;
  promote_floats(a, b);
  if (a.defined()) check_alpha(a, alpha, op);
  const Tensor out = binary(BinaryOp::kAdd, a, b, alpha, op);
  // grad_out: broadcast shape -> grad_a: a's shape, grad_b: alpha * grad_out in b's shape
  if (needs_grad(a, b)) {
    record_op(node, out, {a, b}, [a_shape = a.sizes(), b_shape = b.sizes(), alpha](const Tensor& g) {
      return std::vector<Tensor>{sum_to_size(g, a_shape), sum_to_size(alpha == 1.0 ? g : mul(g, alpha), b_shape)};
    });
  }
  return out;
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b, double alpha) { return add_scaled(a, b, alpha, "add", "AddBackward"); }
Tensor add(const Tensor& a, double b) {
  return with_scalar(a, b, "add", [](const Tensor& x, const Tensor& s) { return add(x, s); });
}
Tensor sub(const Tensor& a, const Tensor& b, double alpha) { return add_scaled(a, b, -alpha, "sub", "SubBackward"); }
Tensor sub(const Tensor& a, double b) {
  return with_scalar(a, b, "sub", [](const Tensor& x, const Tensor& s) { return sub(x, s); });
}

Tensor mul(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  promote_floats(a, b);
  const Tensor out = binary(BinaryOp::kMul, a, b, 1.0, "mul");
  // grad_a = grad_out * b, grad_b = grad_out * a (each summed to its input's shape)
  if (needs_grad(a, b)) {
    const bool need_a = a.requires_grad(), need_b = b.requires_grad();
    record_op("MulBackward", out, {a, b},
              [sa = SavedTensor(need_b ? a : Tensor()), sb = SavedTensor(need_a ? b : Tensor()), a_shape = a.sizes(),
               b_shape = b.sizes(), need_a, need_b](const Tensor& g) {
                return std::vector<Tensor>{need_a ? sum_to_size(mul(g, sb.get("MulBackward")), a_shape) : Tensor(),
                                           need_b ? sum_to_size(mul(g, sa.get("MulBackward")), b_shape) : Tensor()};
              });
  }
  return out;
}
Tensor mul(const Tensor& a, double b) {
  return with_scalar(a, b, "mul", [](const Tensor& x, const Tensor& s) { return mul(x, s); });
}

Tensor div(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  promote_floats(a, b);
  check_pair(a, b, "div");
  if (!a.is_floating_point()) return div(a.to(kFloat32), b.to(kFloat32));  // true division
  const Tensor out = binary(BinaryOp::kDiv, a, b, 1.0, "div");
  // grad_a = grad_out / b, grad_b = -grad_out * a / b^2 = -grad_out * out / b
  if (needs_grad(a, b)) {
    const bool need_a = a.requires_grad(), need_b = b.requires_grad();
    record_op("DivBackward", out, {a, b},
              [sb = SavedTensor(b), so = SavedTensor(need_b ? out : Tensor(), true), a_shape = a.sizes(),
               b_shape = b.sizes(), need_a, need_b](const Tensor& g) {
                const Tensor& bv = sb.get("DivBackward");
                return std::vector<Tensor>{
                    need_a ? sum_to_size(div(g, bv), a_shape) : Tensor(),
                    need_b ? sum_to_size(neg(div(mul(g, so.get("DivBackward")), bv)), b_shape) : Tensor()};
              });
  }
  return out;
}
Tensor div(const Tensor& a, double b) {
  check_defined(a, "div", "a");
  const Tensor x = a.is_floating_point() ? a : a.to(kFloat32);
  return with_scalar(x, b, "div", [](const Tensor& x32, const Tensor& s) { return div(x32, s); });
}
Tensor operator/(double a, const Tensor& b) {
  check_defined(b, "div", "b");
  const Tensor x = b.is_floating_point() ? b : b.to(kFloat32);
  return with_scalar(x, a, "div", [](const Tensor& x32, const Tensor& s) { return div(s, x32); });
}

namespace {
// maximum/minimum: the gradient goes to the winning input; on a tie each gets half (PyTorch).
Tensor select_binary(BinaryOp kind, const Tensor& a_in, const Tensor& b_in, const char* op, const char* node) {
  Tensor a = a_in, b = b_in;
  promote_floats(a, b);
  const Tensor out = binary(kind, a, b, 1.0, op);
  if (needs_grad(a, b)) {
    record_op(node, out, {a, b},
              [sa = SavedTensor(a), sb = SavedTensor(b), kind, node, a_shape = a.sizes(),
               b_shape = b.sizes()](const Tensor& g) {
                const Tensor& av = sa.get(node);
                const Tensor& bv = sb.get(node);
                const DType dt = g.dtype();
                const Tensor a_wins = kind == BinaryOp::kMaximum ? gt(av, bv) : lt(av, bv);
                const Tensor b_wins = kind == BinaryOp::kMaximum ? lt(av, bv) : gt(av, bv);
                const Tensor half_tie = mul(eq(av, bv).to(dt), 0.5);
                return std::vector<Tensor>{sum_to_size(mul(g, add(a_wins.to(dt), half_tie)), a_shape),
                                           sum_to_size(mul(g, add(b_wins.to(dt), half_tie)), b_shape)};
              });
  }
  return out;
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) {
  return select_binary(BinaryOp::kMaximum, a, b, "maximum", "MaximumBackward");
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return select_binary(BinaryOp::kMinimum, a, b, "minimum", "MinimumBackward");
}

void add_out(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, const char* op) {
  if (a.defined()) check_alpha(a, alpha, op);
  binary_out(BinaryOp::kAdd, out, a, b, alpha, op);
}
void mul_out(const Tensor& out, const Tensor& a, const Tensor& b, const char* op) {
  binary_out(BinaryOp::kMul, out, a, b, 1.0, op);
}
void div_out(const Tensor& out, const Tensor& a, const Tensor& b, const char* op) {
  if (a.defined()) {
    TDDP_CHECK(a.is_floating_point(),
               "{}: true division of {} tensors cannot be written in place (the result is float)", op,
               dtype_name(a.dtype()));
  }
  binary_out(BinaryOp::kDiv, out, a, b, 1.0, op);
}

// ---- comparisons (not differentiable: bool results) -------------------------------------------

Tensor eq(const Tensor& a, const Tensor& b) { return compare(CompareOp::kEq, a, b, "eq"); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare(CompareOp::kNe, a, b, "ne"); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(CompareOp::kLt, a, b, "lt"); }
Tensor le(const Tensor& a, const Tensor& b) { return compare(CompareOp::kLe, a, b, "le"); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare(CompareOp::kGt, a, b, "gt"); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare(CompareOp::kGe, a, b, "ge"); }
Tensor eq(const Tensor& a, double b) { return compare_scalar(CompareOp::kEq, a, b, "eq"); }
Tensor ne(const Tensor& a, double b) { return compare_scalar(CompareOp::kNe, a, b, "ne"); }
Tensor lt(const Tensor& a, double b) { return compare_scalar(CompareOp::kLt, a, b, "lt"); }
Tensor le(const Tensor& a, double b) { return compare_scalar(CompareOp::kLe, a, b, "le"); }
Tensor gt(const Tensor& a, double b) { return compare_scalar(CompareOp::kGt, a, b, "gt"); }
Tensor ge(const Tensor& a, double b) { return compare_scalar(CompareOp::kGe, a, b, "ge"); }

// ---- unary ------------------------------------------------------------------------------------
// Shapes are unchanged: grad_x and grad_out both have x's shape.

namespace {
// Records a unary op whose gradient is grad_out * factor(saved), where `saved` is the input
// or the output as the formula needs.
template <typename F>
Tensor record_unary(const Tensor& x, const Tensor& out, const char* node, const Tensor& saved, F factor) {
  if (needs_grad(x)) {
    record_op(node, out, {x}, [s = SavedTensor(saved, saved.is_same(out)), node, factor](const Tensor& g) {
      return std::vector<Tensor>{mul(g, factor(s.get(node)))};
    });
  }
  return out;
}
}  // namespace

Tensor neg(const Tensor& x) {
  const Tensor out = numeric_unary(UnaryOp::kNeg, x, "neg");
  // grad_x = -grad_out
  if (needs_grad(x)) record_op("NegBackward", out, {x}, [](const Tensor& g) { return std::vector<Tensor>{neg(g)}; });
  return out;
}
Tensor abs(const Tensor& x) {
  // grad_x = grad_out * sign(x) (0 at 0)
  return record_unary(x, numeric_unary(UnaryOp::kAbs, x, "abs"), "AbsBackward", x,
                      [](const Tensor& v) { return sub(gt(v, 0.0).to(v.dtype()), lt(v, 0.0).to(v.dtype())); });
}
Tensor relu(const Tensor& x) {
  const Tensor out = numeric_unary(UnaryOp::kRelu, x, "relu");
  // grad_x = grad_out where out > 0, else 0 (one fused pass)
  if (needs_grad(x)) {
    record_op("ReluBackward", out, {x}, [so = SavedTensor(out, true)](const Tensor& g) {
      const Tensor y = so.get("ReluBackward");
      // create_graph: a recorded product with out > 0 (a mask: no gradient of its own)
      if (GradMode::is_enabled()) return std::vector<Tensor>{mul(g, gt(y, 0.0).to(g.dtype()))};
      return std::vector<Tensor>{binary(BinaryOp::kReluBackward, g, y, 1.0, "relu_backward")};
    });
  }
  return out;
}
Tensor exp(const Tensor& x) {
  const Tensor out = floating_unary(UnaryOp::kExp, x, "exp");
  // grad_x = grad_out * exp(x) = grad_out * out
  return record_unary(x, out, "ExpBackward", out, [](const Tensor& y) { return y; });
}
Tensor log(const Tensor& x) {
  // grad_x = grad_out / x
  return record_unary(x, floating_unary(UnaryOp::kLog, x, "log"), "LogBackward", x,
                      [](const Tensor& v) { return 1.0 / v; });
}
Tensor sqrt(const Tensor& x) {
  const Tensor out = floating_unary(UnaryOp::kSqrt, x, "sqrt");
  // grad_x = grad_out / (2 sqrt(x)) = grad_out / (2 out)
  return record_unary(x, out, "SqrtBackward", out, [](const Tensor& y) { return 0.5 / y; });
}
Tensor tanh(const Tensor& x) {
  const Tensor out = floating_unary(UnaryOp::kTanh, x, "tanh");
  // grad_x = grad_out * (1 - out^2)
  return record_unary(x, out, "TanhBackward", out, [](const Tensor& y) { return 1.0 - mul(y, y); });
}
Tensor sigmoid(const Tensor& x) {
  const Tensor out = floating_unary(UnaryOp::kSigmoid, x, "sigmoid");
  // grad_x = grad_out * out * (1 - out)
  return record_unary(x, out, "SigmoidBackward", out, [](const Tensor& y) { return mul(y, 1.0 - y); });
}

Tensor masked_fill(const Tensor& input, const Tensor& mask, double value) {
  check_defined(input, "masked_fill", "input");
  check_defined(mask, "masked_fill", "mask");
  check_not_bool(input, "masked_fill", "input");
  TDDP_CHECK(mask.dtype() == kBool, "masked_fill: expected a bool mask, got dtype {}", dtype_name(mask.dtype()));
  check_same_device(input, mask, "masked_fill", "input", "mask");
  TDDP_CHECK(is_expandable_to(mask.sizes(), input.sizes()),
             "masked_fill: a mask of shape {} cannot be broadcast to the input's shape {}", format_shape(mask.sizes()),
             format_shape(input.sizes()));
  TDDP_CHECK(input.is_floating_point() || (std::isfinite(value) && value == std::trunc(value)),
             "masked_fill: value {} cannot be stored in a tensor of dtype {}", value, dtype_name(input.dtype()));
  Tensor out;
  {
    NoGradGuard no_grad;
    out = binary(BinaryOp::kMaskedFill, input, mask.to(input.dtype()), value, "masked_fill");
  }
  // grad_input = grad_out where the mask is false, 0 where it filled
  if (needs_grad(input)) {
    record_op("MaskedFillBackward", out, {input},
              [mask](const Tensor& g) { return std::vector<Tensor>{masked_fill(g, mask, 0.0)}; });
  }
  return out;
}

namespace {
// gelu'(x) (its own kernel: elementwise_math.h); recorded under create_graph, with gelu'' from
// graph_formulas.h.
Tensor gelu_grad(const Tensor& v, bool tanh_form) {
  const Tensor d1 = floating_unary(tanh_form ? UnaryOp::kGeluTanhGrad : UnaryOp::kGeluGrad, v, "gelu backward");
  return record_unary(v, d1, "GeluBackwardBackward", v,
                      [tanh_form](const Tensor& x) { return gelu_second_derivative(x, tanh_form); });
}
}  // namespace

Tensor gelu(const Tensor& x, std::string_view approximate) {
  check_defined(x, "gelu", "x");
  TDDP_CHECK(approximate == "none" || approximate == "tanh", "gelu: approximate must be 'none' or 'tanh', got '{}'",
             approximate);
  TDDP_CHECK(x.is_floating_point(), "gelu: expected a floating-point input, got dtype {}", dtype_name(x.dtype()));
  const bool tanh_form = approximate == "tanh";
  const Tensor out = floating_unary(tanh_form ? UnaryOp::kGeluTanh : UnaryOp::kGelu, x, "gelu");
  // grad_x = grad_out * gelu'(x)
  return record_unary(x, out, "GeluBackward", x, [tanh_form](const Tensor& v) { return gelu_grad(v, tanh_form); });
}

Tensor pow(const Tensor& x, double exponent) {
  check_defined(x, "pow", "x");
  check_not_bool(x, "pow", "x");
  const bool integral_exponent = std::isfinite(exponent) && exponent == std::trunc(exponent);
  if (x.dtype() == kInt64) {
    if (!integral_exponent) return pow(x.to(kFloat32), exponent);
    TDDP_CHECK(exponent >= 0, "pow: integers to negative integer powers are not allowed (exponent {})", exponent);
  }
  const Tensor out = new_output(x.sizes(), x.dtype(), x.device());
  {
    NoGradGuard no_grad;
    backend_for(x.device(), "pow").pow_scalar(out, x, exponent);
  }
  // grad_x = grad_out * exponent * x^(exponent - 1) (zero when exponent is 0)
  return record_unary(x, out, "PowBackward", x, [exponent](const Tensor& v) {
    return exponent == 0.0 ? zeros_like(v) : mul(pow(v, exponent - 1.0), exponent);
  });
}

Tensor pow(double base, const Tensor& exponent) {
  check_defined(exponent, "pow", "exponent");
  check_not_bool(exponent, "pow", "exponent");
  if (exponent.dtype() == kInt64) {
    TDDP_CHECK(!(std::isfinite(base) && base == std::trunc(base)),
               "pow: an integral base ({}) with an int64 exponent gives integers, which are not supported: pass a "
               "floating exponent",
               base);
    return pow(base, exponent.to(kFloat32));
  }
  const Tensor out = new_output(exponent.sizes(), exponent.dtype(), exponent.device());
  {
    NoGradGuard no_grad;
    backend_for(exponent.device(), "pow").pow_scalar_base(out, exponent, base);
  }
  // grad_exponent = grad_out * out * log(base), as PyTorch: 0 where base is 0 and exponent >= 0
  if (!needs_grad(exponent)) return out;
  record_op("PowBackward1", out, {exponent},
            [so = SavedTensor(out, true), se = SavedTensor(exponent), base](const Tensor& g) {
              Tensor factor = mul(so.get("PowBackward1"), std::log(base));
              if (base == 0) factor = masked_fill(factor, ge(se.get("PowBackward1"), 0.0), 0.0);
              return std::vector<Tensor>{mul(g, factor)};
            });
  return out;
}

}  // namespace tinyddp::tensor
