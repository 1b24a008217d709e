// backend_for, the one place that maps a device type to its backend (internal/backend.h), and
// the copies every backend builds on its own copy and fill.
#include "tinyddp/tensor/internal/backend.h"

#include "tinyddp/base/error.h"
#include "tinyddp/tensor/backends/cpu/backend.h"
#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/internal/profiling.h"
#if TINYDDP_WITH_CUDA
#include "tinyddp/tensor/backends/cuda/backend.h"
#endif

namespace tinyddp::tensor {

namespace {

Backend& device_backend(Device device, const char* op) {
  switch (device.type) {
    case DeviceType::kCPU: return cpu::backend();
    case DeviceType::kCUDA:
#if TINYDDP_WITH_CUDA
      return cuda::backend();
#else
      break;  // a CUDA tensor exists in this build only through a custom allocator, as tests make one
#endif
  }
  throw Error(fmt::format("{}: no kernel for tensors on {} in this build", op, device.str()));
}

}  // namespace

Backend& backend_for(Device device, const char* op) {
  Backend& backend = device_backend(device, op);
  // While a Profile records, each call is timed on its way to the backend (tensor/profiler.h).
  return profiler::is_enabled() ? profiling_backend(backend, op) : backend;
}

bool Backend::adam_steps(const std::vector<AdamTensors>&, const AdamStep&) { return false; }

bool Backend::sgd_steps(std::vector<SgdTensors>& list, const SgdStep& step) {
  for (SgdTensors& t : list) {
    // (one dtype: the first declines or none does)
    if (!sgd_step(t.param, t.grad, step.momentum != 0 ? &t.momentum_buffer : nullptr, step)) return false;
  }
  return true;
}

bool Backend::foreach_norm(const Tensor&, const std::vector<Tensor>&) { return false; }
bool Backend::dropout_mask(const Tensor&, double, const RandomKey&) { return false; }
bool Backend::foreach_mul_(const std::vector<Tensor>&, const Tensor&) { return false; }

Tensor Backend::contiguous(const Tensor& t) {
  if (t.is_contiguous()) return t;
  const Tensor out = empty(t.sizes(), TensorOptions(t.dtype()).device(t.device()));
  copy(out, t, false);
  return out;
}

Tensor Backend::converted(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  const Tensor out = empty(t.sizes(), TensorOptions(dtype).device(t.device()));
  copy(out, t, false);
  return out;
}

Tensor Backend::stand_in(const Tensor& out) {
  return out.is_contiguous() ? out : empty(out.sizes(), TensorOptions(out.dtype()).device(out.device()));
}

void Backend::settle(const Tensor& out, const Tensor& stand_in) {
  if (stand_in.raw_data_ptr() != out.raw_data_ptr()) copy(out, stand_in, false);
}

Tensor Backend::zeros(const Shape& sizes, DType dtype, Device device) {
  const Tensor out = empty(sizes, TensorOptions(dtype).device(device));
  fill(out, 0.0);
  return out;
}

}  // namespace tinyddp::tensor
