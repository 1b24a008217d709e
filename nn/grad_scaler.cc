// GradScaler: see grad_scaler.h. The host keeps the scale and the count of clean steps (it
// alone changes them, in update(), with the float32 arithmetic of PyTorch's update kernel) and
// mirrors the scale into a device tensor with fill_, so scale() and unscale_ read nothing back.
#include "tinyddp/nn/grad_scaler.h"

#include <cmath>

namespace tinyddp::nn {

namespace {

// v rounded to float32, as a float32 tensor holds it: beyond float32's range (from halfway past
// its largest value) that is inf, which a plain cast would leave undefined.
double to_float32(double v) {
  const double overflow = std::ldexp(1.0, 128) - std::ldexp(1.0, 103);
  if (std::fabs(v) >= overflow) return std::copysign(INFINITY, v);
  return static_cast<float>(v);
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_host_(to_float32(options.init_scale)) {
  TDDP_CHECK(options_.init_scale > 0 && std::isfinite(scale_host_),
             "GradScaler: init_scale must be positive and finite in float32, got {}", options_.init_scale);
  TDDP_CHECK(options_.growth_factor > 1.0, "GradScaler: growth_factor should be > 1, got {}", options_.growth_factor);
  TDDP_CHECK(options_.backoff_factor > 0 && options_.backoff_factor < 1.0,
             "GradScaler: backoff_factor should be between 0 and 1, got {}", options_.backoff_factor);
  TDDP_CHECK(options_.growth_interval > 0, "GradScaler: growth_interval should be a positive integer, got {}",
             options_.growth_interval);
}

Tensor GradScaler::scale(const Tensor& outputs) {
  if (!options_.enabled) return outputs;
  TDDP_CHECK(outputs.defined(), "GradScaler::scale: the outputs are undefined");
  if (!scale_.defined()) {
    scale_ = tensor::full({1}, scale_host_, tensor::TensorOptions().device(outputs.device()));
  }
  return tensor::mul(outputs, scale_.to(outputs.device()));
}

void GradScaler::check_scale_made(const char* what) const {
  TDDP_CHECK(scale_.defined(),
             "GradScaler::{}: no scale yet; call scaler.scale(loss) earlier in the iteration (and backward on it)",
             what);
}

void GradScaler::unscale_(Optimizer& optimizer) {
  if (!options_.enabled) return;
  check_scale_made("unscale_");
  PerOptimizer& state = per_optimizer_[&optimizer];
  TDDP_CHECK(state.stage != Stage::kUnscaled,
             "GradScaler::unscale_: already called on this optimizer since the last update()");
  TDDP_CHECK(state.stage != Stage::kStepped, "GradScaler::unscale_: called after step() (before update())");
  tensor::NoGradGuard no_grad;
  // PyTorch: inv_scale = scale.double().reciprocal().float(); every gradient times it, and
  // found_inf set where one holds an inf or NaN (|g| < inf is false for both).
  const double inv_scale = static_cast<float>(1.0 / static_cast<double>(scale_host_));
  state.found_inf = tensor::zeros({1}, tensor::TensorOptions().device(scale_.device()));
  for (const Tensor& p : optimizer.params()) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    TDDP_CHECK(g.dtype() != tensor::kFloat16,
               "GradScaler::unscale_: attempting to unscale float16 gradients (keep the parameters float32 and let "
               "autocast compute in float16)");
    if (g.numel() == 0) continue;
    const Tensor finite = tensor::lt(tensor::abs(g), INFINITY).to(tensor::kFloat32);
    const Tensor bad = tensor::max(1.0 - finite).reshape({1}).to(scale_.device());
    state.found_inf = tensor::maximum(state.found_inf, bad);
    g.mul_(inv_scale);
  }
  state.stage = Stage::kUnscaled;
}

bool GradScaler::step(Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  PerOptimizer& state = per_optimizer_[&optimizer];
  TDDP_CHECK(state.stage != Stage::kStepped, "GradScaler::step: already called since the last update()");
  if (state.stage == Stage::kReady) unscale_(optimizer);
  state.stage = Stage::kStepped;
  state.found_inf_host = state.found_inf.item<double>() != 0;  // the one read back per step
  if (state.found_inf_host) return false;
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  check_scale_made("update");
  TDDP_CHECK(!per_optimizer_.empty(),
             "GradScaler::update: no inf checks were recorded before update() (call "
             "step(optimizer) or unscale_(optimizer) first)");
  bool found = false;
  for (auto& [optimizer, state] : per_optimizer_) {
    if (state.stage == Stage::kUnscaled) state.found_inf_host = state.found_inf.item<double>() != 0;
    found = found || state.found_inf_host;
  }
  // PyTorch's update kernel: float32 scale times a double factor, rounded to float32.
  const auto times = [](double scale, double factor) { return to_float32(scale * factor); };
  if (found) {
    scale_host_ = times(scale_host_, options_.backoff_factor);
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == options_.growth_interval) {
    const double grown = times(scale_host_, options_.growth_factor);
    if (std::isfinite(grown)) scale_host_ = grown;
    growth_tracker_ = 0;
  }
  scale_.fill_(scale_host_);
  per_optimizer_.clear();
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  check_scale_made("update");
  TDDP_CHECK(new_scale > 0, "GradScaler::update: new_scale must be positive, got {}", new_scale);
  scale_host_ = to_float32(new_scale);
  scale_.fill_(scale_host_);
  per_optimizer_.clear();
}

double GradScaler::get_scale() const { return options_.enabled ? scale_host_ : 1.0; }

OrderedDict<Tensor> GradScaler::state_dict() const {
  OrderedDict<Tensor> out;
  if (!options_.enabled) return out;
  out.insert("scale", tensor::scalar_tensor(scale_host_, tensor::kFloat64));
  out.insert("growth_factor", tensor::scalar_tensor(options_.growth_factor, tensor::kFloat64));
  out.insert("backoff_factor", tensor::scalar_tensor(options_.backoff_factor, tensor::kFloat64));
  out.insert("growth_interval", tensor::scalar_tensor(static_cast<double>(options_.growth_interval), tensor::kInt64));
  out.insert("_growth_tracker", tensor::scalar_tensor(static_cast<double>(growth_tracker_), tensor::kInt64));
  return out;
}

void GradScaler::load_state_dict(const OrderedDict<Tensor>& state) {
  if (!options_.enabled) return;
  TDDP_CHECK(!state.empty(),
             "GradScaler::load_state_dict: the state is empty, possibly saved from a disabled "
             "GradScaler");
  const auto number = [&](const char* key) {
    TDDP_CHECK(state.contains(key), "GradScaler::load_state_dict: missing '{}'", key);
    const Tensor& t = state.at(key);
    TDDP_CHECK(t.defined() && t.numel() == 1, "GradScaler::load_state_dict: '{}' must hold one number", key);
    return t.to(tensor::kFloat64).item<double>();
  };
  GradScalerOptions loaded = options_;
  loaded.init_scale = number("scale");
  loaded.growth_factor = number("growth_factor");
  loaded.backoff_factor = number("backoff_factor");
  loaded.growth_interval = static_cast<int64_t>(number("growth_interval"));
  const auto tracker = static_cast<int64_t>(number("_growth_tracker"));
  GradScaler check(loaded);  // the same checks as a new scaler's
  options_ = loaded;
  scale_host_ = to_float32(loaded.init_scale);
  growth_tracker_ = tracker;
  if (scale_.defined()) scale_.fill_(scale_host_);
}

}  // namespace tinyddp::nn
