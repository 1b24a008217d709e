// The CPU allocator and Storage's lifetime management.
#include "tinyddp/tensor/storage.h"

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <new>
#include <string_view>

#include "tinyddp/tensor/cuda.h"
#if TINYDDP_WITH_CUDA
#include "tinyddp/tensor/cuda_runtime/runtime.h"
#endif
#include "tinyddp/base/error.h"

namespace tinyddp::tensor {

namespace {

constexpr size_t kCpuAlignment = 64;  // one cache line; what AVX-512 loads like best

// Whether the user asked for glibc's behaviour: TINYDDP_CPU_MALLOC=system.
bool system_malloc() {
  const char* choice = std::getenv("TINYDDP_CPU_MALLOC");
  return choice != nullptr && std::string_view(choice) == "system";
}

// glibc's defaults hand every block above a threshold that adapts to at most 32 MiB back to the
// kernel when it is freed (munmap, or trimming the heap's top beyond 128 KiB-64 MiB), so a
// training step that allocates and frees the same large tensors each iteration (a convolution's
// im2col matrix, its output) page-faults them in again every time: half of a conv layer's time
// in measurements (bench/README.md). tinyddp keeps such memory in the heap instead: blocks up
// to 32 MiB come from it and freed memory is trimmed only beyond 512 MiB. Not when the user
// tunes malloc already (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, GLIBC_TUNABLES) or
// sets TINYDDP_CPU_MALLOC=system.
struct KeepLargeBlocks {
  KeepLargeBlocks() {
    for (const char* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"}) {
      if (std::getenv(name) != nullptr) return;
    }
    if (system_malloc()) return;
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
  }
};
const KeepLargeBlocks keep_large_blocks;

// Blocks above glibc's largest mmap threshold (32 MiB) are always mapped and unmapped, and so
// page-faulted in again on every use: a 64 MiB `a + b` took 38 ms, 5.2 GB/s, where the add
// itself takes 5.5 ms (bench/README.md, "Large blocks"). tinyddp maps them itself and keeps
// up to kCachedLimit of freed ones for a request of the same (2 MiB-rounded) size, the oldest
// unmapped first; TINYDDP_CPU_MALLOC=system turns this off.
constexpr size_t kLargeBlock = size_t(32) << 20;
constexpr size_t kLargeRounding = size_t(2) << 20;

class LargeBlocks {
 public:
  static LargeBlocks& instance() {
    static LargeBlocks* blocks = new LargeBlocks();  // never destroyed: storage may outlive statics
    return *blocks;
  }

  void* allocate(size_t nbytes) {
    const size_t size = round(nbytes);
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        if (it->size == size) {
          void* ptr = it->ptr;
          cached_ -= size;
          free_.erase(it);
          return ptr;
        }
      }
    }
    void* ptr = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ptr == MAP_FAILED && cached_bytes() > 0) {  // the cached blocks may be what is missing
      empty();
      ptr = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    TDDP_CHECK(ptr != MAP_FAILED, "CPU allocator: out of memory allocating {} bytes", nbytes);
    return ptr;
  }

  void deallocate(void* ptr, size_t nbytes) {
    const size_t size = round(nbytes);
    std::deque<Block> evicted;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (size <= limit_) {
        while (cached_ + size > limit_) {
          evicted.push_back(free_.front());
          cached_ -= free_.front().size;
          free_.pop_front();
        }
        free_.push_back({ptr, size});
        cached_ += size;
      } else {
        evicted.push_back({ptr, size});
      }
    }
    for (const Block& b : evicted) munmap(b.ptr, b.size);
  }

  size_t cached_bytes() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return cached_;
  }

  void empty() {
    std::deque<Block> evicted;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      evicted.swap(free_);
      cached_ = 0;
    }
    for (const Block& b : evicted) munmap(b.ptr, b.size);
  }

 private:
  struct Block {
    void* ptr;
    size_t size;
  };
  // 512 MiB, or an eighth of the machine's memory where that is less.
  LargeBlocks() : limit_(std::min(kCachedLimit, physical_memory() / 8)) {}
  static constexpr size_t kCachedLimit = size_t(512) << 20;
  static size_t physical_memory() {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : kCachedLimit * 8;
  }
  static size_t round(size_t nbytes) { return (nbytes + kLargeRounding - 1) / kLargeRounding * kLargeRounding; }

  std::mutex mutex_;
  std::deque<Block> free_;  // oldest first
  size_t cached_ = 0;
  const size_t limit_;
};

bool large_block(size_t nbytes) {
  static const bool cache = !system_malloc();
  return cache && nbytes >= kLargeBlock;
}

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    if (large_block(nbytes)) return LargeBlocks::instance().allocate(nbytes);
    const size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    void* ptr = std::aligned_alloc(kCpuAlignment, rounded);
    TDDP_CHECK(ptr != nullptr, "CPU allocator: out of memory allocating {} bytes", nbytes);
    return ptr;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    if (ptr != nullptr && large_block(nbytes)) {
      LargeBlocks::instance().deallocate(ptr, nbytes);
      return;
    }
    std::free(ptr);
  }
  Device device() const override { return kCPU; }
};

}  // namespace

