// CudaGraph (tensor/cuda.h): stream capture on a device's compute stream into a graph with a
// private pool of the caching allocator, the check that refuses host waits meanwhile
// (runtime.h), the device words that hold captured dropout's keys, filled before each replay,
// and the hooks that captured collectives run around each replay (on_graph_replay).
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "tinyddp/base/error.h"
#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/cuda_runtime/runtime.h"
#include "tinyddp/tensor/random.h"

namespace tinyddp::tensor::cuda {

namespace {

// Whether a CudaGraph is capturing on each device: read by every host wait, so kept here
// rather than asked of CUDA.
std::atomic<bool> capturing_on[kMaxDevices] = {};
// What was refused during the open capture on each device (a string literal), or null: the
// capture is then invalid, as CUDA's own is after a forbidden call, and capture_end says so.
std::atomic<const char*> refused_on[kMaxDevices] = {};
std::atomic<uint64_t> next_pool{1};

bool flag(int device) { return device >= 0 && device < kMaxDevices && capturing_on[device].load(); }

// The keys of a graph's random kernels: words of device memory in chunks (allocated during the
// capture, from the graph's pool), slot i at chunks[i / kChunk][i % kChunk]. Before each replay
// `fill` copies a fresh draw of the default generator into each, in the order handed out.
class KeySlots {
 public:
  static constexpr int64_t kChunk = 64;  // 512 bytes, the allocator's rounding

  const uint64_t* next(int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (count_ % kChunk == 0) {
      chunks_.push_back(static_cast<uint64_t*>(caching_allocator(device)->allocate(kBytes)));
    }
    return chunks_.back() + count_++ % kChunk;
  }

  // Queues, on `stream`, the copies of one new key per slot from page-locked memory, which the
  // pinned allocator does not hand out again before the copies are done.
  void fill(cudaStream_t stream) {
    if (count_ == 0) return;
    const size_t bytes = static_cast<size_t>(count_) * sizeof(uint64_t);
    auto* keys = static_cast<uint64_t*>(pinned_allocator()->allocate(bytes));
    {
      Generator& generator = default_generator();
      std::lock_guard<std::mutex> lock(generator.mutex());
      for (int64_t i = 0; i < count_; ++i) keys[i] = generator.random64();  // dropout's eager draw, in call order
    }
    cudaError_t status = cudaSuccess;
    for (size_t c = 0; c < chunks_.size() && status == cudaSuccess; ++c) {
      const int64_t first = static_cast<int64_t>(c) * kChunk, n = std::min(kChunk, count_ - first);
      status = cudaMemcpyAsync(chunks_[c], keys + first, static_cast<size_t>(n) * sizeof(uint64_t),
                               cudaMemcpyHostToDevice, stream);
    }
    record_pinned_use(keys, stream);
    pinned_allocator()->deallocate(keys, bytes);
    if (status != cudaSuccess)
      throw_cuda_error(status, "cudaMemcpyAsync (a CUDA graph's random keys)", __FILE__, __LINE__);
  }

  // Back to the allocator (the graph's pool), once no replay can read them.
  void release(int device) {
    for (uint64_t* chunk : chunks_) caching_allocator(device)->deallocate(chunk, kBytes);
    chunks_.clear();
    count_ = 0;
  }

 private:
  static constexpr size_t kBytes = kChunk * sizeof(uint64_t);
  std::mutex mutex_;
  std::vector<uint64_t*> chunks_;
  int64_t count_ = 0;
};

// The key slots of the graph capturing on each device, or null.
std::atomic<KeySlots*> capturing_keys[kMaxDevices] = {};

// The replay hooks of a graph (on_graph_replay), in the order they were added: each wraps the
// ones added after it, the innermost the launch.
struct ReplayHooks {
  using Around = std::function<void(const ReplayLaunch&)>;
  std::mutex mutex;
  std::vector<Around> list;

  void run(const ReplayLaunch& launch) {
    std::vector<Around> copy;
    {
      std::lock_guard<std::mutex> lock(mutex);
      copy = list;
    }
    run_from(copy, 0, launch);
  }

