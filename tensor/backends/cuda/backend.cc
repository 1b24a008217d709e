// The CUDA backend's entry points (backends/cuda/backend.h) but its copies (copy.cc) and im2col
// (conv.cc): Tensors turned into the kernels' descriptors (backends/cuda/kernels.h), launched on the
// device's compute stream, each launch checked; cuBLAS and cuDNN through libraries.h.
#include "tinyddp/tensor/backends/cuda/backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#include "tinyddp/base/error.h"
#include "tinyddp/tensor/backends/cuda/kernels.h"
#include "tinyddp/tensor/backends/cuda/launch.h"
#include "tinyddp/tensor/backends/cuda/libraries.h"
#include "tinyddp/tensor/backends/cuda/plan.h"
#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/cuda_runtime/runtime.h"
#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/internal/reduce_plan.h"

namespace tinyddp::tensor::cuda {

namespace {

namespace k = kernels;

// sum and mean: `scale` is 1 or 1 / (elements per output). As on the CPU, a sum over the
// leading dims of a contiguous tensor adds its rows column by column, without a copy.
Tensor scaled_sum(const Tensor& x, const Shape& dims, bool keepdim, DType out_dtype, bool mean, const char* op) {
  const int device = device_of(x);
  DeviceGuard guard(device);
  void* stream = compute_stream(device);
  int64_t inner = 0;
  const int64_t rows = leading_rows(x, dims, &inner);
  const RowPlan plan = plan_rows(backend(), rows > 0 ? Tensor() : x, dims, keepdim, x.sizes());
  const Tensor out = tensor::empty(plan.out_shape, TensorOptions().dtype(out_dtype).device(x.device()));
  const int64_t count = rows > 0 ? rows : plan.inner;
  const double scale = mean ? 1.0 / static_cast<double>(count) : 1.0;  // 0 elements: 0 * inf = NaN, as 0 / 0
  const int dtype = static_cast<int>(x.dtype());
  // The column sums' partial sums, one row per chunk of x's rows, in the accumulating dtype.
  Tensor partial;
  if (const int64_t chunks = rows > 0 ? k::sum_columns_chunks(rows, inner) : 1; chunks > 1) {
    const DType acc = x.is_floating_point() ? (x.dtype() == kFloat64 ? kFloat64 : kFloat32) : kInt64;
    partial = tensor::empty({chunks, inner}, TensorOptions().dtype(acc).device(x.device()));
  }
  check_launch(
      rows > 0
          ? k::sum_columns(x.raw_data_ptr(), dtype, out.raw_data_ptr(),
                           partial.defined() ? partial.raw_data_ptr() : nullptr, rows, inner, scale, stream)
          : k::sum_rows(plan.rows.raw_data_ptr(), dtype, out.raw_data_ptr(), plan.outer, plan.inner, scale, stream),
      op);
  return out;
}

}  // namespace

void CudaBackend::binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  run<3>({&out, &a, &b}, "binary op kernel", [&](const k::Geometry& g, const auto& o, void* stream) {
    return k::binary(static_cast<int>(op), g, o[0], o[1], o[2], alpha, stream);
  });
}

void CudaBackend::compare(CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  run<3>({&out, &a, &b}, "comparison kernel", [&](const k::Geometry& g, const auto& o, void* stream) {
    return k::compare(static_cast<int>(op), g, o[0], o[1], o[2], stream);
  });
}

void CudaBackend::unary(UnaryOp op, const Tensor& out, const Tensor& x) {
  run<2>({&out, &x}, "unary op kernel", [&](const k::Geometry& g, const auto& o, void* stream) {
    return k::unary(static_cast<int>(op), g, o[0], o[1], stream);
  });
}

void CudaBackend::pow_scalar(const Tensor& out, const Tensor& x, double exponent) {
  run<2>({&out, &x}, "pow kernel", [&](const k::Geometry& g, const auto& o, void* stream) {
    return k::pow_scalar(g, o[0], o[1], exponent, stream);
  });
}

void CudaBackend::pow_scalar_base(const Tensor& out, const Tensor& exponent, double base) {
  run<2>({&out, &exponent}, "pow kernel", [&](const k::Geometry& g, const auto& o, void* stream) {
    return k::pow_scalar_base(g, o[0], o[1], base, stream);
  });
}

