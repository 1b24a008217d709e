// Which GPU each thread works on, and the one way tinyddp changes it.
//
// The CUDA runtime binds a thread to a device's context on the thread's first runtime call:
// to the device set with cudaSetDevice, else to device 0, whose context it creates if need
// be (hundreds of MiB of GPU memory). So a thread that never chose a device and queries an
// event, or a guard that "restores" the device 0 it never used, puts a context on GPU 0 in
// every rank: with 8 ranks GPU 0 holds 8 contexts. The rules that prevent it:
// - The main thread chooses its device once (set_device; init_process_group does it from
//   LOCAL_RANK for the nccl backend, examples/train from --device).
// - A helper thread (NCCL watchdog, Gloo worker) adopts, when it starts, the device of the
//   thread that created it, before any CUDA call.
// - DeviceGuard switches for a scope and switches back only to a device that was current:
//   on a thread that had none, the guard's device stays current (it is the one the thread
//   works with).
// This file has no CUDA in it: the runtime call sits behind a seam (testing::replace_set_device),
// so that CPU-only tests check these rules.
#pragma once

namespace tinyddp::tensor::cuda {

// This thread's device as tinyddp made it current, or -1 when none has been yet.
int current_device();
// Makes `device` current on this thread (cudaSetDevice), as torch.cuda.set_device. A no-op
// when it is current already. Throws for a device that does not exist.
void set_device(int device);
// For a new thread: sets `device` (a current_device() taken on the creating thread) when
// it is one, and nothing otherwise.
void adopt_device(int device);

// Makes `device` current for its lifetime; restores the previous device after, if there was one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  int device_ = -1;
};

namespace testing {
using SetDeviceFn = void (*)(int device);
// Replaces the runtime's cudaSetDevice behind set_device (nullptr: the runtime's again);
// returns the previous replacement.
SetDeviceFn replace_set_device(SetDeviceFn fn);
// This thread as if it had never made a device current.
void forget_current_device();
}  // namespace testing

}  // namespace tinyddp::tensor::cuda
