// tensor/cuda/backend.h under --config=cuda: Tensors turned into the kernels' descriptors
// (tensor/cuda/kernels.h), launched on the device's compute stream, each launch checked.
#include "tinyddp/tensor/cuda/backend.h"

#include <cuda_runtime_api.h>

#include <array>
#include <cstring>

#include "tinyddp/base/error.h"
#include "tinyddp/tensor/cuda/kernels.h"
#include "tinyddp/tensor/cuda/libraries.h"
#include "tinyddp/tensor/cuda/plan.h"
#include "tinyddp/tensor/cuda/runtime.h"
#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/internal/reduce_plan.h"

namespace tinyddp::tensor::cuda {

namespace {

namespace k = kernels;

int device_of(const Tensor& t) { return t.device().index; }

void check_launch(int status, const char* op) {
  if (status != 0) throw_cuda_error(static_cast<cudaError_t>(status), op, __FILE__, __LINE__);
}

// sum and mean: `scale` is 1 or 1 / (elements per output). As on the CPU, a sum over the
// leading dims of a contiguous tensor adds its rows column by column, without a copy.
Tensor scaled_sum(const Tensor& x, const Shape& dims, bool keepdim, DType out_dtype, bool mean, const char* op) {
  const int device = device_of(x);
  DeviceGuard guard(device);
  void* stream = compute_stream(device);
  int64_t inner = 0;
  const int64_t rows = leading_rows(x, dims, &inner);
  const RowPlan plan = plan_rows(rows > 0 ? Tensor() : x, dims, keepdim, x.sizes());
  const Tensor out = tensor::empty(plan.out_shape, TensorOptions().dtype(out_dtype).device(x.device()));
  const int64_t count = rows > 0 ? rows : plan.inner;
  const double scale = mean ? 1.0 / static_cast<double>(count) : 1.0;  // 0 elements: 0 * inf = NaN, as 0 / 0
  const int dtype = static_cast<int>(x.dtype());
  check_launch(rows > 0 ? k::sum_columns(x.raw_data_ptr(), dtype, out.raw_data_ptr(), rows, inner, scale, stream)
                        : k::sum_rows(plan.rows.raw_data_ptr(), dtype, out.raw_data_ptr(), plan.outer, plan.inner,
                                      scale, stream),
               op);
  return out;
}

// Runs `kernel(geometry, operands, stream)` over `tensors` (the first one is the output,
// whose shape is iterated and whose device runs it) and checks the launch.
template <size_t N, typename Kernel>
void run(const std::array<const Tensor*, N>& tensors, const char* op, Kernel&& kernel) {
  const int device = device_of(*tensors[0]);
  DeviceGuard guard(device);
  std::array<k::Operand, N> ops;
  const k::Geometry g = geometry<N>(tensors[0]->sizes(), tensors, ops, op);
  const int status = kernel(g, ops, static_cast<void*>(compute_stream(device)));
  check_launch(status, op);
}

}  // namespace

void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  run<3>({&out, &a, &b}, "binary op kernel", [&](const k::Geometry& g, const auto& o, void* stream) {
    return k::binary(static_cast<int>(op), g, o[0], o[1], o[2], alpha, stream);
  });
}

void compare(CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  run<3>({&out, &a, &b}, "comparison kernel", [&](const k::Geometry& g, const auto& o, void* stream) {
    return k::compare(static_cast<int>(op), g, o[0], o[1], o[2], stream);
  });
}

void unary(UnaryOp op, const Tensor& out, const Tensor& x) {
  run<2>({&out, &x}, "unary op kernel", [&](const k::Geometry& g, const auto& o, void* stream) {
    return k::unary(static_cast<int>(op), g, o[0], o[1], stream);
  });
}

void pow_scalar(const Tensor& out, const Tensor& x, double exponent) {
  run<2>({&out, &x}, "pow kernel", [&](const k::Geometry& g, const auto& o, void* stream) {
    return k::pow_scalar(g, o[0], o[1], exponent, stream);
  });
}

void pow_scalar_base(const Tensor& out, const Tensor& exponent, double base) {
  run<2>({&out, &exponent}, "pow kernel", [&](const k::Geometry& g, const auto& o, void* stream) {
    return k::pow_scalar_base(g, o[0], o[1], base, stream);
  });
}

void fill(const Tensor& dst, double value) {
  run<1>({&dst}, "fill kernel",
         [&](const k::Geometry& g, const auto& o, void* stream) { return k::fill(g, o[0], value, stream); });
}

void accumulate(const Tensor& dst, const Tensor& src) {
  run<2>({&dst, &src}, "accumulate kernel",
         [&](const k::Geometry& g, const auto& o, void* stream) { return k::accumulate(g, o[0], o[1], stream); });
}

Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) {
  return scaled_sum(x, dims, keepdim, x.dtype() == kBool ? kInt64 : x.dtype(), false, "sum kernel");
}

Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) {
  return scaled_sum(x, dims, keepdim, x.dtype(), true, "mean kernel");
}