Allocator* cpu_allocator() {
  static CpuAllocator allocator;
  return &allocator;
}

Allocator* allocator_for(Device device) {
  switch (device.type) {
    case DeviceType::kCPU: return cpu_allocator();
    case DeviceType::kCUDA:
#if TINYDDP_WITH_CUDA
      if (cuda::is_available()) return cuda::caching_allocator(device.index);  // which checks the index
#endif
      throw Error(fmt::format("cannot allocate a tensor on {}: {}", device.str(), cuda::unavailable_reason()));
  }
  throw Error("allocator_for: unknown device type");
}

namespace {
std::atomic<size_t> cpu_allocated{0};
std::atomic<size_t> cpu_peak{0};

void count_cpu_bytes(Device device, size_t nbytes) {
  if (!device.is_cpu() || nbytes == 0) return;
  const size_t now = cpu_allocated.fetch_add(nbytes, std::memory_order_relaxed) + nbytes;
  size_t peak = cpu_peak.load(std::memory_order_relaxed);
  while (now > peak && !cpu_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void uncount_cpu_bytes(Device device, size_t nbytes) {
  if (device.is_cpu() && nbytes > 0) cpu_allocated.fetch_sub(nbytes, std::memory_order_relaxed);
}
}  // namespace

CpuMemoryStats cpu_memory_stats() {
  return {cpu_allocated.load(std::memory_order_relaxed), cpu_peak.load(std::memory_order_relaxed)};
}

void reset_cpu_peak_memory() { cpu_peak.store(cpu_allocated.load(std::memory_order_relaxed)); }

size_t cpu_cached_bytes() { return LargeBlocks::instance().cached_bytes(); }

void cpu_empty_cache() { LargeBlocks::instance().empty(); }

Storage::Storage(size_t nbytes, Device device) {
  if (!device.is_cpu() || large_block(nbytes)) {
    *this = Storage(nbytes, allocator_for(device));
    return;
  }
  // One malloc holds the header and the bytes, which start at the first 64-byte boundary
  // after the header (plain malloc is much cheaper than aligned_alloc for small blocks).
  TDDP_CHECK(nbytes <= SIZE_MAX - sizeof(Impl) - kCpuAlignment, "CPU allocator: {} bytes is too large", nbytes);
  void* block = std::malloc(sizeof(Impl) + kCpuAlignment + nbytes);
  TDDP_CHECK(block != nullptr, "CPU allocator: out of memory allocating {} bytes", nbytes);
  impl_ = new (block) Impl();
  const auto first = reinterpret_cast<uintptr_t>(block) + sizeof(Impl);
  impl_->data = reinterpret_cast<void*>((first + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment);
  impl_->nbytes = nbytes;
  impl_->device = kCPU;
  count_cpu_bytes(kCPU, nbytes);
}

Storage::Storage(size_t nbytes, Allocator* allocator) {
  TDDP_CHECK(allocator != nullptr, "Storage: allocator is null");
  void* data = allocator->allocate(nbytes);
  impl_ = new Impl();
  impl_->data = data;
  impl_->nbytes = nbytes;
  impl_->device = allocator->device();
  impl_->allocator = allocator;
  count_cpu_bytes(impl_->device, nbytes);
}

void Storage::free_bytes() const {
  TDDP_CHECK(impl_ != nullptr && impl_->allocator != nullptr,
             "Storage::free_bytes: only a storage made from an allocator can free its bytes");
  if (impl_->data != nullptr) impl_->allocator->deallocate(impl_->data, impl_->nbytes);
  uncount_cpu_bytes(impl_->device, impl_->nbytes);
  impl_->data = nullptr;
  impl_->nbytes = 0;
}

void Storage::restore_bytes(size_t nbytes) const {
  TDDP_CHECK(impl_ != nullptr && impl_->allocator != nullptr && impl_->data == nullptr,
             "Storage::restore_bytes: only a storage whose bytes were freed (free_bytes) can have them back");
  impl_->data = impl_->allocator->allocate(nbytes);
  impl_->nbytes = nbytes;
  count_cpu_bytes(impl_->device, nbytes);
}

void Storage::restore_version(uint64_t version) const {
  if (impl_) impl_->version.store(version, std::memory_order_relaxed);
}

void Storage::release(Impl* impl) {
  if (impl == nullptr || impl->references.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  uncount_cpu_bytes(impl->device, impl->nbytes);
  if (impl->allocator == nullptr) {
    impl->~Impl();
    std::free(impl);  // header and bytes were one malloc block
  } else {
    if (impl->data != nullptr) impl->allocator->deallocate(impl->data, impl->nbytes);
    delete impl;
  }
}

}  // namespace tinyddp::tensor
