// CPU causal softmax (cpu/backend.h): the rows run in the selected instruction set's kernels
// (cpu/isa/kernels.h), which round as scale, masked_fill and softmax (and their backward)
// one after the other do; float16/bfloat16 go through float32, where their arithmetic
// happens anyway.
#include <vector>

#include "tinyddp/tensor/cpu/backend.h"
#include "tinyddp/tensor/cpu/isa/kernels.h"
#include "tinyddp/tensor/factory.h"

namespace tinyddp::tensor::cpu {

namespace {
DType compute_dtype(DType dtype) { return dtype == kFloat64 ? kFloat64 : kFloat32; }

// `out` itself when it has the compute dtype, else a buffer for it.
Tensor result_for(const Tensor& out) {
  return out.dtype() == compute_dtype(out.dtype()) ? out : empty(out.sizes(), compute_dtype(out.dtype()));
}
}  // namespace

void causal_softmax(const Tensor& out, const Tensor& x, double scale) {
  const Tensor in = x.to(compute_dtype(x.dtype())).contiguous(), result = result_for(out);
  const int64_t m = x.size(1), n = x.size(2), rows = x.size(0) * m;
  if (in.dtype() == kFloat64) {
    std::vector<double> scratch(static_cast<size_t>(n));
    isa_kernels().causal_softmax_rows_f64(in.data_ptr<double>(), result.data_ptr<double>(), rows, m, n, scale,
                                          scratch.data());
  } else {
    std::vector<float> scratch(static_cast<size_t>(n));
    isa_kernels().causal_softmax_rows_f32(in.data_ptr<float>(), result.data_ptr<float>(), rows, m, n, scale,
                                          scratch.data());
  }
  if (!result.is_same(out)) copy(out, result);
}

void causal_softmax_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& y, double scale) {
  const DType c = compute_dtype(y.dtype());
  const Tensor g = grad_out.to(c).contiguous(), yc = y.to(c).contiguous(), result = result_for(grad_x);
  const int64_t m = y.size(1), n = y.size(2), rows = y.size(0) * m;
  if (c == kFloat64) {
    isa_kernels().causal_softmax_backward_rows_f64(g.data_ptr<double>(), yc.data_ptr<double>(),
                                                   result.data_ptr<double>(), rows, m, n, scale);
  } else {
    isa_kernels().causal_softmax_backward_rows_f32(g.data_ptr<float>(), yc.data_ptr<float>(), result.data_ptr<float>(),
                                                   rows, m, n, scale);
  }
  if (!result.is_same(grad_x)) copy(grad_x, result);
}

}  // namespace tinyddp::tensor::cpu
