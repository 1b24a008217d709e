// The losses of loss.h beyond mse_loss, cross_entropy and nll_loss, each composed from tensor ops (so
// they run on both backends and differentiate through them), in float32 under autocast as
// PyTorch's (binary_cross_entropy is refused there, as PyTorch refuses it).
#include <string>

#include "tinyddp/nn/loss.h"
#include "tinyddp/tensor/autocast.h"

namespace tinyddp::nn {

namespace t = tinyddp::tensor;

namespace {

// The elementwise losses reduced as `reduction` says ("batchmean": the sum over input.size(0),
// where allowed).
Tensor reduced(const Tensor& losses, std::string_view reduction, const char* op, bool batchmean_allowed = false) {
  if (reduction == "mean") return t::mean(losses);
  if (reduction == "sum") return t::sum(losses);
  if (reduction == "none") return losses;
  TDDP_CHECK(batchmean_allowed && reduction == "batchmean",
             "{}: '{}' is not a valid value for reduction (use 'mean', 'sum'{} or 'none')", op, reduction,
             batchmean_allowed ? ", 'batchmean'" : "");
  return t::div(t::sum(losses), static_cast<double>(losses.dim() == 0 ? 1 : losses.size(0)));
}

// input and target defined, of one shape and one floating dtype.
void check_pair(const Tensor& input, const Tensor& target, const char* op) {
  TDDP_CHECK(input.defined() && target.defined(), "{}: undefined input or target", op);
  TDDP_CHECK(input.sizes() == target.sizes(),
             "{}: input shape {} and target shape {} differ (give the target the input's shape)", op,
             t::format_shape(input.sizes()), t::format_shape(target.sizes()));
  TDDP_CHECK(input.is_floating_point() && target.is_floating_point(),
             "{}: expected floating-point input and target, got {} and {}", op, t::dtype_name(input.dtype()),
             t::dtype_name(target.dtype()));
}

// 1 - x.
Tensor one_minus(const Tensor& x) { return t::add(t::neg(x), 1.0); }

// An elementwise weight (BCE's weight, pos_weight), where given: of the input's dtype and
// device, and broadcastable to `shape`.
void check_weight(const Tensor& weight, const Tensor& input, const char* name, const char* op) {
  if (!weight.defined()) return;
  TDDP_CHECK(weight.dtype() == input.dtype() && weight.device() == input.device(),
             "{}: {} ({}, {}) must have the input's dtype and device ({}, {})", op, name, t::dtype_name(weight.dtype()),
             weight.device().str(), t::dtype_name(input.dtype()), input.device().str());
  TDDP_CHECK(t::broadcast_shapes(weight.sizes(), input.sizes(), op) == input.sizes(),
             "{}: {} of shape {} does not broadcast to the input's shape {}", op, name, t::format_shape(weight.sizes()),
             t::format_shape(input.sizes()));
}

}  // namespace

Tensor l1_loss(const Tensor& input_in, const Tensor& target_in, std::string_view reduction) {
  Tensor input = input_in, target = target_in;
  if (t::detail::autocast_args(t::detail::CastPolicy::kFloat32, {&input, &target})) {
    return l1_loss(input, target, reduction);
  }
  check_pair(input, target, "l1_loss");
  return reduced(t::abs(t::sub(input, target)), reduction, "l1_loss");
}

Tensor smooth_l1_loss(const Tensor& input_in, const Tensor& target_in, std::string_view reduction, double beta) {
  Tensor input = input_in, target = target_in;
  if (t::detail::autocast_args(t::detail::CastPolicy::kFloat32, {&input, &target})) {
    return smooth_l1_loss(input, target, reduction, beta);
  }
  check_pair(input, target, "smooth_l1_loss");
  TDDP_CHECK(beta >= 0, "smooth_l1_loss: beta must be non-negative, got {}", beta);
  if (beta == 0) return l1_loss(input, target, reduction);
  const Tensor d = t::sub(input, target), size = t::abs(d);
  const Tensor losses = t::where(t::lt(size, beta), t::mul(t::mul(d, d), 0.5 / beta), t::sub(size, 0.5 * beta));
  return reduced(losses, reduction, "smooth_l1_loss");
}

Tensor huber_loss(const Tensor& input_in, const Tensor& target_in, std::string_view reduction, double delta) {
  Tensor input = input_in, target = target_in;
  if (t::detail::autocast_args(t::detail::CastPolicy::kFloat32, {&input, &target})) {
    return huber_loss(input, target, reduction, delta);
  }
  check_pair(input, target, "huber_loss");
  TDDP_CHECK(delta > 0, "huber_loss: delta must be positive, got {}", delta);
  const Tensor d = t::sub(input, target), size = t::abs(d);
  const Tensor losses =
      t::where(t::lt(size, delta), t::mul(t::mul(d, d), 0.5), t::mul(t::sub(size, 0.5 * delta), delta));
  return reduced(losses, reduction, "huber_loss");
}

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, std::string_view reduction,
                            const Tensor& weight) {
  TDDP_CHECK(!(input.defined() && t::is_autocast_enabled(input.device().type)),
             "binary_cross_entropy is unsafe to autocast (as in PyTorch): use binary_cross_entropy_with_logits, "
             "which combines the sigmoid with the loss, or leave the autocast scope for it");
  check_pair(input, target, "binary_cross_entropy");
  check_weight(weight, input, "weight", "binary_cross_entropy");
  if (input.numel() > 0) {
    t::NoGradGuard no_grad;
    const double lowest = t::min(input).item<double>(), highest = t::max(input).item<double>();
    TDDP_CHECK(lowest >= 0 && highest <= 1,
               "binary_cross_entropy: all elements of input should be between 0 and 1, "
               "got {}",
               lowest < 0 ? lowest : highest);
  }
  // Each log clamped at -100 (PyTorch's), so a probability of 0 or 1 gives a finite loss.
  const Tensor log_x = t::clamp(t::log(input), -100.0), log_1mx = t::clamp(t::log(one_minus(input)), -100.0);
  Tensor losses = t::neg(t::add(t::mul(target, log_x), t::mul(one_minus(target), log_1mx)));
  if (weight.defined()) losses = t::mul(losses, weight);
  return reduced(losses, reduction, "binary_cross_entropy");
}

