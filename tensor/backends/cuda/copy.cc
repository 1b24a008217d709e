// The CUDA backend's copies (backends/cuda/backend.h: copy, with its stream rules): on one GPU by
// cudaMemcpyAsync where the bytes move as they are, else by the copy kernel, between GPUs and between host and GPU with
// cudaMemcpy, converting on the destination's side; and tensor/cuda.h's marks (StreamMark) and to_host_after, which
// order copies against the compute stream.
#include <cuda_runtime_api.h>

#include "tinyddp/base/error.h"
#include "tinyddp/tensor/backends/cpu/backend.h"
#include "tinyddp/tensor/backends/cuda/backend.h"
#include "tinyddp/tensor/backends/cuda/kernels.h"
#include "tinyddp/tensor/backends/cuda/launch.h"
#include "tinyddp/tensor/backends/cuda/plan.h"
#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/cuda_runtime/runtime.h"
#include "tinyddp/tensor/factory.h"

namespace tinyddp::tensor::cuda {

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

// One GPU, one dtype, both dense in row-major order and apart in memory: the bytes move with
// cudaMemcpyAsync on the compute stream (the copy engine's bandwidth, as PyTorch's copy_; a
// CUDA graph captures it as a copy node). Returns false for every other pair.
bool copy_bytes_on_device(const Tensor& dst, const Tensor& src) {
  if (dst.dtype() != src.dtype() || dst.sizes() != src.sizes() || !dst.is_contiguous() || !src.is_contiguous()) {
    return false;
  }
  const auto* d = static_cast<const char*>(dst.raw_data_ptr());
  const auto* s = static_cast<const char*>(src.raw_data_ptr());
  const size_t bytes = dst.nbytes();
  if (d == s) return true;
  if (d < s + bytes && s < d + bytes) return false;  // overlapping ranges: the kernel, element by element
  const int device = device_of(dst);
  DeviceGuard guard(device);
  TDDP_CUDA_CHECK(
      cudaMemcpyAsync(dst.raw_data_ptr(), src.raw_data_ptr(), bytes, cudaMemcpyDeviceToDevice, compute_stream(device)));
  return true;
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
  cpu::backend().copy(dense, host.as_strided(src.sizes(), src.strides(), 0), false);
  return dense;
}

void CudaBackend::copy(const Tensor& dst, const Tensor& src, bool non_blocking) {
  if (dst.numel() == 0) return;
  if (dst.is_cuda() && src.is_cuda() && dst.device() == src.device()) {
    if (copy_bytes_on_device(dst, src)) return;
    run<2>({&dst, &src}, "copy kernel", [&](const kernels::Geometry& g, const auto& o, void* stream) {
      return kernels::copy(g, o[0], o[1], stream);
    });
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
    const Tensor dense_src = contiguous(src);
    const Tensor landing =
        direct ? dst : tensor::empty(src.sizes(), TensorOptions().dtype(src.dtype()).device(dst.device()));
    copy_peer(landing, dense_src);
    if (!direct) copy(dst, landing, false);  // same device now: broadcast and convert there
    return;
  }
  if (dst.is_cuda()) {
    // Host to device, from pinned memory: src itself when the caller pinned it, else a pinned
    // block src is copied into, which the allocator keeps until the copy has run.
    const bool user_pinned = src.is_pinned() && src.is_contiguous();
    const Tensor dense_src = user_pinned ? src : empty_pinned(src.sizes(), src.dtype(), "pin_memory");
    if (!user_pinned) cpu::backend().copy(dense_src, src, false);
    const Tensor landing =
        direct ? dst : tensor::empty(src.sizes(), TensorOptions().dtype(src.dtype()).device(dst.device()));
    const cudaStream_t stream = compute_stream(device_of(dst));
    TDDP_CUDA_CHECK(cudaMemcpyAsync(landing.raw_data_ptr(), dense_src.raw_data_ptr(), dense_src.nbytes(),
                                    cudaMemcpyHostToDevice, stream));
    record_pinned_use(dense_src.raw_data_ptr(), stream);
    // The caller's pinned memory is theirs to write as soon as copy_ returns, unless they
    // asked for non_blocking (PyTorch's contract): then they order their writes themselves.
    if (user_pinned && !non_blocking) TDDP_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (!direct) copy(dst, landing, false);
    return;
  }
  // Device to host, after the kernels that wrote src. Without waiting only into pinned
  // memory that needs no conversion on the host afterwards.
  const Tensor dense_src = contiguous(src);
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
  if (!direct) cpu::backend().copy(dst, landing, false);
}

}  // namespace tinyddp::tensor::cuda
