// The profiler's side of the backend interface (internal to tensor/): what backend_for hands
// out while a Profile records (a Backend that times each call, then passes it on), and the
// scope that records one kernel into the live Profile (tensor/profiler.h).
#pragma once

#include <cstdint>
#include <memory>

#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/internal/backend.h"
#include "tinyddp/tensor/profiler.h"

namespace tinyddp::tensor {

// The backend that records every call of `inner` under the op name `op` (one per pair, kept
// for the process, so that a reference held across other ops stays valid and keeps its name).
Backend& profiling_backend(Backend& inner, const char* op);

}  // namespace tinyddp::tensor

namespace tinyddp::tensor::profiler::detail {

// Records one kernel from construction to destruction into the Profile live at construction
// (nothing when none is, when the kernel threw, or inside another kernel's scope on the same
// thread: a backend's own use of the interface counts as part of the kernel that made it). `device`: where it runs
// (CUDA kernels get device times from events on that device's compute stream).
class KernelScope {
 public:
  KernelScope(const char* op, const char* kernel, Kind kind, Device device, int64_t bytes, double flops);
  ~KernelScope();
  KernelScope(const KernelScope&) = delete;
  KernelScope& operator=(const KernelScope&) = delete;
  // A call that declined (the backend had no kernel): nothing ran, nothing is recorded.
  void declined() { declined_ = true; }
  // Bytes known only after the call (a reduction's result).
  void add_bytes(int64_t bytes) { event_.bytes += bytes; }

 private:
  std::shared_ptr<Profile::State> state_;
  Event event_;
  cuda::StreamMark start_;
  bool declined_ = false;
  bool nested_ = false;
  int exceptions_ = 0;
};

}  // namespace tinyddp::tensor::profiler::detail
