// CPU max pooling (backends/cpu/backend.h): max_pool2d and its backward, by PyTorch's rule (each
// window's maximum, the first tap holding it, row-major; a NaN, if any, wins: the last NaN),
// through per-position tap tables for any window and kernels of their own for the usual 2 x 2
// windows of stride 2: dense rows in place, channels-last maps in place with the channels as
// vector lanes, and other maps (16-bit, sliced channels-last) gathered into dense planes first.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "tinyddp/tensor/backends/cpu/backend.h"
#include "tinyddp/tensor/backends/cpu/loops.h"

namespace tinyddp::tensor::cpu {

namespace {

// Every output position's taps that fall inside the input (the same for every plane): for
// position k, entries [begin[k], begin[k + 1]) of `offset` (in elements of x) and `index` (ih * W + iw).
struct PoolTaps {
  std::vector<int64_t> begin, offset, index;
  PoolTaps(const Window2d& w, int64_t row_stride, int64_t col_stride) {
    for (int64_t oh = 0; oh < w.oh; ++oh) {
      for (int64_t ow = 0; ow < w.ow; ++ow) {
        begin.push_back(static_cast<int64_t>(offset.size()));
        for (int64_t i = 0; i < w.kh; ++i) {
          const int64_t ih = oh * w.sh - w.ph + i * w.dh;
          for (int64_t j = 0; j < w.kw; ++j) {
            const int64_t iw = ow * w.sw - w.pw + j * w.dw;
            if (ih < 0 || ih >= w.h || iw < 0 || iw >= w.w) continue;
            offset.push_back(ih * row_stride + iw * col_stride);
            index.push_back(ih * w.w + iw);
          }
        }
      }
    }
    begin.push_back(static_cast<int64_t>(offset.size()));
  }
};

// One plane's pooling: as PyTorch, each window's maximum, the first tap holding it (row-major),
// and a NaN, if any, wins (the last NaN). Branch-free passes: which tap wins is data, and
// mispredicted branches would cost more than the pooling itself.
template <typename T>
void max_pool_plane(const T* __restrict in, T* __restrict out, int64_t* __restrict where, const PoolTaps& taps) {
  using C = compute_t<T>;
  const int64_t positions = static_cast<int64_t>(taps.begin.size()) - 1;
  const int64_t* offset = taps.offset.data();
  const int64_t* index = taps.index.data();
  for (int64_t k = 0; k < positions; ++k) {
    const int64_t first = taps.begin[k], last = taps.begin[k + 1];
    C best = -std::numeric_limits<C>::infinity();
    bool nan = false;
    for (int64_t t = first; t < last; ++t) {
      const C v = static_cast<C>(in[offset[t]]);
      best = v > best ? v : best;
      nan |= v != v;
    }
    int64_t best_at = index[first];
    for (int64_t t = last - 1; t >= first; --t) {
      const int64_t hit = static_cast<C>(in[offset[t]]) == best;  // 0 or 1: arithmetic, not a branch
      best_at += (index[t] - best_at) * hit;
    }
    if (nan) {  // rare
      best = std::numeric_limits<C>::quiet_NaN();
      for (int64_t t = first; t < last; ++t) {
        if (static_cast<C>(in[offset[t]]) != static_cast<C>(in[offset[t]])) best_at = index[t];
      }
    }
    out[k] = static_cast<T>(best);
    where[k] = best_at;  // the input element ih * W + iw of the plane
  }
}

}  // namespace

// 2 x 2 windows with stride 2 and no padding or dilation (the usual pooling), rows dense: each
// window's four taps read in place, by max_pool_plane's rule (the maximum, then the first tap
// holding it, row-major; a NaN, if any, wins: the last NaN). Selects by bit masks
// (select_bits), no branches (which tap wins is data, and mispredicts) and no tap arrays, so
// that the float32 loop vectorises: each pair's winner keeps the first on ties, and so does
// the pairs' winner, so it is the first maximal tap. A window with a NaN is written again by
// the NaN rule. `planes` planes, plane_stride elements apart (their outputs one after another):
// the small maps of a CNN cost per row and per call more than per tap, so a range of planes is
// one call. float32 and float64 only: 16-bit planes are widened first (max_pool_2x2_gathered).
template <typename T>
void max_pool_2x2(const T* __restrict in, int64_t row_stride, int64_t plane_stride, int64_t planes, T* __restrict out,
                  int64_t* __restrict where, const Window2d& w) {
  using C = compute_t<T>;
  const auto row_pair = [&](int64_t p, int64_t oh) { return in + p * plane_stride + 2 * oh * row_stride; };
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t oh = 0; oh < w.oh; ++oh) {
      const T* top = row_pair(p, oh);
      const T* bottom = top + row_stride;
      const int64_t first = 2 * oh * w.w;  // the window's top-left element, ih * W + iw
      T* o = out + (p * w.oh + oh) * w.ow;
      int64_t* at = where + (p * w.oh + oh) * w.ow;
      for (int64_t ow = 0; ow < w.ow; ++ow) {
        const C a = static_cast<C>(top[2 * ow]), b = static_cast<C>(top[2 * ow + 1]);
        const C c = static_cast<C>(bottom[2 * ow]), d = static_cast<C>(bottom[2 * ow + 1]);
        const bool b_wins = b > a, d_wins = d > c;
        const C ab = b_wins ? b : a, cd = d_wins ? d : c;
        const bool bottom_wins = cd > ab;
        const T top_best = select_bits(b_wins, top[2 * ow + 1], top[2 * ow]);
        const T bottom_best = select_bits(d_wins, bottom[2 * ow + 1], bottom[2 * ow]);
        o[ow] = select_bits(bottom_wins, bottom_best, top_best);
        at[ow] = first + 2 * ow + select_bits(bottom_wins, w.w + d_wins, static_cast<int64_t>(b_wins));
      }
    }
  }
  // NaNs: a pass of its own, over the whole range at once where its rows are dense (it
  // vectorises; rows of a few elements would each cost a loop), then the windows holding one
  // are written again by the NaN rule.
  const auto has_nan = [](const T* x, int64_t count) {
    uint32_t nans = 0;  // an unsigned or: GCC vectorises it, not a bool's
    for (int64_t k = 0; k < count; ++k) nans |= static_cast<uint32_t>(static_cast<C>(x[k]) != static_cast<C>(x[k]));
    return nans != 0;
  };
  if (row_stride == w.w && plane_stride == 2 * w.oh * w.w && !has_nan(in, planes * plane_stride)) return;
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t oh = 0; oh < w.oh; ++oh) {
      const T* top = row_pair(p, oh);
      const T* bottom = top + row_stride;
      if (!has_nan(top, 2 * w.ow) && !has_nan(bottom, 2 * w.ow)) continue;
      const int64_t first = 2 * oh * w.w;
      for (int64_t ow = 0; ow < w.ow; ++ow) {  // rare
        const C v[4] = {static_cast<C>(top[2 * ow]), static_cast<C>(top[2 * ow + 1]), static_cast<C>(bottom[2 * ow]),
                        static_cast<C>(bottom[2 * ow + 1])};
        const int64_t offset[4] = {0, 1, w.w, w.w + 1};
        for (int t = 0; t < 4; ++t) {
          if (v[t] != v[t]) {
            out[(p * w.oh + oh) * w.ow + ow] = static_cast<T>(std::numeric_limits<C>::quiet_NaN());
            where[(p * w.oh + oh) * w.ow + ow] = first + 2 * ow + offset[t];
          }
        }
      }
    }
  }
}

