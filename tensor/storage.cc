// The CPU allocator and Storage's lifetime management.
#include "tinyddp/tensor/storage.h"

#include <malloc.h>

#include <cstdlib>
#include <new>
#include <string_view>

#include "tinyddp/tensor/cuda.h"
#if TINYDDP_WITH_CUDA
#include "tinyddp/tensor/cuda/runtime.h"
#endif
#include "tinyddp/base/error.h"

namespace tinyddp::tensor {

namespace {

constexpr size_t kCpuAlignment = 64;  // one cache line; what AVX-512 loads like best

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
    const char* choice = std::getenv("TINYDDP_CPU_MALLOC");
    if (choice != nullptr && std::string_view(choice) == "system") return;
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
  }
};
const KeepLargeBlocks keep_large_blocks;

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    const size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    void* ptr = std::aligned_alloc(kCpuAlignment, rounded);
    TDDP_CHECK(ptr != nullptr, "CPU allocator: out of memory allocating {} bytes", nbytes);
    return ptr;
  }
  void deallocate(void* ptr, size_t /*nbytes*/) override { std::free(ptr); }
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

Storage::Storage(size_t nbytes, Device device) {
  if (!device.is_cpu()) {
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
}

Storage::Storage(size_t nbytes, Allocator* allocator) {
  TDDP_CHECK(allocator != nullptr, "Storage: allocator is null");
  void* data = allocator->allocate(nbytes);
  impl_ = new Impl();
  impl_->data = data;
  impl_->nbytes = nbytes;
  impl_->device = allocator->device();
  impl_->allocator = allocator;
}

void Storage::release(Impl* impl) {
  if (impl == nullptr || impl->references.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (impl->allocator == nullptr) {
    impl->~Impl();
    std::free(impl);  // header and bytes were one malloc block
  } else {
    impl->allocator->deallocate(impl->data, impl->nbytes);
    delete impl;
  }
}

}  // namespace tinyddp::tensor
