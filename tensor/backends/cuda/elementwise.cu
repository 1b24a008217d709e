// Elementwise CUDA kernels: one grid-stride loop over the iteration shape, each thread turning
// a linear index into per-operand offsets (strides in elements; 0 for broadcast dims). The
// host side (backend.cc) has merged every mergeable pair of dims, so contiguous operands reach
// here as one dim and the offset arithmetic is a multiply (other launches divide in 32 bits by
// multiply-high and shift where they fit: index_math.h); dense, aligned ones go in packs of
// 16 bytes per operand (flat_vectors: 128-bit loads and stores). 16-bit floats are stored as their
// bits and computed in float, rounding to nearest-even on the way back, as on the CPU.
#include "tinyddp/tensor/backends/cuda/dtypes.cuh"
#include "tinyddp/tensor/backends/cuda/index_math.h"
#include "tinyddp/tensor/backends/cuda/kernels.h"
#include "tinyddp/tensor/internal/elementwise_math.h"
#include "tinyddp/tensor/internal/philox.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace tinyddp::tensor::cuda::kernels {

namespace {

template <int N>
struct Operands {
  char* data[N];
  int64_t strides[N][kMaxDims];
};

// The offsets (in elements) of linear index i in each operand.
template <int N>
__device__ inline void offsets(const Geometry& g, const Operands<N>& ops, int64_t i, int64_t (&off)[N]) {
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = g.ndim - 1; d >= 0; --d) {
    const int64_t size = g.sizes[d];
    const int64_t coord = i % size;
    i /= size;
    for (int k = 0; k < N; ++k) off[k] += coord * ops.strides[k][d];
  }
}

// f(offsets) for every element; N operands. kFlat: the geometry is one dim (contiguous
// operands, scalars broadcast with stride 0, after the host merged the dims), and each offset
// is the index times the operand's stride. Otherwise a 64-bit division and remainder per dim
// and element, which bounds a copy by the integer units rather than by memory: only launches
// too large for for_each_narrow's 32-bit arithmetic take it.
template <int N, bool kFlat, typename F>
__global__ void for_each(Geometry g, Operands<N> ops, F f) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < g.numel; i += stride) {
    int64_t off[N];
    if constexpr (kFlat) {
      for (int k = 0; k < N; ++k) off[k] = i * ops.strides[k][0];
    } else {
      offsets<N>(g, ops, i, off);
    }
    f(ops, off);
  }
}

// The general path in 32-bit arithmetic (index_math.h): what nearly every strided or
// broadcast launch takes.
template <int N, typename F>
__global__ void for_each_narrow(NarrowGeometry<N> g, Operands<N> ops, F f) {
  const uint32_t stride = gridDim.x * blockDim.x;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < g.numel; i += stride) {
    int64_t off[N];
    narrow_offsets<N>(g, i, off);
    f(ops, off);
  }
}

constexpr int kThreads = 256;

template <int N>
Operands<N> operands_of(const Operand* const (&operands)[N]) {
  Operands<N> ops;
  for (int k = 0; k < N; ++k) {
    ops.data[k] = static_cast<char*>(operands[k]->data);
    for (int d = 0; d < kMaxDims; ++d) ops.strides[k][d] = operands[k]->strides[d];
  }
  return ops;
}

template <int N, typename F>
cudaError_t launch(const Geometry& g, const Operand* const (&operands)[N], void* stream, F f) {
  if (g.numel == 0) return cudaSuccess;
  const Operands<N> ops = operands_of(operands);
  const int blocks = grid_stride_blocks(g.numel, kThreads);
  NarrowGeometry<N> narrow;
  if (g.ndim == 1) {
    for_each<N, true><<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(g, ops, f);
  } else if (narrow_geometry<N>(g, operands, narrow)) {
    for_each_narrow<N><<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(narrow, ops, f);
  } else {
    for_each<N, false><<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(g, ops, f);
  }
  return cudaGetLastError();
}

