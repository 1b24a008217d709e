// Checked CUDA calls, compute streams and the caching allocator of device memory: see
// runtime.h (pinned host memory is in pinned.cc).
#include "tinyddp/tensor/cuda_runtime/runtime.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "tinyddp/base/error.h"

namespace tinyddp::tensor::cuda {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  throw Error(fmt::format("CUDA error: {} failed with '{}' ({} = {}) at {}:{}", call, cudaGetErrorString(status),
                          cudaGetErrorName(status), static_cast<int>(status), file, line));
}

namespace {

void check_device(int device) {
  TDDP_CHECK(device >= 0 && device < kMaxDevices && device < device_count(),
             "CUDA device {} does not exist ({} device(s) visible)", device, device_count());
}

}  // namespace

void runtime_set_device(int device) {
  check_device(device);
  TDDP_CUDA_CHECK(cudaSetDevice(device));
}

cudaStream_t compute_stream(int device) {
  // Looked up by every launch: a lock-free read once the stream exists.
  static std::mutex mutex;
  static std::atomic<cudaStream_t> streams[kMaxDevices] = {};
  check_device(device);
  if (cudaStream_t stream = streams[device].load(std::memory_order_acquire)) return stream;
  std::lock_guard<std::mutex> lock(mutex);
  if (streams[device].load(std::memory_order_relaxed) == nullptr) {
    DeviceGuard guard(device);
    cudaStream_t stream = nullptr;
    TDDP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    streams[device].store(stream, std::memory_order_release);
  }
  return streams[device].load(std::memory_order_relaxed);
}

void stream_wait(cudaStream_t waiting, cudaStream_t stream, int device) {
  DeviceGuard guard(device);
  cudaEvent_t event = nullptr;
  TDDP_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  TDDP_CUDA_CHECK(cudaEventRecord(event, stream));
  TDDP_CUDA_CHECK(cudaStreamWaitEvent(waiting, event, 0));
  cudaEventDestroy(event);  // safe once recorded: the wait holds on to it
}

namespace {
struct StreamPool {
  std::mutex mutex;
  std::vector<cudaStream_t> free[kMaxDevices];
};
StreamPool& stream_pool() {
  static auto* pool = new StreamPool();  // never destroyed, as the streams
  return *pool;
}
}  // namespace

cudaStream_t acquire_stream(int device) {
  check_device(device);
  StreamPool& pool = stream_pool();
  {
    std::lock_guard<std::mutex> lock(pool.mutex);
    if (!pool.free[device].empty()) {
      const cudaStream_t stream = pool.free[device].back();
      pool.free[device].pop_back();
      return stream;
    }
  }
  DeviceGuard guard(device);
  cudaStream_t stream = nullptr;
  TDDP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return stream;
}

void release_stream(int device, cudaStream_t stream) {
  if (stream == nullptr || device < 0 || device >= kMaxDevices) return;
  StreamPool& pool = stream_pool();
  std::lock_guard<std::mutex> lock(pool.mutex);
  pool.free[device].push_back(stream);
}

void synchronize(int device) {
  if (device_count() == 0) return;
  check_not_capturing(device, "synchronize");
  DeviceGuard guard(device);
  TDDP_CUDA_CHECK(cudaStreamSynchronize(compute_stream(device)));
}