void CudaBackend::fill(const Tensor& dst, double value) {
  run<1>({&dst}, "fill kernel",
         [&](const k::Geometry& g, const auto& o, void* stream) { return k::fill(g, o[0], value, stream); });
}

void CudaBackend::accumulate(const Tensor& dst, const Tensor& src) {
  run<2>({&dst, &src}, "accumulate kernel",
         [&](const k::Geometry& g, const auto& o, void* stream) { return k::accumulate(g, o[0], o[1], stream); });
}

Tensor CudaBackend::sum(const Tensor& x, const Shape& dims, bool keepdim) {
  return scaled_sum(x, dims, keepdim, is_integral(x.dtype(), true) ? kInt64 : x.dtype(), false, "sum kernel");
}

Tensor CudaBackend::mean(const Tensor& x, const Shape& dims, bool keepdim) {
  return scaled_sum(x, dims, keepdim, x.dtype(), true, "mean kernel");
}

std::tuple<Tensor, Tensor> CudaBackend::max(const Tensor& x, const Shape& dims, bool keepdim) {
  const int device = device_of(x);
  DeviceGuard guard(device);
  const RowPlan plan = plan_rows(*this, x, dims, keepdim, x.sizes());
  const Tensor values = tensor::empty(plan.out_shape, TensorOptions().dtype(x.dtype()).device(x.device()));
  const Tensor indices = tensor::empty(plan.out_shape, TensorOptions().dtype(kInt64).device(x.device()));
  check_launch(k::max_rows(plan.rows.raw_data_ptr(), static_cast<int>(x.dtype()), values.raw_data_ptr(),
                           indices.data_ptr<int64_t>(), plan.outer, plan.inner, compute_stream(device)),
               "max kernel");
  return {values, indices};
}

void CudaBackend::softmax(const Tensor& out, const Tensor& x, int64_t dim, bool log) {
  if (x.numel() == 0) return;
  const int device = device_of(x);
  DeviceGuard guard(device);
  if (dnn::softmax(out, x, dim, log)) return;
  // Our kernel: the softmax dim moved last and made contiguous, then one block per row.
  const Tensor rows = contiguous(x.transpose(dim, -1));
  const int64_t n = x.dim() == 0 ? 1 : x.size(dim);
  const Tensor result = tensor::empty(rows.sizes(), TensorOptions().dtype(x.dtype()).device(x.device()));
  check_launch(k::softmax_rows(rows.raw_data_ptr(), static_cast<int>(x.dtype()), result.raw_data_ptr(),
                               rows.numel() / n, n, log, compute_stream(device)),
               log ? "log_softmax kernel" : "softmax kernel");
  copy(out, result.transpose(dim, -1), false);
}

void CudaBackend::causal_softmax(const Tensor& out, const Tensor& x, double scale) {
  const int device = device_of(x);
  DeviceGuard guard(device);
  check_launch(k::causal_softmax_rows(x.raw_data_ptr(), nullptr, static_cast<int>(x.dtype()), out.raw_data_ptr(),
                                      x.size(0) * x.size(1), x.size(1), x.size(2), scale, compute_stream(device)),
               "causal_softmax kernel");
}

void CudaBackend::causal_softmax_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& y, double scale) {
  const int device = device_of(y);
  DeviceGuard guard(device);
  check_launch(k::causal_softmax_rows(grad_out.raw_data_ptr(), y.raw_data_ptr(), static_cast<int>(y.dtype()),
                                      grad_x.raw_data_ptr(), y.size(0) * y.size(1), y.size(1), y.size(2), scale,
                                      compute_stream(device)),
               "causal_softmax backward kernel");
}

void CudaBackend::embedding(const Tensor& out, const Tensor& weight, const Tensor& ids) {
  const int device = device_of(weight);
  DeviceGuard guard(device);
  check_launch(k::embedding_rows(weight.raw_data_ptr(), ids.data_ptr<int64_t>(), static_cast<int>(weight.dtype()),
                                 out.raw_data_ptr(), ids.numel(), weight.size(1), compute_stream(device)),
               "embedding kernel");
}