template <typename T>
__device__ inline T& at(char* base, int64_t offset) {
  return reinterpret_cast<T*>(base)[offset];
}

// The formulas: elementwise_math.h (the ops' ints are the kernel_ops.h enums, cast by
// backends/cuda/backend.cc).
template <typename C>
__device__ inline C apply_unary(int op, C v) {
  return elementwise_math::unary(static_cast<UnaryOp>(op), v);
}

// atomicAdd for the types CUDA lacks one for: a compare-and-swap loop on the enclosing word.
__device__ inline void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ inline void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ inline void atomic_add(int64_t* p, int64_t v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}
__device__ inline void atomic_add(int32_t* p, int32_t v) { atomicAdd(reinterpret_cast<int*>(p), static_cast<int>(v)); }
// uint8: the byte's lane of its 32-bit word, added with wrap-around by compare-and-swap.
__device__ inline void atomic_add(uint8_t* p, uint8_t v) {
  auto* word = reinterpret_cast<unsigned int*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t(3));
  const unsigned int shift = 8u * static_cast<unsigned int>(reinterpret_cast<uintptr_t>(p) & 3);
  unsigned int old = *word, assumed;
  do {
    assumed = old;
    const unsigned int sum = ((assumed >> shift) + v) & 0xffu;
    old = atomicCAS(word, assumed, (assumed & ~(0xffu << shift)) | (sum << shift));
  } while (assumed != old);
}
template <typename T>
__device__ inline void atomic_add16(T* p, float v) {
  auto* word = reinterpret_cast<unsigned int*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t(3));
  const bool high = (reinterpret_cast<uintptr_t>(p) & 2) != 0;
  unsigned int old = *word, assumed;
  do {
    assumed = old;
    const uint16_t bits = high ? static_cast<uint16_t>(assumed >> 16) : static_cast<uint16_t>(assumed & 0xffff);
    const uint16_t sum = store<T>(load<T>(T{bits}) + v).bits;
    const unsigned int next =
        high ? ((assumed & 0xffffu) | (static_cast<unsigned int>(sum) << 16)) : ((assumed & 0xffff0000u) | sum);
    old = atomicCAS(word, assumed, next);
  } while (assumed != old);
}

// One element's work as a value function (the inputs' elements in, the output's element out),
// and how it runs: ByOffset on the general and flat paths (an offset per operand and element),
// flat_vectors on the vector path (kernels.h's vector_width: a pack of W elements per operand
// and step, loaded and stored whole). Out: the output's element type; In: the inputs'.
template <typename Out, typename In, int kInputs, typename V>
struct ByOffset {
  V v;
  __device__ void operator()(const Operands<kInputs + 1>& o, const int64_t (&off)[kInputs + 1]) const {
    Out& out = at<Out>(o.data[0], off[0]);
    if constexpr (kInputs == 0) {
      out = v();
    } else if constexpr (kInputs == 1) {
      out = v(at<In>(o.data[1], off[1]));
    } else {
      out = v(at<In>(o.data[1], off[1]), at<In>(o.data[2], off[2]));
    }
  }
};

template <typename T, int W>
struct alignas(sizeof(T) * W) Pack {
  T v[W];
};

template <typename Out, typename In, int kInputs, int W, typename V>
__global__ void flat_vectors(int64_t numel, Operands<kInputs + 1> o, V v) {
  const int64_t packs = numel / W;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t p = first; p < packs; p += step) {
    Pack<In, W> in[kInputs > 0 ? kInputs : 1];
#pragma unroll
    for (int k = 0; k < kInputs; ++k) {
      if (o.strides[k + 1][0] == 0) {
        const In scalar = at<In>(o.data[k + 1], 0);
#pragma unroll
        for (int j = 0; j < W; ++j) in[k].v[j] = scalar;
      } else {
        in[k] = reinterpret_cast<const Pack<In, W>*>(o.data[k + 1])[p];
      }
    }
    Pack<Out, W> out;
#pragma unroll
    for (int j = 0; j < W; ++j) {
      if constexpr (kInputs == 0) {
        out.v[j] = v();
      } else if constexpr (kInputs == 1) {
        out.v[j] = v(in[0].v[j]);
      } else {
        out.v[j] = v(in[0].v[j], in[1].v[j]);
      }
    }
    reinterpret_cast<Pack<Out, W>*>(o.data[0])[p] = out;
  }
  const ByOffset<Out, In, kInputs, V> one{v};
  for (int64_t i = packs * W + first; i < numel; i += step) {  // the last numel % W elements
    int64_t off[kInputs + 1];
    for (int k = 0; k <= kInputs; ++k) off[k] = i * o.strides[k][0];
    one(o, off);
  }
}