namespace {

constexpr size_t kRound = 512;

class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(int device) : device_(device) {}

  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    const size_t size = (nbytes + kRound - 1) / kRound * kRound;
    const cudaStream_t stream = compute_stream(device_);
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.requests;
    // While a graph is captured, no event may be queried: blocks freed with pending events
    // wait until the capture ends.
    if (capture_pool_ == 0) reclaim_finished();
    auto& pool = free_[{stream, capture_pool_}];
    auto it = pool.lower_bound(size);
    Block* block = nullptr;
    if (it != pool.end() && it->first <= 2 * size) {
      block = it->second;
      pool.erase(it);
      ++stats_.cache_hits;
    } else {
      block = new_block(size, stream);
    }
    block->in_use = true;
    stats_.allocated_bytes += block->size;
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    return block->ptr;
  }

  void deallocate(void* ptr, size_t /*nbytes*/) override {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(ptr);
    if (it == blocks_.end() || !it->second->in_use) return;  // not ours: nothing sensible to do
    Block* block = it->second.get();
    block->in_use = false;
    stats_.allocated_bytes -= block->size;
    if (block->other_streams.empty()) {
      cache(block);
      return;
    }
    if (capture_pool_ != 0) {
      // During a capture the other streams (a collective's, joined to the capture) are captured
      // too: an event recorded there now would be a node of the graph, not a point in time. The
      // block waits, unused, until the capture ends (set_capture_pool(0) records the events).
      deferred_.push_back(block);
      return;
    }
    record_other_streams(block);
  }

  Device device() const override { return Device::cuda(device_); }

  void record_stream(const void* ptr, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [base, block] : blocks_) {
      const auto* b = static_cast<const char*>(base);
      const auto* p = static_cast<const char*>(ptr);
      if (p >= b && p < b + block->size) {
        // Once per stream: a bucket recorded every iteration must not grow the list.
        const auto& others = block->other_streams;
        if (stream != block->stream && std::find(others.begin(), others.end(), stream) == others.end()) {
          block->other_streams.push_back(stream);
        }
        return;
      }
    }
  }

  AllocatorStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
  }

  // From now on, requests are served from (and new blocks belong to) `pool`, the private pool
  // of a graph being captured; 0 goes back to the shared cache.
  void set_capture_pool(uint64_t pool) {
    std::lock_guard<std::mutex> lock(mutex_);
    capture_pool_ = pool;
    if (pool != 0) return;
    std::vector<Block*> deferred;
    deferred.swap(deferred_);
    for (Block* block : deferred) record_other_streams(block);
  }

  // The graph that owned `pool` is gone: its blocks join the shared cache (those in use
  // when they are freed).
  void release_pool(uint64_t pool) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [ptr, block] : blocks_) {
      if (block->pool == pool) block->pool = 0;
    }
    for (auto it = free_.begin(); it != free_.end();) {
      if (it->first.second != pool) {
        ++it;
        continue;
      }
      auto& shared = free_[{it->first.first, 0}];
      shared.insert(it->second.begin(), it->second.end());
      it = free_.erase(it);
    }
  }

  // Returns the cached blocks to CUDA, waiting for pending ones first, without holding the
  // mutex while it waits: a collective that never ends (a dead peer) would otherwise block
  // every allocation and free on the device, the watchdog's release of that collective's
  // tensors included, before the watchdog could abort it.
  void empty() {
    std::vector<Block*> waiting;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      waiting.swap(pending_);  // out of every list: no one else touches them meanwhile
    }
    DeviceGuard guard(device_);
    cudaError_t first_error = cudaSuccess;
    for (Block* block : waiting) {
      for (cudaEvent_t e : block->pending_events) {
        const cudaError_t status = cudaEventSynchronize(e);
        if (first_error == cudaSuccess) first_error = status;
        cudaEventDestroy(e);
      }
      block->pending_events.clear();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    for (Block* block : waiting) cache(block);
    if (capture_pool_ == 0) release_cached();  // cudaFree is not allowed while a graph is captured
    if (first_error != cudaSuccess) throw_cuda_error(first_error, "cudaEventSynchronize", __FILE__, __LINE__);
  }

 private:
  struct Block {
    void* ptr = nullptr;
    size_t size = 0;
    cudaStream_t stream = nullptr;
    uint64_t pool = 0;  // 0: the shared cache; else the CUDA graph whose capture allocated it
    bool in_use = false;
    std::vector<cudaStream_t> other_streams;
    std::vector<cudaEvent_t> pending_events;
  };

  // Events on the other streams that used `block`, after which it may be reused; the block
  // waits in pending_ until they have passed. Caller holds mutex_.
  void record_other_streams(Block* block) {
    // Reuse only once the other streams' work queued so far has finished. This runs from
    // Storage's destructor, so it must not throw: if an event cannot be made, wait instead.
    // Any thread may free a tensor: the guard sets this block's device, and never sets a
    // device on a thread that had none (tensor/cuda_runtime/device_guard.h).
    std::optional<DeviceGuard> guard;
    try {
      guard.emplace(device_);
    } catch (...) {
    }
    for (cudaStream_t s : block->other_streams) {
      cudaEvent_t event = nullptr;
      if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) == cudaSuccess &&
          cudaEventRecord(event, s) == cudaSuccess) {
        block->pending_events.push_back(event);
      } else {
        if (event != nullptr) cudaEventDestroy(event);
        cudaStreamSynchronize(s);
      }
    }
    block->other_streams.clear();
    pending_.push_back(block);
  }

  // A free block, back in the cache of its stream and pool.
  void cache(Block* block) { free_[{block->stream, block->pool}].emplace(block->size, block); }

  // Blocks whose events have all completed go back to their pools.
  void reclaim_finished() {
    for (auto it = pending_.begin(); it != pending_.end();) {
      Block* block = *it;
      bool done = true;
      for (cudaEvent_t e : block->pending_events) {
        const cudaError_t status = cudaEventQuery(e);
        if (status == cudaErrorNotReady) {
          done = false;
          break;
        }
        if (status != cudaSuccess) throw_cuda_error(status, "cudaEventQuery", __FILE__, __LINE__);
      }
      if (!done) {
        ++it;
        continue;
      }
      for (cudaEvent_t e : block->pending_events) cudaEventDestroy(e);
      block->pending_events.clear();
      cache(block);
      it = pending_.erase(it);
    }
  }

  // Only the shared cache's blocks: a graph's private pool lives as long as the graph.
  void release_cached() {
    for (auto& [key, pool] : free_) {
      if (key.second != 0) continue;
      for (auto& [size, block] : pool) {
        TDDP_CUDA_CHECK(cudaFree(block->ptr));
        ++stats_.cuda_free_calls;
        stats_.reserved_bytes -= block->size;
        blocks_.erase(block->ptr);
      }
      pool.clear();
    }
  }

  Block* new_block(size_t size, cudaStream_t stream) {
    DeviceGuard guard(device_);
    void* ptr = nullptr;
    // During a capture cudaMalloc counts as unsafe in this thread's capture mode; it is fine
    // here (the memory is the graph's for as long as the graph lives), so the thread relaxes
    // its mode around the call.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    if (capture_pool_ != 0) cudaThreadExchangeStreamCaptureMode(&mode);
    cudaError_t status = cudaMalloc(&ptr, size);
    if (capture_pool_ != 0) cudaThreadExchangeStreamCaptureMode(&mode);
    if (status == cudaErrorMemoryAllocation && capture_pool_ == 0) {
      cudaGetLastError();  // clear the sticky-free error before retrying
      release_cached();
      status = cudaMalloc(&ptr, size);
    }
    if (status != cudaSuccess) {
      cudaGetLastError();
      throw Error(fmt::format(
          "CUDA out of memory: could not allocate {} bytes on cuda:{} ({}); {} bytes in use by tensors, {} bytes "
          "reserved by the caching allocator (after emptying its cache)",
          size, device_, cudaGetErrorString(status), stats_.allocated_bytes, stats_.reserved_bytes));
    }
    ++stats_.cuda_malloc_calls;
    stats_.reserved_bytes += size;
    auto block = std::make_unique<Block>();
    block->ptr = ptr;
    block->size = size;
    block->stream = stream;
    block->pool = capture_pool_;
    Block* raw = block.get();
    blocks_.emplace(ptr, std::move(block));
    return raw;
  }

  const int device_;
  std::mutex mutex_;
  std::unordered_map<void*, std::unique_ptr<Block>> blocks_;  // every block we hold
  // Free blocks per (stream, pool), by size.
  std::map<std::pair<cudaStream_t, uint64_t>, std::multimap<size_t, Block*>> free_;
  std::vector<Block*> pending_;   // freed, other streams busy
  std::vector<Block*> deferred_;  // freed during a capture, other streams used: no events yet
  uint64_t capture_pool_ = 0;     // the pool of the graph being captured, 0 when none
  AllocatorStats stats_;
};

