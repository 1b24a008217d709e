// CPU kernel plumbing: dtype dispatch (a switch calling a generic lambda with a type tag),
// the compute type of each dtype, for_each_strided(), which walks N operands over one shape
// with per-operand strides (0 along broadcast dims), coalescing dims in memory order so that a
// contiguous or channels-last case becomes one flat loop, and partial_sums() for row sums.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "tinyddp/tensor/internal/iteration_order.h"
#include "tinyddp/tensor/parallel.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::tensor::cpu {

template <typename T>
struct TypeTag {
  using type = T;
};

// Arithmetic on 16-bit floats happens in float; int32 in int64 (signed overflow is undefined in
// C++; the result cast back wraps, as PyTorch's int32 arithmetic); everything else in its own
// type (uint8 in C++'s int, cast back with wrap-around).
template <typename T>
constexpr bool is_16bit_float_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
template <typename T>
using compute_t =
    std::conditional_t<is_16bit_float_v<T>, float, std::conditional_t<std::is_same_v<T, int32_t>, int64_t, T>>;

// yes ? a : b by masks of the bits, so that the compiler does not branch on it.
template <typename T>
T select_bits(bool yes, T a, T b) {
  using Bits = std::conditional_t<sizeof(T) == 2, uint16_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>;
  static_assert(sizeof(T) == sizeof(Bits));
  Bits x, y;
  std::memcpy(&x, &a, sizeof(T));
  std::memcpy(&y, &b, sizeof(T));
  const Bits mask = static_cast<Bits>(-static_cast<Bits>(yes));
  const Bits chosen = static_cast<Bits>((x & mask) | (y & static_cast<Bits>(~mask)));
  T out;
  std::memcpy(&out, &chosen, sizeof(T));
  return out;
}

// f(TypeTag<T>{}) for the C++ type of `dtype`.
template <typename F>
decltype(auto) dispatch_all(DType dtype, F&& f) {
  switch (dtype) {
    case kFloat32: return f(TypeTag<float>{});
    case kFloat64: return f(TypeTag<double>{});
    case kFloat16: return f(TypeTag<Half>{});
    case kBFloat16: return f(TypeTag<BFloat16>{});
    case kInt64: return f(TypeTag<int64_t>{});
    case kBool: return f(TypeTag<bool>{});
    case kInt32: return f(TypeTag<int32_t>{});
    case kUInt8: return f(TypeTag<uint8_t>{});
  }
  throw Error("dispatch: unknown dtype");
}

// Same, for the dtypes that support arithmetic (callers have already rejected bool).
template <typename F>
decltype(auto) dispatch_numeric(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case kFloat32: return f(TypeTag<float>{});
    case kFloat64: return f(TypeTag<double>{});
    case kFloat16: return f(TypeTag<Half>{});
    case kBFloat16: return f(TypeTag<BFloat16>{});
    case kInt64: return f(TypeTag<int64_t>{});
    case kInt32: return f(TypeTag<int32_t>{});
    case kUInt8: return f(TypeTag<uint8_t>{});
    case kBool: break;
  }
  throw Error(fmt::format("{}: not supported for dtype {}", op, dtype_name(dtype)));
}

template <typename F>
decltype(auto) dispatch_floating(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case kFloat32: return f(TypeTag<float>{});
    case kFloat64: return f(TypeTag<double>{});
    case kFloat16: return f(TypeTag<Half>{});
    case kBFloat16: return f(TypeTag<BFloat16>{});
    default: break;
  }
  throw Error(fmt::format("{}: expected a floating-point tensor, got dtype {}", op, dtype_name(dtype)));
}

// Strides (in elements) of `t` when broadcast to `shape` (which has at least t.dim() dims):
// 0 for dims that are new or of size 1 in t.
Shape broadcast_strides(const Tensor& t, const Shape& shape);

// The coalesced iteration space of N operands over one shape (inline up to 6 dims).
template <size_t N>
struct StridedPlan {
  Shape sizes;                                     // outer dims first; the last one is the inner loop
  SmallVector<std::array<int64_t, N>, 6> strides;  // per dim, per operand
};

