// Kernels over lists of tensors (tensor/fused.h): the Adam / AdamW and SGD steps of a parameter
// group (fused_adam_steps_, fused_sgd_steps_; the CPU twins: backends/cpu/isa/optim_kernels.cc), foreach_norm and
// foreach_mul_, several tensors per launch: the list is
// cut into launches of up to kTensorsPerLaunch parameters, whose pointers travel in the kernel's
// arguments; each block takes one chunk of kChunk elements of one parameter (found from the
// chunks' running count), each thread a strided share of the chunk. A GPT-2's 148 parameters
// take 4 launches where the op-by-op update takes about 9 per parameter.
//
// Each element's float operations are the op-by-op update's on the GPU (nn/optim.cc's
// Adam::step_group, one elementwise kernel per op) in its order and rounding: products, sums,
// quotients and roots rounded one by one (the __*_rn intrinsics, which nvcc never contracts),
// and a fused multiply-add exactly where an op-by-op kernel computes a + alpha * b (add_ with an
// alpha: nvcc contracts that expression), so that both paths give the same bits.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "tinyddp/tensor/backends/cuda/dtypes.cuh"
#include "tinyddp/tensor/backends/cuda/kernels.h"
#include "tinyddp/tensor/internal/kernel_ops.h"

namespace tinyddp::tensor::cuda::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = 65536;

// One launch's parameters: pointers, sizes and the running count of chunks before each.
template <typename T>
struct AdamLaunch {
  T* param[kTensorsPerLaunch];
  const T* grad[kTensorsPerLaunch];
  T* exp_avg[kTensorsPerLaunch];
  T* exp_avg_sq[kTensorsPerLaunch];
  // Capturable Adam's numbers on the device (null: AdamNumbers' host ones).
  const T* denom_scale[kTensorsPerLaunch];
  const T* eps_term[kTensorsPerLaunch];
  const T* keep[kTensorsPerLaunch];
  int64_t numel[kTensorsPerLaunch];
  int64_t first_chunk[kTensorsPerLaunch + 1];
  int count;
};

// The step's numbers, rounded to T once (as the op-by-op update's scalars are).
template <typename T>
struct AdamNumbers {
  T keep, decay, beta1, rest1, beta2, rest2, root2, eps, step;
  bool decoupled, weight_decay, maximize;
};

// Correctly rounded arithmetic that nvcc does not contract, float and double.
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ inline float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ inline double div_rn(double a, double b) { return __ddiv_rn(a, b); }
__device__ inline float sqrt_rn(float a) { return __fsqrt_rn(a); }
__device__ inline double sqrt_rn(double a) { return __dsqrt_rn(a); }
// a + alpha * b as an elementwise kernel's add with alpha computes it: one rounding.
__device__ inline float add_scaled(float a, float alpha, float b) { return __fmaf_rn(alpha, b, a); }
__device__ inline double add_scaled(double a, double alpha, double b) { return __fma_rn(alpha, b, a); }

// The tensor whose chunk this block takes (the last whose first chunk is not past it), and the
// chunk's range of its elements.
template <typename Launch>
__device__ int list_tensor(const Launch& launch) {
  int t = 0;
  while (t + 1 < launch.count && launch.first_chunk[t + 1] <= blockIdx.x) ++t;
  return t;
}
template <typename Launch>
__device__ void chunk_range(const Launch& launch, int t, int64_t& begin, int64_t& end) {
  begin = (blockIdx.x - launch.first_chunk[t]) * kChunk;
  end = begin + kChunk < launch.numel[t] ? begin + kChunk : launch.numel[t];
}

// Sets launch.numel, first_chunk and count for `count` tensors of numel_of(k) elements; returns
// the launch's chunks (its blocks).
template <typename Launch, typename NumelOf>
int64_t lay_out_chunks(Launch& launch, int count, NumelOf numel_of) {
  int64_t chunks = 0;
  for (int k = 0; k < count; ++k) {
    launch.numel[k] = numel_of(k);
    launch.first_chunk[k] = chunks;
    chunks += (launch.numel[k] + kChunk - 1) / kChunk;
  }
  launch.first_chunk[count] = chunks;
  launch.count = count;
  return chunks;
}