void CudaBackend::embedding_backward(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& ids) {
  // The ids sorted (stably) on the device, then each id's rows summed in their order: no atomics.
  const int device = device_of(grad_out);
  DeviceGuard guard(device);
  const int64_t n = ids.numel(), rows = grad_weight.size(0);
  TDDP_CHECK(n <= INT32_MAX, "embedding backward on CUDA: {} ids, more than 2^31 - 1 (the sort's limit)", n);
  fill(grad_weight, 0.0);
  const size_t bytes = k::embedding_backward_scratch_bytes(n, rows);
  TDDP_CHECK(n == 0 || bytes > 0, "embedding backward on CUDA: CUB could not size the sort of {} ids", n);
  const Tensor scratch = empty({static_cast<int64_t>(bytes)}, TensorOptions(kUInt8).device(grad_out.device()));
  check_launch(k::embedding_backward_rows(grad_out.raw_data_ptr(), ids.data_ptr<int64_t>(),
                                          static_cast<int>(grad_out.dtype()), grad_weight.raw_data_ptr(), n,
                                          grad_weight.size(1), rows, scratch.raw_data_ptr(), compute_stream(device)),
               "embedding backward kernel");
}

void CudaBackend::layer_norm(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                             const Tensor& weight, const Tensor& bias, double eps) {
  const int device = device_of(x);
  DeviceGuard guard(device);
  check_launch(k::layer_norm_rows(x.raw_data_ptr(), weight.defined() ? weight.raw_data_ptr() : nullptr,
                                  bias.defined() ? bias.raw_data_ptr() : nullptr, static_cast<int>(x.dtype()),
                                  out.raw_data_ptr(), mean.raw_data_ptr(), rstd.raw_data_ptr(), x.size(0), x.size(1),
                                  eps, compute_stream(device)),
               "layer_norm kernel");
}

bool CudaBackend::layer_norm_backward(const Tensor& grad_x, const Tensor&, const Tensor&, const Tensor& dy,
                                      const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight) {
  if (!grad_x.defined()) return false;
  const int device = device_of(x);
  DeviceGuard guard(device);
  check_launch(
      k::layer_norm_backward_rows(dy.raw_data_ptr(), x.raw_data_ptr(), mean.raw_data_ptr(), rstd.raw_data_ptr(),
                                  weight.defined() ? weight.raw_data_ptr() : nullptr, static_cast<int>(x.dtype()),
                                  grad_x.raw_data_ptr(), x.size(0), x.size(1), compute_stream(device)),
      "layer_norm backward kernel");
  return false;  // the weight's and bias's gradients: column sums composed in native/
}

bool CudaBackend::cross_entropy(const Tensor& loss, const Tensor& stats, const Tensor& logits, const Tensor& targets,
                                const Tensor& weight, int64_t ignore_index, double label_smoothing) {
  const int device = device_of(logits);
  DeviceGuard guard(device);
  check_launch(
      k::cross_entropy_rows(logits.raw_data_ptr(), targets.data_ptr<int64_t>(),
                            weight.defined() ? weight.raw_data_ptr() : nullptr, static_cast<int>(logits.dtype()),
                            loss.raw_data_ptr(), stats.raw_data_ptr(), logits.size(0), logits.size(1), ignore_index,
                            label_smoothing, compute_stream(device)),
      "cross_entropy kernel");
  return true;
}

bool CudaBackend::cross_entropy_backward(const Tensor& grad_logits, const Tensor& grad_loss, const Tensor& logits,
                                         const Tensor& stats, const Tensor& targets, const Tensor& weight,
                                         int64_t ignore_index, double label_smoothing) {
  const int device = device_of(logits);
  DeviceGuard guard(device);
  // The weight's sum, where the smoothing's terms need it, on the device (nothing read back).
  const Tensor weight_sum = weight.defined() ? converted(sum(weight, {0}, false), stats.dtype()) : Tensor();
  check_launch(
      k::cross_entropy_backward_rows(logits.raw_data_ptr(), grad_loss.raw_data_ptr(), targets.data_ptr<int64_t>(),
                                     stats.raw_data_ptr(), weight.defined() ? weight.raw_data_ptr() : nullptr,
                                     weight_sum.defined() ? weight_sum.raw_data_ptr() : nullptr,
                                     static_cast<int>(logits.dtype()), grad_logits.raw_data_ptr(), logits.size(0),
                                     logits.size(1), ignore_index, label_smoothing, compute_stream(device)),
      "cross_entropy backward kernel");
  return true;
}