// Elements gathered at a time (in L1).
constexpr int64_t kGatheredElements = 4096;

// The same for 16-bit planes, and for planes whose rows are not dense (a channels-last map whose
// channels are a slice, where a row's elements lie apart and the planes of one image are
// neighbours; a whole channels-last map takes max_pool_2x2_channels_last): the rows each window
// reads gathered into dense planes of the compute type first (16-bit widened to float32), a
// range of planes at once in the order memory holds them, then pooled as dense float32 or
// float64 planes, and the results rounded back (exactly: each output is one of the inputs).
template <typename T>
void max_pool_2x2_gathered(const T* in, int64_t plane_stride, int64_t row_stride, int64_t col_stride, int64_t planes,
                           T* out, int64_t* where, const Window2d& w) {
  using C = compute_t<T>;
  thread_local std::vector<C> wide, pooled;
  const int64_t rows = 2 * w.oh, plane = rows * w.w, positions = w.oh * w.ow;
  wide.resize(static_cast<size_t>(planes * plane));
  pooled.resize(static_cast<size_t>(planes * positions));
  C* to = wide.data();
  if (col_stride == 1 && row_stride == w.w && plane_stride == plane) {  // dense: one loop (rows are a few elements)
    for (int64_t k = 0; k < planes * plane; ++k) to[k] = static_cast<C>(in[k]);
  } else if (plane_stride < col_stride) {  // channels-last: the planes' elements side by side
    for (int64_t h = 0; h < rows; ++h) {
      for (int64_t k = 0; k < w.w; ++k) {
        const T* from = in + h * row_stride + k * col_stride;
        for (int64_t p = 0; p < planes; ++p) to[p * plane + h * w.w + k] = static_cast<C>(from[p * plane_stride]);
      }
    }
  } else {
    for (int64_t p = 0; p < planes; ++p) {
      for (int64_t h = 0; h < rows; ++h) {
        const T* row = in + p * plane_stride + h * row_stride;
        for (int64_t k = 0; k < w.w; ++k) to[p * plane + h * w.w + k] = static_cast<C>(row[k * col_stride]);
      }
    }
  }
  max_pool_2x2(wide.data(), w.w, plane, planes, pooled.data(), where, w);
  for (int64_t k = 0; k < planes * positions; ++k) out[k] = static_cast<T>(pooled[k]);
}

