// tensor/cuda/backend.h under --config=cuda: Tensors turned into the kernels' descriptors
// (tensor/cuda/kernels.h), launched on the device's compute stream, each launch checked.
#include "tensor/cuda/backend.h"

#include <cuda_runtime_api.h>

#include <array>
#include <cstring>

#include "tensor/cuda/kernels.h"
#include "tensor/cuda/libraries.h"
#include "tensor/cuda/plan.h"
#include "tensor/cuda/runtime.h"
#include "tensor/error.h"
#include "tensor/factory.h"
#include "tensor/reduce_plan.h"

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
                        : k::sum_rows(plan.rows.raw_data_ptr(), dtype, out.raw_data_ptr(), plan.outer, plan.inner, scale,
                                      stream),
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

void binary(cpu::BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  run<3>({&out, &a, &b}, "binary op kernel", [&](const k::Geometry& g, const auto& o, void* stream) {
    return k::binary(static_cast<int>(op), g, o[0], o[1], o[2], alpha, stream);
  });
}

void compare(cpu::CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  run<3>({&out, &a, &b}, "comparison kernel", [&](const k::Geometry& g, const auto& o, void* stream) {
    return k::compare(static_cast<int>(op), g, o[0], o[1], o[2], stream);
  });
}

void unary(cpu::UnaryOp op, const Tensor& out, const Tensor& x) {
  run<2>({&out, &x}, "unary op kernel", [&](const k::Geometry& g, const auto& o, void* stream) {
    return k::unary(static_cast<int>(op), g, o[0], o[1], stream);
  });
}

void pow_scalar(const Tensor& out, const Tensor& x, double exponent) {
  run<2>({&out, &x}, "pow kernel",
         [&](const k::Geometry& g, const auto& o, void* stream) { return k::pow_scalar(g, o[0], o[1], exponent, stream); });
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

void mm(const Tensor& out, const Tensor& a, const Tensor& b) { blas::mm(out, a, b); }

void copy(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.is_cuda() && src.is_cuda() && dst.device() == src.device()) {
    run<2>({&dst, &src}, "copy kernel",
           [&](const k::Geometry& g, const auto& o, void* stream) { return k::copy(g, o[0], o[1], stream); });
    return;
  }
  // Between devices: move src's elements as they are (dense, src's dtype, src's shape), then
  // broadcast and convert on the destination's side.
  // From the host: straight into a contiguous pinned copy (itself when src is one already).
  const Tensor dense_src = src.is_cpu() ? src.pin_memory() : src.contiguous();
  const bool direct = dst.is_contiguous() && dst.dtype() == src.dtype() && dst.sizes() == src.sizes();
  const Tensor landing = direct ? dst : tensor::empty(src.sizes(), TensorOptions().dtype(src.dtype()).device(dst.device()));
  const size_t nbytes = dense_src.nbytes();
  if (src.is_cuda() && dst.is_cuda()) {  // two GPUs: wait for the source's stream, copy peer to peer
    synchronize(device_of(src));
    DeviceGuard guard(device_of(dst));
    TDDP_CUDA_CHECK(cudaMemcpyPeerAsync(landing.raw_data_ptr(), device_of(dst), dense_src.raw_data_ptr(), device_of(src),
                                        nbytes, compute_stream(device_of(dst))));
  } else if (dst.is_cuda()) {
    // Host to device without the host waiting: from pinned memory (src, or the pinned block
    // it was staged into), which is not reused before the copy has run.
    DeviceGuard guard(device_of(dst));
    const cudaStream_t stream = compute_stream(device_of(dst));
    TDDP_CUDA_CHECK(cudaMemcpyAsync(landing.raw_data_ptr(), dense_src.raw_data_ptr(), nbytes, cudaMemcpyHostToDevice, stream));
    record_pinned_use(dense_src.raw_data_ptr(), stream);
  } else {  // device to host: after the kernels that wrote src
    DeviceGuard guard(device_of(src));
    const cudaStream_t stream = compute_stream(device_of(src));
    TDDP_CUDA_CHECK(cudaMemcpyAsync(landing.raw_data_ptr(), dense_src.raw_data_ptr(), nbytes, cudaMemcpyDeviceToHost, stream));
    TDDP_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  if (!direct) dst.copy_(landing);  // same device now: broadcast and convert there
}

}  // namespace tinyddp::tensor::cuda
