// The direct convolution kernels of one instruction set (isa/kernels.h: conv2d_direct_f32 and
// conv2d_direct_weight_grad_f32), built twice beside kernels.cc, in the same namespace
// isa_<name>: small feature maps, where an im2col matrix would cost as much as the product.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "tinyddp/tensor/cpu/isa/isa_macros.h"
#include "tinyddp/tensor/cpu/isa/isa_vec.h"
#include "tinyddp/tensor/cpu/isa/kernels.h"

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

// Copies n floats (few: a feature map's row).
void copy_row(float* dst, const float* src, int64_t n) {
  if (n == 4) {
    _mm_storeu_ps(dst, _mm_loadu_ps(src));  // small maps' usual width, one move
  } else {
    for (int64_t x = 0; x < n; ++x) dst[x] = src[x];
  }
}

// Image n's planes into the padded frame (its border stays zero).
void fill_frame(const DirectConvArgs& a, int64_t n, float* frame) {
  const int64_t ph = a.h + 2 * a.pad_h, pw = a.w + 2 * a.pad_w;
  const float* in = a.in + n * a.c * a.h * a.w;
  for (int64_t c = 0; c < a.c; ++c) {
    for (int64_t y = 0; y < a.h; ++y) {
      float* row = frame + (c * ph + y + a.pad_h) * pw + a.pad_w;
      copy_row(row, in + (c * a.h + y) * a.w, a.w);
    }
  }
}

// ---- Same-size maps: output positions in vectors ------------------------------------------
// Where the output is the input's size (stride 1, padding (k - 1) / 2) and an image's
// positions fill whole vectors, the kernels vectorize over positions instead of channels.
// Output position p = y * w + x reads input position p + (i - pad_h) * w + (j - pad_w) at tap
// (i, j), so a tap's values at positions [p, p + kLanes) are one vector load from the input
// plane, shifted, with the lanes that fall into the padding (rows above or below, columns that
// wrap around a row's end) masked out. No scatter of channel vectors into NCHW rows, and no
// block of positions left over.

constexpr int64_t kMaxTapMasks = kDirectConvTapMasks;  // kh * kw * (positions / kLanes), on the stack

bool same_size(const DirectConvArgs& a) {
  const int64_t positions = a.h * a.w;
  return a.oh == a.h && a.ow == a.w && positions % kLanes == 0 && a.kh * a.kw * (positions / kLanes) <= kMaxTapMasks;
}

// The lanes of positions [p, p + kLanes) whose tap (i, j) lies inside the plane, as bits.
uint32_t tap_bits(const DirectConvArgs& a, int64_t i, int64_t j, int64_t p) {
  uint32_t bits = 0;
  for (int64_t l = 0; l < kLanes; ++l) {
    const int64_t y = (p + l) / a.w + i - a.pad_h, x = (p + l) % a.w + j - a.pad_w;
    bits |= static_cast<uint32_t>(y >= 0 && y < a.h && x >= 0 && x < a.w) << l;
  }
  return bits;
}

// A load mask, and the masked load: the lanes of src set in the mask, the others zero and not
// read (they may lie outside the input).
#if defined(__AVX512F__)
using Mask = __mmask16;
Mask make_mask(uint32_t bits) { return static_cast<Mask>(bits); }
Vec load_lanes(const float* src, Mask m) { return _mm512_maskz_loadu_ps(m, src); }
#else
using Mask = __m256i;
Mask make_mask(uint32_t bits) {
  const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(static_cast<int>(bits)), lane_bit), lane_bit);
}
Vec load_lanes(const float* src, Mask m) { return _mm256_maskload_ps(src, m); }
#endif

// Every tap's mask at every vector of positions: masks[(i * kw + j) * vectors + v].
struct TapMasks {
  Mask m[kMaxTapMasks];
  int64_t vectors;
  explicit TapMasks(const DirectConvArgs& a) : vectors(a.h * a.w / kLanes) {
    for (int64_t i = 0; i < a.kh; ++i) {
      for (int64_t j = 0; j < a.kw; ++j) {
        for (int64_t v = 0; v < vectors; ++v)
          m[(i * a.kw + j) * vectors + v] = make_mask(tap_bits(a, i, j, v * kLanes));
      }
    }
  }
};

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
  float* const frame = a.scratch;
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

// ---- The weight's gradient on same-size maps: dot products over positions ---------------
// Strip (c, j) of an image: rows y < h + kh - 1 of its padded plane c, from column j, so that
// strip(c, j)[y * w + x] = padded(c, y, x + j) and tap (c, i, j) at positions [p, p + kLanes)
// is strip(c, j)[i * w + p, ...): plain vector loads in the innermost loop, where masked loads
// from the plane (window_block) would split more of them across cache lines.

int64_t strip_rows(const DirectConvArgs& a) { return a.h + a.kh - 1; }

// Tap (c, i, j)'s values at output position 0, in the strips of one image.
int64_t strip_offset(const DirectConvArgs& a, int64_t c, int64_t i, int64_t j) {
  return ((c * a.kw + j) * strip_rows(a) + i) * a.w;
}