template <size_t N>
StridedPlan<N> plan_strided(const Shape& shape, const std::array<Shape, N>& strides) {
  StridedPlan<N> plan;
  // Keep dims of size > 1, innermost first in the operands' memory order (iteration_order.h),
  // merging a dim into the one inside it when every operand steps over the inner dim's full
  // extent with its stride.
  const bool logical = logical_order_holds<N>(shape, strides);  // the common case: no order to build
  const Shape order = logical ? Shape() : sorted_iteration_order<N>(shape, strides);
  for (size_t k = 0; k < shape.size(); ++k) {
    const int64_t d = logical ? static_cast<int64_t>(shape.size() - 1 - k) : order[k];
    if (shape[d] == 1) continue;
    std::array<int64_t, N> s;
    for (size_t k = 0; k < N; ++k) s[k] = strides[k][d];
    if (!plan.sizes.empty()) {
      bool mergeable = true;
      for (size_t k = 0; k < N; ++k) mergeable &= s[k] == plan.strides.back()[k] * plan.sizes.back();
      if (mergeable) {
        plan.sizes.back() *= shape[d];
        continue;
      }
    }
    plan.sizes.push_back(shape[d]);
    plan.strides.push_back(s);
  }
  if (plan.sizes.empty()) {  // a single element
    plan.sizes.push_back(1);
    plan.strides.push_back({});
  }
  std::reverse(plan.sizes.begin(), plan.sizes.end());
  std::reverse(plan.strides.begin(), plan.strides.end());
  return plan;
}

// Whether every operand is row-major over the whole shape (dims of size 1 aside), so that the
// shape is one flat row of `numel` elements for all of them.
template <size_t N>
bool dense_over(const Shape& shape, const std::array<Shape, N>& strides, int64_t* numel) {
  bool dense = true;
  *numel = 1;
  for (size_t d = shape.size(); d-- > 0 && dense;) {
    for (size_t k = 0; k < N; ++k) dense &= shape[d] == 1 || strides[k][d] == *numel;
    *numel *= shape[d];
  }
  return dense;
}

// inner(n, offsets, inner_strides) for each innermost row of a plan (of a shape with elements),
// outer dims as an odometer.
template <size_t N, typename F>
void for_each_planned(const StridedPlan<N>& plan, F& inner) {
  const size_t outer_dims = plan.sizes.size() - 1;
  const int64_t n = plan.sizes.back();
  const std::array<int64_t, N> inner_strides = plan.strides.back();
  Shape counter(outer_dims, 0);
  std::array<int64_t, N> offsets{};
  while (true) {
    inner(n, offsets, inner_strides);
    // Odometer over the outer dims, innermost of them first.
    size_t d = outer_dims;
    while (d > 0) {
      --d;
      for (size_t k = 0; k < N; ++k) offsets[k] += plan.strides[d][k];
      if (++counter[d] < plan.sizes[d]) break;
      for (size_t k = 0; k < N; ++k) offsets[k] -= plan.strides[d][k] * plan.sizes[d];
      counter[d] = 0;
      if (d == 0) return;
    }
    if (outer_dims == 0) return;
  }
}

// Calls inner(n, offsets, inner_strides) once per innermost row: n elements starting at
// element offsets[k] of operand k, stepping inner_strides[k]. Nothing is called when the
// shape has no elements.
template <size_t N, typename F>
void for_each_strided(const Shape& shape, const std::array<Shape, N>& strides, F&& inner) {
  for (int64_t size : shape) {
    if (size == 0) return;
  }
  // Fast path: every operand row-major over the whole shape is one flat row.
  int64_t numel = 0;
  if (dense_over<N>(shape, strides, &numel)) {
    std::array<int64_t, N> zeros{}, ones;
    ones.fill(1);
    inner(numel, zeros, ones);
    return;
  }
  for_each_planned<N>(plan_strided<N>(shape, strides), inner);
}

