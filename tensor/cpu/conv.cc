// CPU im2col and col2im (cpu/backend.h), the data movement under convolution and pooling. Both
// walk (n, c, kernel tap i, j) in col's memory order and, per tap, its OH output rows: the taps
// that fall on padding are written as pad_value (im2col) or skipped (col2im), the rest move
// with the input's column stride, a plain copy or add when the stride is 1 and both rows are
// dense. Rows are short (4 to 32 elements in small CNNs), so the per-row work is kept to a few
// additions: everything else is computed once per tap.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tinyddp/tensor/cpu/backend.h"
#include "tinyddp/tensor/cpu/loops.h"

namespace tinyddp::tensor::cpu {

namespace {

// One tap's walk over the output rows. `T` is the element type, `Col` the col side's pointer
// type (const for col2im).
template <typename T>
struct TapWalk {
  int64_t cs[6], xs[4];  // strides of col [N, C, kh, kw, OH, OW] and x [N, C, H, W]
  Window2d w;
  // Per kernel column j: the output columns [first, last) whose input column
  // iw = ow * sw - pw + j * dw lies inside the row (the others read padding).
  std::vector<std::pair<int64_t, int64_t>> valid;

  TapWalk(const Tensor& col, const Tensor& x, const Window2d& window) : w(window) {
    for (int d = 0; d < 6; ++d) cs[d] = col.stride(d);
    for (int d = 0; d < 4; ++d) xs[d] = x.stride(d);
    for (int64_t j = 0; j < w.kw; ++j) {
      const int64_t shift = j * w.dw - w.pw;
      const int64_t first = std::min(shift >= 0 ? 0 : (-shift + w.sw - 1) / w.sw, w.ow);
      const int64_t last = w.w - 1 - shift < 0 ? 0 : (w.w - 1 - shift) / w.sw + 1;
      valid.emplace_back(first, std::clamp(last, first, w.ow));
    }
  }

  // Calls tap(n, c, i, j) in col's memory order: images innermost when col keeps them
  // together under each tap (convolution's [C, kh, kw, N, OH, OW]), outermost otherwise
  // (pooling's [N, C, kh, kw, OH, OW]).
  template <typename F>
  void for_each_tap(F&& tap) const {
    if (cs[0] < cs[3]) {
      for (int64_t c = 0; c < w.c; ++c)
        for (int64_t i = 0; i < w.kh; ++i)
          for (int64_t j = 0; j < w.kw; ++j)
            for (int64_t n = 0; n < w.n; ++n) tap(n, c, i, j);
    } else {
      for (int64_t n = 0; n < w.n; ++n)
        for (int64_t c = 0; c < w.c; ++c)
          for (int64_t i = 0; i < w.kh; ++i)
            for (int64_t j = 0; j < w.kw; ++j) tap(n, c, i, j);
    }
  }
};

}  // namespace

void im2col(const Tensor& col, const Tensor& x, const Window2d& window, double pad_value) {
  dispatch_floating(x.dtype(), "im2col", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T pad = static_cast<T>(static_cast<compute_t<T>>(pad_value));
    const TapWalk<T> walk(col, x, window);
    const Window2d& w = walk.w;
    T* const col_data = col.data_ptr<T>();
    const T* const x_data = x.data_ptr<T>();
    const int64_t col_step = walk.cs[5], row_step = walk.cs[4], src_step = w.sw * walk.xs[3];
    const bool dense = col_step == 1 && src_step == 1;
    walk.for_each_tap([&](int64_t n, int64_t c, int64_t i, int64_t j) {
      T* out = col_data + n * walk.cs[0] + c * walk.cs[1] + i * walk.cs[2] + j * walk.cs[3];
      const T* plane = x_data + n * walk.xs[0] + c * walk.xs[1] + (j * w.dw - w.pw) * walk.xs[3];
      const auto [first, last] = walk.valid[j];
      int64_t ih = i * w.dh - w.ph;
      for (int64_t oh = 0; oh < w.oh; ++oh, ih += w.sh, out += row_step) {
        if (ih < 0 || ih >= w.h) {
          for (int64_t ow = 0; ow < w.ow; ++ow) out[ow * col_step] = pad;
          continue;
        }
        const T* src = plane + ih * walk.xs[2];
        for (int64_t ow = 0; ow < first; ++ow) out[ow * col_step] = pad;
        if (dense) {
          for (int64_t ow = first; ow < last; ++ow) out[ow] = src[ow];
        } else {
          for (int64_t ow = first; ow < last; ++ow) out[ow * col_step] = src[ow * src_step];
        }
        for (int64_t ow = last; ow < w.ow; ++ow) out[ow * col_step] = pad;
      }
    });
  });
}