// Never destroyed: tensors in static storage may be freed after static destructors ran.
CachingAllocator* allocator_of(int device) {
  static std::mutex mutex;
  static std::atomic<CachingAllocator*> allocators[kMaxDevices] = {};
  check_device(device);
  if (CachingAllocator* allocator = allocators[device].load(std::memory_order_acquire)) return allocator;
  std::lock_guard<std::mutex> lock(mutex);
  if (allocators[device].load(std::memory_order_relaxed) == nullptr) {
    allocators[device].store(new CachingAllocator(device), std::memory_order_release);
  }
  return allocators[device].load(std::memory_order_relaxed);
}

}  // namespace

Allocator* caching_allocator(int device) { return allocator_of(device); }

AllocatorStats allocator_stats(int device) {
  if (device_count() == 0) return {};
  return allocator_of(device)->stats();
}

void empty_cache() {
  for (int d = 0; d < device_count(); ++d) allocator_of(d)->empty();
}

void reset_peak_memory_stats(int device) {
  if (device_count() > 0) allocator_of(device)->reset_peak();
}

void record_stream(const void* ptr, int device, cudaStream_t stream) {
  allocator_of(device)->record_stream(ptr, stream);
}

void set_allocator_capture_pool(int device, uint64_t pool) { allocator_of(device)->set_capture_pool(pool); }

void release_allocator_pool(int device, uint64_t pool) { allocator_of(device)->release_pool(pool); }

}  // namespace tinyddp::tensor::cuda
