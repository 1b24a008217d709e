// What the CUDA backend's sources share to launch a kernel (internal to cuda/, CUDA builds
// only): the device a tensor is on, the check of a launch's status, and run(), which turns
// tensors into an elementwise launch's descriptors (plan.h) on the output's device.
#pragma once

#include <cuda_runtime_api.h>

#include <array>

#include "tinyddp/tensor/backends/cuda/kernels.h"
#include "tinyddp/tensor/backends/cuda/plan.h"
#include "tinyddp/tensor/cuda_runtime/device_guard.h"
#include "tinyddp/tensor/cuda_runtime/runtime.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::tensor::cuda {

inline int device_of(const Tensor& t) { return t.device().index; }

inline void check_launch(int status, const char* op) {
  if (status != 0) throw_cuda_error(static_cast<cudaError_t>(status), op, __FILE__, __LINE__);
}

// Runs `kernel(geometry, operands, stream)` over `tensors` (the first one is the output,
// whose shape is iterated and whose device runs it) and checks the launch.
template <size_t N, typename Kernel>
void run(const std::array<const Tensor*, N>& tensors, const char* op, Kernel&& kernel) {
  const int device = device_of(*tensors[0]);
  DeviceGuard guard(device);
  std::array<kernels::Operand, N> ops;
  const kernels::Geometry g = geometry<N>(tensors[0]->sizes(), tensors, ops, op);
  const int status = kernel(g, ops, static_cast<void*>(compute_stream(device)));
  check_launch(status, op);
}

}  // namespace tinyddp::tensor::cuda
