// Whether this build and this machine can run CUDA code: the device query that the rest of
// the tensor library consults before touching a GPU. Works (answering "no") in CPU-only builds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tinyddp/tensor/cuda_runtime/device_guard.h"  // set_device, current_device, DeviceGuard
#include "tinyddp/tensor/dtype.h"
#include "tinyddp/tensor/shape.h"

namespace tinyddp::tensor {
class Tensor;
}  // namespace tinyddp::tensor

namespace tinyddp::tensor::cuda {

struct DeviceProperties {
  int index = 0;
  std::string name;
  size_t total_memory = 0;  // bytes
  int major = 0;            // compute capability
  int minor = 0;
};

// True when tinyddp was compiled with --config=cuda.
bool is_built();
// Number of usable CUDA devices: 0 in a CPU-only build, or when the driver or device is
// missing (cudaGetDeviceCount fails, e.g. with error 35 on machines without a GPU).
int device_count();
bool is_available();
std::vector<DeviceProperties> device_properties();
// One line saying why CUDA tensors cannot be created here (build, driver or device).
std::string unavailable_reason();
// Runs a small kernel on `device` that writes a known pattern and checks it on the host.
// Returns "" on success, else the failing CUDA call and its error string.
std::string smoke_test(int device);

// Waits until every kernel and copy queued on `device` has run (a no-op without CUDA).
void synchronize(int device = 0);

// The caching allocator's counters for one device (see tensor/cuda_runtime/runtime.h), as
// torch.cuda.memory_stats; all zero without CUDA.
struct AllocatorStats {
  size_t allocated_bytes = 0;  // in blocks handed out now (rounded sizes)
  size_t reserved_bytes = 0;   // obtained from cudaMalloc and not yet returned
  size_t peak_allocated_bytes = 0;
  int64_t cuda_malloc_calls = 0;
  int64_t cuda_free_calls = 0;
  int64_t cache_hits = 0;  // requests served from cached blocks
  int64_t requests = 0;
};
AllocatorStats allocator_stats(int device = 0);
// Returns every cached, unused block to CUDA, as torch.cuda.empty_cache().
void empty_cache();
// Starts the peak (AllocatorStats::peak_allocated_bytes) again from what is allocated now, as
// torch.cuda.reset_peak_memory_stats (a no-op without CUDA).
void reset_peak_memory_stats(int device = 0);

// A point in a device's compute stream: the work queued there when it was recorded. For
// work another thread does later on what the stream has produced by then, without waiting
// for what was queued after (the Gloo worker's staging copies of CUDA tensors).
class StreamMark {
 public:
  StreamMark() = default;
  // Records one on `device`'s compute stream (throws without CUDA); `timing`: one that
  // elapsed_ms can measure from or to.
  static StreamMark record(int device, bool timing = false);
  // Milliseconds of GPU time from `from` to `to` (timing marks on one device), as
  // cudaEventElapsedTime; waits for `to` to pass first.
  static double elapsed_ms(const StreamMark& from, const StreamMark& to);
  bool defined() const { return event_ != nullptr; }
  int device() const { return device_; }
  // The CUDA event behind the mark (a cudaEvent_t).
  void* event() const { return event_.get(); }

