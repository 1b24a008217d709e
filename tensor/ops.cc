// Tensor operations: argument checks (errors name the op, the argument and the shapes,
// dtypes or devices involved), output allocation, the device switch into cpu/ kernels, and,
// right beside each differentiable forward, its backward formula (recorded via graph.h).
// Kernels always run under NoGradGuard so that the tensor methods they use record nothing.
#include "tensor/ops.h"

#include <algorithm>
#include <cmath>

#include "tensor/cpu/kernels.h"
#include "tensor/cuda.h"
#include "tensor/cuda/backend.h"
#include "tensor/graph.h"

namespace tinyddp::tensor {

namespace {

[[noreturn]] void no_kernel(const char* op, Device device) {
  throw Error(fmt::format("{}: no kernel for tensors on {} in this build", op, device.str()));
}

// Before a CUDA kernel: a build without CUDA has none (a CUDA tensor can only exist there
// through a custom allocator, as tests make one).
void require_cuda(const char* op, Device device) {
  if (!cuda::is_built()) no_kernel(op, device);
}

void check_defined(const Tensor& t, const char* op, const char* arg) {
  TDDP_CHECK(t.defined(), "{}: argument '{}' is an undefined tensor", op, arg);
}

void check_same_device(const Tensor& a, const Tensor& b, const char* op, const char* name_a, const char* name_b) {
  TDDP_CHECK(a.device() == b.device(), "{}: expected all tensors on the same device, but '{}' is on {} and '{}' is on {}",
             op, name_a, a.device().str(), name_b, b.device().str());
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op, const char* name_a, const char* name_b) {
  TDDP_CHECK(a.dtype() == b.dtype(),
             "{}: expected tensors of the same dtype, but '{}' is {} and '{}' is {} (convert one with .to(dtype))", op,
             name_a, dtype_name(a.dtype()), name_b, dtype_name(b.dtype()));
}

void check_not_bool(const Tensor& t, const char* op, const char* arg) {
  TDDP_CHECK(t.dtype() != kBool, "{}: arithmetic on bool tensors is not supported ('{}' is bool; convert with .to(dtype))",
             op, arg);
}

void check_pair(const Tensor& a, const Tensor& b, const char* op) {
  check_defined(a, op, "a");
  check_defined(b, op, "b");
  check_same_device(a, b, op, "a", "b");
  check_same_dtype(a, b, op, "a", "b");
}

// True when some element of `t` is reachable through two different indices (a broadcast
// dim of stride 0). Writing into such a tensor would be order-dependent.
bool has_internal_overlap(const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.sizes()[d] > 1 && t.strides()[d] == 0) return true;
  }
  return false;
}

// Byte range [first, last] touched by t inside its storage (t.numel() > 0).
std::pair<int64_t, int64_t> byte_range(const Tensor& t) {
  int64_t last = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.sizes()[d] - 1) * t.strides()[d];
  const auto size = static_cast<int64_t>(t.element_size());
  return {t.storage_offset() * size, (last + 1) * size - 1};
}

bool same_geometry(const Tensor& a, const Tensor& b) {
  return a.storage_offset() == b.storage_offset() && a.sizes() == b.sizes() && a.strides() == b.strides() &&
         a.dtype() == b.dtype();
}

// An input that overlaps the output in any way other than being exactly the output (the
// in-place case) is copied first, so the result never depends on loop order.
Tensor detach_from_output(const Tensor& input, const Tensor& out) {
  if (!input.shares_storage(out) || input.numel() == 0 || out.numel() == 0) return input;
  if (same_geometry(input, out)) return input;
  const auto [in_first, in_last] = byte_range(input);
  const auto [out_first, out_last] = byte_range(out);
  if (in_last < out_first || out_last < in_first) return input;
  return input.clone();
}

void check_writable(const Tensor& out, const char* op) {
  TDDP_CHECK(!has_internal_overlap(out),
             "{}: more than one element of the written-to tensor refers to a single memory location (shape {}, strides "
             "{}); clone() it first",
             op, format_shape(out.sizes()), format_shape(out.strides()));
}

Tensor new_output(const Shape& shape, DType dtype, Device device) {
  return empty(shape, TensorOptions().dtype(dtype).device(device));
}

