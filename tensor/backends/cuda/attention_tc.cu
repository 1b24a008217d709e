// Launches the tensor-core flash attention kernels of attention_tc.cuh (attention.cuh's
// tc_takes, tc_forward, tc_backward): grids of 64-row tiles by heads (launch_tiles), shared
// memory sized by each kernel's layout.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "tinyddp/tensor/backends/cuda/attention.cuh"
#include "tinyddp/tensor/backends/cuda/attention_tc.cuh"

namespace tinyddp::tensor::cuda::kernels::attention {

namespace {

using tc::dkdv_kernel;
using tc::dq_kernel;
using tc::forward_kernel;
using tc::kThreads;
using tc::kTile;

// f(W{}, std::integral_constant<int, E>{}) for float16 (2) or bfloat16 (3) and E of 64 or 128.
template <typename F>
cudaError_t with_types(int dtype, int64_t e, F&& f) {
  const auto width = [&](auto w) -> cudaError_t {
    if (e == 64) return f(w, std::integral_constant<int, 64>{});
    if (e == 128) return f(w, std::integral_constant<int, 128>{});
    return cudaErrorNotSupported;
  };
  if (dtype == 2) return width(__half{});
  if (dtype == 3) return width(__nv_bfloat16{});
  return cudaErrorNotSupported;
}

}  // namespace

bool tc_takes(int dtype, int64_t e, int64_t ev, const void* const* pointers, int count,
              const AttentionLayouts& layouts) {
  if ((dtype != 2 && dtype != 3) || e != ev || (e != 64 && e != 128)) return false;
  for (int i = 0; i < count; ++i) {
    if (reinterpret_cast<uintptr_t>(pointers[i]) % 16 != 0) return false;
  }
  for (const HeadStrides& s :
       {layouts.q, layouts.k, layouts.v, layouts.out, layouts.dout, layouts.dq, layouts.dk, layouts.dv}) {
    if (s.batch % 8 != 0 || s.head % 8 != 0 || s.row % 8 != 0) return false;  // 8 16-bit elements: 16 bytes
  }
  return layouts.per_batch > 0;
}

int tc_forward(const void* q, const void* k, const void* v, int dtype, void* out, float* lse, const Sizes& z,
               const AttentionLayouts& layouts, double scale, const Drop<float>& drop, cudaStream_t stream) {
  return with_types(dtype, z.e, [&](auto tag, auto width) {
    using W = decltype(tag);
    constexpr int E = decltype(width)::value;
    return launch_tiles(forward_kernel<W, E>, z.m, kTile, z.heads, kThreads, tc::forward_layout<E>().bytes(), stream,
                        static_cast<const W*>(q), static_cast<const W*>(k), static_cast<const W*>(v),
                        static_cast<W*>(out), lse, z, layouts, static_cast<float>(scale), drop);
  });
}

int tc_backward(const void* q, const void* k, const void* v, const void* dout, const float* lse, const float* delta,
                int dtype, void* dq, void* dk, void* dv, const Sizes& z, const AttentionLayouts& layouts, double scale,
                const Drop<float>& drop, cudaStream_t stream) {
  return with_types(dtype, z.e, [&](auto tag, auto width) {
    using W = decltype(tag);
    constexpr int E = decltype(width)::value;
    const auto* qw = static_cast<const W*>(q);
    const auto* kw = static_cast<const W*>(k);
    const auto* vw = static_cast<const W*>(v);
    const auto* dw = static_cast<const W*>(dout);
    const float s = static_cast<float>(scale);
    const cudaError_t status =
        launch_tiles(dq_kernel<W, E>, z.m, kTile, z.heads, kThreads, tc::dq_layout<E>().bytes(), stream, qw, kw, vw, dw,
                     lse, delta, static_cast<W*>(dq), z, layouts, s, drop);
    if (status != cudaSuccess) return status;
    return launch_tiles(dkdv_kernel<W, E>, z.n, kTile, z.heads, kThreads, tc::dkdv_layout<E>().bytes(), stream, qw, kw,
                        vw, dw, lse, delta, static_cast<W*>(dk), static_cast<W*>(dv), z, layouts, s, drop);
  });
}

}  // namespace tinyddp::tensor::cuda::kernels::attention
