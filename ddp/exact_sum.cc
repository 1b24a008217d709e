// ExactGradientSum (exact_sum.h): chunks' gradients rounded onto a fixed-point grid, summed as
// integers over the chunks and the ranks, and turned back into one mean per parameter.
#include "tinyddp/ddp/exact_sum.h"

#include <algorithm>
#include <cmath>

#include "tinyddp/base/error.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::ddp {

namespace {

namespace t = tinyddp::tensor;

// The smallest e with |x| < 2^e for every x of `values` (kUnknown-like floor for all zeros).
template <typename T>
int bound_of(const T* values, int64_t n, int floor) {
  T largest = 0;
  for (int64_t i = 0; i < n; ++i) largest = std::max(largest, std::fabs(values[i]));
  if (largest == 0) return floor;
  int exponent = 0;
  std::frexp(static_cast<double>(largest), &exponent);  // largest = m * 2^exponent, 0.5 <= m < 1
  return exponent;
}

template <typename T>
void add_rounded(const T* values, int64_t n, int scale, int64_t* sums) {
  for (int64_t i = 0; i < n; ++i) {
    // x * 2^scale is exact in double; rounding to the nearest integer (ties to even) is the one
    // rounding a chunk's gradient gets, the same whichever rank holds the chunk.
    sums[i] += static_cast<int64_t>(std::nearbyint(std::ldexp(static_cast<double>(values[i]), scale)));
  }
}

// Bits a sum of `count` integers needs beyond one of them.
int guard_bits(int64_t count) {
  int bits = 0;
  while ((int64_t{1} << bits) < count) ++bits;
  return bits;
}

}  // namespace

ExactGradientSum::ExactGradientSum(std::vector<Tensor> params, std::vector<std::string> names,
                                   std::shared_ptr<comm::ProcessGroup> pg, int64_t total_chunks, int headroom_bits)
    : params_(std::move(params)),
      names_(std::move(names)),
      pg_(std::move(pg)),
      total_chunks_(total_chunks),
      headroom_(headroom_bits) {
  TDDP_CHECK(names_.size() == params_.size(), "ExactGradientSum: {} names for {} parameters", names_.size(),
             params_.size());
  TDDP_CHECK(total_chunks_ >= 1, "ExactGradientSum: total_chunks must be at least 1, got {}", total_chunks_);
  TDDP_CHECK(headroom_ >= 0 && headroom_ <= 16, "ExactGradientSum: headroom_bits must be in [0, 16], got {}",
             headroom_);
  bits_ = 62 - guard_bits(total_chunks_);
  TDDP_CHECK(bits_ - headroom_ >= 30,
             "ExactGradientSum: {} chunks per step leave {} bits of the int64 sums below the gradients' bound, fewer "
             "than 30: use fewer, larger chunks",
             total_chunks_, bits_ - headroom_);
  int64_t offset = 0;
  for (size_t p = 0; p < params_.size(); ++p) {
    const t::DType dtype = params_[p].dtype();
    TDDP_CHECK(dtype == t::kFloat32 || dtype == t::kFloat64,
               "ExactGradientSum: parameter '{}' is {}; the exact sum takes float32 or float64", names_[p],
               t::dtype_name(dtype));
    offsets_.push_back(offset);
    offset += params_[p].numel();
  }
  offsets_.push_back(offset);
  sums_.assign(static_cast<size_t>(offset) + 1, 0);  // the last slot counts the chunks
  bound_.assign(params_.size(), kUnknown);
  step_bound_.assign(params_.size(), kUnknown);
}