// In-place writes are not differentiable in tinyddp: refuse them where a gradient would be
// lost or corrupted (the output or the source takes part in the graph) instead of giving
// silently wrong gradients. Outside grad mode (optimizer steps, DDP buckets) they are fine.
void check_in_place(const Tensor& self, const Tensor* source, const char* op) {
  if (!GradMode::is_enabled()) return;
  TDDP_CHECK(!self.requires_grad(),
             "{}: in-place operation on a tensor that requires grad; autograd records out-of-place ops only (use the "
             "out-of-place op, or NoGradGuard for updates such as optimizer steps)",
             op);
  TDDP_CHECK(source == nullptr || !source->defined() || !source->requires_grad(),
             "{}: the source tensor requires grad, but an in-place write into a tensor that does not cannot record "
             "it; use the out-of-place op",
             op);
}

void run_binary(cpu::BinaryOp kind, const Tensor& out, const Tensor& a, const Tensor& b, double alpha, const char* op) {
  NoGradGuard no_grad;
  switch (out.device().type) {
    case DeviceType::kCPU: cpu::binary(kind, out, a, b, alpha); return;
    case DeviceType::kCUDA: require_cuda(op, out.device()); cuda::binary(kind, out, a, b, alpha); return;
  }
}

// Shared checks of the out-variants: out = kind(a, b) with out already allocated.
void binary_out(cpu::BinaryOp kind, const Tensor& out, const Tensor& a, const Tensor& b, double alpha, const char* op) {
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

Tensor binary(cpu::BinaryOp kind, const Tensor& a, const Tensor& b, double alpha, const char* op) {
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

Tensor compare(cpu::CompareOp kind, const Tensor& a, const Tensor& b, const char* op) {
  check_pair(a, b, op);
  const Tensor out = new_output(broadcast_shapes(a.sizes(), b.sizes(), op), kBool, a.device());
  NoGradGuard no_grad;
  switch (out.device().type) {
    case DeviceType::kCPU: cpu::compare(kind, out, a, b); return out;
    case DeviceType::kCUDA: require_cuda(op, out.device()); cuda::compare(kind, out, a, b); return out;
  }
  return out;
}

Tensor compare_scalar(cpu::CompareOp kind, const Tensor& a, double b, const char* op) {
  check_defined(a, op, "a");
  const Tensor s = a.dtype() == kBool ? scalar_tensor(b, TensorOptions(kBool).device(a.device()))
                                      : scalar_like(a, b, op);
  return compare(kind, a.to(s.dtype()), s, op);
}

Tensor run_unary(cpu::UnaryOp kind, const Tensor& x, const char* op) {
  NoGradGuard no_grad;
  const Tensor out = new_output(x.sizes(), x.dtype(), x.device());
  switch (x.device().type) {
    case DeviceType::kCPU: cpu::unary(kind, out, x); return out;
    case DeviceType::kCUDA: require_cuda(op, x.device()); cuda::unary(kind, out, x); return out;
  }
  return out;
}

// neg, abs, relu: any numeric dtype, result of the same dtype.
Tensor numeric_unary(cpu::UnaryOp kind, const Tensor& x, const char* op) {
  check_defined(x, op, "x");
  check_not_bool(x, op, "x");
  return run_unary(kind, x, op);
}

// exp, log, sqrt, tanh, sigmoid: integers compute in float32, as in PyTorch. The input is
// made contiguous so that every layout takes the same (vectorised) code path.
Tensor floating_unary(cpu::UnaryOp kind, const Tensor& x, const char* op) {
  check_defined(x, op, "x");
  NoGradGuard no_grad;
  const Tensor input = x.is_floating_point() ? x : x.to(kFloat32);
  return run_unary(kind, input.contiguous(), op);
}

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

// Before a kernel that exists for the CPU and, in CUDA builds, for GPUs.
void check_kernel_device(const Tensor& x, const char* op) {
  if (x.is_cuda()) require_cuda(op, x.device());
  else if (!x.is_cpu()) no_kernel(op, x.device());
}

// out = a @ b on the tensors' device (checked by the caller).
void run_mm(const Tensor& out, const Tensor& a, const Tensor& b) {
  if (out.is_cpu()) cpu::mm(out, a, b);
  else cuda::mm(out, a, b);
}

// ones where `mask` holds, zeros elsewhere, in `dtype`.
Tensor mask_as(const Tensor& mask, DType dtype) { return mask.to(dtype); }

}  // namespace

// ---- binary arithmetic ---------------------------------------------------------------------
// Gradients of broadcasting ops are summed back to each input's shape (sum_to_size).

Tensor scalar_like(const Tensor& t, double value, const char* op) {
  check_defined(t, op, "a");
  DType dtype = t.dtype();
  if (dtype == kInt64 && !(std::isfinite(value) && value == std::trunc(value))) dtype = kFloat32;
  if (dtype == kFloat16 || dtype == kBFloat16) dtype = kFloat32;  // the scalar is not rounded to 16 bits
  return scalar_tensor(value, TensorOptions().dtype(dtype).device(t.device()));
}

Tensor sum_to_size(const Tensor& grad, const Shape& shape) {
  TDDP_CHECK(is_expandable_to(shape, grad.sizes()), "sum_to_size: shape {} cannot be broadcast to the gradient's shape {}",
             format_shape(shape), format_shape(grad.sizes()));
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
  return (a.dtype() == kFloat16 || a.dtype() == kBFloat16) ? result.to(a.dtype()) : result;
}

// a + alpha * b, shared by add and sub.
Tensor add_scaled(const Tensor& a, const Tensor& b, double alpha, const char* op, const char* node) {
  if (a.defined()) check_alpha(a, alpha, op);
  const Tensor out = binary(cpu::BinaryOp::kAdd, a, b, alpha, op);
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

Tensor mul(const Tensor& a, const Tensor& b) {
  const Tensor out = binary(cpu::BinaryOp::kMul, a, b, 1.0, "mul");
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

Tensor div(const Tensor& a, const Tensor& b) {
  check_pair(a, b, "div");
  if (!a.is_floating_point()) return div(a.to(kFloat32), b.to(kFloat32));  // true division
  const Tensor out = binary(cpu::BinaryOp::kDiv, a, b, 1.0, "div");
  // grad_a = grad_out / b, grad_b = -grad_out * a / b^2 = -grad_out * out / b
  if (needs_grad(a, b)) {
    const bool need_a = a.requires_grad(), need_b = b.requires_grad();
    record_op("DivBackward", out, {a, b},
              [sb = SavedTensor(b), so = SavedTensor(need_b ? out : Tensor(), true), a_shape = a.sizes(), b_shape = b.sizes(),
               need_a, need_b](const Tensor& g) {
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
Tensor select_binary(cpu::BinaryOp kind, const Tensor& a, const Tensor& b, const char* op, const char* node) {
  const Tensor out = binary(kind, a, b, 1.0, op);
  if (needs_grad(a, b)) {
    record_op(node, out, {a, b},
              [sa = SavedTensor(a), sb = SavedTensor(b), kind, node, a_shape = a.sizes(), b_shape = b.sizes()](const Tensor& g) {
                const Tensor& av = sa.get(node);
                const Tensor& bv = sb.get(node);
                const DType dt = g.dtype();
                const Tensor a_wins = kind == cpu::BinaryOp::kMaximum ? gt(av, bv) : lt(av, bv);
                const Tensor b_wins = kind == cpu::BinaryOp::kMaximum ? lt(av, bv) : gt(av, bv);
                const Tensor half_tie = mul(mask_as(eq(av, bv), dt), 0.5);
                return std::vector<Tensor>{sum_to_size(mul(g, add(mask_as(a_wins, dt), half_tie)), a_shape),
                                           sum_to_size(mul(g, add(mask_as(b_wins, dt), half_tie)), b_shape)};
              });
  }
  return out;
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) {
  return select_binary(cpu::BinaryOp::kMaximum, a, b, "maximum", "MaximumBackward");
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return select_binary(cpu::BinaryOp::kMinimum, a, b, "minimum", "MinimumBackward");
}

void add_out(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, const char* op) {
  if (a.defined()) check_alpha(a, alpha, op);
  binary_out(cpu::BinaryOp::kAdd, out, a, b, alpha, op);
}
void mul_out(const Tensor& out, const Tensor& a, const Tensor& b, const char* op) {
  binary_out(cpu::BinaryOp::kMul, out, a, b, 1.0, op);
}
void div_out(const Tensor& out, const Tensor& a, const Tensor& b, const char* op) {
  if (a.defined()) {
    TDDP_CHECK(a.is_floating_point(), "{}: true division of {} tensors cannot be written in place (the result is float)",
               op, dtype_name(a.dtype()));
  }
  binary_out(cpu::BinaryOp::kDiv, out, a, b, 1.0, op);
}

// ---- comparisons (not differentiable: bool results) -------------------------------------------

Tensor eq(const Tensor& a, const Tensor& b) { return compare(cpu::CompareOp::kEq, a, b, "eq"); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare(cpu::CompareOp::kNe, a, b, "ne"); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(cpu::CompareOp::kLt, a, b, "lt"); }
Tensor le(const Tensor& a, const Tensor& b) { return compare(cpu::CompareOp::kLe, a, b, "le"); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare(cpu::CompareOp::kGt, a, b, "gt"); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare(cpu::CompareOp::kGe, a, b, "ge"); }
Tensor eq(const Tensor& a, double b) { return compare_scalar(cpu::CompareOp::kEq, a, b, "eq"); }
Tensor ne(const Tensor& a, double b) { return compare_scalar(cpu::CompareOp::kNe, a, b, "ne"); }
Tensor lt(const Tensor& a, double b) { return compare_scalar(cpu::CompareOp::kLt, a, b, "lt"); }
Tensor le(const Tensor& a, double b) { return compare_scalar(cpu::CompareOp::kLe, a, b, "le"); }
Tensor gt(const Tensor& a, double b) { return compare_scalar(cpu::CompareOp::kGt, a, b, "gt"); }
Tensor ge(const Tensor& a, double b) { return compare_scalar(cpu::CompareOp::kGe, a, b, "ge"); }

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
  const Tensor out = numeric_unary(cpu::UnaryOp::kNeg, x, "neg");
  // grad_x = -grad_out
  if (needs_grad(x)) record_op("NegBackward", out, {x}, [](const Tensor& g) { return std::vector<Tensor>{neg(g)}; });
  return out;
}
Tensor abs(const Tensor& x) {
  // grad_x = grad_out * sign(x) (0 at 0)
  return record_unary(x, numeric_unary(cpu::UnaryOp::kAbs, x, "abs"), "AbsBackward", x, [](const Tensor& v) {
    return sub(mask_as(gt(v, 0.0), v.dtype()), mask_as(lt(v, 0.0), v.dtype()));
  });
}
Tensor relu(const Tensor& x) {
  const Tensor out = numeric_unary(cpu::UnaryOp::kRelu, x, "relu");
  // grad_x = grad_out where out > 0, else 0 (one fused pass)
  if (needs_grad(x)) {
    record_op("ReluBackward", out, {x}, [so = SavedTensor(out, true)](const Tensor& g) {
      return std::vector<Tensor>{binary(cpu::BinaryOp::kReluBackward, g, so.get("ReluBackward"), 1.0, "relu_backward")};
    });
  }
  return out;
}
Tensor exp(const Tensor& x) {
  const Tensor out = floating_unary(cpu::UnaryOp::kExp, x, "exp");
  // grad_x = grad_out * exp(x) = grad_out * out
  return record_unary(x, out, "ExpBackward", out, [](const Tensor& y) { return y; });
}
Tensor log(const Tensor& x) {
  // grad_x = grad_out / x
  return record_unary(x, floating_unary(cpu::UnaryOp::kLog, x, "log"), "LogBackward", x,
                      [](const Tensor& v) { return 1.0 / v; });
}
Tensor sqrt(const Tensor& x) {
  const Tensor out = floating_unary(cpu::UnaryOp::kSqrt, x, "sqrt");
  // grad_x = grad_out / (2 sqrt(x)) = grad_out / (2 out)
  return record_unary(x, out, "SqrtBackward", out, [](const Tensor& y) { return 0.5 / y; });
}
Tensor tanh(const Tensor& x) {
  const Tensor out = floating_unary(cpu::UnaryOp::kTanh, x, "tanh");
  // grad_x = grad_out * (1 - out^2)
  return record_unary(x, out, "TanhBackward", out, [](const Tensor& y) { return 1.0 - mul(y, y); });
}
Tensor sigmoid(const Tensor& x) {
  const Tensor out = floating_unary(cpu::UnaryOp::kSigmoid, x, "sigmoid");
  // grad_x = grad_out * out * (1 - out)
  return record_unary(x, out, "SigmoidBackward", out, [](const Tensor& y) { return mul(y, 1.0 - y); });
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
    switch (x.device().type) {
      case DeviceType::kCPU: cpu::pow_scalar(out, x, exponent); break;
      case DeviceType::kCUDA: require_cuda("pow", x.device()); cuda::pow_scalar(out, x, exponent); break;
    }
  }
  // grad_x = grad_out * exponent * x^(exponent - 1) (zero when exponent is 0)
  return record_unary(x, out, "PowBackward", x, [exponent](const Tensor& v) {
    return exponent == 0.0 ? zeros_like(v) : mul(pow(v, exponent - 1.0), exponent);
  });
}

// ---- reductions -------------------------------------------------------------------------------

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
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) {
  check_defined(x, "sum", "x");
  check_kernel_device(x, "sum");
  const Shape wrapped = reduction_dims(x, dims, "sum");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = x.is_cpu() ? cpu::sum(x, wrapped, keepdim) : cuda::sum(x, wrapped, keepdim);
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
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) {
  check_defined(x, "mean", "x");
  TDDP_CHECK(x.is_floating_point(),
             "mean: could not infer output dtype; input dtype must be floating point, got {} (convert with .to())",
             dtype_name(x.dtype()));
  check_kernel_device(x, "mean");
  const Shape wrapped = reduction_dims(x, dims, "mean");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = x.is_cpu() ? cpu::mean(x, wrapped, keepdim) : cuda::mean(x, wrapped, keepdim);
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

Tensor max(const Tensor& x) {
  check_defined(x, "max", "x");
  TDDP_CHECK(x.numel() > 0, "max: expected a non-empty tensor, got shape {} (specify a dim to reduce an empty tensor)",
             format_shape(x.sizes()));
  check_kernel_device(x, "max");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = std::get<0>(x.is_cpu() ? cpu::max(x, {}, false) : cuda::max(x, {}, false));
  }
  // grad_x: grad_out shared evenly among the elements equal to the maximum (all NaNs if NaN)
  if (needs_grad(x)) {
    record_op("MaxBackward", out, {x}, [sx = SavedTensor(x), so = SavedTensor(out, true)](const Tensor& g) {
      const Tensor& xv = sx.get("MaxBackward");
      const Tensor& best = so.get("MaxBackward");
      const bool nan = std::isnan(best.item<double>());
      const Tensor mask = mask_as(nan ? ne(xv, xv) : eq(xv, best), g.dtype());
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
    std::tie(values, indices) = x.is_cpu() ? cpu::max(x, {d}, keepdim) : cuda::max(x, {d}, keepdim);
  }
  // grad_x: zeros except grad_out at each maximum's index along `d`
  if (needs_grad(x)) {
    record_op("MaxBackward", values, {x}, [shape = x.sizes(), d, keepdim, si = SavedTensor(indices)](const Tensor& g) {
      if (shape.empty()) return std::vector<Tensor>{g};
      const Tensor idx = keepdim ? si.get("MaxBackward") : si.get("MaxBackward").unsqueeze(d);
      Shape position_shape(shape.size(), 1);
      position_shape[d] = shape[d];
      const Tensor positions = arange(shape[d], TensorOptions().device(g.device())).view(position_shape);
      const Tensor hit = mask_as(eq(positions, idx), g.dtype());  // broadcasts to x's shape
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
  return std::get<1>(x.is_cpu() ? cpu::max(x, {}, false) : cuda::max(x, {}, false));
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
    (x.is_cpu() ? cpu::softmax : cuda::softmax)(out, x, d, log);
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

// ---- matmul -----------------------------------------------------------------------------------

namespace {
// left @ right (2-D), computed so that the result has the memory layout of `like`: when
// `like` is a transposed view of a contiguous matrix (Linear's weight.t()), the product is
// computed as (right^T @ left^T)^T. The view's own backward then hands the parameter a
// contiguous gradient, which AccumulateGrad adopts without a transposing copy.
Tensor mm_in_layout_of(const Tensor& left, const Tensor& right, const Tensor& like) {
  const bool transposed = like.dim() == 2 && like.size(0) > 1 && like.size(1) > 1 && like.stride(0) == 1 &&
                          like.stride(1) == like.size(0);
  return transposed ? mm(right.t(), left.t()).t() : mm(left, right);
}
}  // namespace

Tensor mm(const Tensor& a, const Tensor& b) {
  check_pair(a, b, "mm");
  check_not_bool(a, "mm", "a");
  TDDP_CHECK(a.dim() == 2, "mm: 'a' must be a matrix (2-D), got shape {}", format_shape(a.sizes()));
  TDDP_CHECK(b.dim() == 2, "mm: 'b' must be a matrix (2-D), got shape {}", format_shape(b.sizes()));
  TDDP_CHECK(a.size(1) == b.size(0), "mm: shapes {} and {} cannot be multiplied ({} != {})", format_shape(a.sizes()),
             format_shape(b.sizes()), a.size(1), b.size(0));
  check_kernel_device(a, "matmul");
  const Tensor out = new_output({a.size(0), b.size(1)}, a.dtype(), a.device());
  {
    NoGradGuard no_grad;
    run_mm(out, a, b);
  }
  // grad_out: [n, m], a: [n, k], b: [k, m] -> grad_a = grad_out b^T: [n, k], grad_b = a^T grad_out: [k, m]
  if (needs_grad(a, b)) {
    const bool need_a = a.requires_grad(), need_b = b.requires_grad();
    record_op("MmBackward", out, {a, b},
              [sa = SavedTensor(a), sb = SavedTensor(b), need_a, need_b](const Tensor& g) {
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

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_pair(a, b, "matmul");
  TDDP_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both arguments need at least 1 dimension, got shapes {} and {}",
             format_shape(a.sizes()), format_shape(b.sizes()));
  Tensor a2, b2, out2;
  {
    NoGradGuard no_grad;
    // Vectors become matrices for the product and lose that dim again afterwards.
    a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
    b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
    TDDP_CHECK(a2.size(-1) == b2.size(-2), "matmul: shapes {} and {} cannot be multiplied ({} != {})",
               format_shape(a.sizes()), format_shape(b.sizes()), a2.size(-1), b2.size(-2));
    out2 = batched_mm(a2, b2);
  }
  Tensor out = out2;
  if (a.dim() == 1) out = out.squeeze(-2);
  if (b.dim() == 1) out = out.squeeze(-1);
  // grad_out: [..., n, m] (vector dims restored) -> grad_a = grad_out b^T, grad_b = a^T grad_out,
  // each summed over broadcast batch dims back to its input's shape.
  if (needs_grad(a, b)) {
    const bool need_a = a.requires_grad(), need_b = b.requires_grad();
    record_op("MatmulBackward", out, {a, b},
              [sa = SavedTensor(a2), sb = SavedTensor(b2), a_shape = a.sizes(),
               b_shape = b.sizes(), a2_shape = a2.sizes(), b2_shape = b2.sizes(), out2_shape = out2.sizes(), need_a,
               need_b](const Tensor& g) {
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

Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias) {
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
  Tensor x2, out;
  {
    NoGradGuard no_grad;
    x2 = input.dim() == 2 ? input : input.reshape({-1, in_features});
    const Tensor out2 = new_output({x2.size(0), out_features}, input.dtype(), input.device());
    run_mm(out2, x2, weight.t());  // x2 [n, in] @ weight^T [in, out]
    if (bias.defined()) run_binary(cpu::BinaryOp::kAdd, out2, out2, bias, 1.0, "linear");
    out = out2.reshape(out_shape);
  }
  // grad_out: [n, out] -> grad_input = grad_out @ weight: [n, in],
  // grad_weight = grad_out^T @ input: [out, in] (contiguous), grad_bias = sum over rows: [out]
  if (needs_grad({&input, &weight, &bias})) {
    const bool need_input = input.requires_grad(), need_weight = weight.requires_grad();
    const bool need_bias = bias.defined() && bias.requires_grad();
    record_op("LinearBackward", out, {input, weight, bias},
              [sx = SavedTensor(need_weight ? x2 : Tensor()), sw = SavedTensor(need_input ? weight : Tensor()),
               in_shape = input.sizes(), out_features, need_input, need_weight, need_bias](const Tensor& g) {
                const Tensor g2 = g.reshape({-1, out_features});
                return std::vector<Tensor>{
                    need_input ? mm(g2, sw.get("LinearBackward")).reshape(in_shape) : Tensor(),
                    need_weight ? mm(g2.t(), sx.get("LinearBackward")) : Tensor(),
                    need_bias ? sum(g2, {0}) : Tensor()};
              });
  }
  return out;
}

// ---- copy, fill, comparisons of whole tensors --------------------------------------------------

void copy_into(const Tensor& dst, const Tensor& src, bool non_blocking) {
  check_defined(dst, "copy_", "self");
  check_defined(src, "copy_", "src");
  TDDP_CHECK(is_expandable_to(src.sizes(), dst.sizes()),
             "copy_: source of shape {} cannot be broadcast to the destination shape {}", format_shape(src.sizes()),
             format_shape(dst.sizes()));
  check_writable(dst, "copy_");
  check_in_place(dst, &src, "copy_");
  if (same_geometry(dst, src) && dst.shares_storage(src)) return;  // copying a tensor onto itself
  NoGradGuard no_grad;
  const Tensor source = detach_from_output(src, dst);
  if (dst.is_cpu() && source.is_cpu()) {
    cpu::copy(dst, source);
  } else {
    require_cuda("copy_", dst.is_cpu() ? source.device() : dst.device());
    cuda::copy(dst, source, non_blocking);  // on one GPU, or between devices
  }
  dst.storage().bump_version();
}

void fill_out(const Tensor& dst, double value) {
  check_defined(dst, "fill_", "self");
  check_in_place(dst, nullptr, "fill_");
  switch (dst.device().type) {
    case DeviceType::kCPU: cpu::fill(dst, value); break;
    case DeviceType::kCUDA: require_cuda("fill_", dst.device()); cuda::fill(dst, value); break;
  }
  dst.storage().bump_version();
}

void accumulate_into(const Tensor& dst, const Tensor& src) {
  check_defined(dst, "accumulate_into", "dst");
  check_defined(src, "accumulate_into", "src");
  check_same_dtype(dst, src, "accumulate_into", "dst", "src");
  TDDP_CHECK(src.sizes() == dst.sizes(), "accumulate_into: shapes {} (dst) and {} (src) differ", format_shape(dst.sizes()),
             format_shape(src.sizes()));
  check_in_place(dst, &src, "accumulate_into");
  check_same_device(dst, src, "accumulate_into", "dst", "src");
  NoGradGuard no_grad;
  if (dst.is_cpu()) {
    cpu::accumulate(dst, detach_from_output(src, dst));
  } else {
    require_cuda("accumulate_into", dst.device());
    cuda::accumulate(dst, detach_from_output(src, dst));
  }
  dst.storage().bump_version();
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  check_pair(a, b, "allclose");
  NoGradGuard no_grad;
  const Shape shape = broadcast_shapes(a.sizes(), b.sizes(), "allclose");
  const std::vector<double> va = a.to(kCPU).to(kFloat64).expand(shape).contiguous().to_vector<double>();
  const std::vector<double> vb = b.to(kCPU).to(kFloat64).expand(shape).contiguous().to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i) {
    const double x = va[i], y = vb[i];
    if (std::isnan(x) || std::isnan(y)) {
      if (equal_nan && std::isnan(x) && std::isnan(y)) continue;
      return false;
    }
    if (x == y) continue;  // also equal infinities
    if (std::isinf(x) || std::isinf(y)) return false;  // inf vs anything else is never close
    if (!(std::fabs(x - y) <= atol + rtol * std::fabs(y))) return false;
  }
  return true;
}

bool equal(const Tensor& a, const Tensor& b) {
  check_defined(a, "equal", "a");
  check_defined(b, "equal", "b");
  check_same_device(a, b, "equal", "a", "b");
  if (a.sizes() != b.sizes()) return false;
  NoGradGuard no_grad;
  if (a.dtype() == kInt64 && b.dtype() == kInt64) return a.to_vector<int64_t>() == b.to_vector<int64_t>();
  return a.to(kFloat64).to_vector<double>() == b.to(kFloat64).to_vector<double>();
}

}  // namespace tinyddp::tensor
