// tensor/cuda/backend.h under --config=cuda: Tensors turned into the kernels' descriptors
// (tensor/cuda/kernels.h), launched on the device's compute stream, each launch checked.
#include "tensor/cuda/backend.h"

#include <cuda_runtime_api.h>

#include <array>
#include <cstring>

#include "tensor/cuda/kernels.h"
#include "tensor/cuda/runtime.h"
#include "tensor/error.h"
#include "tensor/factory.h"

namespace tinyddp::tensor::cuda {

namespace {

namespace k = kernels;

// The iteration shape `sizes` with each operand's strides broadcast to it, size-1 dims
// dropped and every pair of dims merged that all operands traverse as one (so contiguous
// operands become one dim).
template <size_t N>
k::Geometry geometry(const Shape& sizes, const std::array<const Tensor*, N>& tensors, std::array<k::Operand, N>& ops,
                     const char* op) {
  std::array<Shape, N> strides;
  for (size_t i = 0; i < N; ++i) {
    const Tensor& t = *tensors[i];
    ops[i].data = t.raw_data_ptr();
    ops[i].dtype = static_cast<int>(t.dtype());
    // Right-aligned broadcasting: missing or size-1 dims of the operand get stride 0.
    const int64_t offset = static_cast<int64_t>(sizes.size()) - t.dim();
    for (int64_t d = 0; d < static_cast<int64_t>(sizes.size()); ++d) {
      const int64_t td = d - offset;
      strides[i].push_back(td < 0 || t.size(td) == 1 ? 0 : t.stride(td));
    }
  }
  // Merge from the innermost dim outwards.
  std::vector<int64_t> merged_sizes;
  std::array<std::vector<int64_t>, N> merged_strides;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    if (sizes[d] == 1) continue;
    bool joins = !merged_sizes.empty();
    for (size_t i = 0; i < N && joins; ++i) {
      joins = strides[i][d] == merged_strides[i].back() * merged_sizes.back();
    }
    if (joins) {
      merged_sizes.back() *= sizes[d];
    } else {
      merged_sizes.push_back(sizes[d]);
      for (size_t i = 0; i < N; ++i) merged_strides[i].push_back(strides[i][d]);
    }
  }
  k::Geometry g;
  g.numel = 1;
  for (int64_t s : sizes) g.numel *= s;
  const int ndim = static_cast<int>(merged_sizes.size());
  TDDP_CHECK(ndim <= k::kMaxDims, "{}: CUDA kernels take at most {} non-mergeable dims, got {} (make the tensors contiguous)",
             op, k::kMaxDims, ndim);
  g.ndim = std::max(ndim, 1);
  g.sizes[0] = 1;
  for (int d = 0; d < ndim; ++d) {
    g.sizes[d] = merged_sizes[ndim - 1 - d];  // back to outermost first
    for (size_t i = 0; i < N; ++i) ops[i].strides[d] = merged_strides[i][ndim - 1 - d];
  }
  return g;
}

int device_of(const Tensor& t) { return t.device().index; }

void check_launch(int status, const char* op) {
  if (status != 0) throw_cuda_error(static_cast<cudaError_t>(status), op, __FILE__, __LINE__);
}

}  // namespace

void binary(cpu::BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  DeviceGuard guard(device_of(out));
  std::array<k::Operand, 3> ops;
  const k::Geometry g = geometry<3>(out.sizes(), {&out, &a, &b}, ops, "binary op");
  check_launch(k::binary(static_cast<int>(op), g, ops[0], ops[1], ops[2], alpha, compute_stream(device_of(out))),
               "binary op kernel");
}

void compare(cpu::CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  DeviceGuard guard(device_of(out));
  std::array<k::Operand, 3> ops;
  const k::Geometry g = geometry<3>(out.sizes(), {&out, &a, &b}, ops, "comparison");
  check_launch(k::compare(static_cast<int>(op), g, ops[0], ops[1], ops[2], compute_stream(device_of(out))),
               "comparison kernel");
}

