// Device: where a tensor's storage lives (CPU, or CUDA with an index), as torch.device.
#pragma once

#include <cstdint>
#include <string>

namespace tinyddp::tensor {

enum class DeviceType : uint8_t { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = -1;  // -1 for CPU; >= 0 for CUDA

  Device() = default;
  Device(DeviceType t, int i = -1);
  // Parses "cpu", "cuda", "cuda:1" (throws on anything else), like torch.device("cuda:1").
  explicit Device(const std::string& spec);

  static Device cpu() { return Device(); }
  static Device cuda(int i = 0) { return Device(DeviceType::kCUDA, i); }

  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  std::string str() const;  // "cpu", "cuda:0"
  bool operator==(const Device& other) const { return type == other.type && index == other.index; }
  bool operator!=(const Device& other) const { return !(*this == other); }
};

inline const Device kCPU = Device::cpu();

}  // namespace tinyddp::tensor