// Runs value function v over the launch: the vector path where kernels.h's vector_width allows
// it, else element by element.
template <typename Out, typename In, int kInputs, typename V>
cudaError_t launch_values(const Geometry& g, const Operand* const (&operands)[kInputs + 1], void* stream, V v) {
  constexpr int kWidth = 16 / static_cast<int>(sizeof(Out) > sizeof(In) ? sizeof(Out) : sizeof(In));
  static_assert(kWidth >= 2, "a vector holds at least two elements");
  if (g.numel == 0) return cudaSuccess;
  if (vector_width<kInputs + 1>(g, operands) != kWidth) {
    return launch<kInputs + 1>(g, operands, stream, ByOffset<Out, In, kInputs, V>{v});
  }
  const int blocks = grid_stride_blocks((g.numel + kWidth - 1) / kWidth, kThreads);
  flat_vectors<Out, In, kInputs, kWidth>
      <<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(g.numel, operands_of(operands), v);
  return cudaGetLastError();
}

template <typename T>
struct BinaryValue {
  int op;
  compute_t<T> scale;
  __device__ T operator()(T x, T y) const {
    return store<T>(elementwise_math::binary(static_cast<BinaryOp>(op), load(x), load(y), scale));
  }
};

template <typename T>
struct CompareValue {
  int op;
  __device__ bool operator()(T x, T y) const {
    return elementwise_math::compare(static_cast<CompareOp>(op), load(x), load(y));
  }
};

template <typename T>
struct UnaryValue {
  int op;
  __device__ T operator()(T x) const { return store<T>(apply_unary<compute_t<T>>(op, load(x))); }
};

template <typename T>
struct PowValue {
  double exponent;
  __device__ T operator()(T x) const {
    return store<T>(elementwise_math::pow_scalar(elementwise_math::pow_kind(exponent), load(x), exponent));
  }
};

// base ** exponent for a floating exponent (ops.h refuses the rest).
template <typename T>
struct PowBaseValue {
  double base;
  __device__ T operator()(T x) const {
    using C = compute_t<T>;
    return store<T>(elementwise_math::pow_scalar_base(static_cast<C>(base), load(x)));
  }
};

template <typename D, typename S>
struct CopyValue {
  __device__ D operator()(S x) const { return store<D>(load(x)); }
};

template <typename T>
struct FillValue {
  T value;
  __device__ T operator()() const { return value; }
};

template <typename T>
struct AccumulateFn {
  __device__ void operator()(const Operands<2>& o, const int64_t (&off)[2]) const {
    T* target = &at<T>(o.data[0], off[0]);
    const T& v = at<T>(o.data[1], off[1]);
    if constexpr (std::is_same_v<T, F16> || std::is_same_v<T, BF16>) {
      atomic_add16(target, load(v));
    } else {
      atomic_add(target, v);
    }
  }
};

}  // namespace

int binary(int op, const Geometry& g, const Operand& out, const Operand& a, const Operand& b, double alpha,
           void* stream) {
  const Operand* const operands[3] = {&out, &a, &b};
  return dispatch_numeric(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    return launch_values<T, T, 2>(g, operands, stream, BinaryValue<T>{op, static_cast<compute_t<T>>(alpha)});
  });
}

