// Storage: the reference-counted bytes behind one or more tensors (views share it), and the
// Allocator seam through which CPU and (later) CUDA memory is obtained.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "tensor/device.h"

namespace tinyddp::tensor {

// Hands out raw memory for one device. The CPU allocator returns 64-byte aligned blocks;
// the CUDA caching allocator plugs in behind the same interface.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual Device device() const = 0;
};

Allocator* cpu_allocator();
// The allocator for `device`; throws a clear error for devices this build cannot use.
Allocator* allocator_for(Device device);

// A shared handle to a block of bytes on one device. Copies share the block; it is returned
// to its allocator when the last handle (tensor or view) goes away.
class Storage {
 public:
  Storage() = default;
  // Allocates `nbytes` on `device`.
  Storage(size_t nbytes, Device device);
  // Allocates `nbytes` from a specific allocator (on allocator->device()).
  Storage(size_t nbytes, Allocator* allocator);

  void* data() const { return impl_ ? impl_->data : nullptr; }
  size_t nbytes() const { return impl_ ? impl_->nbytes : 0; }
  Device device() const { return impl_ ? impl_->device : Device(); }
  bool defined() const { return impl_ != nullptr; }
  long use_count() const { return impl_.use_count(); }
  bool is_same(const Storage& other) const { return impl_ == other.impl_; }
  // Counts in-place writes into this storage through any tensor or view, so that autograd
  // can tell when a tensor saved for backward was modified (see tensor/graph.h).
  uint64_t version() const { return impl_ ? impl_->version.load(std::memory_order_relaxed) : 0; }
  void bump_version() const {
    if (impl_) impl_->version.fetch_add(1, std::memory_order_relaxed);
  }

 private:
  struct Impl {
    void* data = nullptr;
    size_t nbytes = 0;
    Device device;
    Allocator* allocator = nullptr;
    std::atomic<uint64_t> version{0};
    ~Impl();
  };
  std::shared_ptr<Impl> impl_;
};

}  // namespace tinyddp::tensor
