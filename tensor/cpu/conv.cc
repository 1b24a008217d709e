// CPU im2col and col2im (cpu/backend.h), the data movement under convolution and pooling. Both
// walk (n, c, kernel tap i, j) in col's memory order and, per tap, its OH output rows: the taps
// that fall on padding are written as pad_value (im2col) or skipped (col2im), the rest move
// with the input's column stride, a plain copy or add when the stride is 1 and both rows are
// dense. Rows are short (4 to 32 elements in small CNNs), so the per-row work is kept to a few
// additions: everything else is computed once per tap.
#include <algorithm>
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
          for (int64_t ow = first; ow < last; ++ow) dst[ow] = static_cast<T>(static_cast<C>(dst[ow]) + static_cast<C>(in[ow]));
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

}  // namespace tinyddp::tensor::cpu
