// F::instance_norm and InstanceNorm1d/2d (instancenorm.h). As PyTorch computes it: the input
// [N, C, ...] seen as one sample of N * C channels [1, N C, ...], batch-normalised with the
// running statistics, weight and bias repeated N times, so each (sample, channel) gets its own
// mean and biased variance; the repeated running statistics, updated, are averaged back over
// the samples.
#include "tinyddp/nn/instancenorm.h"

#include "tinyddp/nn/functional.h"

namespace tinyddp::nn {

namespace functional {

Tensor instance_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                     const Tensor& bias, bool use_input_stats, double momentum, double eps) {
  TDDP_CHECK(input.defined() && input.dim() >= 2, "instance_norm: expected an input [N, C, ...], got {}",
             input.defined() ? tensor::format_shape(input.sizes()) : std::string("an undefined tensor"));
  const int64_t n = input.size(0), c = input.size(1), positions = input.numel() / std::max<int64_t>(n * c, 1);
  TDDP_CHECK(!use_input_stats || positions > 1,
             "instance_norm: Expected more than 1 spatial element when training, got input size {}",
             tensor::format_shape(input.sizes()));
  TDDP_CHECK(use_input_stats || (running_mean.defined() && running_var.defined()),
             "instance_norm: Expected running_mean and running_var to be defined when use_input_stats is false");
  const auto repeated = [n](const Tensor& t) { return t.defined() ? tensor::repeat(t, {n}) : Tensor(); };
  Tensor mean = repeated(running_mean), var = repeated(running_var);
  tensor::Shape shape = input.sizes();
  shape[0] = 1;
  shape[1] = n * c;
  const Tensor out = tensor::batch_norm(input.reshape(shape), mean, var, repeated(weight), repeated(bias),
                                        use_input_stats, momentum, eps);
  if (use_input_stats && running_mean.defined()) {
    tensor::NoGradGuard no_grad;
    running_mean.copy_(tensor::mean(mean.view({n, c}), {0}));
    running_var.copy_(tensor::mean(var.view({n, c}), {0}));
  }
  return out.view(input.sizes());
}

}  // namespace functional

InstanceNorm::InstanceNorm(std::string type, int64_t spatial_dims_, const InstanceNormOptions& o)
    : NormBase(std::move(type), o.num_features(), o.eps(), o.momentum(), o.affine(), o.track_running_stats()),
      spatial_dims(spatial_dims_) {}

InstanceNormOptions InstanceNorm::options() const {
  return InstanceNormOptions(num_features)
      .eps(eps)
      .momentum(momentum.value_or(0.0))
      .affine(affine)
      .track_running_stats(track_running_stats);
}

Tensor InstanceNorm::forward(const Tensor& input) {
  TDDP_CHECK(input.dim() == spatial_dims + 1 || input.dim() == spatial_dims + 2,
             "{}: expected {}D (unbatched) or {}D (batched) input, got shape {}", type_name(), spatial_dims + 1,
             spatial_dims + 2, tensor::format_shape(input.sizes()));
  const bool unbatched = input.dim() == spatial_dims + 1;
  const Tensor x = unbatched ? input.unsqueeze(0) : input;
  // PyTorch only warns about a channel count that differs from num_features when there is
  // nothing per channel to apply; with a weight it is an error.
  TDDP_CHECK(!affine || x.size(1) == num_features,
             "{}: expected input's size at dim={} to match num_features ({}), but got: {}.", type_name(),
             unbatched ? 0 : 1, num_features, x.size(1));
  const Tensor out = functional::instance_norm(x, running_mean, running_var, weight, bias,
                                               is_training() || !track_running_stats, momentum.value_or(0.0), eps);
  return unbatched ? out.squeeze(0) : out;
}

}  // namespace tinyddp::nn
