// BatchNorm1d/2d (batchnorm.h): the channel checks, the factor the running statistics move by
// (the momentum, or a cumulative average when it is None, counted in num_batches_tracked),
// and the forward, which tensor::batch_norm computes with batch statistics in training and
// the running ones in eval.
#include "tinyddp/nn/batchnorm.h"

namespace tinyddp::nn {

NormBase::NormBase(std::string type, int64_t num_features_, double eps_, std::optional<double> momentum_, bool affine_,
                   bool track_running_stats_)
    : Module(std::move(type)), num_features(num_features_), eps(eps_), momentum(momentum_), affine(affine_),
      track_running_stats(track_running_stats_) {
  TDDP_CHECK(num_features > 0, "{}: num_features must be positive, got {}", type_name(), num_features);
  TDDP_CHECK(eps > 0, "{}: eps must be positive, got {}", type_name(), eps);
  if (affine) {
    weight = register_parameter("weight", tensor::ones({num_features}));
    bias = register_parameter("bias", tensor::zeros({num_features}));
  }
  if (track_running_stats) {
    running_mean = register_buffer("running_mean", tensor::zeros({num_features}));
    running_var = register_buffer("running_var", tensor::ones({num_features}));
    num_batches_tracked = register_buffer("num_batches_tracked", tensor::zeros({}, tensor::kInt64));
  }
}

void BatchNorm::check_channels(const Tensor& input) const {
  TDDP_CHECK(input.size(1) == num_features, "{}: expected input with {} channels (dim 1), got shape {}", type_name(),
             num_features, tensor::format_shape(input.sizes()));
}

double BatchNorm::advance_running_stats() {
  if (!is_training() || !track_running_stats) return momentum.value_or(0.0);
  return count_batch();
}

double BatchNorm::count_batch() {
  tensor::NoGradGuard no_grad;
  num_batches_tracked.add_(1.0);
  if (momentum) return *momentum;
  return 1.0 / static_cast<double>(num_batches_tracked.item<int64_t>());  // cumulative moving average
}

Tensor BatchNorm::forward(const Tensor& input) {
  check_input_dim(input);
  check_channels(input);
  if (deferring_ && is_training() && track_running_stats) {
    // Momentum 1 into zeros: the batch's mean and unbiased variance, exactly as batch_norm
    // would blend them into the running statistics.
    BatchStatistics batch{tensor::zeros_like(running_mean), tensor::zeros_like(running_var)};
    Tensor out = tensor::batch_norm(input, batch.mean, batch.unbiased_var, weight, bias, true, 1.0, eps);
    deferred_.push_back(std::move(batch));
    return out;
  }
  const double factor = advance_running_stats();
  // In training the running statistics are updated (when tracked); in eval they normalise.
  return tensor::batch_norm(input, running_mean, running_var, weight, bias, uses_batch_stats(), factor, eps);
}

void BatchNorm::defer_running_stats(bool on) {
  deferring_ = on;
  deferred_.clear();
}

void BatchNorm::apply_running_stats(const Tensor& mean, const Tensor& unbiased_var) {
  TDDP_CHECK(track_running_stats, "{}: apply_running_stats needs track_running_stats", type_name());
  TDDP_CHECK(mean.sizes() == running_mean.sizes() && unbiased_var.sizes() == running_var.sizes(),
             "{}: apply_running_stats takes [{}] statistics, got {} and {}", type_name(), num_features,
             tensor::format_shape(mean.sizes()), tensor::format_shape(unbiased_var.sizes()));
  const double factor = count_batch();
  tensor::NoGradGuard no_grad;
  running_mean.mul_(1.0 - factor).add_(mean.to(running_mean.dtype()), factor);
  running_var.mul_(1.0 - factor).add_(unbiased_var.to(running_var.dtype()), factor);
}

std::string NormBase::extra_repr() const {
  return fmt::format("{}, eps={}, momentum={}, affine={}, track_running_stats={}", num_features, eps,
                     momentum ? fmt::format("{}", *momentum) : "None", affine ? "True" : "False",
                     track_running_stats ? "True" : "False");
}

void BatchNorm1d::check_input_dim(const Tensor& input) const {
  TDDP_CHECK(input.dim() == 2 || input.dim() == 3, "BatchNorm1d: expected 2D or 3D input, got shape {}",
             tensor::format_shape(input.sizes()));
}

void BatchNorm2d::check_input_dim(const Tensor& input) const {
  TDDP_CHECK(input.dim() == 4, "BatchNorm2d: expected 4D input [N, C, H, W], got shape {}",
             tensor::format_shape(input.sizes()));
}

std::shared_ptr<Module> BatchNorm1d::clone_structure() const {
  return std::make_shared<BatchNorm1d>(num_features, eps, momentum, affine, track_running_stats);
}
std::shared_ptr<Module> BatchNorm2d::clone_structure() const {
  return std::make_shared<BatchNorm2d>(num_features, eps, momentum, affine, track_running_stats);
}

}  // namespace tinyddp::nn