// Elements per chunk of an elementwise loop on the intra-op threads: below twice this a loop
// stays on the calling thread (a chunk must outweigh waking a thread, a few µs).
constexpr int64_t kElementwiseGrain = 32768;

// What one element of a costlier kernel is worth in adds, on one thread (bench/grain_compare.sh;
// bench/README.md, "The intra-op grain, kernel by kernel": per element, an add 0.11 ns, a pass
// of batch or layer normalisation 0.6, a softmax 1.2, a max-pooling tap 1.7, on Zen 4). Such a
// kernel passes its cost to parallel_rows, so it splits at proportionally fewer elements: each
// chunk is still a few µs of work, as kElementwiseGrain adds are. Rounded down from the
// measurements, so a chunk errs on the larger side.
constexpr int64_t kCostTranscendental = 2;  // exp, log, tanh, GELU, ... (exp 1.9, GELU 2.9)
constexpr int64_t kCostNormalize = 4;       // a pass over a row or channel with double sums
constexpr int64_t kCostSoftmax = 8;         // max, exp, sum and divide, per element
constexpr int64_t kCostPoolTap = 8;         // one tap of a max-pooling window

// fn(first, last) over independent rows [first, last) of [0, rows), each `row_length`
// elements of `cost` adds' worth each, on the intra-op threads (a range of rows at least
// kElementwiseGrain adds' worth).
template <typename F>
void parallel_rows(int64_t rows, int64_t row_length, int64_t cost, F&& fn) {
  parallel_for(0, rows, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(row_length * cost, 1)), fn);
}
// The same for elements an add's worth each (elementwise loops, sums).
template <typename F>
void parallel_rows(int64_t rows, int64_t row_length, F&& fn) {
  parallel_rows(rows, row_length, 1, std::forward<F>(fn));
}

// Whether an elementwise loop of `numel` elements stays on the calling thread: too small to
// split, one intra-op thread, or already inside a parallel region.
inline bool elementwise_serial(int64_t numel) {
  return numel < 2 * kElementwiseGrain || get_num_threads() == 1 || in_parallel_region();
}

// For sums over rows: [0, rows) in chunks of a size fixed by the shape (at least `min_rows`
// rows and kElementwiseGrain elements), each chunk's partial result partial(first, last)
// computed on the intra-op threads. Returns the partials in chunk order, for the caller to
// add in that order: the bits do not depend on the thread count.
template <typename F>
auto parallel_row_partials(int64_t rows, int64_t row_length, int64_t min_rows, F&& partial) {
  const int64_t chunk_rows = std::max<int64_t>(min_rows, kElementwiseGrain / std::max<int64_t>(row_length, 1));
  std::vector<decltype(partial(int64_t{0}, int64_t{0}))> parts(static_cast<size_t>(chunk_count(rows, chunk_rows)));
  parallel_chunks(static_cast<int64_t>(parts.size()), [&](int64_t c) {
    parts[static_cast<size_t>(c)] = partial(c * chunk_rows, std::min(rows, (c + 1) * chunk_rows));
  });
  return parts;
}

// Whether a loop over the plan goes faster in tiles: when its two innermost dims are transposed
// between the operands (one operand steps the inner dim with a long stride and the dim outside
// it with stride 1: out = x.t().contiguous()), a row reads that operand one cache line per
// element, and the lines come back for the next row only while the caches hold a row's worth.
// They do not when the stride is a multiple of 512 elements (the lines fall into a few cache
// sets) in rows of more than 256, nor when a row spans 3 M elements or more (more pages than the
// TLB holds); elsewhere rows are faster than tiles (bench/README.md, "Transposed copies": the
// 1024 float32 transpose 5.0 -> 1.5 ms in tiles, NCHW to channels-last and 1000 x 1000 slower).
template <size_t N>
bool tiles_pay(const StridedPlan<N>& plan) {
  const size_t dims = plan.sizes.size();
  if (dims < 2) return false;
  const int64_t cols = plan.sizes[dims - 1];
  for (size_t k = 0; k < N; ++k) {
    const int64_t stride = std::abs(plan.strides[dims - 1][k]);
    if (stride <= 1 || plan.strides[dims - 2][k] != 1) continue;
    if ((stride % 512 == 0 && cols > 256) || stride * cols >= (int64_t{3} << 20)) return true;
  }
  return false;
}