void col2im(const Tensor& grad_x, const Tensor& col, const Window2d& window) {
  fill(grad_x, 0.0);
  dispatch_floating(grad_x.dtype(), "col2im", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const TapWalk<T> walk(col, grad_x, window);
    const Window2d& w = walk.w;
    const T* const col_data = col.data_ptr<T>();
    T* const x_data = grad_x.data_ptr<T>();
    const int64_t col_step = walk.cs[5], row_step = walk.cs[4], dst_step = w.sw * walk.xs[3];
    const bool dense = col_step == 1 && dst_step == 1;
    walk.for_each_tap([&](int64_t n, int64_t c, int64_t i, int64_t j) {
      const T* in = col_data + n * walk.cs[0] + c * walk.cs[1] + i * walk.cs[2] + j * walk.cs[3];
      T* plane = x_data + n * walk.xs[0] + c * walk.xs[1] + (j * w.dw - w.pw) * walk.xs[3];
      const auto [first, last] = walk.valid[j];
      int64_t ih = i * w.dh - w.ph;
      for (int64_t oh = 0; oh < w.oh; ++oh, ih += w.sh, in += row_step) {
        if (ih < 0 || ih >= w.h) continue;  // the row lies in the padding: nothing flows back
        T* dst = plane + ih * walk.xs[2];
        if (dense) {
          for (int64_t ow = first; ow < last; ++ow)
            dst[ow] = static_cast<T>(static_cast<C>(dst[ow]) + static_cast<C>(in[ow]));
        } else {
          for (int64_t ow = first; ow < last; ++ow) {
            T& d = dst[ow * dst_step];
            d = static_cast<T>(static_cast<C>(d) + static_cast<C>(in[ow * col_step]));
          }
        }
      }
    });
  });
}

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

void max_pool2d(const Tensor& out, const Tensor& indices, const Tensor& x, const Window2d& w) {
  dispatch_floating(x.dtype(), "max_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const PoolTaps taps(w, x.stride(2), x.stride(3));
    const int64_t positions = w.oh * w.ow, s0 = x.stride(0), s1 = x.stride(1), channels = w.c;
    const T* in = x.data_ptr<T>();
    T* o = out.data_ptr<T>();
    int64_t* where = indices.data_ptr<int64_t>();
    for (int64_t p = 0; p < w.n * channels; ++p) {
      max_pool_plane(in + (p / channels) * s0 + (p % channels) * s1, o + p * positions, where + p * positions, taps);
    }
  });
}

void max_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& indices, const Window2d& w) {
  fill(grad_x, 0.0);
  dispatch_floating(grad_x.dtype(), "max_pool2d backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* g = grad_out.data_ptr<T>();
    const int64_t* where = indices.data_ptr<int64_t>();
    T* gx = grad_x.data_ptr<T>();
    const int64_t per_plane = w.oh * w.ow, plane = w.h * w.w;
    for (int64_t p = 0; p < w.n * w.c; ++p) {
      T* target = gx + p * plane;
      for (int64_t k = p * per_plane; k < (p + 1) * per_plane; ++k) {
        T& d = target[where[k]];
        d = static_cast<T>(static_cast<C>(d) + static_cast<C>(g[k]));
      }
    }
  });
}

}  // namespace tinyddp::tensor::cpu
