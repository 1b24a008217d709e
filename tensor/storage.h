// Storage: the reference-counted bytes behind one or more tensors (views share it), and the
// Allocator seam through which CPU and (later) CUDA memory is obtained.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "tinyddp/tensor/device.h"

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
// CPU blocks of 32 MiB or more are kept for reuse when freed (at most 512 MiB, or an eighth of
// the machine's memory; not under TINYDDP_CPU_MALLOC=system): the bytes held now, and a call
// that gives them all back to the system.
size_t cpu_cached_bytes();
void cpu_empty_cache();
// The bytes of the CPU storages alive now (tensors, views share theirs) and the most alive at
// once since the last reset_cpu_peak_memory(): torch.cuda.memory_allocated and
// max_memory_allocated for the CPU. What a model's parameters, gradients, optimizer state and
// activations hold, without the large-block cache, the allocator's rounding or the process's
// other memory (which a peak RSS includes).
struct CpuMemoryStats {
  size_t allocated_bytes = 0;
  size_t peak_allocated_bytes = 0;
};
CpuMemoryStats cpu_memory_stats();
void reset_cpu_peak_memory();
// The allocator for `device`; throws a clear error for devices this build cannot use.
Allocator* allocator_for(Device device);

// A shared handle to a block of bytes on one device. Copies share the block; it is returned
// to its allocator when the last handle (tensor or view) goes away. The reference count
// lives in the block's header, and CPU storage keeps its bytes in the same allocation, so a
// new CPU tensor's storage costs one malloc.
class Storage {
 public:
  Storage() = default;
  Storage(const Storage& other) : impl_(other.impl_) { retain(); }
  Storage(Storage&& other) noexcept : impl_(other.impl_) { other.impl_ = nullptr; }
  Storage& operator=(const Storage& other) {
    if (impl_ != other.impl_) {
      Impl* old = impl_;
      impl_ = other.impl_;
      retain();
      release(old);
    }
    return *this;
  }
  Storage& operator=(Storage&& other) noexcept {
    if (this != &other) {
      release(impl_);
      impl_ = other.impl_;
      other.impl_ = nullptr;
    }
    return *this;
  }
  ~Storage() { release(impl_); }
  // Allocates `nbytes` on `device`.
  Storage(size_t nbytes, Device device);
  // Allocates `nbytes` from a specific allocator (on allocator->device()).
  Storage(size_t nbytes, Allocator* allocator);

  void* data() const { return impl_ ? impl_->data : nullptr; }
  size_t nbytes() const { return impl_ ? impl_->nbytes : 0; }
  Device device() const { return impl_ ? impl_->device : Device(); }
  bool defined() const { return impl_ != nullptr; }
  long use_count() const { return impl_ ? impl_->references.load(std::memory_order_relaxed) : 0; }
  bool is_same(const Storage& other) const { return impl_ == other.impl_; }
  // Counts in-place writes into this storage through any tensor or view, so that autograd
  // can tell when a tensor saved for backward was modified (see tensor/graph.h).
  uint64_t version() const { return impl_ ? impl_->version.load(std::memory_order_relaxed) : 0; }
  void bump_version() const {
    if (impl_) impl_->version.fetch_add(1, std::memory_order_relaxed);
  }

  // Frees the bytes while every tensor and view keeps this storage (nbytes() becomes 0 and
  // data() null, so reading a tensor over it throws), as PyTorch's storage.resize_(0); then
  // restore_bytes() allocates them again, uninitialised. Fully sharded data parallelism frees a
  // gathered parameter so between its forward and its backward, while the forward's saved
  // tensors still refer to it, and writes the same values back before the backward reads them;
  // restore_version() then puts back the version those saved tensors recorded (the values are
  // the ones they saved). Only for a storage made from an allocator (Storage(nbytes, allocator)).
  void free_bytes() const;
  void restore_bytes(size_t nbytes) const;
  void restore_version(uint64_t version) const;

 private:
  struct Impl {
    void* data = nullptr;
    size_t nbytes = 0;
    Device device;
    Allocator* allocator = nullptr;  // null: the bytes follow this header in one CPU block
    std::atomic<long> references{1};
    std::atomic<uint64_t> version{0};
  };
  void retain() const {
    if (impl_) impl_->references.fetch_add(1, std::memory_order_relaxed);
  }
  static void release(Impl* impl);

  Impl* impl_ = nullptr;
};

}  // namespace tinyddp::tensor
