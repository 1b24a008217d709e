// The argument checks every family of tensor ops shares (checks.h), with errors that name the
// op, the argument and its shape, dtype or device; output allocation and the overlap rules for
// written tensors.
#include "tinyddp/tensor/native/checks.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/grad_mode.h"
#include "tinyddp/tensor/ops.h"
#include "tinyddp/tensor/random.h"

namespace tinyddp::tensor::detail {

namespace {

// Byte range [first, last] touched by t inside its storage (t.numel() > 0).
std::pair<int64_t, int64_t> byte_range(const Tensor& t) {
  int64_t last = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.sizes()[d] - 1) * t.strides()[d];
  const auto size = static_cast<int64_t>(t.element_size());
  return {t.storage_offset() * size, (last + 1) * size - 1};
}
}  // namespace

void check_defined(const Tensor& t, const char* op, const char* arg) {
  TDDP_CHECK(t.defined(), "{}: argument '{}' is an undefined tensor", op, arg);
}

void check_same_device(const Tensor& a, const Tensor& b, const char* op, const char* name_a, const char* name_b) {
  TDDP_CHECK(a.device() == b.device(),
             "{}: expected all tensors on the same device, but '{}' is on {} and '{}' is on {}", op, name_a,
             a.device().str(), name_b, b.device().str());
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op, const char* name_a, const char* name_b) {
  TDDP_CHECK(a.dtype() == b.dtype(),
             "{}: expected tensors of the same dtype, but '{}' is {} and '{}' is {} (convert one with .to(dtype))", op,
             name_a, dtype_name(a.dtype()), name_b, dtype_name(b.dtype()));
}

void check_not_bool(const Tensor& t, const char* op, const char* arg) {
  TDDP_CHECK(t.dtype() != kBool,
             "{}: arithmetic on bool tensors is not supported ('{}' is bool; convert with .to(dtype))", op, arg);
}

void check_pair(const Tensor& a, const Tensor& b, const char* op) {
  check_defined(a, op, "a");
  check_defined(b, op, "b");
  check_same_device(a, b, op, "a", "b");
  check_same_dtype(a, b, op, "a", "b");
}

void promote_operands(Tensor& a, Tensor& b) {
  if (!a.defined() || !b.defined() || a.dtype() == b.dtype()) return;
  const DType dtype = result_type(a, b);
  a = a.to(dtype);
  b = b.to(dtype);
}

// True when some element of `t` is reachable through two different indices (a broadcast
// dim of stride 0). Writing into such a tensor would be order-dependent.
bool has_internal_overlap(const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.sizes()[d] > 1 && t.strides()[d] == 0) return true;
  }
  return false;
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

// Before a kernel that exists for the CPU and, in CUDA builds, for GPUs.
void check_kernel_device(const Tensor& x, const char* op) { backend_for(x.device(), op); }

std::pair<int64_t, int64_t> integer_extremes(const Tensor& t) {
  NoGradGuard no_grad;
  if (t.is_cpu()) {
    const Tensor values = t.to(kInt64).contiguous();
    const int64_t* v = values.data_ptr<int64_t>();
    const auto [lowest, highest] = std::minmax_element(v, v + values.numel());
    return {*lowest, *highest};
  }
  const Tensor values = t.to(kInt64);  // both read back at once
  const std::vector<int64_t> ends =
      cat({neg(max(neg(values))).reshape({1}), max(values).reshape({1})}, 0).to(kCPU).to_vector<int64_t>();
  return {ends[0], ends[1]};
}

RandomKey device_random_key(const Tensor& t, Generator* generator, const char* op) {
  Generator& g = generator != nullptr ? *generator : default_generator();
  if (t.is_cuda() && cuda::is_capturing(t.device().index)) {
    TDDP_CHECK(&g == &default_generator(),
               "{}: a CUDA graph being captured draws its random keys from the default generator at every replay; "
               "pass no generator to the ops it captures (or run this one outside the capture)",
               op);
    return RandomKey{0, cuda::graph_random_key_slot(t.device().index)};
  }
  std::lock_guard<std::mutex> lock(g.mutex());
  return RandomKey{g.random64(), nullptr};
}

}  // namespace tinyddp::tensor::detail
