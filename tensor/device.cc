// Device construction, parsing and printing.
#include "tinyddp/tensor/device.h"

#include <charconv>

#include "tinyddp/base/error.h"

namespace tinyddp::tensor {

Device::Device(DeviceType t, int i) : type(t), index(i) {
  if (type == DeviceType::kCPU) {
    TDDP_CHECK(index == -1 || index == 0, "Device: a CPU device has no index, got {}", index);
    index = -1;
  } else {
    if (index == -1) index = 0;  // "cuda" means device 0
    TDDP_CHECK(index >= 0, "Device: a CUDA device index must be >= 0, got {}", index);
  }
}

Device::Device(const std::string& spec) {
  if (spec == "cpu") return;
  const std::string prefix = "cuda";
  TDDP_CHECK(spec.rfind(prefix, 0) == 0, "Device: expected \"cpu\", \"cuda\" or \"cuda:N\", got \"{}\"", spec);
  type = DeviceType::kCUDA;
  index = 0;
  if (spec.size() == prefix.size()) return;
  const char* begin = spec.data() + prefix.size() + 1;
  const char* end = spec.data() + spec.size();
  const auto [ptr, ec] = std::from_chars(begin, end, index);
  TDDP_CHECK(spec[prefix.size()] == ':' && ec == std::errc() && ptr == end && begin != end && index >= 0,
             "Device: expected \"cpu\", \"cuda\" or \"cuda:N\", got \"{}\"", spec);
}

std::string Device::str() const {
  if (is_cpu()) return "cpu";
  return fmt::format("cuda:{}", index);
}

}  // namespace tinyddp::tensor