template <typename T>
__global__ void adam_kernel(AdamLaunch<T> launch, AdamNumbers<T> c) {
  const int t = list_tensor(launch);
  int64_t begin, end;
  chunk_range(launch, t, begin, end);
  T* p = launch.param[t];
  const T* g = launch.grad[t];
  T* m = launch.exp_avg[t];
  T* v = launch.exp_avg_sq[t];
  // Capturable: this parameter's numbers, read once per block (written by the ops before).
  const bool device = launch.denom_scale[t] != nullptr;
  const T scale = device ? *launch.denom_scale[t] : T(1), eps_term = device ? *launch.eps_term[t] : T(0);
  const T keep = launch.keep[t] != nullptr ? *launch.keep[t] : c.keep;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    T d = c.maximize ? -g[i] : g[i];
    T w = p[i];
    if (c.weight_decay && c.decoupled) w = mul_rn(w, keep);             // p.mul_(1 - lr * decay)
    if (c.weight_decay && !c.decoupled) d = add_scaled(d, c.decay, w);  // add(grad, p, decay)
    const T first = add_scaled(mul_rn(m[i], c.beta1), c.rest1, d);      // m.mul_(b1).add_(d, 1 - b1)
    const T second = add_rn(mul_rn(v[i], c.beta2), mul_rn(mul_rn(d, c.rest2), d));
    if (device) {  // denom = sqrt(v).div(denom_scale).add_(eps_term); p.add_(m / denom)
      p[i] = add_rn(w, div_rn(first, add_rn(div_rn(sqrt_rn(second), scale), eps_term)));
    } else {
      const T denom = add_rn(div_rn(sqrt_rn(second), c.root2), c.eps);
      p[i] = add_rn(w, div_rn(mul_rn(first, c.step), denom));  // p.add_(m * -step_size / denom)
    }
    m[i] = first;
    v[i] = second;
  }
}

template <typename T>
AdamNumbers<T> numbers(const AdamStep& a) {
  const double bias_correction1 = 1 - std::pow(a.beta1, static_cast<double>(a.step));
  const double bias_correction2 = 1 - std::pow(a.beta2, static_cast<double>(a.step));
  AdamNumbers<T> c;
  c.keep = static_cast<T>(1 - a.lr * a.weight_decay);
  c.decay = static_cast<T>(a.weight_decay);
  c.beta1 = static_cast<T>(a.beta1), c.rest1 = static_cast<T>(1 - a.beta1);
  c.beta2 = static_cast<T>(a.beta2), c.rest2 = static_cast<T>(1 - a.beta2);
  c.root2 = static_cast<T>(std::sqrt(bias_correction2)), c.eps = static_cast<T>(a.eps);
  c.step = static_cast<T>(-(a.lr / bias_correction1));
  c.decoupled = a.decoupled, c.weight_decay = a.weight_decay != 0, c.maximize = a.maximize;
  return c;
}

