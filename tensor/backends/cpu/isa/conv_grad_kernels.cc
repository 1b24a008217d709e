// The weight's gradient of the direct convolution of one instruction set (isa/kernels.h:
// conv2d_direct_weight_grad_f32), built twice beside conv_kernels.cc, in the same namespace
// isa_<name>.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "tinyddp/tensor/backends/cpu/isa/conv_shared.h"
#include "tinyddp/tensor/backends/cpu/isa/isa_macros.h"
#include "tinyddp/tensor/backends/cpu/isa/isa_vec.h"
#include "tinyddp/tensor/backends/cpu/isa/kernel_parts.h"
#include "tinyddp/tensor/backends/cpu/isa/kernels.h"

namespace tinyddp::tensor::cpu {
namespace TINYDDP_ISA_NAMESPACE {
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
  const int64_t plane = a.h * a.w, rows = strip_rows(a), vectors = masks.vectors;
  const float* const in = a.in + n * a.c * plane;
  // Strip by strip, each written front to back as its plane is read (j = 1, 2 read it from L1).
  for (int64_t c = 0; c < a.c; ++c) {
    for (int64_t j = 0; j < a.kw; ++j) {
      float* const strip = strips + (c * a.kw + j) * rows * a.w;
      float* const inside = strip + a.pad_h * a.w;
      const float* const src = in + c * plane + j - a.pad_w;
      const Mask* const m = masks.m + (a.pad_h * a.kw + j) * vectors;
      std::fill(strip, inside, 0.0f);
      for (int64_t v = 0; v < vectors; ++v) vstore(inside + v * kLanes, load_lanes(src + v * kLanes, m[v]));
      std::fill(inside + plane, strip + rows * a.w, 0.0f);
    }
  }
}

// Output channels [ob, ob + RO) x taps [t0, t0 + T), over images [n0, n0 + images): RO x T
// vector accumulators, each the lanes of one dot product of a grad_out row with a tap's strip
// row, summed across lanes at the end and added onto out. grad_out is read in place
// ([n, o, position]); `strips` holds the images' strips, `strip_size` floats apart.
template <int RO, int T>
void strip_weight_grad_block(const DirectConvArgs& a, const float* strips, int64_t strip_size, int64_t n0,
                             int64_t images, int64_t ob, int64_t t0) {
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
  for (int64_t n = 0; n < images; ++n) {
    const float* g = a.grad + ((n0 + n) * a.o + ob) * positions;
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
    for (int r = 0; r < RO; ++r) a.out[(t0 + t) * a.o + ob + r] += vsum(acc[r][t]);
  }
}

// Blocks: 2 output channels (o is a multiple of 8) x kStripTaps taps, then the taps left one
// by one.
#if defined(__AVX512F__)
constexpr int kStripTaps = 9;  // 18 accumulators of 32 registers; 3x3: a channel's taps
#else
constexpr int kStripTaps = 5;  // 10 of 16
#endif
void strip_weight_grad(const DirectConvArgs& a, const float* strips, int64_t strip_size, int64_t n0, int64_t images) {
  // Channels inside taps: a block of taps' strip rows (the images') stays in L1 while each
  // pair of channels' grad_out streams past it.
  const int64_t taps = a.c * a.kh * a.kw;
  int64_t t0 = 0;
  for (; t0 + kStripTaps <= taps; t0 += kStripTaps) {
    for (int64_t ob = 0; ob < a.o; ob += 2)
      strip_weight_grad_block<2, kStripTaps>(a, strips, strip_size, n0, images, ob, t0);
  }
  for (; t0 < taps; ++t0) {
    for (int64_t ob = 0; ob < a.o; ob += 2) strip_weight_grad_block<2, 1>(a, strips, strip_size, n0, images, ob, t0);
  }
}

// Images per pass of strip_weight_grad: as many as keep their strips and grad_out within
// kStripPassFloats (in L2 while every block of taps reads them), at least one.
constexpr int64_t kStripPassFloats = int64_t{128} << 10;  // 512 KB
int64_t strip_size(const DirectConvArgs& a) { return a.c * a.kw * strip_rows(a) * a.w; }
int64_t strip_pass(const DirectConvArgs& a) {
  const int64_t per_image = strip_size(a) + a.o * a.h * a.w;
  return std::clamp<int64_t>(kStripPassFloats / per_image, 1, std::max<int64_t>(a.n, 1));
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

int64_t conv2d_direct_weight_grad_scratch(const DirectConvArgs& a) {
  if (same_size(a)) return strip_pass(a) * strip_size(a);
  return a.n * (a.c * (a.h + 2 * a.pad_h) * (a.w + 2 * a.pad_w) + a.oh * a.ow * a.o);
}

void conv2d_direct_weight_grad(const DirectConvArgs& a) {
  const int64_t frame_size = a.c * (a.h + 2 * a.pad_h) * (a.w + 2 * a.pad_w);
  if (!same_size(a)) return channel_weight_grad(a, a.scratch, frame_size);
  // The images in passes: their strips, then every block of taps and channels over them.
  const TapMasks masks(a);
  const int64_t size = strip_size(a), pass = strip_pass(a);
  std::fill(a.out, a.out + a.c * a.kh * a.kw * a.o, 0.0f);
  for (int64_t n0 = 0; n0 < a.n; n0 += pass) {
    const int64_t images = std::min(pass, a.n - n0);
    for (int64_t n = 0; n < images; ++n) fill_strips(a, masks, n0 + n, a.scratch + n * size);
    strip_weight_grad(a, a.scratch, size, n0, images);
  }
}

}  // namespace TINYDDP_ISA_NAMESPACE
}  // namespace tinyddp::tensor::cpu