std::tuple<Tensor, Tensor> max(const Tensor& x, const Shape& dims, bool keepdim) {
  const int device = device_of(x);
  DeviceGuard guard(device);
  const RowPlan plan = plan_rows(x, dims, keepdim, x.sizes());
  const Tensor values = tensor::empty(plan.out_shape, TensorOptions().dtype(x.dtype()).device(x.device()));
  const Tensor indices = tensor::empty(plan.out_shape, TensorOptions().dtype(kInt64).device(x.device()));
  check_launch(k::max_rows(plan.rows.raw_data_ptr(), static_cast<int>(x.dtype()), values.raw_data_ptr(),
                           indices.data_ptr<int64_t>(), plan.outer, plan.inner, compute_stream(device)),
               "max kernel");
  return {values, indices};
}

void softmax(const Tensor& out, const Tensor& x, int64_t dim, bool log) {
  if (x.numel() == 0) return;
  const int device = device_of(x);
  DeviceGuard guard(device);
  if (dnn::softmax(out, x, dim, log)) return;
  // Our kernel: the softmax dim moved last and made contiguous, then one block per row.
  const Tensor rows = x.transpose(dim, -1).contiguous();
  const int64_t n = x.dim() == 0 ? 1 : x.size(dim);
  const Tensor result = tensor::empty(rows.sizes(), TensorOptions().dtype(x.dtype()).device(x.device()));
  check_launch(k::softmax_rows(rows.raw_data_ptr(), static_cast<int>(x.dtype()), result.raw_data_ptr(),
                               rows.numel() / n, n, log, compute_stream(device)),
               log ? "log_softmax kernel" : "softmax kernel");
  copy(out, result.transpose(dim, -1));
}

void causal_softmax(const Tensor& out, const Tensor& x, double scale) {
  const int device = device_of(x);
  DeviceGuard guard(device);
  check_launch(k::causal_softmax_rows(x.raw_data_ptr(), nullptr, static_cast<int>(x.dtype()), out.raw_data_ptr(),
                                      x.size(0) * x.size(1), x.size(1), x.size(2), scale, compute_stream(device)),
               "causal_softmax kernel");
}

void causal_softmax_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& y, double scale) {
  const int device = device_of(y);
  DeviceGuard guard(device);
  check_launch(k::causal_softmax_rows(grad_out.raw_data_ptr(), y.raw_data_ptr(), static_cast<int>(y.dtype()),
                                      grad_x.raw_data_ptr(), y.size(0) * y.size(1), y.size(1), y.size(2), scale,
                                      compute_stream(device)),
               "causal_softmax backward kernel");
}

void embedding(const Tensor& out, const Tensor& weight, const Tensor& ids) {
  const int device = device_of(weight);
  DeviceGuard guard(device);
  check_launch(k::embedding_rows(weight.raw_data_ptr(), ids.data_ptr<int64_t>(), static_cast<int>(weight.dtype()),
                                 out.raw_data_ptr(), ids.numel(), weight.size(1), compute_stream(device)),
               "embedding kernel");
}

void embedding_backward(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& ids) {
  // Atomic adds into a float (double) accumulator, then converted to grad_weight's dtype.
  const int device = device_of(grad_out);
  DeviceGuard guard(device);
  const DType acc_dtype = grad_out.dtype() == kFloat64 ? kFloat64 : kFloat32;
  const Tensor acc = tensor::zeros(grad_weight.sizes(), TensorOptions().dtype(acc_dtype).device(grad_out.device()));
  check_launch(
      k::embedding_backward_rows(grad_out.raw_data_ptr(), ids.data_ptr<int64_t>(), static_cast<int>(grad_out.dtype()),
                                 acc.raw_data_ptr(), ids.numel(), grad_weight.size(1), compute_stream(device)),
      "embedding backward kernel");
  copy(grad_weight, acc);
}

void layer_norm(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                const Tensor& bias, double eps) {
  const int device = device_of(x);
  DeviceGuard guard(device);
  check_launch(k::layer_norm_rows(x.raw_data_ptr(), weight.defined() ? weight.raw_data_ptr() : nullptr,
                                  bias.defined() ? bias.raw_data_ptr() : nullptr, static_cast<int>(x.dtype()),
                                  out.raw_data_ptr(), mean.raw_data_ptr(), rstd.raw_data_ptr(), x.size(0), x.size(1),
                                  eps, compute_stream(device)),
               "layer_norm kernel");
}

