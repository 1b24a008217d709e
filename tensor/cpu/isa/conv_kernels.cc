// The direct convolution kernels of one instruction set (isa/kernels.h: conv2d_direct_f32 and
// conv2d_direct_weight_grad_f32), built twice beside kernels.cc, in the same namespace
// isa_<name>: small feature maps, where an im2col matrix would cost as much as the product.
#include <immintrin.h>

#include <algorithm>

#include "tinyddp/tensor/cpu/isa/isa_macros.h"
#include "tinyddp/tensor/cpu/isa/kernels.h"

namespace tinyddp::tensor::cpu {
namespace TINYDDP_ISA_NAMESPACE {
namespace {

// Output channels [ob, ob + 8 NV) at the P output positions from `first` of one image: NV x P
// accumulators in registers, one weight row of 8 NV channels and P input values per tap.
// (FMA intrinsics: x86-64-v3 and v4 both have them, and GCC contracts no a * b + c in ISO C++.
// The loops over k, p and e are unrolled so that the accumulators stay in registers: at -O2
// GCC kept them in memory, and the kernel ran at a fifth of its speed.)
template <int NV, int P>
void conv_block(const DirectConvArgs& a, const float* frame, int64_t pw, int64_t ob, int64_t first, float* out) {
  __m256 acc[P][NV];
#pragma GCC unroll 8
  for (int k = 0; k < NV; ++k) {
    const __m256 b = a.bias != nullptr ? _mm256_loadu_ps(a.bias + ob + 8 * k) : _mm256_setzero_ps();
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) acc[p][k] = b;
  }
  const float* at[P];  // each position's window corner in the frame
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) at[p] = frame + (first + p) / a.ow * pw + (first + p) % a.ow;
  const int64_t plane = (a.h + 2 * a.pad_h) * pw;
  const float* w = a.wt + ob;
  for (int64_t c = 0; c < a.c; ++c) {
    for (int64_t i = 0; i < a.kh; ++i) {
      const int64_t row = c * plane + i * pw;
      for (int64_t j = 0; j < a.kw; ++j, w += a.o) {
        __m256 wv[NV];
#pragma GCC unroll 8
        for (int k = 0; k < NV; ++k) wv[k] = _mm256_loadu_ps(w + 8 * k);
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p) {
          const __m256 v = _mm256_broadcast_ss(at[p] + row + j);
#pragma GCC unroll 8
          for (int k = 0; k < NV; ++k) acc[p][k] = _mm256_fmadd_ps(v, wv[k], acc[p][k]);
        }
      }
    }
  }
  const int64_t positions = a.oh * a.ow;
#pragma GCC unroll 8
  for (int k = 0; k < NV; ++k) {
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, acc[p][k]);
#pragma GCC unroll 8
      for (int e = 0; e < 8; ++e) out[(ob + 8 * k + e) * positions + first + p] = lanes[e];
    }
  }
}

// The last `left` (< R) positions from `first`: one block of exactly that many.
template <int NV, int R>
void conv_tail(const DirectConvArgs& a, const float* frame, int64_t pw, int64_t ob, int64_t first, int64_t left,
               float* out) {
  if constexpr (R > 1) {
    if (left == R - 1) {
      conv_block<NV, R - 1>(a, frame, pw, ob, first, out);
    } else {
      conv_tail<NV, R - 1>(a, frame, pw, ob, first, left, out);
    }
  }
}

// One image's output channels [ob, ob + 8 NV): twelve accumulators (P = 12 / NV positions)
// per block, enough independent FMA chains to hide the FMA's latency on both of its units.
template <int NV>
void conv_channels(const DirectConvArgs& a, const float* frame, int64_t pw, int64_t ob, float* out) {
  constexpr int P = 12 / NV;
  const int64_t positions = a.oh * a.ow;
  int64_t first = 0;
  for (; first + P <= positions; first += P) conv_block<NV, P>(a, frame, pw, ob, first, out);
  conv_tail<NV, P>(a, frame, pw, ob, first, positions - first, out);
}

// Image n's planes into the padded frame (its border stays zero).
void fill_frame(const DirectConvArgs& a, int64_t n, float* frame) {
  const int64_t ph = a.h + 2 * a.pad_h, pw = a.w + 2 * a.pad_w;
  const float* in = a.in + n * a.c * a.h * a.w;
  for (int64_t c = 0; c < a.c; ++c) {
    for (int64_t y = 0; y < a.h; ++y) {
      float* row = frame + (c * ph + y + a.pad_h) * pw + a.pad_w;
      const float* src = in + (c * a.h + y) * a.w;
      if (a.w == 4) {
        _mm_storeu_ps(row, _mm_loadu_ps(src));  // small maps' usual width, one move
      } else {
        for (int64_t x = 0; x < a.w; ++x) row[x] = src[x];
      }
    }
  }
}

}  // namespace

