// The direct convolution of one instruction set (isa/kernels.h: conv2d_direct_f32, the forward
// and, transposed, the input's gradient), built twice beside kernels.cc, in the same namespace
// isa_<name>: small feature maps, where an im2col matrix would cost as much as the product,
// and same-size maps, whose positions fill whole vectors. The weight's gradient is in
// conv_grad_kernels.cc.
#include <immintrin.h>

#include <algorithm>

#include "tinyddp/tensor/backends/cpu/isa/conv_shared.h"
#include "tinyddp/tensor/backends/cpu/isa/isa_macros.h"
#include "tinyddp/tensor/backends/cpu/isa/isa_vec.h"
#include "tinyddp/tensor/backends/cpu/isa/kernel_parts.h"
#include "tinyddp/tensor/backends/cpu/isa/kernels.h"

namespace tinyddp::tensor::cpu {
namespace TINYDDP_ISA_NAMESPACE {
namespace {

// Output channels [ob, ob + 8 NV) at the P output positions from `first` of one image: NV x P
// accumulators in registers, one weight row of 8 NV channels and P input values per tap.
// (FMA intrinsics: x86-64-v3 and v4 both have them, and GCC contracts no a * b + c in ISO C++.
// The loops over k, p and e are unrolled so that the accumulators stay in registers: at -O2
// GCC kept them in memory, and the kernel ran at a fifth of its speed.)
template <int NV, int P, int K>
void conv_block(const DirectConvArgs& a, const float* frame, int64_t pw, int64_t ob, int64_t first, float* out) {
  const int64_t kh = K > 0 ? K : a.kh, kw = K > 0 ? K : a.kw;
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
#pragma GCC unroll 4
    for (int64_t i = 0; i < kh; ++i) {
      const int64_t row = c * plane + i * pw;
#pragma GCC unroll 4
      for (int64_t j = 0; j < kw; ++j, w += a.o) {
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
template <int NV, int R, int K>
void conv_tail(const DirectConvArgs& a, const float* frame, int64_t pw, int64_t ob, int64_t first, int64_t left,
               float* out) {
  if constexpr (R > 1) {
    if (left == R - 1) {
      conv_block<NV, R - 1, K>(a, frame, pw, ob, first, out);
    } else {
      conv_tail<NV, R - 1, K>(a, frame, pw, ob, first, left, out);
    }
  }
}

// One image's output channels [ob, ob + 8 NV): twelve accumulators (P = 12 / NV positions)
// per block, enough independent FMA chains to hide the FMA's latency on both of its units.
template <int NV, int K>
void conv_channels(const DirectConvArgs& a, const float* frame, int64_t pw, int64_t ob, float* out) {
  constexpr int P = 12 / NV;
  const int64_t positions = a.oh * a.ow;
  int64_t first = 0;
  for (; first + P <= positions; first += P) conv_block<NV, P, K>(a, frame, pw, ob, first, out);
  conv_tail<NV, P, K>(a, frame, pw, ob, first, positions - first, out);
}

// Output channels [ob, ob + 32) (or the fewer left) of one image; K: the kernel's size when
// it is K x K (its tap loops then unrolled), 0 for any size.
template <int K>
void channel_block(const DirectConvArgs& a, const float* frame, int64_t pw, int64_t ob, float* out) {
  switch (std::min<int64_t>(4, (a.o - ob) / 8)) {
    case 4: return conv_channels<4, K>(a, frame, pw, ob, out);
    case 3: return conv_channels<3, K>(a, frame, pw, ob, out);
    case 2: return conv_channels<2, K>(a, frame, pw, ob, out);
    default: return conv_channels<1, K>(a, frame, pw, ob, out);
  }
}

// Output channels [ob, ob + 8) at positions [v kLanes, (v + 1) kLanes) of one image (`in`
// its planes): 8 accumulators, each tap one masked vector of inputs and 8 weights broadcast.
// The taps in the same order as conv_block's, so both give the same sums. K as for
// channel_block.
template <int K, int V>
void window_block(const DirectConvArgs& a, const float* in, const TapMasks& masks, int64_t ob, int64_t v, float* out) {
  constexpr int R = 8;
  const int64_t kh = K > 0 ? K : a.kh, kw = K > 0 ? K : a.kw, plane = a.h * a.w, p = v * kLanes;
  Vec acc[V][R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int u = 0; u < V; ++u) acc[u][r] = a.bias != nullptr ? vbroadcast(a.bias[ob + r]) : vzero();
  }
  const float* w = a.wt + ob;
  for (int64_t c = 0; c < a.c; ++c) {
    const float* at = in + c * plane + p - a.pad_h * a.w - a.pad_w;  // tap (0, 0) of lane 0
#pragma GCC unroll 4
    for (int64_t i = 0; i < kh; ++i) {
#pragma GCC unroll 4
      for (int64_t j = 0; j < kw; ++j, w += a.o) {
        Vec x[V];
#pragma GCC unroll 4
        for (int u = 0; u < V; ++u) {
          x[u] = load_lanes(at + u * kLanes + i * a.w + j, masks.m[(i * kw + j) * masks.vectors + v + u]);
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const Vec wr = vbroadcast(w[r]);
#pragma GCC unroll 4
          for (int u = 0; u < V; ++u) acc[u][r] = vfma(x[u], wr, acc[u][r]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int u = 0; u < V; ++u) vstore(out + (ob + r) * plane + p + u * kLanes, acc[u][r]);
  }
}

// Vectors of positions per block: 8 x 2 accumulators of 32 registers under AVX-512 (each
// weight broadcast serves two), 8 x 1 of 16 under AVX2.
#if defined(__AVX512F__)
constexpr int kWindowVectors = 2;
#else
constexpr int kWindowVectors = 1;
#endif

template <int K>
void window_conv(const DirectConvArgs& a) {
  const TapMasks masks(a);
  const int64_t plane = a.h * a.w;
  for (int64_t n = 0; n < a.n; ++n) {
    const float* in = a.in + n * a.c * plane;
    float* out = a.out + n * a.o * plane;
    for (int64_t ob = 0; ob < a.o; ob += 8) {
      int64_t v = 0;
      for (; v + kWindowVectors <= masks.vectors; v += kWindowVectors) {
        window_block<K, kWindowVectors>(a, in, masks, ob, v, out);
      }
      for (; v < masks.vectors; ++v) window_block<K, 1>(a, in, masks, ob, v, out);
    }
  }
}

}  // namespace

void conv2d_direct(const DirectConvArgs& a) {
  const bool k3 = a.kh == 3 && a.kw == 3;
  if (same_size(a)) return k3 ? window_conv<3>(a) : window_conv<0>(a);
  const int64_t ph = a.h + 2 * a.pad_h, pw = a.w + 2 * a.pad_w;
  float frame[kDirectConvFrame];
  std::fill(frame, frame + a.c * ph * pw, 0.0f);
  for (int64_t n = 0; n < a.n; ++n) {
    fill_frame(a, n, frame);
    float* out = a.out + n * a.o * a.oh * a.ow;
    for (int64_t ob = 0; ob < a.o; ob += 32) {
      if (k3) {
        channel_block<3>(a, frame, pw, ob, out);
      } else {
        channel_block<0>(a, frame, pw, ob, out);
      }
    }
  }
}

}  // namespace TINYDDP_ISA_NAMESPACE
}  // namespace tinyddp::tensor::cpu