template <typename T>
int adam_launches(const AdamTensorPointers* list, int count, const AdamStep& options, cudaStream_t stream) {
  const AdamNumbers<T> c = numbers<T>(options);
  for (int first = 0; first < count; first += kTensorsPerLaunch) {
    AdamLaunch<T> launch{};
    const int64_t chunks = lay_out_chunks(launch, std::min(kTensorsPerLaunch, count - first),
                                          [&](int k) { return list[first + k].numel; });
    for (int k = 0; k < launch.count; ++k) {
      const AdamTensorPointers& e = list[first + k];
      launch.param[k] = static_cast<T*>(e.param);
      launch.grad[k] = static_cast<const T*>(e.grad);
      launch.exp_avg[k] = static_cast<T*>(e.exp_avg);
      launch.exp_avg_sq[k] = static_cast<T*>(e.exp_avg_sq);
      launch.denom_scale[k] = static_cast<const T*>(e.denom_scale);
      launch.eps_term[k] = static_cast<const T*>(e.eps_term);
      launch.keep[k] = static_cast<const T*>(e.keep);
    }
    if (chunks == 0) continue;
    adam_kernel<T><<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(launch, c);
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

// ---- SGD ----------------------------------------------------------------------------------------

template <typename T>
struct SgdLaunch {
  T* param[kTensorsPerLaunch];
  const T* grad[kTensorsPerLaunch];
  T* buf[kTensorsPerLaunch];
  int64_t numel[kTensorsPerLaunch];
  int64_t first_chunk[kTensorsPerLaunch + 1];
  bool first_step[kTensorsPerLaunch];
  int count;
};

// The step's numbers, rounded to T once (as the op-by-op update's scalars are).
template <typename T>
struct SgdNumbers {
  T decay, momentum, keep, step;
  bool weight_decay, use_momentum, nesterov;
};

// nn/optim.cc's SGD::step op by op (torch.optim.SGD's single-tensor step), each op's rounding:
// d = grad + decay * p (add with alpha: one fused multiply-add), buf = buf * momentum (rounded)
// + (1 - dampening) * d (add_ with alpha), or d itself on the first step; d = d + momentum *
// buf with nesterov, else buf; p = p + (-lr) * d.
template <typename T>
__global__ void sgd_kernel(SgdLaunch<T> launch, SgdNumbers<T> c) {
  const int t = list_tensor(launch);
  int64_t begin, end;
  chunk_range(launch, t, begin, end);
  T* p = launch.param[t];
  const T* g = launch.grad[t];
  T* buf = launch.buf[t];
  const bool first = launch.first_step[t];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    T d = g[i];
    if (c.weight_decay) d = add_scaled(d, c.decay, p[i]);
    if (c.use_momentum) {
      const T b = first ? d : add_scaled(mul_rn(buf[i], c.momentum), c.keep, d);
      buf[i] = b;
      d = c.nesterov ? add_scaled(d, c.momentum, b) : b;
    }
    p[i] = add_scaled(p[i], c.step, d);
  }
}

template <typename T>
int sgd_launches(const SgdTensorPointers* list, int count, const SgdStep& options, cudaStream_t stream) {
  SgdNumbers<T> c;
  c.decay = static_cast<T>(options.weight_decay), c.momentum = static_cast<T>(options.momentum);
  c.keep = static_cast<T>(1 - options.dampening), c.step = static_cast<T>(-options.lr);
  c.weight_decay = options.weight_decay != 0, c.use_momentum = options.momentum != 0, c.nesterov = options.nesterov;
  for (int first = 0; first < count; first += kTensorsPerLaunch) {
    SgdLaunch<T> launch{};
    const int64_t chunks = lay_out_chunks(launch, std::min(kTensorsPerLaunch, count - first),
                                          [&](int k) { return list[first + k].numel; });
    for (int k = 0; k < launch.count; ++k) {
      const SgdTensorPointers& e = list[first + k];
      launch.param[k] = static_cast<T*>(e.param);
      launch.grad[k] = static_cast<const T*>(e.grad);
      launch.buf[k] = static_cast<T*>(e.momentum_buffer);
      launch.first_step[k] = e.first_step;
    }
    if (chunks == 0) continue;
    sgd_kernel<T><<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(launch, c);
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

// ---- foreach_norm, foreach_mul_ ------------------------------------------------------------------

// One launch's tensors: pointers, sizes and the running count of chunks before each.
template <typename T>
struct ListLaunch {
  T* data[kTensorsPerLaunch];
  int64_t numel[kTensorsPerLaunch];
  int64_t first_chunk[kTensorsPerLaunch + 1];
  int count;
};

template <typename A>
using acc_of = std::conditional_t<std::is_same_v<A, double>, double, float>;

// partial[b] = the sum of squares of block b's chunk, in float (double for float64): each
// thread's strided share, then the block's tree in shared memory, in a fixed order.
template <typename T>
__global__ void squares_kernel(ListLaunch<T> launch, acc_of<compute_t<T>>* partial) {
  using A = acc_of<compute_t<T>>;
  __shared__ A buf[kThreads];
  const int t = list_tensor(launch);
  int64_t begin, end;
  chunk_range(launch, t, begin, end);
  A total = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const A v = static_cast<A>(load(launch.data[t][i]));
    total += v * v;
  }
  buf[threadIdx.x] = total;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = buf[0];
}

// out[i] = sqrt of the sum of tensor i's partial sums, added in chunk order (a thread per tensor).
template <typename T>
__global__ void norms_kernel(ListLaunch<T> launch, const acc_of<compute_t<T>>* partial, T* out) {
  using A = acc_of<compute_t<T>>;
  const int t = static_cast<int>(threadIdx.x);
  if (t >= launch.count) return;
  A total = 0;
  for (int64_t c = launch.first_chunk[t]; c < launch.first_chunk[t + 1]; ++c) total += partial[c];
  out[t] = store<T>(sqrt(total));
}

template <typename T>
__global__ void scale_kernel(ListLaunch<T> launch, const T* scale) {
  const int t = list_tensor(launch);
  int64_t begin, end;
  chunk_range(launch, t, begin, end);
  const compute_t<T> s = load(*scale);
  T* x = launch.data[t];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) x[i] = store<T>(load(x[i]) * s);
}

// The launches over `count` tensors, kTensorsPerLaunch at a time: fn(launch, chunks, first) for
// each, `first` the index of its first tensor; the first error stops them.
template <typename T, typename F>
int list_launches(void* const* data, const int64_t* numel, int count, F&& fn) {
  for (int first = 0; first < count; first += kTensorsPerLaunch) {
    ListLaunch<T> launch{};
    const int64_t chunks =
        lay_out_chunks(launch, std::min(kTensorsPerLaunch, count - first), [&](int k) { return numel[first + k]; });
    for (int k = 0; k < launch.count; ++k) launch.data[k] = static_cast<T*>(data[first + k]);
    const cudaError_t status = fn(launch, chunks, first);
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

}  // namespace

int adam_steps(const AdamTensorPointers* list, int count, int dtype, const AdamStep& options, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (dtype == 0) return adam_launches<float>(list, count, options, s);
  if (dtype == 1) return adam_launches<double>(list, count, options, s);
  return cudaErrorNotSupported;  // 16-bit parameters: the op-by-op update
}

int sgd_steps(const SgdTensorPointers* list, int count, int dtype, const SgdStep& options, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (dtype == 0) return sgd_launches<float>(list, count, options, s);
  if (dtype == 1) return sgd_launches<double>(list, count, options, s);
  return cudaErrorNotSupported;
}

}  // namespace tinyddp::tensor::cuda::kernels

namespace tinyddp::tensor::cuda::kernels {

int64_t foreach_norm_scratch(const int64_t* numel, int count) {
  int64_t chunks = 0;
  for (int i = 0; i < count; ++i) chunks += (numel[i] + kChunk - 1) / kChunk;
  return chunks;
}

int foreach_norm(void* const* data, const int64_t* numel, int count, int dtype, void* partial, void* out,
                 void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  return dispatch(dtype, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    if constexpr (!is_floating<T>) {
      return cudaErrorInvalidValue;  // tensor/native/optim.cc refuses other dtypes
    } else {
      using A = acc_of<compute_t<T>>;
      A* scratch = static_cast<A*>(partial);
      return static_cast<cudaError_t>(
          list_launches<T>(data, numel, count, [&](const ListLaunch<T>& launch, int64_t chunks, int first) {
            if (chunks > 0) squares_kernel<T><<<static_cast<unsigned>(chunks), kThreads, 0, s>>>(launch, scratch);
            norms_kernel<T><<<1, kTensorsPerLaunch, 0, s>>>(launch, scratch, static_cast<T*>(out) + first);
            scratch += chunks;
            return cudaGetLastError();
          }));
    }
  });
}

int foreach_mul(void* const* data, const int64_t* numel, int count, int dtype, const void* scale, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  return dispatch(dtype, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    if constexpr (!is_floating<T>) {
      return cudaErrorInvalidValue;
    } else {
      return static_cast<cudaError_t>(
          list_launches<T>(data, numel, count, [&](const ListLaunch<T>& launch, int64_t chunks, int) {
            if (chunks == 0) return cudaSuccess;
            scale_kernel<T><<<static_cast<unsigned>(chunks), kThreads, 0, s>>>(launch, static_cast<const T*>(scale));
            return cudaGetLastError();
          }));
    }
  });
}

}  // namespace tinyddp::tensor::cuda::kernels