void unary(cpu::UnaryOp op, const Tensor& out, const Tensor& x) {
  DeviceGuard guard(device_of(out));
  std::array<k::Operand, 2> ops;
  const k::Geometry g = geometry<2>(out.sizes(), {&out, &x}, ops, "unary op");
  check_launch(k::unary(static_cast<int>(op), g, ops[0], ops[1], compute_stream(device_of(out))), "unary op kernel");
}

void pow_scalar(const Tensor& out, const Tensor& x, double exponent) {
  DeviceGuard guard(device_of(out));
  std::array<k::Operand, 2> ops;
  const k::Geometry g = geometry<2>(out.sizes(), {&out, &x}, ops, "pow");
  check_launch(k::pow_scalar(g, ops[0], ops[1], exponent, compute_stream(device_of(out))), "pow kernel");
}

void fill(const Tensor& dst, double value) {
  DeviceGuard guard(device_of(dst));
  std::array<k::Operand, 1> ops;
  const k::Geometry g = geometry<1>(dst.sizes(), {&dst}, ops, "fill_");
  check_launch(k::fill(g, ops[0], value, compute_stream(device_of(dst))), "fill kernel");
}

void accumulate(const Tensor& dst, const Tensor& src) {
  DeviceGuard guard(device_of(dst));
  std::array<k::Operand, 2> ops;
  const k::Geometry g = geometry<2>(dst.sizes(), {&dst, &src}, ops, "accumulate_into");
  check_launch(k::accumulate(g, ops[0], ops[1], compute_stream(device_of(dst))), "accumulate kernel");
}

void copy(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.is_cuda() && src.is_cuda() && dst.device() == src.device()) {
    DeviceGuard guard(device_of(dst));
    std::array<k::Operand, 2> ops;
    const k::Geometry g = geometry<2>(dst.sizes(), {&dst, &src}, ops, "copy_");
    check_launch(k::copy(g, ops[0], ops[1], compute_stream(device_of(dst))), "copy kernel");
    return;
  }
  // Between devices: move src's elements as they are (dense, src's dtype, src's shape), then
  // broadcast and convert on the destination's side.
  const Tensor dense_src = src.contiguous();
  const bool direct = dst.is_contiguous() && dst.dtype() == src.dtype() && dst.sizes() == src.sizes();
  const Tensor landing = direct ? dst : tensor::empty(src.sizes(), TensorOptions().dtype(src.dtype()).device(dst.device()));
  const size_t nbytes = dense_src.nbytes();
  if (src.is_cuda() && dst.is_cuda()) {  // two GPUs: wait for the source's stream, copy peer to peer
    synchronize(device_of(src));
    DeviceGuard guard(device_of(dst));
    TDDP_CUDA_CHECK(cudaMemcpyPeerAsync(landing.raw_data_ptr(), device_of(dst), dense_src.raw_data_ptr(), device_of(src),
                                        nbytes, compute_stream(device_of(dst))));
  } else if (dst.is_cuda()) {  // host to device: the stream reads the host bytes later, so wait
    DeviceGuard guard(device_of(dst));
    const cudaStream_t stream = compute_stream(device_of(dst));
    TDDP_CUDA_CHECK(cudaMemcpyAsync(landing.raw_data_ptr(), dense_src.raw_data_ptr(), nbytes, cudaMemcpyHostToDevice, stream));
    TDDP_CUDA_CHECK(cudaStreamSynchronize(stream));
  } else {  // device to host: after the kernels that wrote src
    DeviceGuard guard(device_of(src));
    const cudaStream_t stream = compute_stream(device_of(src));
    TDDP_CUDA_CHECK(cudaMemcpyAsync(landing.raw_data_ptr(), dense_src.raw_data_ptr(), nbytes, cudaMemcpyDeviceToHost, stream));
    TDDP_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  if (!direct) dst.copy_(landing);  // same device now: broadcast and convert there
}

}  // namespace tinyddp::tensor::cuda
