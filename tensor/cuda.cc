// tensor/cuda.h: answers from the nvcc-compiled query under --config=cuda, and "not built"
// answers otherwise (TINYDDP_WITH_CUDA is set by the BUILD file under that config).
#include "tinyddp/tensor/cuda.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "tinyddp/base/error.h"
#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/grad_mode.h"
#include "tinyddp/tensor/tensor.h"

#if TINYDDP_WITH_CUDA
#include "tinyddp/tensor/cuda_runtime/device_query.h"
#include "tinyddp/tensor/cuda_runtime/runtime.h"
#endif

namespace tinyddp::tensor::cuda {

#if TINYDDP_WITH_CUDA

bool is_built() { return true; }

int device_count() {
  // Asked before every allocation and launch; the answer cannot change within a process.
  static const int count = [] {
    std::string error;
    const int n = detail::query_device_count(&error);
    return n < 0 ? 0 : n;
  }();
  return count;
}

std::vector<DeviceProperties> device_properties() {
  std::vector<DeviceProperties> result;
  for (int i = 0; i < device_count(); ++i) {
    detail::RawDeviceProperties raw;
    std::string error;
    TDDP_CHECK(detail::query_device_properties(i, &raw, &error), "cuda::device_properties({}): {}", i, error);
    result.push_back({i, raw.name, raw.total_memory, raw.major, raw.minor});
  }
  return result;
}

std::string unavailable_reason() {
  std::string error;
  const int count = detail::query_device_count(&error);
  if (count < 0) return "no usable CUDA device (" + error + ")";
  if (count == 0) return "no CUDA device found";
  return fmt::format("none: CUDA is available ({} device(s))", count);
}

std::string smoke_test(int device) {
  try {
    DeviceGuard guard(device);
    std::string error;
    return detail::run_fill_kernel(&error) ? "" : error;
  } catch (const std::exception& e) {
    return e.what();
  }
}

#else

bool is_built() { return false; }
int device_count() { return 0; }
std::vector<DeviceProperties> device_properties() { return {}; }
std::string unavailable_reason() { return "tinyddp was built without CUDA support (rebuild with --config=cuda)"; }
std::string smoke_test(int device) { return fmt::format("cuda::smoke_test({}): {}", device, unavailable_reason()); }
void synchronize(int) {}
AllocatorStats allocator_stats(int) { return {}; }
void empty_cache() {}
void reset_peak_memory_stats(int) {}
// The one call of cuda.h on tensors (the CUDA backend's copies define it under CUDA); the rest
// of the runtime's answers are in cuda_runtime/runtime_stub.cc.
Tensor to_host_after(const Tensor&, const StreamMark&) {
  throw Error(fmt::format("to_host_after: {}", unavailable_reason()));
}

#endif

bool is_available() { return device_count() > 0; }

}  // namespace tinyddp::tensor::cuda

namespace tinyddp::tensor {

bool Tensor::is_pinned() const {
#if TINYDDP_WITH_CUDA
  return is_cpu() && cuda::is_pinned(raw_data_ptr());
#else
  return false;
#endif
}

Tensor cuda::empty_pinned([[maybe_unused]] const Shape& sizes, [[maybe_unused]] DType dtype, const char* op) {
#if TINYDDP_WITH_CUDA
  TDDP_CHECK(cuda::is_available(), "{}: needs a GPU: {}", op, cuda::unavailable_reason());
  const Storage storage(static_cast<size_t>(shape_numel(sizes)) * tensor::element_size(dtype),
                        cuda::pinned_allocator());
  return Tensor::make(storage, sizes, contiguous_strides(sizes), 0, dtype);
#else
  throw Error(fmt::format("{}: needs a GPU: {}", op, cuda::unavailable_reason()));
#endif
}

Tensor Tensor::pin_memory() const {
  TDDP_CHECK(is_cpu(), "pin_memory: only CPU tensors can be pinned, got a tensor on {}", device().str());
  if (is_pinned() && is_contiguous()) return *this;
  const Tensor out = cuda::empty_pinned(sizes(), dtype(), "pin_memory");
  NoGradGuard no_grad;
  out.copy_(*this);
  return out;
}

}  // namespace tinyddp::tensor

namespace tinyddp::tensor::cuda {

namespace {
std::atomic<bool> tf32_allowed{false};
std::atomic<bool> cudnn_tf32_allowed{true};

// The attention routes' switches, both on unless TINYDDP_CUDA_SDP names one route (flash or
// math) for measurements; read once, at the first question or switch.
struct SdpSwitches {
  std::atomic<bool> flash{true}, math{true};
  SdpSwitches() {
    const char* env = std::getenv("TINYDDP_CUDA_SDP");
    const std::string value = env == nullptr ? "" : env;
    TDDP_CHECK(value.empty() || value == "auto" || value == "flash" || value == "math",
               "TINYDDP_CUDA_SDP='{}' names no attention route: use auto, flash or math", value);
    if (value == "flash") math = false;
    if (value == "math") flash = false;
  }
};
SdpSwitches& sdp() {
  static SdpSwitches switches;
  return switches;
}
}  // namespace

bool allow_tf32() { return tf32_allowed.load(std::memory_order_relaxed); }
void set_allow_tf32(bool allow) { tf32_allowed.store(allow, std::memory_order_relaxed); }
bool cudnn_allow_tf32() { return cudnn_tf32_allowed.load(std::memory_order_relaxed); }
void set_cudnn_allow_tf32(bool allow) { cudnn_tf32_allowed.store(allow, std::memory_order_relaxed); }
bool flash_sdp_enabled() { return sdp().flash.load(std::memory_order_relaxed); }
void enable_flash_sdp(bool enabled) { sdp().flash.store(enabled, std::memory_order_relaxed); }
bool math_sdp_enabled() { return sdp().math.load(std::memory_order_relaxed); }
void enable_math_sdp(bool enabled) { sdp().math.store(enabled, std::memory_order_relaxed); }

}  // namespace tinyddp::tensor::cuda
