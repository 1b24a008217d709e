// The one dispatch form of tensor/ops/ (internal): a switch on the device type into the CPU
// backend (cpu/backend.h) or the CUDA one (cuda/backend.h), to the kernel of the same name.
// An op decides nothing else about a backend: where a backend has algorithms of its own, its
// entry point chooses among them.
#pragma once

#include "tinyddp/tensor/cpu/backend.h"
#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/cuda/backend.h"
#include "tinyddp/tensor/device.h"
#include "tinyddp/tensor/ops/composite.h"

namespace tinyddp::tensor::detail {

[[noreturn]] void no_kernel(const char* op, Device device);

// Before a CUDA kernel: a build without CUDA has none (a CUDA tensor can only exist there
// through a custom allocator, as tests make one).
void require_cuda(const char* op, Device device);

// The one dispatch form: runs the kernel of `device`'s type, cpu_kernel() or cuda_kernel().
template <typename Cpu, typename Cuda>
decltype(auto) dispatch(Device device, const char* op, Cpu&& cpu_kernel, Cuda&& cuda_kernel) {
  switch (device.type) {
    case DeviceType::kCPU: return cpu_kernel();
    case DeviceType::kCUDA: require_cuda(op, device); return cuda_kernel();
  }
  no_kernel(op, device);
}

}  // namespace tinyddp::tensor::detail

// TDDP_DISPATCH(device, "op", kernel, args...): cpu::kernel(args...) or cuda::kernel(args...).
#define TDDP_DISPATCH(device, op, kernel, ...)                                                                     \
  ::tinyddp::tensor::detail::dispatch((device), (op), [&] { return ::tinyddp::tensor::cpu::kernel(__VA_ARGS__); }, \
                                      [&] { return ::tinyddp::tensor::cuda::kernel(__VA_ARGS__); })

// TDDP_DISPATCH_OR_COMPOSE(device, "op", kernel, args...): cpu::kernel(args...) on the CPU; on
// a GPU composite::kernel(args...) (ops/composite.h), composed from other ops because the CUDA
// backend has no kernel of its own for it.
#define TDDP_DISPATCH_OR_COMPOSE(device, op, kernel, ...)                                                          \
  ::tinyddp::tensor::detail::dispatch((device), (op), [&] { return ::tinyddp::tensor::cpu::kernel(__VA_ARGS__); }, \
                                      [&] { return ::tinyddp::tensor::composite::kernel(__VA_ARGS__); })
