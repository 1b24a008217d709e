// Whether this build and this machine can run CUDA code: the device query that the rest of
// the tensor library consults before touching a GPU. Works (answering "no") in CPU-only builds.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tinyddp::tensor::cuda {

struct DeviceProperties {
  int index = 0;
  std::string name;
  size_t total_memory = 0;  // bytes
  int major = 0;            // compute capability
  int minor = 0;
};

// True when tinyddp was compiled with --config=cuda.
bool is_built();
// Number of usable CUDA devices: 0 in a CPU-only build, or when the driver or device is
// missing (cudaGetDeviceCount fails, e.g. with error 35 on machines without a GPU).
int device_count();
bool is_available();
std::vector<DeviceProperties> device_properties();
// One line saying why CUDA tensors cannot be created here (build, driver or device).
std::string unavailable_reason();
// Runs a small kernel on `device` that writes a known pattern and checks it on the host.
// Returns "" on success, else the failing CUDA call and its error string.
std::string smoke_test(int device);

}  // namespace tinyddp::tensor::cuda