 private:
  int device_ = -1;
  std::shared_ptr<void> event_;
};

// src's elements in a contiguous CPU tensor (page-locked), copied on a side stream once the
// work before `after` (a mark on src's device) has run, without waiting for anything queued
// after it; the calling thread waits for the copy. Strided src: its span of storage is
// copied, then gathered on the host (into page-locked memory as well).
Tensor to_host_after(const Tensor& src, const StreamMark& after);

// A new contiguous CPU tensor in page-locked memory, uninitialised (tensor/cuda.cc; throws,
// saying why, without CUDA or a GPU); `op` names the caller in that error.
Tensor empty_pinned(const Shape& sizes, DType dtype, const char* op);

// A CUDA graph: the kernels and copies one thread queues on a device's compute stream between
// capture_begin and capture_end, recorded once and then launched again as a whole by replay()
// (one launch for a whole training step), as torch.cuda.CUDAGraph. Capturing runs nothing:
// replay does. Run the step eagerly a few times first (cuBLAS and cuDNN set themselves up,
// optimizers create their state), and capture what is the same every step:
//   - Shapes, pointers and host-side numbers are fixed at capture: new data goes into the
//     tensors the graph reads (input.copy_(batch) before replay()); results are read from the
//     tensors it wrote (their storage stays the graph's).
//   - The tensors created during capture come from the graph's private pool of the caching
//     allocator, which no other work is handed while the graph lives.
//   - The host cannot wait for the GPU during capture: a copy to or from the host, .item(),
//     synchronize() or random sampling (drawn on the host) is an Error that names it, and the
//     capture is abandoned (capture_end throws; reset() or the destructor clean up).
//   - Dropout (and attention dropout) is captured with its key in device memory: each replay
//     first draws a fresh key from the default generator for every dropout call it holds, in
//     the order the calls were captured, as the same calls run eagerly draw theirs. A replay
//     thus drops what the eager step would at the same generator state (bit for bit), and no
//     two replays drop alike. Capturing draws nothing. Other generators are refused there.
//   - NCCL collectives are captured too (a DDP step's bucket allreduces): their group checks
//     and watches each replay through on_graph_replay (comm/nccl/process_group_nccl.h). Reset
//     the graph before its group goes.
// Throws without CUDA.
class CudaGraph {
 public:
  CudaGraph();
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  void capture_begin(int device = 0);
  void capture_end();
  // Launches the captured work on the device's compute stream, without waiting for it.
  void replay();
  // Frees the graph and returns its pool to the shared cache (the destructor does too).
  void reset();
  bool captured() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};
// True while a CudaGraph is capturing on `device` (false without CUDA).
bool is_capturing(int device = 0);
// For the random kernels (tensor/native's dropout), while a CudaGraph captures on `device`: a
// word of device memory for the key of one captured kernel, which every replay fills before it
// runs (see CudaGraph). Throws when no graph captures there.
const uint64_t* graph_random_key_slot(int device);
// For captured work that the host must check or watch at each replay (a captured collective:
// comm/nccl): while a CudaGraph captures on `device`, adds `around`, which that graph's every
// replay() calls with the launch itself. `around` calls `launch` once (holding what it must
// hold, checking before and registering after), or throws instead, which refuses the replay
// (nothing is launched). Several wrap one another in the order added; they go with the graph
// (reset()). Throws when no graph captures there.
using ReplayLaunch = std::function<void()>;
void on_graph_replay(int device, std::function<void(const ReplayLaunch& launch)> around);
// A number that names the capture open on `device` (each capture its own), 0 when none.
uint64_t capture_id(int device);

// Whether float32 matrix products may use TF32 tensor cores (10-bit mantissa inputs, float32
// accumulation): off by default, so that GPU results match float32 CPU results within
// float32 tolerances; as torch.backends.cuda.matmul.allow_tf32.
bool allow_tf32();
void set_allow_tf32(bool allow);

// Whether float32 convolutions through cuDNN may use TF32 tensor cores: on by default, as
// torch.backends.cudnn.allow_tf32 (PyTorch's default trades float32's last bits in
// convolutions for speed; turn it off to match float32 CPU results within float32 tolerances).
bool cudnn_allow_tf32();
void set_cudnn_allow_tf32(bool allow);

// The routes tensor::flash_attention (and so F::scaled_dot_product_attention and the GPT's
// attention) may take on a GPU, as torch.backends.cuda.enable_flash_sdp / enable_math_sdp: both
// on by default. With both, a 16-bit call with heads 64 or 128 wide (q, k, v on 16-byte
// boundaries) takes the flash kernel on tensor cores (1.25x faster than the composed route at
// GPT-2 small's shape on an H200, bench/README.md, and no T x T matrix in memory); any other
// call whose attention weights (heads x queries x keys elements of the inputs' dtype) take at
// most kComposedAttentionBytes goes the composed way (matmul, causal softmax, matmul on
// cuBLAS's tensor cores: the weights kept for the backward, but 5x faster than the CUDA-core
// flash kernel in float32), a longer one through the flash kernel (no T x T matrix in memory).
// With one of them on, that one wherever it applies
// (the flash kernel takes head widths up to 128); where none applies, the call is refused by name.
// The CPU's flash kernel is fast, and these switches leave the CPU alone (as PyTorch's).
// TINYDDP_CUDA_SDP=flash (or =math) starts a process with only that route on, for measurements.
constexpr int64_t kComposedAttentionBytes = int64_t{1} << 30;
bool flash_sdp_enabled();
void enable_flash_sdp(bool enabled);
bool math_sdp_enabled();
void enable_math_sdp(bool enabled);

}  // namespace tinyddp::tensor::cuda