Tensor binary_cross_entropy_with_logits(const Tensor& input_in, const Tensor& target_in, std::string_view reduction,
                                        const Tensor& weight_in, const Tensor& pos_weight_in) {
  Tensor input = input_in, target = target_in, weight = weight_in, pos_weight = pos_weight_in;
  if (t::detail::autocast_args(t::detail::CastPolicy::kFloat32, {&input, &target, &weight, &pos_weight})) {
    return binary_cross_entropy_with_logits(input, target, reduction, weight, pos_weight);
  }
  const char* op = "binary_cross_entropy_with_logits";
  check_pair(input, target, op);
  check_weight(weight, input, "weight", op);
  check_weight(pos_weight, input, "pos_weight", op);
  const Tensor m = t::clamp(t::neg(input), 0.0);
  const Tensor log_sum = t::add(t::log(t::add(t::exp(t::neg(m)), t::exp(t::sub(t::neg(input), m)))), m);
  // pos_weight p scales the positive term: (1 - t) x + (1 + (p - 1) t) log(1 + exp(-x)).
  const Tensor scale = pos_weight.defined() ? t::add(t::mul(t::sub(pos_weight, 1.0), target), 1.0) : Tensor();
  Tensor losses = t::add(t::mul(one_minus(target), input), scale.defined() ? t::mul(scale, log_sum) : log_sum);
  if (weight.defined()) losses = t::mul(losses, weight);
  return reduced(losses, reduction, op);
}

Tensor kl_div(const Tensor& input_in, const Tensor& target_in, std::string_view reduction, bool log_target) {
  Tensor input = input_in, target = target_in;
  if (t::detail::autocast_args(t::detail::CastPolicy::kFloat32, {&input, &target})) {
    return kl_div(input, target, reduction, log_target);
  }
  check_pair(input, target, "kl_div");
  Tensor losses;
  if (log_target) {
    losses = t::mul(t::exp(target), t::sub(target, input));
  } else {
    // target log target, 0 where target is 0 (torch.xlogy), minus target input.
    const Tensor xlogy = t::masked_fill(t::mul(target, t::log(target)), t::eq(target, 0.0), 0.0);
    losses = t::sub(xlogy, t::mul(target, input));
  }
  return reduced(losses, reduction, "kl_div", /*batchmean_allowed=*/true);
}

}  // namespace tinyddp::nn
