// The CPU allocator and Storage's lifetime management.
#include "tensor/storage.h"

#include <cstdlib>
#include <new>

#include "tensor/cuda.h"
#include "tensor/error.h"

namespace tinyddp::tensor {

namespace {

constexpr size_t kCpuAlignment = 64;  // one cache line; what AVX-512 loads like best

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
    case DeviceType::kCPU:
      return cpu_allocator();
    case DeviceType::kCUDA:
      throw Error(fmt::format("cannot allocate a tensor on {}: {}", device.str(), cuda::unavailable_reason()));
  }
  throw Error("allocator_for: unknown device type");
}

Storage::Storage(size_t nbytes, Device device) : Storage(nbytes, allocator_for(device)) {}

Storage::Storage(size_t nbytes, Allocator* allocator) : impl_(std::make_shared<Impl>()) {
  TDDP_CHECK(allocator != nullptr, "Storage: allocator is null");
  impl_->data = allocator->allocate(nbytes);
  impl_->nbytes = nbytes;
  impl_->device = allocator->device();
  impl_->allocator = allocator;
}

Storage::Impl::~Impl() {
  if (allocator != nullptr) allocator->deallocate(data, nbytes);
}

}  // namespace tinyddp::tensor
