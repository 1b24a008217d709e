// Automatic mixed precision, as torch.autocast: inside an Autocast scope, ops on the scope's
// device cast their floating-point inputs by op (PyTorch 1.13's lists for the ops tinyddp has):
//   - lower precision (the scope's dtype): mm, matmul, linear, conv2d;
//   - float32: mse_loss, cross_entropy (nn/loss.h);
//   - every other op runs in the dtype of its inputs (a bfloat16 input gives a bfloat16
//     result; float inputs of different dtypes promote, as add(float32, bfloat16) -> float32).
// float64 inputs are never cast. The casts are ordinary differentiable ops, so gradients come
// back to float32 parameters in float32 (master weights). Casts of float32 leaves that require
// grad (the parameters) are made once per outermost scope and reused (cache_enabled).
//
//   {
//     tinyddp::tensor::Autocast autocast(tinyddp::tensor::DeviceType::kCPU);  // bfloat16
//     loss = nn::cross_entropy(model.forward(x), y);
//   }
//   loss.backward();  // outside the scope, as in PyTorch
//
// CPU: bfloat16 only (PyTorch 1.13's CPU autocast); CUDA: bfloat16 or float16. State is per
// thread. Scopes nest; an inner Autocast(..., enabled = false) turns it off for its scope.
#pragma once

#include "tinyddp/tensor/device.h"
#include "tinyddp/tensor/dtype.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::tensor {

class Autocast {
 public:
  explicit Autocast(DeviceType device_type, DType dtype = kBFloat16, bool enabled = true, bool cache_enabled = true);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  DeviceType device_type_;
  bool previous_enabled_, previous_cache_enabled_;
  DType previous_dtype_;
};

// torch.is_autocast_enabled / is_autocast_cpu_enabled and get_autocast_*_dtype, per device type.
bool is_autocast_enabled(DeviceType device_type);
DType get_autocast_dtype(DeviceType device_type);  // bfloat16 on the CPU, float16 on CUDA by default
// Drops the cached casts (done when the outermost scope ends).
void clear_autocast_cache();

namespace detail {

enum class CastPolicy { kLowerPrecision, kFloat32 };

// An op's tensor arguments as autocast wants them: each defined floating-point argument (not
// float64) on an autocast-enabled device cast to the policy's dtype. Returns false, leaving
// `args` alone, when autocast changes none of them (off, or already in that dtype), so that
// an op can call itself again on the cast arguments and end there.
bool autocast_args(CastPolicy policy, std::initializer_list<Tensor*> args);

}  // namespace detail
}  // namespace tinyddp::tensor