// Channels-last maps (channel stride 1, column stride C) in place, images [first, last): each
// output position's four taps are dense runs of C channels, so the channels are the vector
// lanes, with max_pool_2x2's selection and NaN rule written as selects per lane. The maxima go
// to a channels-last out (kOutLast: dense runs of C, as the input's) or to [N, C, OH, OW]
// places; the indices to their [N, C, OH, OW] places (planes `positions` apart).
template <typename T, bool kOutLast>
void max_pool_2x2_channels_last(const T* in, int64_t image_stride, int64_t row_stride, int64_t first, int64_t last,
                                T* out, int64_t* where, const Window2d& w) {
  using C = compute_t<T>;
  const int64_t channels = w.c, col_stride = channels, positions = w.oh * w.ow;
  const C nan = std::numeric_limits<C>::quiet_NaN();
  for (int64_t n = first; n < last; ++n) {
    for (int64_t oh = 0; oh < w.oh; ++oh) {
      for (int64_t ow = 0; ow < w.ow; ++ow) {
        const T* a = in + n * image_stride + 2 * oh * row_stride + 2 * ow * col_stride;
        const T *b = a + col_stride, *c = a + row_stride, *d = c + col_stride;
        const int64_t corner = 2 * oh * w.w + 2 * ow, k = oh * w.ow + ow;  // the window's top-left, its output
        T* o = out + n * channels * positions + (kOutLast ? k * channels : k);
        int64_t* at = where + n * channels * positions + k;
        for (int64_t ch = 0; ch < channels; ++ch) {
          const C va = static_cast<C>(a[ch]), vb = static_cast<C>(b[ch]);
          const C vc = static_cast<C>(c[ch]), vd = static_cast<C>(d[ch]);
          const bool b_wins = vb > va, d_wins = vd > vc;
          const C ab = b_wins ? vb : va, cd = d_wins ? vd : vc;
          const bool bottom_wins = cd > ab;
          int64_t offset = bottom_wins ? w.w + d_wins : static_cast<int64_t>(b_wins);
          C best = bottom_wins ? cd : ab;
          // A NaN wins, the last one row-major.
          const bool na = va != va, nb = vb != vb, nc = vc != vc, nd = vd != vd;
          const int64_t last_nan = nd ? w.w + 1 : nc ? w.w : nb ? 1 : 0;
          offset = na || nb || nc || nd ? last_nan : offset;
          best = na || nb || nc || nd ? nan : best;
          o[kOutLast ? ch : ch * positions] = static_cast<T>(best);
          at[ch * positions] = corner + offset;
        }
      }
    }
  }
}

bool pools_2x2(const Window2d& w) {
  return w.kh == 2 && w.kw == 2 && w.sh == 2 && w.sw == 2 && w.ph == 0 && w.pw == 0 && w.dh == 1 && w.dw == 1 &&
         2 * w.oh <= w.h && 2 * w.ow <= w.w;  // every window inside (not ceil_mode's last)
}

