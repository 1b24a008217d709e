// CPU causal softmax (backends/cpu/backend.h): the rows run in the selected instruction set's kernels
// (backends/cpu/isa/kernels.h), which round as scale, masked_fill and softmax (and their backward)
// one after the other do. float16/bfloat16 scores go through float32, where their arithmetic
// happens anyway, and round where those three ops would leave a 16-bit tensor: the scaled
// scores (scaled by the scale rounded to their dtype, as PyTorch 1.13 multiplies by a Python
// number) and, in the backward, the softmax's gradient before the scale; bfloat16's backward
// also rounds each row's sum(grad * y), as PyTorch's bfloat16 softmax backward does. The
// [m, n] matrices run on the intra-op threads, whole (a row's mask depends on its place).
#include <vector>

#include "tinyddp/tensor/backends/cpu/backend.h"
#include "tinyddp/tensor/backends/cpu/isa/kernels.h"
#include "tinyddp/tensor/backends/cpu/loops.h"
#include "tinyddp/tensor/factory.h"

namespace tinyddp::tensor::cpu {

namespace {
DType compute_dtype(DType dtype) { return dtype == kFloat64 ? kFloat64 : kFloat32; }

// `out` itself when it has the compute dtype, else a buffer for it.
Tensor result_for(const Tensor& out) {
  return out.dtype() == compute_dtype(out.dtype()) ? out : empty(out.sizes(), compute_dtype(out.dtype()));
}

// out = t * scale, rounded to t's dtype, with the scale in that dtype (t: 16-bit).
void scale_16bit(const Tensor& out, const Tensor& t, double scale) {
  const Tensor factor = empty({}, TensorOptions(t.dtype()));
  backend().fill(factor, scale);
  backend().binary(BinaryOp::kMul, out, t, factor, 1.0);
}
}  // namespace

void CpuBackend::causal_softmax(const Tensor& out, const Tensor& x, double scale) {
  Tensor in;
  if (is_16bit_float(x.dtype())) {  // the scaled scores, rounded; the kernel's own scale is then 1
    const Tensor scaled = empty(x.sizes(), x.dtype());
    scale_16bit(scaled, x, scale);
    in = converted(scaled, kFloat32);
    scale = 1.0;
  } else {
    in = contiguous(converted(x, compute_dtype(x.dtype())));
  }
  const Tensor result = result_for(out);
  const int64_t m = x.size(1), n = x.size(2);
  parallel_rows(x.size(0), m * n, kCostSoftmax, [&](int64_t first, int64_t last) {
    const int64_t at = first * m * n, rows = (last - first) * m;
    if (in.dtype() == kFloat64) {
      std::vector<double> scratch(static_cast<size_t>(n));
      isa_kernels().causal_softmax_rows_f64(in.data_ptr<double>() + at, result.data_ptr<double>() + at, rows, m, n,
                                            scale, scratch.data());
    } else {
      std::vector<float> scratch(static_cast<size_t>(n));
      isa_kernels().causal_softmax_rows_f32(in.data_ptr<float>() + at, result.data_ptr<float>() + at, rows, m, n, scale,
                                            scratch.data());
    }
  });
  if (!result.is_same(out)) copy(out, result, false);
}

void CpuBackend::causal_softmax_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& y, double scale) {
  const DType c = compute_dtype(y.dtype());
  const Tensor g = contiguous(converted(grad_out, c)), yc = contiguous(converted(y, c)), result = result_for(grad_x);
  const int64_t m = y.size(1), n = y.size(2);
  const double kernel_scale = is_16bit_float(grad_x.dtype()) ? 1.0 : scale;  // 16-bit: scaled after rounding
  parallel_rows(y.size(0), m * n, kCostSoftmax, [&](int64_t first, int64_t last) {
    const int64_t at = first * m * n, rows = (last - first) * m;
    if (c == kFloat64) {
      isa_kernels().causal_softmax_backward_rows_f64(g.data_ptr<double>() + at, yc.data_ptr<double>() + at,
                                                     result.data_ptr<double>() + at, rows, m, n, kernel_scale, false);
    } else {
      isa_kernels().causal_softmax_backward_rows_f32(g.data_ptr<float>() + at, yc.data_ptr<float>() + at,
                                                     result.data_ptr<float>() + at, rows, m, n, kernel_scale,
                                                     grad_x.dtype() == kBFloat16);
    }
  });
  if (!result.is_same(grad_x)) copy(grad_x, result, false);
  if (is_16bit_float(grad_x.dtype())) scale_16bit(grad_x, grad_x, scale);
}

}  // namespace tinyddp::tensor::cpu
