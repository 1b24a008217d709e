// Elementwise ops of one tensor: neg, abs, relu, exp, log, sqrt, tanh, sigmoid, gelu, pow with
// a scalar, the trigonometric and special functions, the roundings, and the float tests
// (isnan, isinf, isfinite, nan_to_num), each forward beside its backward formula (recorded via
// graph.h). Shapes are unchanged: grad_x and grad_out both have x's shape.
#include <cmath>
#include <limits>

#include "tinyddp/tensor/graph.h"
#include "tinyddp/tensor/native/checks.h"
#include "tinyddp/tensor/native/elementwise.h"
#include "tinyddp/tensor/native/graph_formulas.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::tensor {

using namespace detail;

namespace {

Tensor run_unary(UnaryOp kind, const Tensor& x, const char* op) {
  NoGradGuard no_grad;
  const Tensor out = new_output(x.sizes(), x.dtype(), x.device(), result_format(x.sizes(), {&x}));
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
// made dense (row-major, or channels last when the result is) so that every layout takes the
// same (vectorised) code path.
Tensor floating_unary(UnaryOp kind, const Tensor& x, const char* op) {
  check_defined(x, op, "x");
  NoGradGuard no_grad;
  const Tensor input = x.is_floating_point() ? x : x.to(kFloat32);
  return run_unary(kind, input.contiguous(result_format(x.sizes(), {&x})), op);
}

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
  // grad_x = grad_out * gelu'(x): one fused pass (one rounding in a 16-bit dtype, as PyTorch's);
  // create_graph records the product with gelu'(x), whose own gradient is gelu''
  if (needs_grad(x)) {
    record_op("GeluBackward", out, {x}, [sx = SavedTensor(x), tanh_form](const Tensor& g) {
      const Tensor v = sx.get("GeluBackward");
      if (GradMode::is_enabled()) return std::vector<Tensor>{mul(g, gelu_grad(v, tanh_form))};
      const BinaryOp op = tanh_form ? BinaryOp::kGeluTanhBackward : BinaryOp::kGeluBackward;
      return std::vector<Tensor>{binary(op, g, v, 1.0, "gelu backward")};
    });
  }
  return out;
}

Tensor pow(const Tensor& x, double exponent) {
  check_defined(x, "pow", "x");
  check_not_bool(x, "pow", "x");
  const bool integral_exponent = std::isfinite(exponent) && exponent == std::trunc(exponent);
  if (is_integral(x.dtype(), false)) {
    if (!integral_exponent) return pow(x.to(kFloat32), exponent);
    TDDP_CHECK(exponent >= 0, "pow: integers to negative integer powers are not allowed (exponent {})", exponent);
  }
  const Tensor out = new_output(x.sizes(), x.dtype(), x.device(), result_format(x.sizes(), {&x}));
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
  if (is_integral(exponent.dtype(), false)) {
    TDDP_CHECK(!(std::isfinite(base) && base == std::trunc(base)),
               "pow: an integral base ({}) with an integer exponent gives integers, which are not supported: pass a "
               "floating exponent",
               base);
    return pow(base, exponent.to(kFloat32));
  }
  const Tensor out =
      new_output(exponent.sizes(), exponent.dtype(), exponent.device(), result_format(exponent.sizes(), {&exponent}));
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

// ---- trigonometric and special functions (integers compute in float32) ------------------------

Tensor sin(const Tensor& x) {
  // grad_x = grad_out * cos(x)
  return record_unary(x, floating_unary(UnaryOp::kSin, x, "sin"), "SinBackward", x,
                      [](const Tensor& v) { return cos(v); });
}
Tensor cos(const Tensor& x) {
  // grad_x = -grad_out * sin(x)
  return record_unary(x, floating_unary(UnaryOp::kCos, x, "cos"), "CosBackward", x,
                      [](const Tensor& v) { return neg(sin(v)); });
}
Tensor erf(const Tensor& x) {
  // grad_x = grad_out * 2 / sqrt(pi) * exp(-x^2)
  return record_unary(x, floating_unary(UnaryOp::kErf, x, "erf"), "ErfBackward", x,
                      [](const Tensor& v) { return mul(exp(neg(mul(v, v))), 2.0 / std::sqrt(M_PI)); });
}
Tensor log1p(const Tensor& x) {
  // grad_x = grad_out / (1 + x)
  return record_unary(x, floating_unary(UnaryOp::kLog1p, x, "log1p"), "Log1PBackward", x,
                      [](const Tensor& v) { return 1.0 / add(v, 1.0); });
}
Tensor expm1(const Tensor& x) {
  const Tensor out = floating_unary(UnaryOp::kExpm1, x, "expm1");
  // grad_x = grad_out * exp(x) = grad_out * (out + 1)
  return record_unary(x, out, "Expm1Backward", out, [](const Tensor& y) { return add(y, 1.0); });
}
Tensor rsqrt(const Tensor& x) {
  const Tensor out = floating_unary(UnaryOp::kRsqrt, x, "rsqrt");
  // grad_x = -grad_out * out^3 / 2
  return record_unary(x, out, "RsqrtBackward", out, [](const Tensor& y) { return mul(pow(y, 3.0), -0.5); });
}
Tensor reciprocal(const Tensor& x) {
  const Tensor out = floating_unary(UnaryOp::kReciprocal, x, "reciprocal");
  // grad_x = -grad_out * out^2
  return record_unary(x, out, "ReciprocalBackward", out, [](const Tensor& y) { return neg(mul(y, y)); });
}
Tensor square(const Tensor& x) { return pow(x, 2.0); }

// ---- roundings and sign: same dtype, piecewise constant (zero gradients, as PyTorch) ----------

namespace {
Tensor piecewise_constant(UnaryOp kind, const Tensor& x, const char* op, const char* node) {
  const Tensor out = numeric_unary(kind, x, op);
  if (needs_grad(x)) {
    record_op(node, out, {x}, [](const Tensor& g) { return std::vector<Tensor>{zeros_like(g)}; });
  }
  return out;
}
}  // namespace

Tensor floor(const Tensor& x) { return piecewise_constant(UnaryOp::kFloor, x, "floor", "FloorBackward"); }
Tensor ceil(const Tensor& x) { return piecewise_constant(UnaryOp::kCeil, x, "ceil", "CeilBackward"); }
Tensor trunc(const Tensor& x) { return piecewise_constant(UnaryOp::kTrunc, x, "trunc", "TruncBackward"); }
Tensor sign(const Tensor& x) { return piecewise_constant(UnaryOp::kSign, x, "sign", "SignBackward"); }
Tensor round(const Tensor& x, int64_t decimals) {
  if (decimals == 0) return piecewise_constant(UnaryOp::kRound, x, "round", "RoundBackward");
  check_defined(x, "round", "x");
  TDDP_CHECK(x.is_floating_point(), "round: decimals ({}) need a floating-point input, got dtype {}", decimals,
             dtype_name(x.dtype()));
  // As PyTorch: rounded at x * 10^decimals, or x / 10^-decimals for negative decimals.
  const double scale = std::pow(10.0, static_cast<double>(decimals < 0 ? -decimals : decimals));
  return decimals > 0 ? div(round(mul(x, scale)), scale) : mul(round(div(x, scale)), scale);
}

// ---- float tests ------------------------------------------------------------------------------

Tensor isnan(const Tensor& x) {
  check_defined(x, "isnan", "x");
  NoGradGuard no_grad;
  return x.is_floating_point() ? ne(x, x) : zeros(x.sizes(), TensorOptions(kBool).device(x.device()));
}
Tensor isinf(const Tensor& x) {
  check_defined(x, "isinf", "x");
  NoGradGuard no_grad;
  return x.is_floating_point() ? eq(abs(x), std::numeric_limits<double>::infinity())
                               : zeros(x.sizes(), TensorOptions(kBool).device(x.device()));
}
Tensor isfinite(const Tensor& x) {
  check_defined(x, "isfinite", "x");
  NoGradGuard no_grad;
  // |NaN| < inf and inf < inf are both false
  return x.is_floating_point() ? lt(abs(x), std::numeric_limits<double>::infinity())
                               : ones(x.sizes(), TensorOptions(kBool).device(x.device()));
}

namespace {
double largest_finite(DType dtype) {
  switch (dtype) {
    case kFloat64: return std::numeric_limits<double>::max();
    case kFloat16: return 65504.0;
    case kBFloat16: return 3.3895313892515355e38;  // (2 - 2^-7) 2^127
    default: return std::numeric_limits<float>::max();
  }
}
}  // namespace

Tensor nan_to_num(const Tensor& x, double nan, std::optional<double> posinf, std::optional<double> neginf) {
  check_defined(x, "nan_to_num", "x");
  if (!x.is_floating_point()) return x.clone();
  const double inf = std::numeric_limits<double>::infinity();
  // grad_x = grad_out where x is finite, 0 where it was replaced (masked_fill's)
  Tensor out = masked_fill_keeping_layout(x, isnan(x), nan);
  out = masked_fill_keeping_layout(out, eq(x, inf), posinf.value_or(largest_finite(x.dtype())));
  return masked_fill_keeping_layout(out, eq(x, -inf), neginf.value_or(-largest_finite(x.dtype())));
}

}  // namespace tinyddp::tensor
