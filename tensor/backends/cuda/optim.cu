// The Adam / AdamW step on the GPU for a list of parameters (tensor/fused.h's fused_adam_steps_;
// the CPU twin: backends/cpu/isa/optim_kernels.cc), several parameters per launch: the list is
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

template <typename T>
__global__ void adam_kernel(AdamLaunch<T> launch, AdamNumbers<T> c) {
  // The parameter whose chunk this block takes: the last whose first chunk is not past it.
  int t = 0;
  while (t + 1 < launch.count && launch.first_chunk[t + 1] <= blockIdx.x) ++t;
  const int64_t begin = (blockIdx.x - launch.first_chunk[t]) * kChunk;
  const int64_t end = begin + kChunk < launch.numel[t] ? begin + kChunk : launch.numel[t];
  T* p = launch.param[t];
  const T* g = launch.grad[t];
  T* m = launch.exp_avg[t];
  T* v = launch.exp_avg_sq[t];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    T d = c.maximize ? -g[i] : g[i];
    T w = p[i];
    if (c.weight_decay && c.decoupled) w = mul_rn(w, c.keep);           // p.mul_(1 - lr * decay)
    if (c.weight_decay && !c.decoupled) d = add_scaled(d, c.decay, w);  // add(grad, p, decay)
    const T first = add_scaled(mul_rn(m[i], c.beta1), c.rest1, d);      // m.mul_(b1).add_(d, 1 - b1)
    const T second = add_rn(mul_rn(v[i], c.beta2), mul_rn(mul_rn(d, c.rest2), d));
    const T denom = add_rn(div_rn(sqrt_rn(second), c.root2), c.eps);
    p[i] = add_rn(w, div_rn(mul_rn(first, c.step), denom));  // p.add_(m * -step_size / denom)
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
    launch.count = std::min(kTensorsPerLaunch, count - first);
    int64_t chunks = 0;
    for (int k = 0; k < launch.count; ++k) {
      const AdamTensorPointers& e = list[first + k];
      launch.param[k] = static_cast<T*>(e.param);
      launch.grad[k] = static_cast<const T*>(e.grad);
      launch.exp_avg[k] = static_cast<T*>(e.exp_avg);
      launch.exp_avg_sq[k] = static_cast<T*>(e.exp_avg_sq);
      launch.numel[k] = e.numel;
      launch.first_chunk[k] = chunks;
      chunks += (e.numel + kChunk - 1) / kChunk;
    }
    launch.first_chunk[launch.count] = chunks;
    if (chunks == 0) continue;
    adam_kernel<T><<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(launch, c);
    const cudaError_t status = cudaGetLastError();
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

}  // namespace tinyddp::tensor::cuda::kernels
