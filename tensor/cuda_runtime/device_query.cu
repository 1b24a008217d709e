// The nvcc-compiled device query: device count and properties through the CUDA runtime, and
// a one-kernel smoke test proving that code actually runs on the device.
#include "tinyddp/tensor/cuda_runtime/device_query.h"

#include <cuda_runtime.h>

#include <string>
#include <vector>

namespace tinyddp::tensor::cuda::detail {

namespace {

bool check(cudaError_t status, const char* call, std::string* error) {
  if (status == cudaSuccess) return true;
  *error =
      std::string(call) + ": " + cudaGetErrorString(status) + " (" + std::to_string(static_cast<int>(status)) + ")";
  return false;
}

// out[i] = i * 3 + 1 for i < n.
__global__ void fill_pattern(int* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i * 3 + 1;
}

}  // namespace

int query_device_count(std::string* error) {
  int count = 0;
  if (!check(cudaGetDeviceCount(&count), "cudaGetDeviceCount", error)) return -1;
  return count;
}

bool query_device_properties(int device, RawDeviceProperties* out, std::string* error) {
  cudaDeviceProp prop{};
  if (!check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties", error)) return false;
  out->name = prop.name;
  out->total_memory = prop.totalGlobalMem;
  out->major = prop.major;
  out->minor = prop.minor;
  return true;
}

bool run_fill_kernel(std::string* error) {
  constexpr int kCount = 1000;
  int* buffer = nullptr;
  if (!check(cudaMalloc(&buffer, kCount * sizeof(int)), "cudaMalloc", error)) return false;
  fill_pattern<<<(kCount + 255) / 256, 256>>>(buffer, kCount);
  bool ok = check(cudaGetLastError(), "fill_pattern launch", error);
  std::vector<int> host(kCount, 0);
  if (ok)
    ok = check(cudaMemcpy(host.data(), buffer, kCount * sizeof(int), cudaMemcpyDeviceToHost), "cudaMemcpy", error);
  cudaFree(buffer);
  for (int i = 0; ok && i < kCount; ++i) {
    if (host[i] != i * 3 + 1) {
      *error = "fill_pattern: wrong value at index " + std::to_string(i);
      ok = false;
    }
  }
  return ok;
}

}  // namespace tinyddp::tensor::cuda::detail
