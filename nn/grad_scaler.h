// Loss scaling for float16 mixed precision, as torch.cuda.amp.GradScaler (torch.amp.GradScaler):
// float16 gradients underflow, so the loss is multiplied by a large scale before backward and
// the gradients divided by it before the step; a step whose gradients hold an inf or NaN is
// skipped and the scale shrinks, and after growth_interval clean steps in a row it grows.
//
//   nn::GradScaler scaler;
//   for (...) {
//     opt.zero_grad();
//     Tensor loss;
//     { tensor::Autocast autocast(tensor::DeviceType::kCUDA, tensor::kFloat16); loss = ...; }
//     scaler.scale(loss).backward();
//     scaler.unscale_(opt);              // optional: to clip the true gradients
//     nn::clip_grad_norm_(params, 1.0);
//     scaler.step(opt);                  // skipped if a gradient is not finite
//     scaler.update();
//   }
//
// The scale is a float32 tensor on the loss's device (kept equal to the host's copy, which
// update() alone changes, with the float32 arithmetic of PyTorch's update kernel); unscale_
// checks and divides the gradients on their device. step() reads one number back (whether to
// skip), as PyTorch's does, and update() reuses it. Under DDP every rank sees the same averaged gradients, so every
// rank skips or steps alike. Works on any device (PyTorch 1.13's disables itself without CUDA).
#pragma once

#include <map>

#include "tinyddp/nn/optim.h"

namespace tinyddp::nn {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // outputs * scale (float32 scale; the scale tensor is made on outputs' device at the first
  // call). Disabled: outputs unchanged.
  Tensor scale(const Tensor& outputs);
  // Divides the gradients of the optimizer's parameters by the scale, in place, and notes
  // whether any holds an inf or NaN. At most once per optimizer between update()s, and not
  // after its step(). float16 gradients are refused, as in PyTorch (keep parameters float32).
  void unscale_(Optimizer& optimizer);
  // unscale_ if not done yet, then optimizer.step() unless a gradient was not finite. Returns
  // whether it stepped.
  bool step(Optimizer& optimizer);
  // After every optimizer's step: backoff on an inf/NaN (and the clean count back to 0),
  // otherwise growth after growth_interval clean steps (kept only if the grown scale is
  // finite). Or, with new_scale, that scale.
  void update();
  void update(double new_scale);

  double get_scale() const;  // reads the device back; the initial scale before the first scale()
  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }

  // "scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker" (PyTorch's
  // keys), float64 and int64 scalars; loading checks them all first.
  OrderedDict<Tensor> state_dict() const;
  void load_state_dict(const OrderedDict<Tensor>& state);

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  struct PerOptimizer {
    Stage stage = Stage::kReady;
    Tensor found_inf;             // float32 [1]: 1 if a gradient was not finite
    bool found_inf_host = false;  // found_inf as read by step()
  };
  void check_scale_made(const char* what) const;

  GradScalerOptions options_;
  double scale_host_;           // the scale, a float32 value
  int64_t growth_tracker_ = 0;  // clean steps in a row
  Tensor scale_;                // float32 [1] on the loss's device, undefined until the first scale()
  std::map<const Optimizer*, PerOptimizer> per_optimizer_;
};

}  // namespace tinyddp::nn