void layer_norm_backward(const Tensor& grad_x, const Tensor& dy, const Tensor& x, const Tensor& mean,
                         const Tensor& rstd, const Tensor& weight) {
  const int device = device_of(x);
  DeviceGuard guard(device);
  check_launch(
      k::layer_norm_backward_rows(dy.raw_data_ptr(), x.raw_data_ptr(), mean.raw_data_ptr(), rstd.raw_data_ptr(),
                                  weight.defined() ? weight.raw_data_ptr() : nullptr, static_cast<int>(x.dtype()),
                                  grad_x.raw_data_ptr(), x.size(0), x.size(1), compute_stream(device)),
      "layer_norm backward kernel");
}

void mm(const Tensor& out, const Tensor& a, const Tensor& b) { blas::mm(out, a, b); }
bool bmm(const Tensor&, const Tensor&, const Tensor&) { return false; }
void addmm(const Tensor& out, const Tensor& bias, const Tensor& a, const Tensor& b) {
  blas::mm(out, a, b);
  binary(BinaryOp::kAdd, out, out, bias, 1.0);
}

bool conv2d(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, const Window2d& window,
            int64_t groups) {
  if (!dnn::conv_forward(out, x, weight, window, groups)) return false;
  if (bias.defined()) binary(BinaryOp::kAdd, out, out, bias.view({1, -1, 1, 1}), 1.0);
  return true;
}
bool conv2d_backward_input(const Tensor& grad_x, const Tensor& grad_out, const Tensor& weight, const Window2d& window,
                           int64_t groups) {
  return dnn::conv_backward_data(grad_x, grad_out, weight, window, groups);
}
bool conv2d_backward_weight(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& x, const Window2d& window,
                            int64_t groups) {
  return dnn::conv_backward_filter(grad_weight, grad_out, x, window, groups);
}
bool conv2d_native(const Window2d&, int64_t, int64_t, bool, DType) { return true; }

namespace {

// Two GPUs: the copy runs on the destination's stream after the source's work so far, and
// the source's stream waits for it, so that later kernels there neither write src (or free
// the dense temporary, which goes back to src's allocator) while the copy still reads it.
void copy_peer(const Tensor& landing, const Tensor& dense_src) {
  const int from = device_of(dense_src), to = device_of(landing);
  const cudaStream_t src_stream = compute_stream(from), dst_stream = compute_stream(to);
  stream_wait(dst_stream, src_stream, from);
  {
    DeviceGuard guard(to);
    TDDP_CUDA_CHECK(cudaMemcpyPeerAsync(landing.raw_data_ptr(), to, dense_src.raw_data_ptr(), from, dense_src.nbytes(),
                                        dst_stream));
  }
  stream_wait(src_stream, dst_stream, to);
  record_stream(dense_src.raw_data_ptr(), from, dst_stream);
}

}  // namespace

StreamMark StreamMark::record(int device, bool timing) {
  DeviceGuard guard(device);
  cudaEvent_t event = nullptr;
  TDDP_CUDA_CHECK(cudaEventCreateWithFlags(&event, timing ? cudaEventDefault : cudaEventDisableTiming));
  StreamMark mark;
  mark.device_ = device;
  mark.event_ = std::shared_ptr<void>(event, [device](void* e) {
    try {
      DeviceGuard on(device);
      cudaEventDestroy(static_cast<cudaEvent_t>(e));
    } catch (...) {
    }
  });
  TDDP_CUDA_CHECK(cudaEventRecord(event, compute_stream(device)));
  return mark;
}

double StreamMark::elapsed_ms(const StreamMark& from, const StreamMark& to) {
  TDDP_CHECK(from.defined() && to.defined() && from.device() == to.device(),
             "StreamMark::elapsed_ms: needs two marks on one device");
  check_not_capturing(to.device(), "StreamMark::elapsed_ms");
  DeviceGuard guard(to.device());
  TDDP_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(to.event())));
  float ms = 0;
  TDDP_CUDA_CHECK(
      cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(from.event()), static_cast<cudaEvent_t>(to.event())));
  return ms;
}