void ExactGradientSum::add_chunk() {
  t::NoGradGuard no_grad;
  for (size_t p = 0; p < params_.size(); ++p) {
    Tensor grad = params_[p].grad();
    if (!grad.defined()) continue;  // no gradient: zeros
    const Tensor host = grad.to(t::Device(t::kCPU)).contiguous();
    TDDP_CHECK(t::all(t::isfinite(host)).item<bool>(),
               "deterministic mode: the gradient of '{}' holds a NaN or an infinity; the fixed-point sum cannot hold "
               "it (lower the learning rate, or clip the gradients)",
               names_[p]);
    const int64_t n = host.numel();
    const bool single = host.dtype() == t::kFloat32;
    const int bound = single ? bound_of(host.data_ptr<float>(), n, kUnknown) : bound_of(host.data_ptr<double>(), n, kUnknown);
    step_bound_[p] = std::max(step_bound_[p], bound);
    if (bound == kUnknown) {
      grad.zero_();
      continue;  // all zeros: nothing to add
    }
    if (bound_[p] == kUnknown || bound > bound_[p] + headroom_) outgrown_ = true;
    if (!outgrown_) {
      const int scale = bits_ - (bound_[p] + headroom_);  // |x| < 2^(bound + headroom): |x * 2^scale| < 2^B
      int64_t* sums = sums_.data() + offsets_[p];
      if (single) {
        add_rounded(host.data_ptr<float>(), n, scale, sums);
      } else {
        add_rounded(host.data_ptr<double>(), n, scale, sums);
      }
    }
    grad.zero_();
  }
  ++chunks_;
  sums_.back() = chunks_;
}

bool ExactGradientSum::finish() {
  t::NoGradGuard no_grad;
  // One max-allreduce: whether any rank's chunk outgrew its grid, and the bound of each
  // parameter's gradients over every chunk of the step.
  std::vector<int64_t> control{outgrown_ ? 1 : 0};
  for (int b : step_bound_) control.push_back(b);
  Tensor agreed = t::from_vector(control);
  Tensor sums = t::from_vector(sums_);
  if (pg_) {
    pg_->allreduce(agreed, comm::ReduceOp::kMax)->wait();
    if (agreed.to_vector<int64_t>()[0] == 0) pg_->allreduce(sums, comm::ReduceOp::kSum)->wait();
  }
  const std::vector<int64_t> bounds = agreed.to_vector<int64_t>();
  const bool refused = bounds[0] != 0;
  const std::vector<int> previous = bound_;
  for (size_t p = 0; p < params_.size(); ++p) bound_[p] = static_cast<int>(bounds[p + 1]);
  std::fill(step_bound_.begin(), step_bound_.end(), kUnknown);
  outgrown_ = false;
  const int64_t chunks_here = chunks_;
  chunks_ = 0;
  if (refused) {
    std::fill(sums_.begin(), sums_.end(), 0);
    ++reruns_;
    return false;
  }
  const std::vector<int64_t> total = sums.to_vector<int64_t>();
  std::fill(sums_.begin(), sums_.end(), 0);
  TDDP_CHECK(total.back() == total_chunks_,
             "deterministic mode: the ranks added {} chunks this step ({} on this rank), but a step has {}",
             total.back(), chunks_here, total_chunks_);
  for (size_t p = 0; p < params_.size(); ++p) {
    // The grid this step's chunks were added on (the bound agreed before it), back to floats.
    const int scale = previous[p] == kUnknown ? 0 : bits_ - (previous[p] + headroom_);
    std::vector<double> mean(static_cast<size_t>(offsets_[p + 1] - offsets_[p]));
    for (size_t i = 0; i < mean.size(); ++i) {
      const int64_t sum = total[static_cast<size_t>(offsets_[p]) + i];
      mean[i] = std::ldexp(static_cast<double>(sum), -scale) / static_cast<double>(total_chunks_);
    }
    const Tensor value = t::from_vector(mean, params_[p].sizes()).to(params_[p].dtype()).to(params_[p].device());
    params_[p].mutable_grad() = value;
  }
  return true;
}

double chunk_mean(comm::ProcessGroup* pg, const std::vector<double>& mine, int64_t first, int64_t total) {
  TDDP_CHECK(first >= 0 && first + static_cast<int64_t>(mine.size()) <= total,
             "chunk_mean: chunks {}..{} are not within the {} chunks of the step", first,
             first + static_cast<int64_t>(mine.size()) - 1, total);
  std::vector<double> slots(static_cast<size_t>(total), 0.0);
  std::copy(mine.begin(), mine.end(), slots.begin() + first);
  Tensor all = tensor::from_vector(slots);
  if (pg) pg->allreduce(all, comm::ReduceOp::kSum)->wait();
  double sum = 0;
  for (double v : all.to_vector<double>()) sum += v;  // in chunk order, on every rank
  return sum / static_cast<double>(total);
}

}  // namespace tinyddp::ddp
