// exact_sum.h's sums of one value per element or per chunk: exact_square_sum (the clipping
// norm's, fully_shard's under the deterministic option) and the chunks' slots
// (chunk_slots, slots_mean, chunk_mean: the step's loss).
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <mutex>

#include "tinyddp/ddp/exact_sum.h"
#include "tinyddp/tensor/ops.h"
#include "tinyddp/tensor/parallel.h"

namespace tinyddp::ddp {

namespace {
namespace t = tinyddp::tensor;
constexpr int64_t kGrain = 1 << 14;  // elements per task
}  // namespace

double exact_square_sum(const std::vector<Tensor>& values, comm::ProcessGroup* pg) {
  t::NoGradGuard no_grad;
  using Wide = unsigned __int128;
  std::vector<Tensor> host;  // float64: the squares of the narrower types are exact there
  for (const Tensor& v : values) host.push_back(v.to(t::Device(t::kCPU)).to(t::kFloat64).contiguous());
  // Each task's part of a pass over every element, combined under a lock: the largest square
  // and whether a NaN was seen, then the integers (associative: any split, the same sum).
  std::mutex mutex;
  const auto each_task = [&](auto&& body) {
    for (const Tensor& h : host) {
      const double* x = h.data_ptr<double>();
      t::parallel_for(0, h.numel(), kGrain, [&](int64_t begin, int64_t end) { body(x + begin, end - begin); });
    }
  };
  double largest = 0, nan = 0;
  each_task([&](const double* x, int64_t n) {
    double mine = 0;
    bool saw_nan = false;
    for (int64_t i = 0; i < n; ++i) {
      saw_nan = saw_nan || std::isnan(x[i]);
      mine = std::max(mine, x[i] * x[i]);
    }
    std::lock_guard<std::mutex> lock(mutex);
    largest = std::max(largest, mine);
    if (saw_nan) nan = 1;
  });
  Tensor agreed = t::from_vector(std::vector<double>{largest, nan});
  if (pg) pg->allreduce(agreed, comm::ReduceOp::kMax)->wait();
  const std::vector<double> got_max = agreed.to_vector<double>();
  largest = got_max[0];
  if (got_max[1] != 0) return std::nan("");
  if (largest == 0 || std::isinf(largest)) return largest;
  int exponent = 0;
  std::frexp(largest, &exponent);  // every square < 2^exponent
  const int scale = 72 - exponent;
  Wide sum = 0;  // below 2^72 per element: room for 2^48 elements per rank
  each_task([&](const double* x, int64_t n) {
    Wide mine = 0;
    for (int64_t i = 0; i < n; ++i) mine += static_cast<Wide>(std::nearbyint(std::ldexp(x[i] * x[i], scale)));
    std::lock_guard<std::mutex> lock(mutex);
    sum += mine;
  });
  // Over the ranks in 40-bit limbs, which int64 adds exactly for up to 2^23 ranks.
  constexpr int kLimb = 40;
  const Wide mask = (Wide{1} << kLimb) - 1;
  Tensor limbs =
      t::from_vector(std::vector<int64_t>{static_cast<int64_t>(sum & mask), static_cast<int64_t>((sum >> kLimb) & mask),
                                          static_cast<int64_t>(sum >> (2 * kLimb))});
  if (pg) pg->allreduce(limbs, comm::ReduceOp::kSum)->wait();
  const std::vector<int64_t> got = limbs.to_vector<int64_t>();
  const Wide total =
      static_cast<Wide>(got[0]) + (static_cast<Wide>(got[1]) << kLimb) + (static_cast<Wide>(got[2]) << (2 * kLimb));
  return std::ldexp(static_cast<double>(total), -scale);
}

std::vector<int64_t> chunk_slots(const std::vector<double>& mine, int64_t first, int64_t total) {
  TDDP_CHECK(first >= 0 && first + static_cast<int64_t>(mine.size()) <= total,
             "chunk_mean: chunks {}..{} are not within the {} chunks of the step", first,
             first + static_cast<int64_t>(mine.size()) - 1, total);
  std::vector<int64_t> slots(static_cast<size_t>(total), std::numeric_limits<int64_t>::min());
  for (size_t c = 0; c < mine.size(); ++c) slots[static_cast<size_t>(first) + c] = std::bit_cast<int64_t>(mine[c]);
  return slots;
}

double slots_mean(const std::vector<int64_t>& slots) {
  double sum = 0;
  for (int64_t bits : slots) sum += std::bit_cast<double>(bits);  // in chunk order, on every rank
  return sum / static_cast<double>(slots.size());
}

double chunk_mean(comm::ProcessGroup* pg, const std::vector<double>& mine, int64_t first, int64_t total) {
  Tensor all = tensor::from_vector(chunk_slots(mine, first, total));
  if (pg) pg->allreduce(all, comm::ReduceOp::kMax)->wait();
  return slots_mean(all.to_vector<int64_t>());
}

}  // namespace tinyddp::ddp
