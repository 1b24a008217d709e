// Tensor::str(): PyTorch-style printing. Floats share one format per tensor (integers print
// as "1.", else 4 decimals, or scientific when magnitudes span too far), rows align, and
// tensors over 1000 elements show the first and last 3 entries of each dim.
#include <cmath>
#include <sstream>

#include <fmt/ranges.h>

#include "tinyddp/tensor/ops.h"

namespace tinyddp::tensor {

namespace {

constexpr int64_t kSummarizeThreshold = 1000;
constexpr int64_t kEdgeItems = 3;

struct FloatFormat {
  bool integral = false;  // every finite value is a whole number
  bool scientific = false;
};

FloatFormat choose_format(const std::vector<double>& values) {
  FloatFormat f;
  double max_abs = 0, min_abs = INFINITY;
  bool all_integral = true, any_finite = false;
  for (double v : values) {
    if (!std::isfinite(v)) continue;
    any_finite = true;
    all_integral &= v == std::trunc(v);
    const double a = std::fabs(v);
    max_abs = std::max(max_abs, a);
    if (a > 0) min_abs = std::min(min_abs, a);
  }
  if (!any_finite) return f;
  const bool wide_range = max_abs > 1e8 || (min_abs != INFINITY && max_abs / min_abs > 1000);
  f.integral = all_integral;
  f.scientific = wide_range || (!all_integral && min_abs < 1e-4);
  return f;
}

std::string format_value(double v, DType dtype, const FloatFormat& f) {
  if (dtype == kBool) return v != 0 ? "True" : "False";
  if (is_integral(dtype, false)) return fmt::format("{}", static_cast<int64_t>(v));
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (f.scientific) return fmt::format("{:.4e}", v);
  if (f.integral) return fmt::format("{:.0f}.", v);
  return fmt::format("{:.4f}", v);
}

// Recursively prints dim `d` of `t` (a contiguous float64 copy) into `out`.
void print_dim(std::ostringstream& out, const Tensor& t, const std::vector<std::string>& cells, int64_t& cell,
               int64_t d, int64_t indent, bool summarize, size_t width) {
  const int64_t size = t.sizes()[d];
  const bool last_dim = d == t.dim() - 1;
  out << '[';
  for (int64_t i = 0; i < size; ++i) {
    if (summarize && size > 2 * kEdgeItems && i == kEdgeItems) {
      out << (last_dim ? " ..., " : fmt::format("...,\n{:{}}", "", indent + 1));
      i = size - kEdgeItems;
    }
    if (last_dim) {
      out << fmt::format("{:>{}}", cells[cell++], width);
    } else {
      print_dim(out, t, cells, cell, d + 1, indent + 1, summarize, width);
    }
    if (i + 1 < size) {
      out << ',';
      if (last_dim) {
        out << ' ';
      } else {
        out << std::string(static_cast<size_t>(t.dim() - d - 1), '\n') << std::string(indent + 1, ' ');
      }
    }
  }
  out << ']';
}

// The elements that will be shown, in print order (all of them unless summarizing).
std::vector<double> shown_values(const Tensor& t, bool summarize) {
  if (!summarize) return t.to_vector<double>();
  Tensor shown = t;
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t size = shown.sizes()[d];
    if (size <= 2 * kEdgeItems) continue;
    // Keep the first and last kEdgeItems along this dim.
    Tensor head = shown.narrow(d, 0, kEdgeItems);
    Tensor tail = shown.narrow(d, size - kEdgeItems, kEdgeItems);
    Shape joined_shape = shown.sizes();
    joined_shape[d] = 2 * kEdgeItems;
    Tensor joined = empty(joined_shape, kFloat64);
    joined.narrow(d, 0, kEdgeItems).copy_(head);
    joined.narrow(d, kEdgeItems, kEdgeItems).copy_(tail);
    shown = joined;
  }
  return shown.contiguous().to_vector<double>();
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  NoGradGuard no_grad;
  const Tensor values = to(kCPU).to(kFloat64);
  std::string suffix;
  if (dtype() != kFloat32 && dtype() != kInt64 && dtype() != kBool)
    suffix += fmt::format(", dtype=torch.{}", dtype_name(dtype()));
  if (is_cuda()) suffix = fmt::format(", device='{}'", device().str()) + suffix;
  if (numel() == 0) {
    const std::string size = dim() == 1 ? "" : fmt::format(", size=({})", fmt::join(sizes(), ", "));
    return fmt::format("tensor([]{}{})", size, suffix);
  }
  const bool summarize = numel() > kSummarizeThreshold;
  const std::vector<double> shown = shown_values(values, summarize);
  const FloatFormat format = choose_format(shown);
  std::vector<std::string> cells;
  size_t width = 0;
  for (double v : shown) {
    cells.push_back(format_value(v, dtype(), format));
    width = std::max(width, cells.back().size());
  }
  if (dim() == 0) return fmt::format("tensor({}{})", cells[0], suffix);
  std::ostringstream out;
  out << "tensor(";
  int64_t cell = 0;
  print_dim(out, values, cells, cell, 0, 7, summarize, width);
  out << suffix << ')';
  return out.str();
}

}  // namespace tinyddp::tensor
