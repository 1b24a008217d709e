// Plain-C++ interface to tensor/cuda_runtime/device_query.cu, the nvcc-compiled part of the device
// query (only linked under --config=cuda). Errors come back as strings; callers throw.
#pragma once

#include <string>
#include <vector>

namespace tinyddp::tensor::cuda::detail {

struct RawDeviceProperties {
  std::string name;
  size_t total_memory = 0;
  int major = 0;
  int minor = 0;
};

// Returns the device count, or -1 with *error set ("cudaGetDeviceCount: <reason> (35)").
int query_device_count(std::string* error);
bool query_device_properties(int device, RawDeviceProperties* out, std::string* error);
// Fills a buffer on the current device with a pattern by a kernel, copies it back and verifies it.
bool run_fill_kernel(std::string* error);

}  // namespace tinyddp::tensor::cuda::detail
