// Copies, fills and accumulation into existing tensors, and whole-tensor comparisons
// (allclose, equal).
#include "tinyddp/tensor/ops.h"

#include <algorithm>
#include <cmath>

#include "tinyddp/tensor/graph.h"
#include "tinyddp/tensor/native/checks.h"

namespace tinyddp::tensor {

using namespace detail;

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
  // A pair with a GPU side goes to the GPU's backend (on one GPU, or between devices).
  backend_for(dst.is_cpu() ? source.device() : dst.device(), "copy_").copy(dst, source, non_blocking);
  dst.storage().bump_version();
}

void fill_out(const Tensor& dst, double value) {
  check_defined(dst, "fill_", "self");
  check_in_place(dst, nullptr, "fill_");
  backend_for(dst.device(), "fill_").fill(dst, value);
  dst.storage().bump_version();
}

void accumulate_into(const Tensor& dst, const Tensor& src) {
  check_defined(dst, "accumulate_into", "dst");
  check_defined(src, "accumulate_into", "src");
  check_same_dtype(dst, src, "accumulate_into", "dst", "src");
  TDDP_CHECK(src.sizes() == dst.sizes(), "accumulate_into: shapes {} (dst) and {} (src) differ",
             format_shape(dst.sizes()), format_shape(src.sizes()));
  check_in_place(dst, &src, "accumulate_into");
  check_same_device(dst, src, "accumulate_into", "dst", "src");
  NoGradGuard no_grad;
  backend_for(dst.device(), "accumulate_into").accumulate(dst, detach_from_output(src, dst));
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
    if (x == y) continue;                              // also equal infinities
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
  if (is_integral(a.dtype(), true) && is_integral(b.dtype(), true)) {  // exact beyond 2^53
    return a.to(kInt64).to_vector<int64_t>() == b.to(kInt64).to_vector<int64_t>();
  }
  return a.to(kFloat64).to_vector<double>() == b.to(kFloat64).to_vector<double>();
}

}  // namespace tinyddp::tensor
