// CPU causal softmax (backends/cpu/backend.h): the rows run in the selected instruction set's kernels
// (backends/cpu/isa/kernels.h), which round as scale, masked_fill and softmax (and their backward)
// one after the other do. float16/bfloat16 scores compute in float32, where their arithmetic
// happens anyway, and round where those three ops would leave a 16-bit tensor: the scaled
// scores (scaled by the scale rounded to their dtype, as PyTorch 1.13 multiplies by a Python
// number) and, in the backward, the softmax's gradient before the scale; bfloat16's backward
// also rounds each row's sum(grad * y), as PyTorch's bfloat16 softmax backward does. They go
// a matrix at a time through float32 buffers: one pass over the 16-bit tensors each way, the
// buffers in cache (a row's bits do not depend on its address: isa/kernels.cc's exp_packets).
// The [m, n] matrices run on the intra-op threads, whole (a row's mask depends on its place).
#include <type_traits>
#include <vector>

#include "tinyddp/tensor/backends/cpu/backend.h"
#include "tinyddp/tensor/backends/cpu/isa/kernels.h"
#include "tinyddp/tensor/backends/cpu/loops.h"
#include "tinyddp/tensor/factory.h"

namespace tinyddp::tensor::cpu {

namespace {
// The scale rounded to the 16-bit dtype, as a float.
float scale_in(DType dtype, double scale) {
  const Tensor factor = empty({}, TensorOptions(dtype));
  backend().fill(factor, scale);
  return backend().converted(factor, kFloat32).data_ptr<float>()[0];
}

template <typename T>
void causal_softmax_16bit(const Tensor& out, const Tensor& x, double scale) {
  const float s = scale_in(x.dtype(), scale);
  const T* px = x.data_ptr<T>();
  T* po = out.data_ptr<T>();
  const int64_t m = x.size(1), n = x.size(2), size = m * n;
  parallel_rows(x.size(0), size, kCostSoftmax, [&](int64_t first, int64_t last) {
    std::vector<float> scratch(static_cast<size_t>(n)), buffer(static_cast<size_t>(size));
    float* w = buffer.data();
    for (int64_t b = first; b < last; ++b) {
      const int64_t at = b * size;
      for (int64_t i = 0; i < size; ++i) w[i] = static_cast<float>(T(static_cast<float>(px[at + i]) * s));
      isa_kernels().causal_softmax_rows_f32(w, w, m, m, n, 1.0, scratch.data());
      for (int64_t i = 0; i < size; ++i) po[at + i] = T(w[i]);
    }
  });
}

template <typename T>
void causal_softmax_backward_16bit(const Tensor& grad_x, const Tensor& grad_out, const Tensor& y, double scale) {
  const float s = scale_in(y.dtype(), scale);
  const T* pg = grad_out.data_ptr<T>();
  const T* py = y.data_ptr<T>();
  T* pd = grad_x.data_ptr<T>();
  const int64_t m = y.size(1), n = y.size(2), size = m * n;
  parallel_rows(y.size(0), size, kCostSoftmax, [&](int64_t first, int64_t last) {
    std::vector<float> g(static_cast<size_t>(size)), yw(g.size()), dx(g.size());
    for (int64_t b = first; b < last; ++b) {
      const int64_t at = b * size;
      for (int64_t i = 0; i < size; ++i) {
        g[i] = static_cast<float>(pg[at + i]);
        yw[i] = static_cast<float>(py[at + i]);
      }
      isa_kernels().causal_softmax_backward_rows_f32(g.data(), yw.data(), dx.data(), m, m, n, 1.0,
                                                     std::is_same_v<T, BFloat16>);
      // The softmax's gradient rounded, then times the rounded scale, rounded again.
      for (int64_t i = 0; i < size; ++i) pd[at + i] = T(static_cast<float>(T(dx[i])) * s);
    }
  });
}

// float32 and float64 rows in place: the kernel of the dtype, matrices on the intra-op threads.
template <typename T>
void causal_softmax_float(const Tensor& out, const Tensor& x, double scale) {
  const int64_t m = x.size(1), n = x.size(2);
  parallel_rows(x.size(0), m * n, kCostSoftmax, [&](int64_t first, int64_t last) {
    const int64_t at = first * m * n, rows = (last - first) * m;
    std::vector<T> scratch(static_cast<size_t>(n));
    if constexpr (std::is_same_v<T, double>) {
      isa_kernels().causal_softmax_rows_f64(x.data_ptr<T>() + at, out.data_ptr<T>() + at, rows, m, n, scale,
                                            scratch.data());
    } else {
      isa_kernels().causal_softmax_rows_f32(x.data_ptr<T>() + at, out.data_ptr<T>() + at, rows, m, n, scale,
                                            scratch.data());
    }
  });
}

template <typename T>
void causal_softmax_backward_float(const Tensor& grad_x, const Tensor& grad_out, const Tensor& y, double scale) {
  const int64_t m = y.size(1), n = y.size(2);
  parallel_rows(y.size(0), m * n, kCostSoftmax, [&](int64_t first, int64_t last) {
    const int64_t at = first * m * n, rows = (last - first) * m;
    const T* g = grad_out.data_ptr<T>() + at;
    if constexpr (std::is_same_v<T, double>) {
      isa_kernels().causal_softmax_backward_rows_f64(g, y.data_ptr<T>() + at, grad_x.data_ptr<T>() + at, rows, m, n,
                                                     scale, false);
    } else {
      isa_kernels().causal_softmax_backward_rows_f32(g, y.data_ptr<T>() + at, grad_x.data_ptr<T>() + at, rows, m, n,
                                                     scale, false);
    }
  });
}

// Runs fn(result) with result `out` itself when it is contiguous, else a contiguous buffer then
// copied into out.
template <typename F>
void into_contiguous(const Tensor& out, F&& fn) {
  const Tensor result = out.is_contiguous() ? out : empty(out.sizes(), out.dtype());
  fn(result);
  if (!result.is_same(out)) backend().copy(out, result, false);
}

}  // namespace

void CpuBackend::causal_softmax(const Tensor& out, const Tensor& x, double scale) {
  const Tensor in = contiguous(x);
  into_contiguous(out, [&](const Tensor& result) {
    dispatch_floating(x.dtype(), "causal_softmax", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (is_16bit_float_v<T>) {
        causal_softmax_16bit<T>(result, in, scale);
      } else {
        causal_softmax_float<T>(result, in, scale);
      }
    });
  });
}

void CpuBackend::causal_softmax_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& y, double scale) {
  const Tensor g = contiguous(grad_out), yc = contiguous(y);
  into_contiguous(grad_x, [&](const Tensor& result) {
    dispatch_floating(y.dtype(), "causal_softmax backward", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (is_16bit_float_v<T>) {
        causal_softmax_backward_16bit<T>(result, g, yc, scale);
      } else {
        causal_softmax_backward_float<T>(result, g, yc, scale);
      }
    });
  });
}

}  // namespace tinyddp::tensor::cpu
