// CPU im2col and col2im (cpu/backend.h), the data movement under convolution and pooling, and
// max pooling. im2col and col2im work on a padded copy of the input (of its gradient), so that
// no row needs bounds: they walk (n, c, kernel tap i, j) in col's memory order and move each
// tap's OH rows of OW elements with the input's strides. Rows are short in small CNNs (2 to
// 16 elements), so those widths have loops of their own with the width known when compiled.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tinyddp/tensor/cpu/backend.h"
#include "tinyddp/tensor/cpu/loops.h"
#include "tinyddp/tensor/factory.h"

namespace tinyddp::tensor::cpu {

namespace {

// The taps (n, c, i, j) of a window over a col matrix [N, C, kh, kw, OH, OW] with strides cs.
struct TapWalk {
  int64_t cs[6];
  Window2d w;

  TapWalk(const Tensor& col, const Window2d& window) : w(window) {
    for (int d = 0; d < 6; ++d) cs[d] = col.stride(d);
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

// The row loops under im2col (Assign) and col2im (Add): for r < rows, element k of row r of
// src (src + r * src_row + k * src_step) is moved onto out + r * out_row + k * out_step. Rows
// are short in small CNNs, so this loop, not the moving, is what costs; the widths of small
// feature maps get a loop whose width is known when compiled (a few vector moves).
struct Assign {
  template <typename T>
  static void apply(T& out, T in) {
    out = in;
  }
};
struct Add {
  template <typename T>
  static void apply(T& out, T in) {
    out = static_cast<T>(static_cast<compute_t<T>>(out) + static_cast<compute_t<T>>(in));
  }
};

template <typename Op, int64_t kCols, typename T>
void move_rows_fixed(T* out, int64_t out_row, int64_t out_step, const T* src, int64_t src_row, int64_t src_step,
                     int64_t rows, int64_t cols) {
  const int64_t n = kCols > 0 ? kCols : cols;
  for (int64_t r = 0; r < rows; ++r, out += out_row, src += src_row) {
    for (int64_t k = 0; k < n; ++k) Op::apply(out[k * out_step], src[k * src_step]);
  }
}

template <typename Op, typename T>
void move_rows(T* out, int64_t out_row, int64_t out_step, const T* src, int64_t src_row, int64_t src_step, int64_t rows,
               int64_t cols) {
  if (out_step == 1 && src_step == 1) {
    switch (cols) {
      case 2: return move_rows_fixed<Op, 2>(out, out_row, 1, src, src_row, 1, rows, cols);
      case 4: return move_rows_fixed<Op, 4>(out, out_row, 1, src, src_row, 1, rows, cols);
      case 8: return move_rows_fixed<Op, 8>(out, out_row, 1, src, src_row, 1, rows, cols);
      case 16: return move_rows_fixed<Op, 16>(out, out_row, 1, src, src_row, 1, rows, cols);
      default: return move_rows_fixed<Op, 0>(out, out_row, 1, src, src_row, 1, rows, cols);
    }
  }
  move_rows_fixed<Op, 0>(out, out_row, out_step, src, src_row, src_step, rows, cols);
}

}  // namespace

void im2col(const Tensor& col, const Tensor& x, const Window2d& window, double pad_value) {
  // Padding is materialised once: a contiguous [N, C, H + 2 ph, W + 2 pw] copy of x whose
  // border holds pad_value (x itself when contiguous and unpadded), so that every tap's rows
  // are plain strided copies.
  Tensor padded = x;
  if (window.ph > 0 || window.pw > 0 || !x.is_contiguous()) {
    padded = empty({window.n, window.c, window.padded_h(), window.padded_w()}, x.dtype());
    if (window.ph > 0 || window.pw > 0) fill(padded, pad_value);
    copy(padded.narrow(2, window.ph, window.h).narrow(3, window.pw, window.w), x);
  }
  dispatch_floating(x.dtype(), "im2col", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const TapWalk walk(col, window);
    const Window2d& w = walk.w;
    T* const col_data = col.data_ptr<T>();
    const T* const p_data = padded.data_ptr<T>();
    const int64_t plane = w.padded_h() * w.padded_w(), row = w.padded_w();
    walk.for_each_tap([&](int64_t n, int64_t c, int64_t i, int64_t j) {
      T* out = col_data + n * walk.cs[0] + c * walk.cs[1] + i * walk.cs[2] + j * walk.cs[3];
      const T* src = p_data + (n * w.c + c) * plane + i * w.dh * row + j * w.dw;
      move_rows<Assign>(out, walk.cs[4], walk.cs[5], src, w.sh * row, w.sw, w.oh, w.ow);
    });
  });
}

void col2im(const Tensor& grad_x, const Tensor& col, const Window2d& window) {
  // Accumulates into a zeroed padded buffer [N, C, H + 2 ph, W + 2 pw] (grad_x itself when
  // unpadded), so that every tap's rows are plain strided adds, then keeps its interior.
  const bool padded_out = window.ph > 0 || window.pw > 0;
  const Tensor padded =
      padded_out ? empty({window.n, window.c, window.padded_h(), window.padded_w()}, grad_x.dtype()) : grad_x;
  fill(padded, 0.0);
  dispatch_floating(grad_x.dtype(), "col2im", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const TapWalk walk(col, window);
    const Window2d& w = walk.w;
    const T* const col_data = col.data_ptr<T>();
    T* const p_data = padded.data_ptr<T>();
    const int64_t plane = w.padded_h() * w.padded_w(), row = w.padded_w();
    walk.for_each_tap([&](int64_t n, int64_t c, int64_t i, int64_t j) {
      const T* in = col_data + n * walk.cs[0] + c * walk.cs[1] + i * walk.cs[2] + j * walk.cs[3];
      T* out = p_data + (n * w.c + c) * plane + i * w.dh * row + j * w.dw;
      move_rows<Add>(out, w.sh * row, w.sw, in, walk.cs[4], walk.cs[5], w.oh, w.ow);
    });
  });
  if (padded_out) copy(grad_x, padded.narrow(2, window.ph, window.h).narrow(3, window.pw, window.w));
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
