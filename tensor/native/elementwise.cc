// Elementwise ops of two tensors: binary arithmetic (broadcasting; gradients summed back to each
// input's shape with sum_to_size), comparisons (not differentiable: bool results) and masked_fill,
// each forward beside its backward formula (recorded via graph.h). The unary ones: unary.cc.
#include "tinyddp/tensor/ops.h"

#include <algorithm>
#include <cmath>

#include "tinyddp/tensor/graph.h"
#include "tinyddp/tensor/native/checks.h"
#include "tinyddp/tensor/native/elementwise.h"
#include "tinyddp/tensor/native/graph_formulas.h"

namespace tinyddp::tensor {

using namespace detail;

namespace {

// PyTorch's kinds of dtype, in promotion order.
int dtype_kind(DType dtype) { return dtype == kBool ? 0 : is_integral(dtype, false) ? 1 : 2; }

void run_binary(BinaryOp kind, const Tensor& out, const Tensor& a, const Tensor& b, double alpha, const char* op) {
  NoGradGuard no_grad;
  backend_for(out.device(), op).binary(kind, out, a, b, alpha);
}

void binary_out(BinaryOp kind, const Tensor& out, const Tensor& a, const Tensor& b, double alpha, const char* op);

// An out-variant whose operands' dtypes differ from each other or from out's: computed in
// result_type(a, b) and written into out when that result can be cast to out's dtype, as
// PyTorch's in-place ops (float32 x.add_(int64 y) works; int64 x.mul_(2.5) is refused).
void mixed_binary_out(BinaryOp kind, const Tensor& out, const Tensor& a, const Tensor& b, double alpha,
                      const char* op) {
  const DType dtype = result_type(a, b);
  TDDP_CHECK(can_cast(dtype, out.dtype()), "{}: result type {} can't be cast to the desired output type {}", op,
             dtype_name(dtype), dtype_name(out.dtype()));
  const Tensor pa = a.to(dtype), pb = b.to(dtype);
  if (dtype == out.dtype()) return binary_out(kind, out, pa, pb, alpha, op);
  const Tensor result = new_output(out.sizes(), dtype, out.device());
  binary_out(kind, result, pa, pb, alpha, op);
  NoGradGuard no_grad;
  out.copy_(result);
}

// Shared checks of the out-variants: out = kind(a, b) with out already allocated.
void binary_out(BinaryOp kind, const Tensor& out, const Tensor& a, const Tensor& b, double alpha, const char* op) {
  if (a.defined() && b.defined() && out.defined() && (a.dtype() != b.dtype() || a.dtype() != out.dtype())) {
    return mixed_binary_out(kind, out, a, b, alpha, op);
  }
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

void check_alpha(const Tensor& a, double alpha, const char* op) {
  TDDP_CHECK(a.is_floating_point() || alpha == std::trunc(alpha),
             "{}: for integral input tensors, alpha must be an integer, got {}", op, alpha);
}

Tensor compare(CompareOp kind, const Tensor& a, const Tensor& b, const char* op) {
  if (a.defined() && b.defined() && a.dtype() != b.dtype()) {  // promoted first, as PyTorch's
    Tensor pa = a, pb = b;
    promote_operands(pa, pb);
    return compare(kind, pa, pb, op);
  }
  check_pair(a, b, op);
  const Shape shape = broadcast_shapes(a.sizes(), b.sizes(), op);
  const Tensor out = new_output(shape, kBool, a.device(), result_format(shape, {&a, &b}));
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

}  // namespace

DType result_type(const Tensor& a, const Tensor& b) {
  check_defined(a, "result_type", "a");
  check_defined(b, "result_type", "b");
  if (a.dtype() == b.dtype()) return a.dtype();
  if ((a.dim() == 0) == (b.dim() == 0)) return promote_types(a.dtype(), b.dtype());
  // One 0-dim operand: it joins in only if it is of a higher kind (then promote_types, as
  // torch's combine_categories: int32 [3] with float64 [] is float64).
  const DType dims = (a.dim() > 0 ? a : b).dtype(), zero = (a.dim() > 0 ? b : a).dtype();
  return dtype_kind(zero) > dtype_kind(dims) ? promote_types(dims, zero) : dims;
}

Tensor detail::binary(BinaryOp kind, const Tensor& a, const Tensor& b, double alpha, const char* op) {
  check_pair(a, b, op);
  check_not_bool(a, op, "a");
  const Shape shape = broadcast_shapes(a.sizes(), b.sizes(), op);
  const Tensor out = new_output(shape, a.dtype(), a.device(), result_format(shape, {&a, &b}));
  run_binary(kind, out, a, b, alpha, op);
  return out;
}

// ---- binary arithmetic ---------------------------------------------------------------------
// Gradients of broadcasting ops are summed back to each input's shape (sum_to_size).

Tensor scalar_like(const Tensor& t, double value, const char* op) {
  check_defined(t, op, "a");
  DType dtype = t.dtype();
  if (is_integral(dtype, false) && !(std::isfinite(value) && value == std::trunc(value))) dtype = kFloat32;
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
  promote_operands(a, b);
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
  promote_operands(a, b);
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
  promote_operands(a, b);
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
  promote_operands(a, b);
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

Tensor pow(const Tensor& x_in, const Tensor& exponent_in) {
  Tensor x = x_in, e = exponent_in;
  check_defined(x, "pow", "x");
  check_defined(e, "pow", "exponent");
  check_not_bool(x, "pow", "x");
  check_not_bool(e, "pow", "exponent");
  if (x.is_floating_point() != e.is_floating_point()) {  // the integer side joins the floating one
    (x.is_floating_point() ? e : x) = (x.is_floating_point() ? e.to(x.dtype()) : x.to(e.dtype()));
  }
  promote_operands(x, e);
  check_pair(x, e, "pow");
  if (!x.is_floating_point() && e.numel() > 0) {
    NoGradGuard no_grad;
    TDDP_CHECK(min(e).item<int64_t>() >= 0, "pow: integers to negative integer powers are not allowed");
  }
  const Tensor out = binary(BinaryOp::kPow, x, e, 1.0, "pow");
  // grad_x = grad_out * e * x^(e - 1) (0 where e is 0); grad_e = grad_out * out * log(x) (0
  // where x is 0 and e >= 0), each summed to its input's shape
  if (needs_grad(x, e)) {
    const bool need_x = x.requires_grad(), need_e = e.requires_grad();
    record_op("PowBackward2", out, {x, e},
              [sx = SavedTensor(x), se = SavedTensor(e), so = SavedTensor(need_e ? out : Tensor(), true),
               x_shape = x.sizes(), e_shape = e.sizes(), need_x, need_e](const Tensor& g) {
                const Tensor& xv = sx.get("PowBackward2");
                const Tensor& ev = se.get("PowBackward2");
                Tensor grad_x, grad_e;
                if (need_x) {
                  const Tensor factor = masked_fill(mul(ev, pow(xv, sub(ev, 1.0))), eq(ev, 0.0), 0.0);
                  grad_x = sum_to_size(mul(g, factor), x_shape);
                }
                if (need_e) {
                  const Tensor factor = mul(so.get("PowBackward2"), log(xv));
                  grad_e =
                      sum_to_size(mul(g, masked_fill(factor, logical_and(eq(xv, 0.0), ge(ev, 0.0)), 0.0)), e_shape);
                }
                return std::vector<Tensor>{grad_x, grad_e};
              });
  }
  return out;
}

// ---- combinations (composites: their gradients are their parts') -----------------------------

namespace {
// The result laid out as PyTorch's one kernel over (start, end, weight) lays it out.
Tensor lerp_layout(const Tensor& result, const Tensor& start, const Tensor& end, const Tensor* weight = nullptr) {
  const MemoryFormat format = result_format(result.sizes(), {&start, &end, weight});
  return result.is_contiguous(format) ? result : result.contiguous(format);
}
}  // namespace

Tensor lerp(const Tensor& start, const Tensor& end, double weight) {
  check_pair(start, end, "lerp");
  // As PyTorch: from start for weights below 0.5, back from end otherwise (exact at both ends).
  const Tensor diff = sub(end, start);
  return lerp_layout(std::abs(weight) < 0.5 ? add(start, mul(diff, weight)) : sub(end, mul(diff, 1.0 - weight)), start,
                     end);
}
Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight) {
  check_pair(start, end, "lerp");
  check_defined(weight, "lerp", "weight");
  const Tensor diff = sub(end, start);
  return lerp_layout(where(lt(abs(weight), 0.5), add(start, mul(weight, diff)), sub(end, mul(diff, 1.0 - weight))),
                     start, end, &weight);
}
Tensor addcmul(const Tensor& input, const Tensor& tensor1, const Tensor& tensor2, double value) {
  check_defined(input, "addcmul", "input");
  return add(input, mul(value == 1.0 ? tensor1 : mul(tensor1, value), tensor2));
}
Tensor addcdiv(const Tensor& input, const Tensor& tensor1, const Tensor& tensor2, double value) {
  check_defined(input, "addcdiv", "input");
  return add(input, div(value == 1.0 ? tensor1 : mul(tensor1, value), tensor2));
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

namespace {
Tensor truth(const Tensor& t, const char* op, const char* arg) {
  check_defined(t, op, arg);
  return t.dtype() == kBool ? t : ne(t, 0.0);
}
// a & b, a | b, a ^ b, ~a: bitwise ops, here of bool tensors only (their logical ops).
void check_bool_operand(const Tensor& t, const char* op) {
  check_defined(t, op, "operand");
  TDDP_CHECK(t.dtype() == kBool,
             "{}: bitwise operators take bool tensors here, got dtype {} (compare first, or use "
             "logical_and / logical_or / logical_xor / logical_not)",
             op, dtype_name(t.dtype()));
}
}  // namespace

Tensor logical_and(const Tensor& a, const Tensor& b) {
  return compare(CompareOp::kLogicalAnd, truth(a, "logical_and", "a"), truth(b, "logical_and", "b"), "logical_and");
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  return compare(CompareOp::kLogicalOr, truth(a, "logical_or", "a"), truth(b, "logical_or", "b"), "logical_or");
}
Tensor logical_xor(const Tensor& a, const Tensor& b) {
  return compare(CompareOp::kLogicalXor, truth(a, "logical_xor", "a"), truth(b, "logical_xor", "b"), "logical_xor");
}
Tensor logical_not(const Tensor& a) { return eq(truth(a, "logical_not", "a"), 0.0); }
Tensor operator&(const Tensor& a, const Tensor& b) {
  check_bool_operand(a, "&");
  check_bool_operand(b, "&");
  return logical_and(a, b);
}
Tensor operator|(const Tensor& a, const Tensor& b) {
  check_bool_operand(a, "|");
  check_bool_operand(b, "|");
  return logical_or(a, b);
}
Tensor operator^(const Tensor& a, const Tensor& b) {
  check_bool_operand(a, "^");
  check_bool_operand(b, "^");
  return logical_xor(a, b);
}
Tensor operator~(const Tensor& a) {
  check_bool_operand(a, "~");
  return logical_not(a);
}

namespace {
Tensor masked_fill_as(const Tensor& input, const Tensor& mask, double value, bool keep_layout) {
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
  const MemoryFormat format = keep_layout ? result_format(input.sizes(), {&input}) : MemoryFormat::kContiguous;
  const Tensor out = new_output(input.sizes(), input.dtype(), input.device(), format);
  run_binary(BinaryOp::kMaskedFill, out, input, mask.to(input.dtype()), value, "masked_fill");
  // grad_input = grad_out where the mask is false, 0 where it filled
  if (needs_grad(input)) {
    record_op("MaskedFillBackward", out, {input},
              [mask](const Tensor& g) { return std::vector<Tensor>{masked_fill_keeping_layout(g, mask, 0.0)}; });
  }
  return out;
}
}  // namespace

// Row-major whatever the input's layout, as PyTorch's out-of-place masked_fill.
Tensor masked_fill(const Tensor& input, const Tensor& mask, double value) {
  return masked_fill_as(input, mask, value, false);
}
Tensor detail::masked_fill_keeping_layout(const Tensor& input, const Tensor& mask, double value) {
  return masked_fill_as(input, mask, value, true);
}

}  // namespace tinyddp::tensor