// Such loops go in tiles of kTransposeTile x kTransposeTile elements of the two inner dims:
// a tile's rows reuse the lines its first row loaded.
constexpr int64_t kTransposeTile = 32;

// A transposed plan's tiles for units [first, last): a unit is a band of kTransposeTile rows of
// the second-innermost dim at one index of the dims outside, cut into tiles of `tile_cols`
// columns. block(offsets, rows, cols) per tile: its first element's offsets, its rows and
// columns (a row steps the plan's second-innermost strides, a column the innermost).
template <size_t N, typename F>
void for_each_tile(const StridedPlan<N>& plan, int64_t first, int64_t last, int64_t tile_cols, F& block) {
  const size_t dims = plan.sizes.size();
  const int64_t rows = plan.sizes[dims - 2], cols = plan.sizes[dims - 1];
  const int64_t bands = chunk_count(rows, kTransposeTile);
  const std::array<int64_t, N>& row_step = plan.strides[dims - 2];
  const std::array<int64_t, N>& col_step = plan.strides[dims - 1];
  for (int64_t unit = first; unit < last; ++unit) {
    std::array<int64_t, N> base{};
    int64_t rest = unit / bands;
    for (size_t d = dims - 2; d-- > 0;) {
      const int64_t index = rest % plan.sizes[d];
      rest /= plan.sizes[d];
      for (size_t k = 0; k < N; ++k) base[k] += index * plan.strides[d][k];
    }
    const int64_t row_first = unit % bands * kTransposeTile, row_last = std::min(rows, row_first + kTransposeTile);
    for (int64_t col = 0; col < cols; col += tile_cols) {
      std::array<int64_t, N> offsets;
      for (size_t k = 0; k < N; ++k) offsets[k] = base[k] + row_first * row_step[k] + col * col_step[k];
      block(offsets, row_last - row_first, std::min(tile_cols, cols - col));
    }
  }
}

// The units for_each_tile walks: bands of kTransposeTile rows of the second-innermost dim, at
// every index of the dims outside.
template <size_t N>
int64_t tile_bands(const StridedPlan<N>& plan) {
  const size_t dims = plan.sizes.size();
  int64_t units = chunk_count(plan.sizes[dims - 2], kTransposeTile);
  for (size_t d = 0; d + 2 < dims; ++d) units *= plan.sizes[d];
  return units;
}

// A transposed plan's tiles on the intra-op threads, in bands of rows (on the calling thread
// when `serial`): block(offsets, rows, cols) as for_each_tile calls it, tile_cols columns at a
// time (a band's whole rows at once when tile_cols is the plan's innermost size).
template <size_t N, typename F>
void parallel_tiles(const StridedPlan<N>& plan, bool serial, F&& block, int64_t tile_cols = kTransposeTile) {
  const int64_t cols = plan.sizes.back(), units = tile_bands(plan);
  const int64_t grain = serial ? units : std::max<int64_t>(1, kElementwiseGrain / (kTransposeTile * cols));
  parallel_for(0, units, grain, [&](int64_t from, int64_t to) { for_each_tile<N>(plan, from, to, tile_cols, block); });
}

