// Batch normalisation and dropout, written with the differentiable ops: their gradients are
// those ops' gradients composed, so nothing here needs a backward formula of its own.
#include "tinyddp/tensor/graph.h"
#include "tinyddp/tensor/ops.h"
#include "tinyddp/tensor/ops/checks.h"
#include "tinyddp/tensor/random.h"

namespace tinyddp::tensor {

using namespace detail;

namespace {

// A [C] parameter or statistic checked against input [N, C, ...].
void check_channel_vector(const Tensor& t, const Tensor& input, const char* name) {
  if (!t.defined()) return;
  check_same_dtype(input, t, "batch_norm", "input", name);
  check_same_device(input, t, "batch_norm", "input", name);
  TDDP_CHECK(t.dim() == 1 && t.size(0) == input.size(1),
             "batch_norm: expected '{}' of shape [{}] (the input's channels, dim 1 of {}), got {}", name, input.size(1),
             format_shape(input.sizes()), format_shape(t.sizes()));
}

}  // namespace

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  check_defined(input, "batch_norm", "input");
  TDDP_CHECK(input.dim() >= 2, "batch_norm: expected an input [N, C, ...] of at least 2 dims, got shape {}",
             format_shape(input.sizes()));
  TDDP_CHECK(input.is_floating_point(), "batch_norm: expected a floating-point input, got dtype {}",
             dtype_name(input.dtype()));
  check_channel_vector(running_mean, input, "running_mean");
  check_channel_vector(running_var, input, "running_var");
  check_channel_vector(weight, input, "weight");
  check_channel_vector(bias, input, "bias");
  const int64_t channels = input.size(1);
  // Statistics are per channel: reduce every dim but 1; [C] vectors broadcast as [1, C, 1, ...].
  Shape dims{0}, channel_shape(static_cast<size_t>(input.dim()), 1);
  for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  channel_shape[1] = channels;
  const int64_t count = input.numel() / std::max<int64_t>(channels, 1);
  Tensor mean_c, invstd_c;  // [1, C, 1, ...]
  if (training) {
    TDDP_CHECK(count > 1, "batch_norm: expected more than 1 value per channel when training, got input of shape {}",
               format_shape(input.sizes()));
    mean_c = mean(input, dims, true);
    const Tensor centered = sub(input, mean_c);
    const Tensor var_c = mean(mul(centered, centered), dims, true);  // biased: normalises the batch
    invstd_c = 1.0 / sqrt(add(var_c, eps));
    if (running_mean.defined() || running_var.defined()) {
      NoGradGuard no_grad;
      if (running_mean.defined()) {
        running_mean.mul_(1.0 - momentum).add_(mean_c.reshape({channels}), momentum);
      }
      if (running_var.defined()) {  // unbiased: estimates the population's variance
        const double unbias = static_cast<double>(count) / static_cast<double>(count - 1);
        running_var.mul_(1.0 - momentum).add_(var_c.reshape({channels}), momentum * unbias);
      }
    }
    Tensor out = mul(centered, invstd_c);
    if (weight.defined()) out = mul(out, weight.view(channel_shape));
    if (bias.defined()) out = add(out, bias.view(channel_shape));
    return out;
  }
  TDDP_CHECK(running_mean.defined() && running_var.defined(),
             "batch_norm: running_mean and running_var are needed outside training (training=false)");
  mean_c = running_mean.view(channel_shape);
  invstd_c = 1.0 / sqrt(add(running_var.view(channel_shape), eps));
  Tensor out = mul(sub(input, mean_c), invstd_c);
  if (weight.defined()) out = mul(out, weight.view(channel_shape));
  if (bias.defined()) out = add(out, bias.view(channel_shape));
  return out;
}

Tensor dropout(const Tensor& input, double p, bool training, Generator* generator) {
  check_defined(input, "dropout", "input");
  TDDP_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability p must be between 0 and 1, got {}", p);
  TDDP_CHECK(input.is_floating_point(), "dropout: expected a floating-point input, got dtype {}",
             dtype_name(input.dtype()));
  if (!training || p == 0.0) return input;
  Tensor mask;  // 1 / (1 - p) where kept, 0 where dropped (all 0 for p = 1)
  {
    NoGradGuard no_grad;
    const Tensor kept = lt(rand_like(input, generator), 1.0 - p);
    mask = p == 1.0 ? zeros_like(input) : mul(kept.to(input.dtype()), 1.0 / (1.0 - p));
  }
  return mul(input, mask);
}

}  // namespace tinyddp::tensor
