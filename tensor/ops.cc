// Tensor operations: argument checks (errors name the op, the argument and the shapes,
// dtypes or devices involved), output allocation, and the device switch into cpu/ kernels.
#include "tensor/ops.h"

#include <cmath>

#include "tensor/cpu/kernels.h"

namespace tinyddp::tensor {

namespace {

[[noreturn]] void no_kernel(const char* op, Device device) {
  throw Error(fmt::format("{}: no kernel for tensors on {} in this build", op, device.str()));
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

void run_binary(cpu::BinaryOp kind, const Tensor& out, const Tensor& a, const Tensor& b, double alpha, const char* op) {
  switch (out.device().type) {
    case DeviceType::kCPU: cpu::binary(kind, out, a, b, alpha); return;
    case DeviceType::kCUDA: no_kernel(op, out.device());
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
  run_binary(kind, out, detach_from_output(a, out), detach_from_output(b, out), alpha, op);
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
  switch (out.device().type) {
    case DeviceType::kCPU: cpu::compare(kind, out, a, b); return out;
    case DeviceType::kCUDA: no_kernel(op, out.device());
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
  const Tensor out = new_output(x.sizes(), x.dtype(), x.device());
  switch (x.device().type) {
    case DeviceType::kCPU: cpu::unary(kind, out, x); return out;
    case DeviceType::kCUDA: no_kernel(op, x.device());
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

void check_cpu(const Tensor& x, const char* op) {
  if (!x.is_cpu()) no_kernel(op, x.device());
}

}  // namespace

// ---- binary arithmetic -------------------------------------------------------------------------

Tensor scalar_like(const Tensor& t, double value, const char* op) {
  check_defined(t, op, "a");
  DType dtype = t.dtype();
  if (dtype == kInt64 && !(std::isfinite(value) && value == std::trunc(value))) dtype = kFloat32;
  if (dtype == kFloat16 || dtype == kBFloat16) dtype = kFloat32;  // the scalar is not rounded to 16 bits
  return scalar_tensor(value, TensorOptions().dtype(dtype).device(t.device()));
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
}  // namespace

Tensor add(const Tensor& a, const Tensor& b, double alpha) {
  if (a.defined()) check_alpha(a, alpha, "add");
  return binary(cpu::BinaryOp::kAdd, a, b, alpha, "add");
}
Tensor add(const Tensor& a, double b) {
  return with_scalar(a, b, "add", [](const Tensor& x, const Tensor& s) { return add(x, s); });
}
Tensor sub(const Tensor& a, const Tensor& b, double alpha) {
  if (a.defined()) check_alpha(a, alpha, "sub");
  return binary(cpu::BinaryOp::kAdd, a, b, -alpha, "sub");
}
Tensor sub(const Tensor& a, double b) {
  return with_scalar(a, b, "sub", [](const Tensor& x, const Tensor& s) { return sub(x, s); });
}
Tensor mul(const Tensor& a, const Tensor& b) { return binary(cpu::BinaryOp::kMul, a, b, 1.0, "mul"); }
Tensor mul(const Tensor& a, double b) {
  return with_scalar(a, b, "mul", [](const Tensor& x, const Tensor& s) { return mul(x, s); });
}
Tensor div(const Tensor& a, const Tensor& b) {
  check_pair(a, b, "div");
  if (!a.is_floating_point()) return div(a.to(kFloat32), b.to(kFloat32));  // true division
  return binary(cpu::BinaryOp::kDiv, a, b, 1.0, "div");
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
Tensor maximum(const Tensor& a, const Tensor& b) { return binary(cpu::BinaryOp::kMaximum, a, b, 1.0, "maximum"); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary(cpu::BinaryOp::kMinimum, a, b, 1.0, "minimum"); }

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

// ---- comparisons ------------------------------------------------------------------------------

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

Tensor neg(const Tensor& x) { return numeric_unary(cpu::UnaryOp::kNeg, x, "neg"); }
Tensor abs(const Tensor& x) { return numeric_unary(cpu::UnaryOp::kAbs, x, "abs"); }
Tensor relu(const Tensor& x) { return numeric_unary(cpu::UnaryOp::kRelu, x, "relu"); }
Tensor exp(const Tensor& x) { return floating_unary(cpu::UnaryOp::kExp, x, "exp"); }
Tensor log(const Tensor& x) { return floating_unary(cpu::UnaryOp::kLog, x, "log"); }
Tensor sqrt(const Tensor& x) { return floating_unary(cpu::UnaryOp::kSqrt, x, "sqrt"); }
Tensor tanh(const Tensor& x) { return floating_unary(cpu::UnaryOp::kTanh, x, "tanh"); }
Tensor sigmoid(const Tensor& x) { return floating_unary(cpu::UnaryOp::kSigmoid, x, "sigmoid"); }

Tensor pow(const Tensor& x, double exponent) {
  check_defined(x, "pow", "x");
  check_not_bool(x, "pow", "x");
  const bool integral_exponent = std::isfinite(exponent) && exponent == std::trunc(exponent);
  if (x.dtype() == kInt64) {
    if (!integral_exponent) return pow(x.to(kFloat32), exponent);
    TDDP_CHECK(exponent >= 0, "pow: integers to negative integer powers are not allowed (exponent {})", exponent);
  }
  const Tensor out = new_output(x.sizes(), x.dtype(), x.device());
  switch (x.device().type) {
    case DeviceType::kCPU: cpu::pow_scalar(out, x, exponent); return out;
    case DeviceType::kCUDA: no_kernel("pow", x.device());
  }
  return out;
}

// ---- reductions -------------------------------------------------------------------------------

Tensor sum(const Tensor& x) { return sum(x, {}, false); }
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) {
  check_defined(x, "sum", "x");
  check_cpu(x, "sum");
  return cpu::sum(x, reduction_dims(x, dims, "sum"), keepdim);
}

Tensor mean(const Tensor& x) { return mean(x, {}, false); }
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) {
  check_defined(x, "mean", "x");
  TDDP_CHECK(x.is_floating_point(),
             "mean: could not infer output dtype; input dtype must be floating point, got {} (convert with .to())",
             dtype_name(x.dtype()));
  check_cpu(x, "mean");
  return cpu::mean(x, reduction_dims(x, dims, "mean"), keepdim);
}

Tensor max(const Tensor& x) {
  check_defined(x, "max", "x");
  TDDP_CHECK(x.numel() > 0, "max: expected a non-empty tensor, got shape {} (specify a dim to reduce an empty tensor)",
             format_shape(x.sizes()));
  check_cpu(x, "max");
  return std::get<0>(cpu::max(x, {}, false));
}

std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  check_defined(x, "max", "x");
  const int64_t d = wrap_dim(dim, x.dim(), "max");
  TDDP_CHECK(x.dim() == 0 || x.sizes()[d] > 0, "max: cannot reduce over dimension {} of size 0 (shape {})", d,
             format_shape(x.sizes()));
  check_cpu(x, "max");
  return cpu::max(x, {d}, keepdim);
}

Tensor argmax(const Tensor& x) {
  check_defined(x, "argmax", "x");
  TDDP_CHECK(x.numel() > 0, "argmax: expected a non-empty tensor, got shape {}", format_shape(x.sizes()));
  check_cpu(x, "argmax");
  return std::get<1>(cpu::max(x, {}, false));
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) { return std::get<1>(max(x, dim, keepdim)); }

namespace {
Tensor softmax_impl(const Tensor& x, int64_t dim, bool log, const char* op) {
  check_defined(x, op, "x");
  TDDP_CHECK(x.is_floating_point(), "{}: expected a floating-point tensor, got dtype {}", op, dtype_name(x.dtype()));
  const int64_t d = wrap_dim(dim, x.dim(), op);
  check_cpu(x, op);
  const Tensor out = new_output(x.sizes(), x.dtype(), x.device());
  cpu::softmax(out, x, d, log);
  return out;
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, false, "softmax"); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, true, "log_softmax"); }

// ---- matmul -----------------------------------------------------------------------------------

Tensor mm(const Tensor& a, const Tensor& b) {
  check_pair(a, b, "mm");
  check_not_bool(a, "mm", "a");
  TDDP_CHECK(a.dim() == 2, "mm: 'a' must be a matrix (2-D), got shape {}", format_shape(a.sizes()));
  TDDP_CHECK(b.dim() == 2, "mm: 'b' must be a matrix (2-D), got shape {}", format_shape(b.sizes()));
  TDDP_CHECK(a.size(1) == b.size(0), "mm: shapes {} and {} cannot be multiplied ({} != {})", format_shape(a.sizes()),
             format_shape(b.sizes()), a.size(1), b.size(0));
  const Tensor out = new_output({a.size(0), b.size(1)}, a.dtype(), a.device());
  switch (a.device().type) {
    case DeviceType::kCPU: cpu::mm(out, a, b); return out;
    case DeviceType::kCUDA: no_kernel("matmul", a.device());
  }
  return out;
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_pair(a, b, "matmul");
  TDDP_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both arguments need at least 1 dimension, got shapes {} and {}",
             format_shape(a.sizes()), format_shape(b.sizes()));
  // Vectors become matrices for the product and lose that dim again afterwards.
  const Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  const Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  const int64_t n = a2.size(-2), k = a2.size(-1), m = b2.size(-1);
  TDDP_CHECK(k == b2.size(-2), "matmul: shapes {} and {} cannot be multiplied ({} != {})", format_shape(a.sizes()),
             format_shape(b.sizes()), k, b2.size(-2));
  Tensor out;
  if (a2.dim() == 2 && b2.dim() == 2) {
    out = mm(a2, b2);
  } else if (b2.dim() == 2 && a2.is_contiguous()) {
    // [..., n, k] x [k, m]: fold the batch into the rows of one GEMM.
    Shape out_shape(a2.sizes().begin(), a2.sizes().end() - 1);
    out_shape.push_back(m);
    out = mm(a2.reshape({-1, k}), b2).view(out_shape);
  } else {
    const Shape batch_a(a2.sizes().begin(), a2.sizes().end() - 2);
    const Shape batch_b(b2.sizes().begin(), b2.sizes().end() - 2);
    const Shape batch = broadcast_shapes(batch_a, batch_b, "matmul");
    Shape a_shape = batch, b_shape = batch, out_shape = batch;
    a_shape.insert(a_shape.end(), {n, k});
    b_shape.insert(b_shape.end(), {k, m});
    out_shape.insert(out_shape.end(), {n, m});
    const Tensor ae = a2.expand(a_shape);
    const Tensor be = b2.expand(b_shape);
    check_not_bool(a, "matmul", "a");
    check_cpu(a, "matmul");
    out = new_output(out_shape, a.dtype(), a.device());
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
      cpu::mm(so, sa, sb);
    }
  }
  if (a.dim() == 1) out = out.squeeze(-2);
  if (b.dim() == 1) out = out.squeeze(-1);
  return out;
}

// ---- copy, fill, comparisons of whole tensors --------------------------------------------------

void copy_into(const Tensor& dst, const Tensor& src) {
  check_defined(dst, "copy_", "self");
  check_defined(src, "copy_", "src");
  TDDP_CHECK(is_expandable_to(src.sizes(), dst.sizes()),
             "copy_: source of shape {} cannot be broadcast to the destination shape {}", format_shape(src.sizes()),
             format_shape(dst.sizes()));
  check_writable(dst, "copy_");
  if (same_geometry(dst, src) && dst.shares_storage(src)) return;  // copying a tensor onto itself
  const Tensor source = detach_from_output(src, dst);
  if (dst.is_cpu() && source.is_cpu()) {
    cpu::copy(dst, source);
    return;
  }
  no_kernel("copy_", dst.is_cpu() ? source.device() : dst.device());
}

void fill_out(const Tensor& dst, double value) {
  check_defined(dst, "fill_", "self");
  switch (dst.device().type) {
    case DeviceType::kCPU: cpu::fill(dst, value); return;
    case DeviceType::kCUDA: no_kernel("fill_", dst.device());
  }
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  check_pair(a, b, "allclose");
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
  if (a.dtype() == kInt64 && b.dtype() == kInt64) return a.to_vector<int64_t>() == b.to_vector<int64_t>();
  return a.to(kFloat64).to_vector<double>() == b.to(kFloat64).to_vector<double>();
}

}  // namespace tinyddp::tensor