int compare(int op, const Geometry& g, const Operand& out, const Operand& a, const Operand& b, void* stream) {
  const Operand* const operands[3] = {&out, &a, &b};
  return dispatch(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    return launch_values<bool, T, 2>(g, operands, stream, CompareValue<T>{op});
  });
}

int unary(int op, const Geometry& g, const Operand& out, const Operand& x, void* stream) {
  const Operand* const operands[2] = {&out, &x};
  return dispatch_numeric(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    return launch_values<T, T, 1>(g, operands, stream, UnaryValue<T>{op});
  });
}

int pow_scalar(const Geometry& g, const Operand& out, const Operand& x, double exponent, void* stream) {
  const Operand* const operands[2] = {&out, &x};
  return dispatch_numeric(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    return launch_values<T, T, 1>(g, operands, stream, PowValue<T>{exponent});
  });
}

int pow_scalar_base(const Geometry& g, const Operand& out, const Operand& exponent, double base, void* stream) {
  const Operand* const operands[2] = {&out, &exponent};
  return dispatch_numeric(out.dtype, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    if constexpr (is_floating<T>) {
      return launch_values<T, T, 1>(g, operands, stream, PowBaseValue<T>{base});
    } else {
      return cudaErrorInvalidValue;
    }
  });
}

int copy(const Geometry& g, const Operand& dst, const Operand& src, void* stream) {
  const Operand* const operands[2] = {&dst, &src};
  return dispatch(dst.dtype, [&](auto dst_tag) {
    return dispatch(src.dtype, [&](auto src_tag) {
      using D = decltype(dst_tag);
      using S = decltype(src_tag);
      return launch_values<D, S, 1>(g, operands, stream, CopyValue<D, S>{});
    });
  });
}

int fill(const Geometry& g, const Operand& dst, double value, void* stream) {
  const Operand* const operands[1] = {&dst};
  return dispatch(dst.dtype, [&](auto tag) {
    using T = decltype(tag);
    return launch_values<T, T, 0>(g, operands, stream, FillValue<T>{store<T>(value)});
  });
}

int accumulate(const Geometry& g, const Operand& dst, const Operand& src, void* stream) {
  const Operand* const operands[2] = {&dst, &src};
  return dispatch_numeric(dst.dtype,
                          [&](auto tag) { return launch<2>(g, operands, stream, AccumulateFn<decltype(tag)>{}); });
}

// Dropout's mask drawn on the device: a thread per block of 4 elements (one Philox block), each
// element `scale` where philox::dropout_keep keeps it, else 0. The key is `seed`, or the word at
// `slot` when there is one (a CUDA graph's, filled before each replay).
template <typename T>
__global__ void dropout_mask_kernel(T* mask, int64_t numel, float keep, T scale, uint64_t seed, const uint64_t* slot) {
  if (slot != nullptr) seed = *slot;
  const int64_t blocks = (numel + 3) / 4;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks; b += stride) {
    const philox::Block bits = philox::block_at(seed, static_cast<uint64_t>(b));
    for (int k = 0; k < 4 && 4 * b + k < numel; ++k) {
      mask[4 * b + k] = philox::uniform(bits.w[k]) < keep ? scale : store<T>(0.0f);
    }
  }
}

int dropout_mask(void* mask, int dtype, int64_t numel, double p, uint64_t seed, const uint64_t* seed_slot,
                 void* stream) {
  if (numel == 0) return cudaSuccess;
  return dispatch(dtype, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    if constexpr (is_floating<T>) {
      const int blocks = grid_stride_blocks((numel + 3) / 4, kThreads);
      dropout_mask_kernel<T><<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
          static_cast<T*>(mask), numel, static_cast<float>(1.0 - p), store<T>(1.0 / (1.0 - p)), seed, seed_slot);
      return cudaGetLastError();
    } else {
      return cudaErrorInvalidValue;
    }
  });
}

}  // namespace tinyddp::tensor::cuda::kernels