Tensor to_host_after(const Tensor& src, const StreamMark& after) {
  TDDP_CHECK(src.is_cuda() && after.defined() && after.device() == device_of(src),
             "to_host_after: needs a CUDA tensor and a mark on its device");
  check_not_capturing(after.device(), "to_host_after");
  if (src.numel() == 0) return tensor::empty(src.sizes(), TensorOptions().dtype(src.dtype()));
  const int device = device_of(src);
  DeviceGuard guard(device);
  // The elements' span of storage: strides are never negative here.
  int64_t extent = 1;
  for (int64_t d = 0; d < src.dim(); ++d) extent += (src.sizes()[d] - 1) * src.strides()[d];
  const Tensor host = empty_pinned({extent}, src.dtype(), "to_host_after");
  const cudaStream_t side = acquire_stream(device);
  try {
    TDDP_CUDA_CHECK(cudaStreamWaitEvent(side, static_cast<cudaEvent_t>(after.event()), 0));
    TDDP_CUDA_CHECK(cudaMemcpyAsync(host.raw_data_ptr(), src.raw_data_ptr(),
                                    static_cast<size_t>(extent) * src.element_size(), cudaMemcpyDeviceToHost, side));
    TDDP_CUDA_CHECK(cudaStreamSynchronize(side));
  } catch (...) {
    release_stream(device, side);
    throw;
  }
  release_stream(device, side);
  // src's storage is not freed before the copy ran: the caller holds src.
  if (src.is_contiguous()) return host.view(src.sizes());
  // Gathered into page-locked memory too: a copy back to the GPU from pageable memory would
  // wait for the device's compute stream (ProcessGroupGloo's write_back must not).
  const Tensor dense = empty_pinned(src.sizes(), src.dtype(), "to_host_after");
  dense.copy_(host.as_strided(src.sizes(), src.strides(), 0));
  return dense;
}

void copy(const Tensor& dst, const Tensor& src, bool non_blocking) {
  if (dst.numel() == 0) return;
  if (dst.is_cuda() && src.is_cuda() && dst.device() == src.device()) {
    run<2>({&dst, &src}, "copy kernel",
           [&](const k::Geometry& g, const auto& o, void* stream) { return k::copy(g, o[0], o[1], stream); });
    return;
  }
  // Between devices: move src's elements as they are (dense, src's dtype, src's shape), then
  // broadcast and convert on the destination's side. The GPU side's device is made current
  // first, so that pinning on a thread without a device does not bind it to GPU 0. None of
  // this can be captured in a CUDA graph: a replay would copy a host buffer that is no longer
  // the caller's, or the host would wait for the GPU.
  check_not_capturing(device_of(src.is_cuda() ? src : dst),
                      src.is_cuda() && dst.is_cuda() ? "copy_ between CUDA devices"
                      : src.is_cuda()                ? "copy_ to the host (.item(), .to(cpu), printing)"
                                                     : "copy_ from the host (a tensor made or sampled on the CPU)");
  if (src.is_cuda() && dst.is_cuda()) check_not_capturing(device_of(dst), "copy_ between CUDA devices");
  DeviceGuard guard(device_of(dst.is_cuda() ? dst : src));
  const bool direct = dst.is_contiguous() && dst.dtype() == src.dtype() && dst.sizes() == src.sizes();
  if (src.is_cuda() && dst.is_cuda()) {
    const Tensor dense_src = src.contiguous();
    const Tensor landing =
        direct ? dst : tensor::empty(src.sizes(), TensorOptions().dtype(src.dtype()).device(dst.device()));
    copy_peer(landing, dense_src);
    if (!direct) dst.copy_(landing);  // same device now: broadcast and convert there
    return;
  }
  if (dst.is_cuda()) {
    // Host to device, from pinned memory: src itself when the caller pinned it, else a pinned
    // block src is copied into, which the allocator keeps until the copy has run.
    const bool user_pinned = src.is_pinned() && src.is_contiguous();
    const Tensor dense_src = src.pin_memory();
    const Tensor landing =
        direct ? dst : tensor::empty(src.sizes(), TensorOptions().dtype(src.dtype()).device(dst.device()));
    const cudaStream_t stream = compute_stream(device_of(dst));
    TDDP_CUDA_CHECK(cudaMemcpyAsync(landing.raw_data_ptr(), dense_src.raw_data_ptr(), dense_src.nbytes(),
                                    cudaMemcpyHostToDevice, stream));
    record_pinned_use(dense_src.raw_data_ptr(), stream);
    // The caller's pinned memory is theirs to write as soon as copy_ returns, unless they
    // asked for non_blocking (PyTorch's contract): then they order their writes themselves.
    if (user_pinned && !non_blocking) TDDP_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (!direct) dst.copy_(landing);
    return;
  }
  // Device to host, after the kernels that wrote src. Without waiting only into pinned
  // memory that needs no conversion on the host afterwards.
  const Tensor dense_src = src.contiguous();
  const cudaStream_t stream = compute_stream(device_of(src));
  const bool async = non_blocking && direct && dst.is_pinned();
  const Tensor landing = direct ? dst : tensor::empty(src.sizes(), TensorOptions().dtype(src.dtype()));
  TDDP_CUDA_CHECK(cudaMemcpyAsync(landing.raw_data_ptr(), dense_src.raw_data_ptr(), dense_src.nbytes(),
                                  cudaMemcpyDeviceToHost, stream));
  if (async) {
    record_pinned_use(landing.raw_data_ptr(), stream);
    return;
  }
  TDDP_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (!direct) dst.copy_(landing);
}

}  // namespace tinyddp::tensor::cuda