bool CpuBackend::max_pool2d(const Tensor& out, const Tensor& indices, const Tensor& x, const Window2d& w) {
  dispatch_floating(x.dtype(), "max_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    // 2 x 2 windows: channels-last maps in place with the channels as lanes, dense rows in
    // place, else (16-bit, channels-last with sliced channels) from gathered planes; any other
    // window goes through the tap tables.
    const bool two_by_two = pools_2x2(w);
    const int64_t positions = w.oh * w.ow, s0 = x.stride(0), s1 = x.stride(1), s2 = x.stride(2), s3 = x.stride(3);
    const bool gathered = two_by_two && (is_16bit_float_v<T> || s3 != 1);
    std::optional<PoolTaps> taps;
    if (!two_by_two) taps.emplace(w, s2, s3);
    const int64_t channels = w.c;
    // Planes one stride apart (N and C merge: a contiguous x): a range of them is one call;
    // otherwise a range within one image (the channels of a channels-last x).
    const bool even_planes = w.n == 1 || s0 == channels * s1;
    const T* in = x.data_ptr<T>();
    T* o = out.data_ptr<T>();
    int64_t* where = indices.data_ptr<int64_t>();
    if (two_by_two && s1 == 1 && s3 == channels && channels > 1) {  // channels-last: an image at a time
      const bool out_last = !out.is_contiguous();  // then channels-last too (native/pool.cc keeps x's format)
      parallel_rows(w.n, channels * positions * 4, kCostPoolTap, [&](int64_t first, int64_t last) {
        if (out_last) {
          max_pool_2x2_channels_last<T, true>(in, s0, s2, first, last, o, where, w);
        } else {
          max_pool_2x2_channels_last<T, false>(in, s0, s2, first, last, o, where, w);
        }
      });
      return;
    }
    const Tensor planes_out = stand_in(out);  // the kernels below write [N, C, OH, OW] planes
    o = planes_out.data_ptr<T>();
    parallel_rows(w.n * channels, positions * w.kh * w.kw, kCostPoolTap, [&](int64_t first, int64_t last) {
      for (int64_t p = first; p < last;) {
        const T* plane = in + (p / channels) * s0 + (p % channels) * s1;
        int64_t planes = !two_by_two ? 1 : even_planes ? last - p : std::min(last, (p / channels + 1) * channels) - p;
        if (gathered) planes = std::clamp(kGatheredElements / std::max<int64_t>(2 * w.oh * w.w, 1), int64_t{1}, planes);
        if (!two_by_two) {
          max_pool_plane(plane, o + p * positions, where + p * positions, *taps);
        } else if (gathered) {
          max_pool_2x2_gathered(plane, s1, s2, s3, planes, o + p * positions, where + p * positions, w);
        } else {
          max_pool_2x2(plane, s2, s1, planes, o + p * positions, where + p * positions, w);
        }
        p += planes;
      }
    });
    settle(out, planes_out);
  });
  return true;
}

bool CpuBackend::max_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& indices,
                                     const Window2d& w) {
  const bool last = !grad_x.is_contiguous();  // channels last, grad_out too (backend.h)
  TDDP_CHECK(!last || (grad_x.is_contiguous(MemoryFormat::kChannelsLast) &&
                       grad_out.is_contiguous(MemoryFormat::kChannelsLast)),
             "max_pool2d backward: the gradients must be contiguous or both channels last");
  dispatch_floating(grad_x.dtype(), "max_pool2d backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* g = grad_out.data_ptr<T>();
    const int64_t* where = indices.data_ptr<int64_t>();
    T* gx = grad_x.data_ptr<T>();
    const int64_t per_plane = w.oh * w.ow, plane = w.h * w.w, channels = w.c;
    if (last) {
      // An image at a time: zeroed, then output k's gradients (C of them, a dense run) added at
      // their maxima, each element's gradients in the order of k, as the planes below.
      parallel_rows(w.n, channels * (per_plane + plane), [&](int64_t first, int64_t end) {
        for (int64_t n = first; n < end; ++n) {
          T* target = gx + n * plane * channels;
          std::fill(target, target + plane * channels, T(0));
          const T* from = g + n * per_plane * channels;
          const int64_t* at = where + n * channels * per_plane;
          for (int64_t k = 0; k < per_plane; ++k) {
            for (int64_t ch = 0; ch < channels; ++ch) {
              T& d = target[at[ch * per_plane + k] * channels + ch];
              d = static_cast<T>(static_cast<C>(d) + static_cast<C>(from[k * channels + ch]));
            }
          }
        }
      });
      return;
    }
    // Each plane its own: zeroed, then each output's gradient added at its maximum while the
    // plane is in the cache (one pass over grad_x, not a fill of all of it first).
    parallel_rows(w.n * w.c, per_plane + plane, [&](int64_t first, int64_t last) {
      for (int64_t p = first; p < last; ++p) {
        T* target = gx + p * plane;
        std::fill(target, target + plane, T(0));
        for (int64_t k = p * per_plane; k < (p + 1) * per_plane; ++k) {
          T& d = target[where[k]];
          d = static_cast<T>(static_cast<C>(d) + static_cast<C>(g[k]));
        }
      }
    });
  });
  return true;
}

}  // namespace tinyddp::tensor::cpu
