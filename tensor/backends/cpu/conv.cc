// CPU im2col and col2im (backends/cpu/backend.h), the data movement under convolution and pooling
// (max pooling itself: pool.cc), and the direct convolutions' entry points. im2col and col2im go plane by plane through
// a small padded frame (the plane with its padding around it, in L1), so that no row needs bounds: each kernel tap (i,
// j) moves OH rows of OW elements between the frame and col. Rows are short in small CNNs (2 to 16 elements), so those
// widths have loops of their own with the width known when compiled.
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "tinyddp/tensor/backends/cpu/algorithms.h"
#include "tinyddp/tensor/backends/cpu/backend.h"
#include "tinyddp/tensor/backends/cpu/isa/kernels.h"
#include "tinyddp/tensor/backends/cpu/loops.h"
#include "tinyddp/tensor/cpu_isa.h"
#include "tinyddp/tensor/factory.h"

namespace tinyddp::tensor::cpu {

namespace {

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

// kCols: the rows' width when it is known when compiled (unit steps), kUnitSteps for unit
// steps and any width, 0 for any steps.
constexpr int64_t kUnitSteps = -1;

template <typename Op, int64_t kCols, typename T>
inline void move_rows_fixed(T* __restrict out, int64_t out_row, int64_t out_step, const T* __restrict src,
                            int64_t src_row, int64_t src_step, int64_t rows, int64_t cols) {
  const int64_t width = kCols > 0 ? kCols : cols;
  if constexpr (kCols != 0) {
    for (int64_t r = 0; r < rows; ++r, out += out_row, src += src_row) {
      for (int64_t k = 0; k < width; ++k) Op::apply(out[k], src[k]);
    }
  } else {
    for (int64_t r = 0; r < rows; ++r, out += out_row, src += src_row) {
      for (int64_t k = 0; k < width; ++k) Op::apply(out[k * out_step], src[k * src_step]);
    }
  }
}

// Calls body(width), width a std::integral_constant for move_rows_fixed's kCols: the rows'
// width when it is one of the small ones and both steps are 1, so that the loops inside know
// it when compiled. Dispatched once around a whole loop nest: a call per tap would cost more
// than its moves.
template <typename F>
void with_row_width(int64_t cols, bool unit_steps, F&& body) {
  using std::integral_constant;
  if (!unit_steps) return body(integral_constant<int64_t, 0>{});
  switch (cols) {
    case 2: return body(integral_constant<int64_t, 2>{});
    case 4: return body(integral_constant<int64_t, 4>{});
    case 8: return body(integral_constant<int64_t, 8>{});
    case 16: return body(integral_constant<int64_t, 16>{});
    default: return body(integral_constant<int64_t, kUnitSteps>{});
  }
}

template <typename Op, typename T>
void move_rows(T* out, int64_t out_row, int64_t out_step, const T* src, int64_t src_row, int64_t src_step, int64_t rows,
               int64_t cols) {
  with_row_width(cols, out_step == 1 && src_step == 1, [&](auto width) {
    move_rows_fixed<Op, decltype(width)::value>(out, out_row, out_step, src, src_row, src_step, rows, cols);
  });
}

// One plane of x (or of grad_x) inside its padded frame: a scratch [H + 2 ph, W + 2 pw] buffer
// that stays in L1 while every tap of the plane is moved, and x's strides to reach the plane.
template <typename T>
struct PaddedPlane {
  std::vector<T> buffer;
  int64_t row, interior;  // the frame's row length; the offset of element (0, 0) of the plane
  int64_t s0, s1, s2, s3;

  PaddedPlane(const Tensor& x, const Window2d& w, T border)
      : buffer(static_cast<size_t>(w.padded_h() * w.padded_w()), border), row(w.padded_w()),
        interior(w.ph * w.padded_w() + w.pw), s0(x.stride(0)), s1(x.stride(1)), s2(x.stride(2)), s3(x.stride(3)) {}

