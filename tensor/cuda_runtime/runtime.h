// The CUDA runtime as tinyddp uses it (host code, only compiled under --config=cuda): checked
// calls, the current device, one compute stream per device, and the caching allocator that
// CUDA tensors' storage comes from.
//
// Streams: every kernel and copy of device d runs on compute_stream(d), a non-blocking stream
// created on first use, so work on one device is ordered without any host synchronisation.
// Host code that reads device memory (copies to the CPU) synchronises that stream.
//
// The caching allocator: cudaMalloc and cudaFree synchronise the device and cost tens of
// microseconds, so freed blocks are kept and handed out again. Requests are rounded up to
// 512 bytes; a freed block goes back to the pool of the stream it was allocated for, and a
// request takes the smallest cached block of that stream that fits and wastes at most half
// of it (blocks are never split). A block that another stream used (record_stream, e.g. by
// a collective on a communication stream) is reused only after an event recorded on that
// stream at free time has completed. On an out-of-memory error the cache is emptied and the
// allocation retried once; the final error reports the request and the allocator's
// statistics. empty_cache() (tensor/cuda.h) returns every unused block to CUDA. While a
// CudaGraph captures, requests are served from that graph's private pool (cuda_graph.cc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/cuda_runtime/device_guard.h"
#include "tinyddp/tensor/storage.h"

namespace tinyddp::tensor::cuda {

// Throws tinyddp::Error naming the call, the CUDA error string and code, and the source line.
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);

#define TDDP_CUDA_CHECK(call)                                                             \
  do {                                                                                    \
    const cudaError_t tddp_status_ = (call);                                              \
    if (tddp_status_ != cudaSuccess)                                                      \
      ::tinyddp::tensor::cuda::throw_cuda_error(tddp_status_, #call, __FILE__, __LINE__); \
  } while (false)

// The most devices the per-device tables (streams, allocators, capture flags) hold.
constexpr int kMaxDevices = 64;

// The compute stream of `device` (created on first use; never destroyed).
cudaStream_t compute_stream(int device);

// `waiting` waits, on the GPU, for the work queued on `stream` (of `device`) so far: an event
// recorded there, never a host wait.
void stream_wait(cudaStream_t waiting, cudaStream_t stream, int device);

// Side streams for communication (a NCCL group's stream, the staging copies of Gloo on CUDA
// tensors), from a per-device pool that lasts for the process: acquire_stream lends one
// (creating it when none is free), release_stream takes it back for the next owner. They are
// never destroyed, because blocks recorded on them (record_stream) may be freed after their
// owner is gone, and the allocator then records an event on them.
cudaStream_t acquire_stream(int device);
void release_stream(int device, cudaStream_t stream);

// The caching allocator of `device` (the Allocator behind CUDA storage).
Allocator* caching_allocator(int device);
// Marks the block holding `ptr` as used by `stream` too: when it is freed, it is reused only
// after the work queued on `stream` by then has completed.
void record_stream(const void* ptr, int device, cudaStream_t stream);

// CUDA graphs (CudaGraph, cuda_graph.cc): while one is captured on `device`, its allocations come
// from, and its frees go back to, the graph's private pool `pool` (no other work may be
// handed those blocks while the graph can replay into them); 0 ends the capture.
// release_allocator_pool returns a destroyed graph's blocks to the shared cache.
void set_allocator_capture_pool(int device, uint64_t pool);
void release_allocator_pool(int device, uint64_t pool);
// Throws an Error naming `what` when a CudaGraph is being captured on `device`: the host
// cannot wait for the GPU then (a wait would end the capture with an opaque CUDA error).
void check_not_capturing(int device, const char* what);

// Page-locked ("pinned") host memory, which the GPU's copy engines read and write directly,
// so a copy from or to it is queued without the host waiting. The allocator behind
// Tensor::pin_memory() (device cpu) and the staging buffers of host-to-device copies and of
// Gloo collectives on CUDA tensors. Freed blocks are cached by size (cudaFreeHost
// synchronises the device) and reused only once every copy recorded on them has completed.
Allocator* pinned_allocator();
// True when `ptr` lies in a block of the pinned allocator that is allocated now.
bool is_pinned(const void* ptr);
// Marks the pinned block holding `ptr` as read or written by work queued on `stream`: the
// block is not handed out again before that work completes.
void record_pinned_use(const void* ptr, cudaStream_t stream);

}  // namespace tinyddp::tensor::cuda
