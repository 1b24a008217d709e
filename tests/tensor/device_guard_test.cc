// The per-thread device rules of tensor/cuda_runtime/device_guard.h, checked without a GPU: the
// runtime's cudaSetDevice is replaced by a recorder, so each test sees exactly which devices
// each thread asked for. The rule that matters on a many-GPU host: no thread ever asks for a
// device it was not told to use (a context on GPU 0 in every rank is the symptom).
#include <catch2/catch.hpp>

#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "tinyddp/tensor/cuda_runtime/device_guard.h"

namespace cuda = tinyddp::tensor::cuda;

namespace {

std::mutex calls_mutex;
std::vector<std::pair<std::thread::id, int>> calls;

void record_set_device(int device) {
  std::lock_guard<std::mutex> lock(calls_mutex);
  calls.emplace_back(std::this_thread::get_id(), device);
}

// The devices set, in order, by the thread `id`.
std::vector<int> devices_set_by(std::thread::id id) {
  std::lock_guard<std::mutex> lock(calls_mutex);
  std::vector<int> out;
  for (const auto& [thread, device] : calls) {
    if (thread == id) out.push_back(device);
  }
  return out;
}

// Installs the recorder for one test, and the main thread as having no device yet.
struct RecordedRuntime {
  RecordedRuntime() {
    calls.clear();
    previous = cuda::testing::replace_set_device(&record_set_device);
    cuda::testing::forget_current_device();
  }
  ~RecordedRuntime() {
    cuda::testing::replace_set_device(previous);
    cuda::testing::forget_current_device();
  }
  cuda::testing::SetDeviceFn previous;
};

using Devices = std::vector<int>;

}  // namespace

TEST_CASE("a guard on a thread without a device leaves its device current, never restoring device 0",
          "[cuda][device]") {
  RecordedRuntime runtime;
  std::thread helper([] {
    CHECK(cuda::current_device() == -1);
    { cuda::DeviceGuard guard(3); }
    CHECK(cuda::current_device() == 3);  // kept: the thread works on device 3 from now on
    { cuda::DeviceGuard guard(3); }      // nothing to switch
  });
  const std::thread::id id = helper.get_id();
  helper.join();
  CHECK(devices_set_by(id) == Devices{3});
}

TEST_CASE("a guard switches for its scope and back to the device that was current", "[cuda][device]") {
  RecordedRuntime runtime;
  cuda::set_device(2);
  cuda::set_device(2);  // already current: no runtime call
  {
    cuda::DeviceGuard outer(5);
    CHECK(cuda::current_device() == 5);
    {
      cuda::DeviceGuard same(5);
      cuda::DeviceGuard inner(1);
      CHECK(cuda::current_device() == 1);
    }
    CHECK(cuda::current_device() == 5);
  }
  CHECK(cuda::current_device() == 2);
  CHECK(devices_set_by(std::this_thread::get_id()) == Devices{2, 5, 1, 5, 2});
}

TEST_CASE("a helper thread adopts its creator's device before anything else, or none", "[cuda][device]") {
  RecordedRuntime runtime;
  const auto spawn = [] {
    {
      std::lock_guard<std::mutex> lock(calls_mutex);
      calls.clear();  // a finished thread's id may be reused
    }
    const int creator = cuda::current_device();
    std::thread helper([creator] {
      cuda::adopt_device(creator);
      cuda::DeviceGuard guard(creator < 0 ? 4 : creator);  // its work, on the rank's device
    });
    const std::thread::id id = helper.get_id();
    helper.join();
    return devices_set_by(id);
  };
  CHECK(spawn() == Devices{4});  // no device chosen: the helper sets only the one it works on
  cuda::set_device(6);
  CHECK(spawn() == Devices{6});  // set once, when it starts; the guard finds it current
}

TEST_CASE("a failed switch leaves the thread's device unchanged, and the guard's destructor does not throw",
          "[cuda][device]") {
  RecordedRuntime runtime;
  cuda::set_device(1);
  cuda::testing::replace_set_device([](int device) {
    if (device == 9) throw std::runtime_error("no device 9");
    record_set_device(device);
  });
  CHECK_THROWS_WITH(cuda::DeviceGuard(9), "no device 9");
  CHECK(cuda::current_device() == 1);
}