void CudaBackend::mm(const Tensor& out, const Tensor& a, const Tensor& b) { blas::mm(out, a, b); }
bool CudaBackend::bmm(const Tensor& out, const Tensor& a, const Tensor& b) {
  blas::bmm(out, a, b);
  return true;
}
void CudaBackend::addmm(const Tensor& out, const Tensor& bias, const Tensor& a, const Tensor& b) {
  if (blas::mm_bias(out, a, b, bias)) return;
  blas::mm(out, a, b);
  binary(BinaryOp::kAdd, out, out, bias, 1.0);
}
std::optional<std::tuple<Tensor, Tensor>> CudaBackend::mm_bias_grad(const Tensor& g, const Tensor& x) {
  const TensorOptions options = TensorOptions().dtype(g.dtype()).device(g.device());
  const Tensor grad_weight = tensor::empty({g.size(1), x.size(1)}, options),
               grad_bias = tensor::empty({g.size(1)}, options);
  if (!blas::mm_bias_grad(grad_weight, grad_bias, g, x)) return std::nullopt;
  return std::make_tuple(grad_weight, grad_bias);
}

bool CudaBackend::conv2d(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                         const Window2d& window, int64_t groups) {
  if (!dnn::conv_forward(out, x, weight, window, groups)) return false;
  if (bias.defined()) binary(BinaryOp::kAdd, out, out, bias.view({1, -1, 1, 1}), 1.0);
  return true;
}
bool CudaBackend::conv2d_backward_input(const Tensor& grad_x, const Tensor& grad_out, const Tensor& weight,
                                        const Window2d& window, int64_t groups) {
  return dnn::conv_backward_data(grad_x, grad_out, weight, window, groups);
}
bool CudaBackend::conv2d_backward_weight(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& x,
                                         const Window2d& window, int64_t groups) {
  return dnn::conv_backward_filter(grad_weight, grad_out, x, window, groups);
}
bool CudaBackend::conv2d_native(const Window2d&, int64_t, int64_t, bool, DType) { return true; }