 private:
  static void run_from(const std::vector<Around>& hooks, size_t i, const ReplayLaunch& launch) {
    if (i == hooks.size()) {
      launch();
      return;
    }
    hooks[i]([&] { run_from(hooks, i + 1, launch); });
  }
};
// The hooks of the graph capturing on each device, or null, and the capture's number.
std::atomic<ReplayHooks*> capturing_hooks[kMaxDevices] = {};
std::atomic<uint64_t> capture_ids[kMaxDevices] = {};

}  // namespace

bool is_capturing(int device) { return flag(device); }

void check_not_capturing(int device, const char* what) {
  if (!flag(device)) return;
  const char* first = nullptr;
  refused_on[device].compare_exchange_strong(first, what);  // the first refusal is the cause
  throw Error(fmt::format(
      "{}: cuda:{} is capturing a CUDA graph, and the host cannot wait for the GPU during capture (copy new inputs "
      "into the graph's tensors before replay(), read results after capture_end or replay())",
      what, device));
}

struct CudaGraph::Impl {
  int device = -1;
  uint64_t pool = 0;  // the allocator's private pool, 0 when none
  bool capturing = false;
  const char* refused = nullptr;  // what check_not_capturing refused during the capture, if anything
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  KeySlots keys;      // captured dropout's keys
  ReplayHooks hooks;  // what captured work asked to run at each replay (on_graph_replay)

