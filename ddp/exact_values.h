// The exact sum's passes over a parameter's values shared by its files (exact_sum.cc,
// exact_widened.cc): the bound of a chunk's values and their fold onto the grid.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <vector>

#include "tinyddp/ddp/exact_fold.h"
#include "tinyddp/tensor/parallel.h"

namespace tinyddp::ddp::exact_detail {

constexpr int64_t kGrain = 1 << 14;  // elements per task
// The smallest e with |x| < 2^e for values whose largest magnitude is `largest` (`floor` when
// all are zero or one is not finite).
inline int bound_of(double largest, bool finite, int floor) {
  if (largest == 0 || !finite) return floor;
  int exponent = 0;
  std::frexp(largest, &exponent);  // largest = m * 2^exponent, 0.5 <= m < 1
  return exponent;
}

// One pass over chunks' gradients of one parameter: returns the smallest e with |x| < 2^e for
// every x (`floor` when all are zero), sets `finite` false when a value is a NaN or an
// infinity, and, when `sums` is not null, adds every x rounded onto the grid 2^-scale to its
// sum (or, Into::kStore, writes their sum over it). The largest |x| does not depend on how the
// threads split the values. A value beyond the grid's range is not added: the bound it returns
// makes the caller refuse the step.
template <typename T>
int add_chunk_values(const std::vector<const T*>& chunks, int64_t n, int floor, bool& finite, int64_t* sums, int scale,
                     exact::Into into) {
  std::mutex mutex;
  double largest = 0;
  finite = true;
  tensor::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    T mine = 0;
    bool ok = true;
    // Each x rounded onto the grid: the one rounding a chunk's gradient gets, the same
    // whichever rank holds the chunk (exact_fold.h).
    std::vector<const T*> at;
    for (const T* values : chunks) at.push_back(values + begin);
    exact::fold(at.data(), static_cast<int>(at.size()), end - begin, sums == nullptr ? nullptr : sums + begin, scale,
                mine, ok, into);
    std::lock_guard<std::mutex> lock(mutex);
    largest = std::max(largest, static_cast<double>(mine));
    finite = finite && ok;
  });
  return bound_of(largest, finite, floor);
}

}  // namespace tinyddp::ddp::exact_detail