// for_each_strided on the intra-op threads (tensor/parallel.h): the rows of the outermost
// dimension (or, for one strided row, the row itself) are split into ranges, each walked by
// one thread; a transposed plan goes by tiles where they pay, in bands of rows. Operand 0 is
// the one written: when it writes any element twice (a 0 stride), this is for_each_strided
// itself, in its order; under 2 * kElementwiseGrain elements it runs on the calling thread.
// Every element is computed as for_each_strided computes it: the same bits.
template <size_t N, typename F>
void parallel_for_each_strided(const Shape& shape, const std::array<Shape, N>& strides, F&& inner) {
  int64_t numel = 1;
  bool overlapping_output = false;
  for (size_t d = 0; d < shape.size(); ++d) {
    numel *= shape[d];
    overlapping_output |= shape[d] > 1 && strides[0][d] == 0;
  }
  const bool serial = elementwise_serial(numel);
  int64_t span = 0;
  const bool dense = dense_over<N>(shape, strides, &span);
  if (overlapping_output || dense || numel < kTransposeTile * kTransposeTile) {
    if (overlapping_output || serial) return for_each_strided<N>(shape, strides, inner);
    if (dense) {  // one flat range of elements, cut anywhere
      std::array<int64_t, N> ones;
      ones.fill(1);
      return parallel_for(0, numel, kElementwiseGrain, [&](int64_t from, int64_t to) {
        std::array<int64_t, N> offsets;
        offsets.fill(from);
        inner(to - from, offsets, ones);
      });
    }
  }
  const StridedPlan<N> plan = plan_strided<N>(shape, strides);
  if (tiles_pay(plan)) {  // bands of tiles, each walked row by row
    const std::array<int64_t, N>& row_step = plan.strides[plan.sizes.size() - 2];
    return parallel_tiles<N>(plan, serial, [&](const std::array<int64_t, N>& first, int64_t rows, int64_t cols) {
      for (int64_t row = 0; row < rows; ++row) {
        std::array<int64_t, N> offsets;
        for (size_t k = 0; k < N; ++k) offsets[k] = first[k] + row * row_step[k];
        inner(cols, offsets, plan.strides.back());
      }
    });
  }
  if (serial) return for_each_planned<N>(plan, inner);
  const int64_t row = plan.sizes.back();
  if (plan.sizes.size() == 1) {  // one strided row: cut it
    return parallel_for(0, row, kElementwiseGrain, [&](int64_t from, int64_t to) {
      std::array<int64_t, N> offsets;
      for (size_t k = 0; k < N; ++k) offsets[k] = from * plan.strides[0][k];
      inner(to - from, offsets, plan.strides[0]);
    });
  }
  // Cut the outermost dimension; each range walks the dims inside it as for_each_strided does.
  const int64_t outer = plan.sizes[0];
  parallel_rows(outer, numel / outer, [&](int64_t from, int64_t to) {
    Shape sub_shape(plan.sizes.begin(), plan.sizes.end());
    sub_shape[0] = to - from;
    std::array<Shape, N> sub_strides;
    for (size_t k = 0; k < N; ++k) {
      sub_strides[k] = Shape(plan.sizes.size(), 0);
      for (size_t d = 0; d < plan.sizes.size(); ++d) sub_strides[k][d] = plan.strides[d][k];
    }
    const auto shifted = [&](int64_t n, const std::array<int64_t, N>& off, const std::array<int64_t, N>& st) {
      std::array<int64_t, N> moved;
      for (size_t k = 0; k < N; ++k) moved[k] = off[k] + from * plan.strides[0][k];
      inner(n, moved, st);
    };
    for_each_strided<N>(sub_shape, sub_strides, shifted);
  });
}

// The sum over k < n of f(k) in A, from eight partial sums: one running sum would wait on
// each add's latency; eight keep the adds (and the vector unit) busy. The partials are
// combined pairwise at the end, so the result depends on n only, not on where it is called.
template <typename A, typename F>
A partial_sums(int64_t n, F&& f) {
  constexpr int kParts = 8;
  A part[kParts] = {};
  int64_t k = 0;
  for (; k + kParts <= n; k += kParts) {
    for (int p = 0; p < kParts; ++p) part[p] += f(k + p);
  }
  A tail = 0;
  for (; k < n; ++k) tail += f(k);
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7])) + tail;
}

}  // namespace tinyddp::tensor::cpu