  // Ends the capture on the device, then stops routing allocations to the pool (in that order:
  // blocks freed during the capture get their events on streams no longer captured, the
  // allocator's deferred frees); the partial graph, if CUDA returns one, is the caller's.
  cudaError_t stop_capture(cudaGraph_t* out) {
    capturing = false;
    capturing_on[device].store(false);
    capturing_keys[device].store(nullptr);
    capturing_hooks[device].store(nullptr);
    refused = refused_on[device].exchange(nullptr);
    const cudaError_t status = cudaStreamEndCapture(compute_stream(device), out);
    set_allocator_capture_pool(device, 0);
    return status;
  }
};

CudaGraph::CudaGraph() : impl_(std::make_unique<Impl>()) {}

CudaGraph::~CudaGraph() {
  try {
    reset();
  } catch (...) {  // a destructor must not throw; reset() reports errors when called directly
  }
}

bool CudaGraph::captured() const { return impl_->exec != nullptr; }

void CudaGraph::capture_begin(int device) {
  TDDP_CHECK(device >= 0 && device < device_count() && device < kMaxDevices, "CudaGraph::capture_begin: {}",
             device_count() == 0 ? unavailable_reason()
                                 : fmt::format("CUDA device {} does not exist ({} visible)", device, device_count()));
  TDDP_CHECK(!impl_->capturing && impl_->exec == nullptr,
             "CudaGraph::capture_begin: this graph already holds a capture; reset() it first");
  TDDP_CHECK(!flag(device), "CudaGraph::capture_begin: another graph is capturing on cuda:{}", device);
  DeviceGuard guard(device);
  const cudaStream_t stream = compute_stream(device);
  // The work queued so far runs outside the graph; blocks it frees are then safe to reuse.
  TDDP_CUDA_CHECK(cudaStreamSynchronize(stream));
  impl_->device = device;
  impl_->pool = next_pool.fetch_add(1);
  set_allocator_capture_pool(device, impl_->pool);
  // Thread-local: other threads (a Gloo worker, a watchdog) keep their CUDA calls.
  const cudaError_t status = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  if (status != cudaSuccess) {
    set_allocator_capture_pool(device, 0);
    release_allocator_pool(device, impl_->pool);
    impl_->pool = 0;
    throw_cuda_error(status, "cudaStreamBeginCapture", __FILE__, __LINE__);
  }
  impl_->capturing = true;
  refused_on[device].store(nullptr);
  capturing_keys[device].store(&impl_->keys);
  capturing_hooks[device].store(&impl_->hooks);
  capture_ids[device].store(impl_->pool);  // unique per capture
  capturing_on[device].store(true);
}

const uint64_t* graph_random_key_slot(int device) {
  KeySlots* keys = device >= 0 && device < kMaxDevices ? capturing_keys[device].load() : nullptr;
  TDDP_CHECK(keys != nullptr, "graph_random_key_slot: no CudaGraph is capturing on cuda:{}", device);
  return keys->next(device);
}

void on_graph_replay(int device, std::function<void(const ReplayLaunch&)> around) {
  ReplayHooks* hooks = device >= 0 && device < kMaxDevices ? capturing_hooks[device].load() : nullptr;
  TDDP_CHECK(hooks != nullptr, "on_graph_replay: no CudaGraph is capturing on cuda:{}", device);
  std::lock_guard<std::mutex> lock(hooks->mutex);
  hooks->list.push_back(std::move(around));
}

uint64_t capture_id(int device) { return flag(device) ? capture_ids[device].load() : 0; }

void CudaGraph::capture_end() {
  TDDP_CHECK(impl_->capturing, "CudaGraph::capture_end: no capture is open (capture_begin first)");
  DeviceGuard guard(impl_->device);
  cudaGraph_t graph = nullptr;
  cudaError_t status = impl_->stop_capture(&graph);
  if (status == cudaSuccess && impl_->refused != nullptr) {
    // The capture is whole as far as CUDA knows, but the caller's work in it stopped at the
    // refused wait: instantiating what was recorded would replay half a step.
    const std::string refused = impl_->refused;
    if (graph != nullptr) cudaGraphDestroy(graph);
    const int device = impl_->device;
    reset();
    throw Error(fmt::format(
        "CudaGraph::capture_end: the capture on cuda:{} failed: {} was refused during it (the host cannot wait for "
        "the GPU during capture), so what was recorded is incomplete; capture again without the wait",
        device, refused));
  }
  if (status == cudaSuccess) {
    impl_->graph = graph;
    status = cudaGraphInstantiate(&impl_->exec, graph, 0);
    if (status != cudaSuccess) impl_->exec = nullptr;
  } else if (graph != nullptr) {
    cudaGraphDestroy(graph);
  }
  if (status != cudaSuccess) {
    cudaGetLastError();  // leave no error behind for the next call
    const int device = impl_->device;
    reset();
    throw Error(fmt::format(
        "CudaGraph::capture_end: the capture on cuda:{} failed with '{}' ({}): something not allowed during capture "
        "ran in it (a wait on the host, work on another stream not joined back, or an error thrown mid-capture)",
        device, cudaGetErrorString(status), cudaGetErrorName(status)));
  }
}

void CudaGraph::replay() {
  TDDP_CHECK(impl_->exec != nullptr, "CudaGraph::replay: nothing captured (capture_begin, the work, capture_end)");
  DeviceGuard guard(impl_->device);
  const cudaStream_t stream = compute_stream(impl_->device);
  // Around the launch, what captured work asked for (a collective's group checks it is whole,
  // then watches the replay); a hook that throws refuses the replay.
  impl_->hooks.run([&] {
    impl_->keys.fill(stream);  // queued before the launch: the graph's kernels read them
    TDDP_CUDA_CHECK(cudaGraphLaunch(impl_->exec, stream));
  });
}

void CudaGraph::reset() {
  if (impl_->device < 0) return;
  DeviceGuard guard(impl_->device);
  if (impl_->capturing) {  // abandoned mid-capture (an error was thrown): discard what was recorded
    cudaGraph_t partial = nullptr;
    impl_->stop_capture(&partial);
    if (partial != nullptr) cudaGraphDestroy(partial);
    cudaGetLastError();
  }
  // Replays still queued write into the pool: let them finish before its blocks are shared.
  const cudaError_t status =
      impl_->exec != nullptr ? cudaStreamSynchronize(compute_stream(impl_->device)) : cudaSuccess;
  if (impl_->exec != nullptr) cudaGraphExecDestroy(impl_->exec);
  if (impl_->graph != nullptr) cudaGraphDestroy(impl_->graph);
  impl_->keys.release(impl_->device);
  {
    std::lock_guard<std::mutex> lock(impl_->hooks.mutex);
    impl_->hooks.list.clear();
  }
  if (impl_->pool != 0) release_allocator_pool(impl_->device, impl_->pool);
  impl_->exec = nullptr;
  impl_->graph = nullptr;
  impl_->pool = 0;
  impl_->device = -1;
  if (status != cudaSuccess) throw_cuda_error(status, "cudaStreamSynchronize", __FILE__, __LINE__);
}

}  // namespace tinyddp::tensor::cuda
