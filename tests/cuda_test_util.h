// GPU test support (only under --config=cuda, where TINYDDP_WITH_CUDA is 1 for the tests that
// use it): a gate that holds a CUDA stream, so that a test can tell whether an operation
// waited for that stream or went ahead of it.
#pragma once

#if TINYDDP_WITH_CUDA
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>

namespace tinyddp::testing {

// Work queued on `stream` after the gate waits until open() (or the gate's destruction, or
// 20 s at most).
class StreamGate {
 public:
  explicit StreamGate(cudaStream_t stream) : open_(std::make_shared<std::atomic<bool>>(false)) {
    auto* flag = new std::shared_ptr<std::atomic<bool>>(open_);
    const cudaError_t status = cudaLaunchHostFunc(stream, &StreamGate::hold, flag);
    if (status != cudaSuccess) {
      delete flag;
      throw std::runtime_error(std::string("StreamGate: cudaLaunchHostFunc failed: ") + cudaGetErrorString(status));
    }
  }
  ~StreamGate() { open(); }
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;

  void open() { open_->store(true); }
  // Opens the gate from another thread after `delay` (join the thread).
  std::thread open_after(std::chrono::milliseconds delay) {
    return std::thread([open = open_, delay] {
      std::this_thread::sleep_for(delay);
      open->store(true);
    });
  }

 private:
  static void hold(void* p) {
    auto* flag = static_cast<std::shared_ptr<std::atomic<bool>>*>(p);
    for (int i = 0; i < 20000 && !(*flag)->load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    delete flag;
  }

  std::shared_ptr<std::atomic<bool>> open_;
};

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace tinyddp::testing
#endif
