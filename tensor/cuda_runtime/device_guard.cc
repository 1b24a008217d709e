// The per-thread device rules (device_guard.h): which GPU the calling thread works on, set
// and restored around each operation, as PyTorch's DeviceGuard.
#include "tinyddp/tensor/cuda_runtime/device_guard.h"

#include <atomic>

namespace tinyddp::tensor::cuda {

// cudaSetDevice, checked (tensor/cuda_runtime/runtime.cc); throws in a build without CUDA.
void runtime_set_device(int device);

namespace {
thread_local int this_thread_device = -1;
std::atomic<testing::SetDeviceFn> replacement{nullptr};

void switch_to(int device) {
  if (const testing::SetDeviceFn fn = replacement.load(std::memory_order_acquire)) {
    fn(device);
  } else {
    runtime_set_device(device);
  }
  this_thread_device = device;
}
}  // namespace

int current_device() { return this_thread_device; }

void set_device(int device) {
  if (device != this_thread_device) switch_to(device);
}

void adopt_device(int device) {
  if (device >= 0) set_device(device);
}

DeviceGuard::DeviceGuard(int device) : previous_(this_thread_device), device_(device) { set_device(device); }

DeviceGuard::~DeviceGuard() {
  if (previous_ < 0 || previous_ == this_thread_device) return;  // never back to "no device"
  try {
    switch_to(previous_);
  } catch (...) {  // a destructor must not throw; the next guard or set_device sets it again
  }
}

namespace testing {
SetDeviceFn replace_set_device(SetDeviceFn fn) { return replacement.exchange(fn, std::memory_order_acq_rel); }
void forget_current_device() { this_thread_device = -1; }
}  // namespace testing

}  // namespace tinyddp::tensor::cuda