  int64_t offset(int64_t n, int64_t c) const { return n * s0 + c * s1; }
  // The first element of tap (i, j)'s rows in the frame.
  const T* tap(const Window2d& w, int64_t i, int64_t j) const { return buffer.data() + i * w.dh * row + j * w.dw; }
  T* tap(const Window2d& w, int64_t i, int64_t j) { return buffer.data() + i * w.dh * row + j * w.dw; }
};

}  // namespace

void CpuBackend::im2col(const Tensor& col, const Tensor& x, const Window2d& w, double pad_value) {
  // Plane by plane: x's plane is copied into the interior of a padded frame whose border holds
  // pad_value, so that every tap's OH rows of OW elements are plain strided copies from L1.
  dispatch_floating(x.dtype(), "im2col", [&](auto tag) {
    using T = typename decltype(tag)::type;
    int64_t cs[6];
    for (int d = 0; d < 6; ++d) cs[d] = col.stride(d);
    T* const col_data = col.data_ptr<T>();
    const T* const x_data = x.data_ptr<T>();
    with_row_width(w.ow, cs[5] == 1 && w.sw == 1, [&](auto width) {
      constexpr int64_t kCols = decltype(width)::value;
      // Planes on the intra-op threads, each range with a frame of its own.
      parallel_rows(w.n * w.c, w.kh * w.kw * w.oh * w.ow, [&](int64_t first, int64_t last) {
        PaddedPlane<T> frame(x, w, static_cast<T>(pad_value));
        for (int64_t p = first; p < last; ++p) {
          const int64_t n = p / w.c, c = p % w.c;
          move_rows<Assign>(frame.buffer.data() + frame.interior, frame.row, 1, x_data + frame.offset(n, c), frame.s2,
                            frame.s3, w.h, w.w);
          T* const out = col_data + n * cs[0] + c * cs[1];
          for (int64_t i = 0; i < w.kh; ++i) {
            for (int64_t j = 0; j < w.kw; ++j) {
              move_rows_fixed<Assign, kCols>(out + i * cs[2] + j * cs[3], cs[4], cs[5], frame.tap(w, i, j),
                                             w.sh * frame.row, w.sw, w.oh, w.ow);
            }
          }
        }
      });
    });
  });
}

void CpuBackend::col2im(const Tensor& grad_x, const Tensor& col, const Window2d& w) {
  // Plane by plane: every tap's rows are added into a zeroed padded frame, whose interior is
  // then the plane of grad_x (the border, padding's share, is dropped).
  dispatch_floating(grad_x.dtype(), "col2im", [&](auto tag) {
    using T = typename decltype(tag)::type;
    int64_t cs[6];
    for (int d = 0; d < 6; ++d) cs[d] = col.stride(d);
    const T* const col_data = col.data_ptr<T>();
    T* const gx_data = grad_x.data_ptr<T>();
    with_row_width(w.ow, cs[5] == 1 && w.sw == 1, [&](auto width) {
      constexpr int64_t kCols = decltype(width)::value;
      // Planes on the intra-op threads (each writes its own plane), each range with its frame.
      parallel_rows(w.n * w.c, w.kh * w.kw * w.oh * w.ow, [&](int64_t first, int64_t last) {
        PaddedPlane<T> frame(grad_x, w, T(0));
        for (int64_t p = first; p < last; ++p) {
          const int64_t n = p / w.c, c = p % w.c;
          std::fill(frame.buffer.begin(), frame.buffer.end(), T(0));
          const T* const in = col_data + n * cs[0] + c * cs[1];
          // Taps column by column (j outer): the next tap then adds onto the same frame
          // positions one row lower, aligned with the rows it just stored, where the next j
          // would add onto them shifted by one element (a load that straddles two recent
          // stores waits for both to reach the cache: it cannot be forwarded).
          for (int64_t j = 0; j < w.kw; ++j) {
            for (int64_t i = 0; i < w.kh; ++i) {
              move_rows_fixed<Add, kCols>(frame.tap(w, i, j), w.sh * frame.row, w.sw, in + i * cs[2] + j * cs[3], cs[4],
                                          cs[5], w.oh, w.ow);
            }
          }
          move_rows<Assign>(gx_data + frame.offset(n, c), frame.s2, frame.s3, frame.buffer.data() + frame.interior,
                            frame.row, 1, w.h, w.w);
        }
      });
    });
  });
}

bool conv2d_direct_fits(int64_t in_channels, int64_t out_channels, int64_t padded_h, int64_t padded_w) {
  return out_channels % 8 == 0 && in_channels * padded_h * padded_w <= kDirectConvFrame;
}

bool conv2d_same_size_fits(int64_t out_channels, const Window2d& w) {
  // Under AVX2 (16 registers, 8 lanes) the position-vector kernels lost to im2col + GEMM on
  // the larger layer of bench/conv_bench.cc (forward 34.6 ms against 27.4): AVX-512 only.
  const int64_t positions = w.h * w.w;
  return cpu_isa() == CpuIsa::kAvx512 && out_channels % 8 == 0 && w.sh == 1 && w.sw == 1 && w.dh == 1 && w.dw == 1 &&
         w.oh == w.h && w.ow == w.w && positions % 16 == 0 && w.kh * w.kw * (positions / 8) <= kDirectConvTapMasks;
}

void conv2d_direct(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, const Window2d& w,
                   bool transposed) {
  // wt [(c, i, j), o]: the kernel's taps of input channel c, one row of all output channels.
  // Transposed, the roles of C and O swap and tap (i, j) reads the kernel at (kh-1-i, kw-1-j).
  const int64_t big_o = weight.size(0), big_c = weight.size(1), kh = w.kh, kw = w.kw;
  const int64_t in_c = transposed ? big_o : big_c, out_c = transposed ? big_c : big_o;
  std::vector<float> wt(static_cast<size_t>(in_c * kh * kw * out_c));
  const float* src = weight.data_ptr<float>();
  for (int64_t o = 0; o < big_o; ++o) {
    for (int64_t c = 0; c < big_c; ++c) {
      for (int64_t i = 0; i < kh; ++i) {
        for (int64_t j = 0; j < kw; ++j) {
          const float v = src[((o * big_c + c) * kh + i) * kw + j];
          if (transposed) {
            wt[static_cast<size_t>(((o * kh + kh - 1 - i) * kw + kw - 1 - j) * out_c + c)] = v;
          } else {
            wt[static_cast<size_t>(((c * kh + i) * kw + j) * out_c + o)] = v;
          }
        }
      }
    }
  }
  DirectConvArgs a;
  a.in = x.data_ptr<float>();
  a.n = w.n;
  a.c = in_c;
  a.h = transposed ? w.oh : w.h;
  a.w = transposed ? w.ow : w.w;
  a.wt = wt.data();
  a.o = out_c;
  a.kh = kh;
  a.kw = kw;
  a.pad_h = transposed ? kh - 1 - w.ph : w.ph;
  a.pad_w = transposed ? kw - 1 - w.pw : w.pw;
  a.bias = bias.defined() ? bias.data_ptr<float>() : nullptr;
  a.out = out.data_ptr<float>();
  a.oh = transposed ? w.h : w.oh;
  a.ow = transposed ? w.w : w.ow;
  TDDP_CHECK(conv2d_same_size_fits(out_c, w) || conv2d_direct_fits(a.c, a.o, a.h + 2 * a.pad_h, a.w + 2 * a.pad_w),
             "conv2d: internal error: the direct kernel does not fit {} -> {} channels", a.c, a.o);
  // Images on the intra-op threads (x and out contiguous: image by image).
  const int64_t in_image = a.c * a.h * a.w, out_image = a.o * a.oh * a.ow;
  parallel_rows(w.n, out_image * a.kh * a.kw * a.c / 8, [&](int64_t first, int64_t last) {
    DirectConvArgs part = a;
    part.in += first * in_image;
    part.out += first * out_image;
    part.n = last - first;
    isa_kernels().conv2d_direct_f32(part);
  });
}

void conv2d_direct_weight_grad(const Tensor& grad_weight, const Tensor& x, const Tensor& grad_out, const Window2d& w) {
  const int64_t big_o = grad_weight.size(0), taps = w.c * w.kh * w.kw;
  TDDP_CHECK(conv2d_same_size_fits(big_o, w) || conv2d_direct_fits(w.c, big_o, w.padded_h(), w.padded_w()),
             "conv2d: internal error: the direct weight gradient does not fit {} -> {} channels", w.c, big_o);
  std::vector<float> by_tap(static_cast<size_t>(taps * big_o));  // [(c, i, j), o]
  DirectConvArgs a;
  a.in = x.data_ptr<float>();
  a.n = w.n;
  a.c = w.c;
  a.h = w.h;
  a.w = w.w;
  a.o = big_o;
  a.kh = w.kh;
  a.kw = w.kw;
  a.pad_h = w.ph;
  a.pad_w = w.pw;
  a.oh = w.oh;
  a.ow = w.ow;
  a.grad = grad_out.data_ptr<float>();
  // A sum over the images: chunks of images fixed by the shape on the intra-op threads, each
  // into its own [(c, i, j), o], added in chunk order.
  const int64_t in_image = w.c * w.h * w.w, out_image = big_o * w.oh * w.ow;
  std::vector<std::vector<float>> parts =
      parallel_row_partials(w.n, out_image * taps / 8, 8, [&](int64_t first, int64_t last) {
        DirectConvArgs part = a;
        part.in += first * in_image;
        part.grad += first * out_image;
        part.n = last - first;
        std::vector<float> sums(by_tap.size());
        part.out = sums.data();
        const auto scratch = std::make_unique_for_overwrite<float[]>(
            static_cast<size_t>(isa_kernels().conv2d_direct_weight_grad_scratch(part)));
        part.scratch = scratch.get();
        isa_kernels().conv2d_direct_weight_grad_f32(part);
        return sums;
      });
  if (!parts.empty()) by_tap = std::move(parts[0]);
  for (size_t c = 1; c < parts.size(); ++c) {
    for (size_t k = 0; k < by_tap.size(); ++k) by_tap[k] += parts[c][k];
  }
  float* dst = grad_weight.data_ptr<float>();
  for (int64_t o = 0; o < big_o; ++o) {
    for (int64_t t = 0; t < taps; ++t) dst[o * taps + t] = by_tap[static_cast<size_t>(t * big_o + o)];
  }
}

}  // namespace tinyddp::tensor::cpu