void conv2d_direct(const DirectConvArgs& a) {
  const int64_t ph = a.h + 2 * a.pad_h, pw = a.w + 2 * a.pad_w;
  float frame[kDirectConvFrame];
  std::fill(frame, frame + a.c * ph * pw, 0.0f);
  for (int64_t n = 0; n < a.n; ++n) {
    fill_frame(a, n, frame);
    float* out = a.out + n * a.o * a.oh * a.ow;
    for (int64_t ob = 0; ob < a.o; ob += 32) {
      switch (std::min<int64_t>(4, (a.o - ob) / 8)) {
        case 4: conv_channels<4>(a, frame, pw, ob, out); break;
        case 3: conv_channels<3>(a, frame, pw, ob, out); break;
        case 2: conv_channels<2>(a, frame, pw, ob, out); break;
        default: conv_channels<1>(a, frame, pw, ob, out); break;
      }
    }
  }
}

namespace {

// Taps [t0, t0 + T) x output channels [ob, ob + 8 NV) of the weight's gradient: T x NV
// accumulators over every image and position; per position one vector of grad_out per
// channel block (gts: each image's grad_out as [position][o]) and T inputs from its frame.
template <int NV, int T>
void weight_grad_block(const DirectConvArgs& a, const float* frames, int64_t frame_size, const float* gts, int64_t t0,
                       int64_t ob) {
  const int64_t pw = a.w + 2 * a.pad_w, plane = (a.h + 2 * a.pad_h) * pw, gt_size = a.oh * a.ow * a.o;
  __m256 acc[T][NV];
  int64_t base[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    const int64_t tap = t0 + t, c = tap / (a.kh * a.kw), i = tap / a.kw % a.kh, j = tap % a.kw;
    base[t] = c * plane + i * pw + j;
#pragma GCC unroll 8
    for (int k = 0; k < NV; ++k) acc[t][k] = _mm256_setzero_ps();
  }
  for (int64_t n = 0; n < a.n; ++n) {
    const float* frame = frames + n * frame_size;
    const float* g = gts + n * gt_size + ob;
    for (int64_t y = 0; y < a.oh; ++y) {
      for (int64_t x = 0; x < a.ow; ++x, g += a.o) {
        __m256 gv[NV];
#pragma GCC unroll 8
        for (int k = 0; k < NV; ++k) gv[k] = _mm256_loadu_ps(g + 8 * k);
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const __m256 v = _mm256_broadcast_ss(frame + base[t] + y * pw + x);
#pragma GCC unroll 8
          for (int k = 0; k < NV; ++k) acc[t][k] = _mm256_fmadd_ps(v, gv[k], acc[t][k]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
#pragma GCC unroll 8
    for (int k = 0; k < NV; ++k) _mm256_storeu_ps(a.out + (t0 + t) * a.o + ob + 8 * k, acc[t][k]);
  }
}

// Every tap for output channels [ob, ob + 8 NV), T taps at a time (T x NV accumulators, NV
// vectors of grad_out and a broadcast in the 16 registers), then the remaining taps one by one.
template <int NV>
void weight_grad_channels(const DirectConvArgs& a, const float* frames, int64_t frame_size, const float* gts,
                          int64_t ob) {
  constexpr int T = NV == 4 ? 2 : NV == 3 ? 3 : 12 / NV;
  const int64_t taps = a.c * a.kh * a.kw;
  int64_t t0 = 0;
  for (; t0 + T <= taps; t0 += T) weight_grad_block<NV, T>(a, frames, frame_size, gts, t0, ob);
  for (; t0 < taps; ++t0) weight_grad_block<NV, 1>(a, frames, frame_size, gts, t0, ob);
}

}  // namespace

void conv2d_direct_weight_grad(const DirectConvArgs& a) {
  const int64_t frame_size = a.c * (a.h + 2 * a.pad_h) * (a.w + 2 * a.pad_w), positions = a.oh * a.ow;
  float* frames = a.scratch;
  float* gts = a.scratch + a.n * frame_size;
  std::fill(frames, frames + a.n * frame_size, 0.0f);
  for (int64_t n = 0; n < a.n; ++n) {
    fill_frame(a, n, frames + n * frame_size);
    const float* g = a.grad + n * a.o * positions;
    float* gt = gts + n * positions * a.o;
    for (int64_t o = 0; o < a.o; ++o) {
      for (int64_t p = 0; p < positions; ++p) gt[p * a.o + o] = g[o * positions + p];
    }
  }
  for (int64_t ob = 0; ob < a.o; ob += 32) {
    switch (std::min<int64_t>(4, (a.o - ob) / 8)) {
      case 4: weight_grad_channels<4>(a, frames, frame_size, gts, ob); break;
      case 3: weight_grad_channels<3>(a, frames, frame_size, gts, ob); break;
      case 2: weight_grad_channels<2>(a, frames, frame_size, gts, ob); break;
      default: weight_grad_channels<1>(a, frames, frame_size, gts, ob); break;
    }
  }
}

}  // namespace TINYDDP_ISA_NAMESPACE
}  // namespace tinyddp::tensor::cpu