// Image n's strips: rows [pad_h, pad_h + h) of strip (c, j) are plane c shifted by j - pad_w,
// the columns that wrap around masked out (tap (pad_h, j)'s masks); the padding's rows zero.
void fill_strips(const DirectConvArgs& a, const TapMasks& masks, int64_t n, float* strips) {
  const int64_t plane = a.h * a.w, below = (strip_rows(a) - a.pad_h - a.h) * a.w;
  const float* in = a.in + n * a.c * plane;
  for (int64_t s = 0; s < a.c * a.kw; ++s) {
    float* strip = strips + s * strip_rows(a) * a.w;
    std::fill(strip, strip + a.pad_h * a.w, 0.0f);
    std::fill(strip + (a.pad_h + a.h) * a.w, strip + (a.pad_h + a.h) * a.w + below, 0.0f);
  }
  for (int64_t j = 0; j < a.kw; ++j) {
    for (int64_t v = 0; v < masks.vectors; ++v) {
      const Mask m = masks.m[(a.pad_h * a.kw + j) * masks.vectors + v];
      for (int64_t c = 0; c < a.c; ++c) {
        const int64_t p = v * kLanes;
        vstore(strips + strip_offset(a, c, a.pad_h, j) + p, load_lanes(in + c * plane + p + j - a.pad_w, m));
      }
    }
  }
}

// Output channels [ob, ob + RO) x taps [t0, t0 + T): RO x T vector accumulators, each the
// lanes of one dot product of a grad_out row with a tap's strip row over every image, summed
// across lanes at the end. grad_out is read in place ([n, o, position]); `strips` holds every
// image's, `strip_size` floats apart.
template <int RO, int T>
void strip_weight_grad_block(const DirectConvArgs& a, const float* strips, int64_t strip_size, int64_t ob, int64_t t0) {
  const int64_t positions = a.h * a.w;
  Vec acc[RO][T];
  int64_t offset[T];
  int64_t c = t0 / (a.kh * a.kw), i = t0 / a.kw % a.kh, j = t0 % a.kw;  // tap t0 + t, stepped (no divisions)
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) {
    offset[t] = strip_offset(a, c, i, j);
    if (++j == a.kw) {
      j = 0;
      if (++i == a.kh) i = 0, ++c;
    }
#pragma GCC unroll 4
    for (int r = 0; r < RO; ++r) acc[r][t] = vzero();
  }
  for (int64_t n = 0; n < a.n; ++n) {
    const float* g = a.grad + (n * a.o + ob) * positions;
    const float* s = strips + n * strip_size;
    for (int64_t p = 0; p < positions; p += kLanes) {
      Vec gv[RO];
#pragma GCC unroll 4
      for (int r = 0; r < RO; ++r) gv[r] = vload(g + r * positions + p);
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        Vec x = vload(s + offset[t] + p);
        // In a register: GCC would fold the load into each of the RO FMAs, and under Zen 4
        // a 512-bit load takes both load ports for a cycle, so the repeated loads, not the
        // FMAs, would set the pace.
        asm("" : "+v"(x));
#pragma GCC unroll 4
        for (int r = 0; r < RO; ++r) acc[r][t] = vfma(gv[r], x, acc[r][t]);
      }
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) {
#pragma GCC unroll 4
    for (int r = 0; r < RO; ++r) a.out[(t0 + t) * a.o + ob + r] = vsum(acc[r][t]);
  }
}

// Blocks: 2 output channels (o is a multiple of 8) x kStripTaps taps, then the taps left one
// by one.
#if defined(__AVX512F__)
constexpr int kStripTaps = 9;  // 18 accumulators of 32 registers; 3x3: a channel's taps
#else
constexpr int kStripTaps = 5;  // 10 of 16
#endif
void strip_weight_grad(const DirectConvArgs& a, const float* strips, int64_t strip_size) {
  // Channels inside taps: a block of taps' strip rows (every image's) stays in L1 while each
  // pair of channels' grad_out streams past it.
  const int64_t taps = a.c * a.kh * a.kw;
  int64_t t0 = 0;
  for (; t0 + kStripTaps <= taps; t0 += kStripTaps) {
    for (int64_t ob = 0; ob < a.o; ob += 2) strip_weight_grad_block<2, kStripTaps>(a, strips, strip_size, ob, t0);
  }
  for (; t0 < taps; ++t0) {
    for (int64_t ob = 0; ob < a.o; ob += 2) strip_weight_grad_block<2, 1>(a, strips, strip_size, ob, t0);
  }
}

// The channel-vector route: each image's grad_out transposed to [position][o], then
// weight_grad_channels.
void channel_weight_grad(const DirectConvArgs& a, float* frames, int64_t frame_size) {
  const int64_t positions = a.oh * a.ow;
  float* gts = frames + a.n * frame_size;
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

}  // namespace

void conv2d_direct_weight_grad(const DirectConvArgs& a) {
  const int64_t frame_size = a.c * (a.h + 2 * a.pad_h) * (a.w + 2 * a.pad_w);
  if (!same_size(a)) return channel_weight_grad(a, a.scratch, frame_size);
  // Every image's strips.
  const TapMasks masks(a);
  float* const strips = a.scratch;
  const int64_t strip_size = a.c * a.kw * strip_rows(a) * a.w;
  for (int64_t n = 0; n < a.n; ++n) fill_strips(a, masks, n, strips + n * strip_size);
  strip_weight_grad(a, strips, strip_size);
}

}  // namespace TINYDDP_ISA_NAMESPACE
}  // namespace tinyddp::tensor::cpu
