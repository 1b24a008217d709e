// Pinned host memory for copies between host and device, cached as the device memory is:
// see runtime.h (pinned_allocator, is_pinned, record_pinned_use).
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "tinyddp/base/error.h"
#include "tinyddp/tensor/cuda_runtime/runtime.h"

namespace tinyddp::tensor::cuda {

namespace {

constexpr size_t kRound = 512;  // sizes are rounded up to this, as the device cache's are

class PinnedAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    const size_t size = (nbytes + kRound - 1) / kRound * kRound;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // The smallest free block that fits, wastes at most half, and whose copies are done.
      for (auto it = free_.lower_bound(size); it != free_.end() && it->first <= 2 * size; ++it) {
        Block& block = blocks_.at(it->second);
        if (!copies_done(block)) continue;
        void* ptr = it->second;
        free_.erase(it);
        block.in_use = true;
        return ptr;
      }
    }
    void* ptr = nullptr;
    cudaError_t status = cudaHostAlloc(&ptr, size, cudaHostAllocPortable);
    if (status != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free error state of the failed call
      release_cached();
      status = cudaHostAlloc(&ptr, size, cudaHostAllocPortable);
    }
    if (status != cudaSuccess) {
      throw Error(fmt::format("pinned host memory: cudaHostAlloc of {} bytes failed: {} ({})", size,
                              cudaGetErrorString(status), cudaGetErrorName(status)));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    blocks_.emplace(ptr, Block{size, true, {}});
    return ptr;
  }

  void deallocate(void* ptr, size_t) override {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    Block& block = blocks_.at(ptr);
    block.in_use = false;
    free_.emplace(block.size, ptr);
  }

  Device device() const override { return kCPU; }

  bool contains(const void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    return find(ptr) != nullptr;
  }

  void record_use(const void* ptr, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    Block* block = find(ptr);
    TDDP_CHECK(block != nullptr, "record_pinned_use: {} is not in an allocated pinned block", ptr);
    cudaEvent_t event = nullptr;
    TDDP_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    TDDP_CUDA_CHECK(cudaEventRecord(event, stream));
    block->pending.push_back(event);
  }

 private:
  struct Block {
    size_t size = 0;
    bool in_use = false;
    std::vector<cudaEvent_t> pending;  // copies that read or write the block
  };

  // The allocated block containing ptr, or null. Caller holds mutex_.
  Block* find(const void* ptr) {
    auto it = blocks_.upper_bound(const_cast<void*>(ptr));
    if (it == blocks_.begin()) return nullptr;
    --it;
    const auto* base = static_cast<const char*>(it->first);
    if (!it->second.in_use || static_cast<const char*>(ptr) >= base + it->second.size) return nullptr;
    return &it->second;
  }

  // Drops the block's completed events; true when none is left. Caller holds mutex_.
  static bool copies_done(Block& block) {
    while (!block.pending.empty()) {
      const cudaError_t status = cudaEventQuery(block.pending.back());
      if (status == cudaErrorNotReady) return false;
      TDDP_CUDA_CHECK(status);
      cudaEventDestroy(block.pending.back());
      block.pending.pop_back();
    }
    return true;
  }

  void release_cached() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = free_.begin(); it != free_.end();) {
      Block& block = blocks_.at(it->second);
      if (!copies_done(block)) {
        ++it;
        continue;
      }
      cudaFreeHost(it->second);
      blocks_.erase(it->second);
      it = free_.erase(it);
    }
  }

  std::mutex mutex_;
  std::map<void*, Block> blocks_;      // every block obtained from cudaHostAlloc, by address
  std::multimap<size_t, void*> free_;  // blocks not in use, by size
};

PinnedAllocator* pinned() {
  static auto* allocator = new PinnedAllocator();  // never destroyed, as the device caches
  return allocator;
}

}  // namespace

Allocator* pinned_allocator() { return pinned(); }
bool is_pinned(const void* ptr) { return ptr != nullptr && pinned()->contains(ptr); }
void record_pinned_use(const void* ptr, cudaStream_t stream) { pinned()->record_use(ptr, stream); }

}  // namespace tinyddp::tensor::cuda