std::optional<std::tuple<Tensor, Tensor>> CudaBackend::batch_norm_mean_var(const Tensor&, DType) {
  return std::nullopt;
}
bool CudaBackend::batch_norm_elemt(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                   const Tensor&) {
  return false;
}
std::optional<std::tuple<Tensor, Tensor>> CudaBackend::batch_norm_backward_reduce(const Tensor&, const Tensor&,
                                                                                  const Tensor&) {
  return std::nullopt;
}
bool CudaBackend::batch_norm_backward_elemt(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                            const Tensor&, const Tensor&, const Tensor&, double) {
  return false;
}
bool CudaBackend::max_pool2d(const Tensor&, const Tensor&, const Tensor&, const Window2d&) { return false; }
bool CudaBackend::max_pool2d_backward(const Tensor&, const Tensor&, const Tensor&, const Window2d&) { return false; }
bool CudaBackend::sgd_step(const Tensor& param, const Tensor& grad, Tensor* momentum_buffer, const SgdStep& step) {
  std::vector<SgdTensors> list{{param, grad, momentum_buffer != nullptr ? *momentum_buffer : Tensor()}};
  if (!sgd_steps(list, step)) return false;
  if (momentum_buffer != nullptr) *momentum_buffer = list[0].momentum_buffer;
  return true;
}
bool CudaBackend::sgd_steps(std::vector<SgdTensors>& list, const SgdStep& step) {
  if (list.empty()) return true;
  const DType dtype = list[0].param.dtype();
  if (dtype != kFloat32 && dtype != kFloat64) return false;  // 16-bit: op by op
  const bool momentum = step.momentum != 0;
  std::vector<k::SgdTensorPointers> pointers;
  pointers.reserve(list.size());
  for (SgdTensors& t : list) {
    const bool first_step = momentum && !t.momentum_buffer.defined();
    if (first_step) t.momentum_buffer = tensor::empty(t.param.sizes(), TensorOptions(dtype).device(t.param.device()));
    pointers.push_back({t.param.raw_data_ptr(), t.grad.raw_data_ptr(),
                        momentum ? t.momentum_buffer.raw_data_ptr() : nullptr, t.param.numel(), first_step});
  }
  const int device = device_of(list[0].param);
  DeviceGuard guard(device);
  check_launch(k::sgd_steps(pointers.data(), static_cast<int>(pointers.size()), static_cast<int>(dtype), step,
                            compute_stream(device)),
               "sgd step kernel");
  return true;
}
bool CudaBackend::adam_steps(const std::vector<AdamTensors>& list, const AdamStep& step) {
  if (list.empty()) return true;
  const DType dtype = list[0].param.dtype();
  if (dtype != kFloat32 && dtype != kFloat64) return false;  // 16-bit: op by op
  std::vector<k::AdamTensorPointers> pointers;
  pointers.reserve(list.size());
  const auto pointer = [](const Tensor& t) -> const void* { return t.defined() ? t.raw_data_ptr() : nullptr; };
  for (const AdamTensors& t : list) {
    pointers.push_back({t.param.raw_data_ptr(), t.grad.raw_data_ptr(), t.exp_avg.raw_data_ptr(),
                        t.exp_avg_sq.raw_data_ptr(), t.param.numel(), pointer(t.denom_scale), pointer(t.eps_term),
                        pointer(t.keep)});
  }
  const int device = device_of(list[0].param);
  DeviceGuard guard(device);
  check_launch(k::adam_steps(pointers.data(), static_cast<int>(pointers.size()), static_cast<int>(dtype), step,
                             compute_stream(device)),
               "adam step kernel");
  return true;
}

namespace {
// The tensors' pointers and sizes, as the list kernels take them.
void list_of(const std::vector<Tensor>& tensors, std::vector<void*>& data, std::vector<int64_t>& numel) {
  for (const Tensor& t : tensors) {
    data.push_back(t.raw_data_ptr());
    numel.push_back(t.numel());
  }
}
}  // namespace

bool CudaBackend::foreach_norm(const Tensor& out, const std::vector<Tensor>& tensors) {
  std::vector<void*> data;
  std::vector<int64_t> numel;
  list_of(tensors, data, numel);
  const int device = device_of(out);
  DeviceGuard guard(device);
  const int count = static_cast<int>(tensors.size());
  const Tensor partial = zeros({std::max<int64_t>(1, k::foreach_norm_scratch(numel.data(), count))},
                               out.dtype() == kFloat64 ? kFloat64 : kFloat32, out.device());
  check_launch(k::foreach_norm(data.data(), numel.data(), count, static_cast<int>(out.dtype()), partial.raw_data_ptr(),
                               out.raw_data_ptr(), compute_stream(device)),
               "foreach_norm kernels");
  return true;
}

bool CudaBackend::foreach_mul_(const std::vector<Tensor>& tensors, const Tensor& scale) {
  std::vector<void*> data;
  std::vector<int64_t> numel;
  list_of(tensors, data, numel);
  const int device = device_of(scale);
  DeviceGuard guard(device);
  check_launch(k::foreach_mul(data.data(), numel.data(), static_cast<int>(tensors.size()),
                              static_cast<int>(scale.dtype()), scale.raw_data_ptr(), compute_stream(device)),
               "foreach_mul_ kernel");
  return true;
}

bool CudaBackend::dropout_mask(const Tensor& mask, double p, const RandomKey& key) {
  const int device = device_of(mask);
  DeviceGuard guard(device);
  check_launch(k::dropout_mask(mask.raw_data_ptr(), static_cast<int>(mask.dtype()), mask.numel(), p, key.value,
                               key.slot, compute_stream(device)),
               "dropout mask kernel");
  return true;
}

CudaBackend& backend() {
  static CudaBackend instance;
  return instance;
}

}  // namespace tinyddp::tensor::cuda
