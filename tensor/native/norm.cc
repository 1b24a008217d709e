// Batch normalisation (its four steps, as PyTorch's, and batch_norm from them with its backward
// beside it) and dropout (written with the differentiable ops, whose gradients compose).
#include <algorithm>
#include <array>
#include <tuple>
#include <utility>

#include "tinyddp/tensor/graph.h"
#include "tinyddp/tensor/internal/backend.h"
#include "tinyddp/tensor/native/checks.h"
#include "tinyddp/tensor/native/composite.h"
#include "tinyddp/tensor/native/graph_formulas.h"
#include "tinyddp/tensor/ops.h"
#include "tinyddp/tensor/random.h"

namespace tinyddp::tensor {

using namespace detail;

namespace {

// The dtype of the [C] vectors beside `input`: the input's, or float32 for a 16-bit input
// beside any float32 vector (autocast's activations into a float32 BatchNorm: computed mixed,
// as PyTorch's CPU kernels, never widened and rounded back).
DType stats_dtype_for(const Tensor& input, std::initializer_list<const Tensor*> vectors) {
  if (input.defined() && is_16bit_float(input.dtype())) {
    for (const Tensor* t : vectors) {
      if (t->defined() && t->dtype() == kFloat32) return kFloat32;
    }
  }
  return input.dtype();
}

// A [C] parameter or statistic checked against input [N, C, ...] and the call's statistics
// dtype.
void check_channel_vector(const Tensor& t, const Tensor& input, const char* name, DType stats) {
  if (!t.defined()) return;
  if (stats == input.dtype()) check_same_dtype(input, t, "batch_norm", "input", name);
  TDDP_CHECK(t.dtype() == stats,
             "batch_norm: expected '{}' of dtype {} (the {} input's [C] vectors are all {} or all float32), got {}",
             name, dtype_name(stats), dtype_name(input.dtype()), dtype_name(input.dtype()), dtype_name(t.dtype()));
  check_same_device(input, t, "batch_norm", "input", name);
  TDDP_CHECK(t.dim() == 1 && t.size(0) == input.size(1),
             "batch_norm: expected '{}' of shape [{}] (the input's channels, dim 1 of {}), got {}", name, input.size(1),
             format_shape(input.sizes()), format_shape(t.sizes()));
}

}  // namespace

namespace {

// The steps' common checks: a floating-point [N, C, ...] input, [C] vectors of its dtype and device.
void check_bn_input(const Tensor& input, const char* op) {
  check_defined(input, op, "input");
  TDDP_CHECK(input.dim() >= 2, "{}: expected an input [N, C, ...] of at least 2 dims, got shape {}", op,
             format_shape(input.sizes()));
  TDDP_CHECK(input.is_floating_point(), "{}: expected a floating-point input, got dtype {}", op,
             dtype_name(input.dtype()));
  check_kernel_device(input, op);
}

}  // namespace

std::tuple<Tensor, Tensor> batch_norm_mean_var(const Tensor& input, std::optional<DType> stats_dtype) {
  check_bn_input(input, "batch_norm_mean_var");
  const DType stats = stats_dtype.value_or(input.dtype());
  TDDP_CHECK(stats == input.dtype() || (is_16bit_float(input.dtype()) && stats == kFloat32),
             "batch_norm_mean_var: statistics of a {} input come in {} (or float32 for a 16-bit input), not {}",
             dtype_name(input.dtype()), dtype_name(input.dtype()), dtype_name(stats));
  NoGradGuard no_grad;
  const Tensor x = input.contiguous();
  if (auto found = backend_for(x.device(), "batch_norm").batch_norm_mean_var(x, stats)) return *found;
  return composite::batch_norm_mean_var(x.to(stats));
}

Tensor batch_norm_elemt(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& mean,
                        const Tensor& invstd) {
  check_bn_input(input, "batch_norm_elemt");
  const DType stats = stats_dtype_for(input, {&weight, &bias, &mean, &invstd});
  for (const auto& [t, name] : {std::pair{&weight, "weight"}, {&bias, "bias"}, {&mean, "mean"}, {&invstd, "invstd"}}) {
    check_channel_vector(*t, input, name, stats);
  }
  NoGradGuard no_grad;
  const Tensor out = new_output(input.sizes(), input.dtype(), input.device());
  const Tensor x = input.contiguous();
  if (!backend_for(x.device(), "batch_norm").batch_norm_elemt(out, x, weight, bias, mean, invstd)) {
    composite::batch_norm_elemt(out, x, weight, bias, mean, invstd);
  }
  return out;
}

std::tuple<Tensor, Tensor> batch_norm_backward_reduce(const Tensor& grad_out, const Tensor& input, const Tensor& mean) {
  check_bn_input(input, "batch_norm_backward_reduce");
  check_same_dtype(input, grad_out, "batch_norm_backward_reduce", "input", "grad_out");
  TDDP_CHECK(grad_out.sizes() == input.sizes(), "batch_norm_backward_reduce: grad_out of shape {} for input {}",
             format_shape(grad_out.sizes()), format_shape(input.sizes()));
  TDDP_CHECK(mean.defined(), "batch_norm_backward_reduce: 'mean' is undefined");
  check_channel_vector(mean, input, "mean", stats_dtype_for(input, {&mean}));
  NoGradGuard no_grad;
  const Tensor dy = grad_out.contiguous(), x = input.contiguous();
  if (auto sums = backend_for(x.device(), "batch_norm backward").batch_norm_backward_reduce(dy, x, mean)) return *sums;
  return composite::batch_norm_backward_reduce(dy.to(mean.dtype()), x.to(mean.dtype()), mean);
}

Tensor batch_norm_backward_elemt(const Tensor& grad_out, const Tensor& input, const Tensor& mean, const Tensor& invstd,
                                 const Tensor& weight, const Tensor& sum_dy, const Tensor& sum_dy_xmu, double count) {
  check_bn_input(input, "batch_norm_backward_elemt");
  check_same_dtype(input, grad_out, "batch_norm_backward_elemt", "input", "grad_out");
  TDDP_CHECK(grad_out.sizes() == input.sizes(), "batch_norm_backward_elemt: grad_out of shape {} for input {}",
             format_shape(grad_out.sizes()), format_shape(input.sizes()));
  TDDP_CHECK(sum_dy.defined() == sum_dy_xmu.defined(),
             "batch_norm_backward_elemt: give both sums (batch statistics) or neither (fixed statistics)");
  TDDP_CHECK(!sum_dy.defined() || count > 0, "batch_norm_backward_elemt: count must be positive, got {}", count);
  const DType stats = stats_dtype_for(input, {&mean, &invstd, &weight, &sum_dy, &sum_dy_xmu});
  for (const auto& [t, name] : {std::pair{&mean, "mean"},
                                {&invstd, "invstd"},
                                {&weight, "weight"},
                                {&sum_dy, "sum_dy"},
                                {&sum_dy_xmu, "sum_dy_xmu"}}) {
    check_channel_vector(*t, input, name, stats);
  }
  NoGradGuard no_grad;
  const Tensor grad_input = new_output(input.sizes(), input.dtype(), input.device());
  const Tensor dy = grad_out.contiguous(), x = input.contiguous();
  if (!backend_for(x.device(), "batch_norm backward")
           .batch_norm_backward_elemt(grad_input, dy, x, mean, invstd, weight, sum_dy, sum_dy_xmu, count)) {
    composite::batch_norm_backward_elemt(grad_input, dy, x, mean, invstd, weight, sum_dy, sum_dy_xmu, count);
  }
  return grad_input;
}

namespace {
// Batch normalisation's gradients from recorded ops (create_graph). Training: the statistics
// are the batch's, recomputed from x so that they carry its history; eval: the fixed ones.
std::vector<Tensor> batch_norm_backward_graph(const Tensor& g, const Tensor& x, const Tensor& weight,
                                              const Tensor& mean, const Tensor& invstd, bool training, double eps,
                                              std::array<bool, 3> need) {
  Shape dims{0}, channel_shape(static_cast<size_t>(x.dim()), 1);  // reduce all but dim 1; [1, C, 1, ...]
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  channel_shape[1] = x.size(1);
  const Tensor w = weight.defined() ? weight.view(channel_shape) : Tensor();
  Tensor grad_input, xhat;
  if (training) {
    NormalizedGrad d = normalized_backward(g, x, w, dims, eps);
    grad_input = d.grad_input;
    xhat = d.xhat;
  } else {
    const Tensor rstd = invstd.view(channel_shape);
    xhat = mul(sub(x, mean.view(channel_shape)), rstd);
    grad_input = mul(w.defined() ? mul(g, w) : g, rstd);
  }
  return {need[0] ? grad_input : Tensor(), need[1] ? sum(mul(g, xhat), dims) : Tensor(),
          need[2] ? sum(g, dims) : Tensor()};
}
}  // namespace

bool batch_norm_widens(const Tensor& input, const Tensor& running_mean, const Tensor& weight) {
  const Tensor& stats_like = running_mean.defined() ? running_mean : weight;
  return input.defined() && is_16bit_float(input.dtype()) && stats_like.defined() && stats_like.dtype() == kFloat32;
}

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  check_bn_input(input, "batch_norm");
  // A 16-bit input into float32 parameters and statistics (PyTorch allows it): the statistics,
  // the sums and the arithmetic in float32 from the 16-bit values, each result rounded once to
  // the input's dtype (the steps below take the mixed dtypes; no widened copy).
  const DType stats = stats_dtype_for(input, {&running_mean, &running_var, &weight, &bias});
  for (const auto& [t, name] : {std::pair{&running_mean, "running_mean"},
                                {&running_var, "running_var"},
                                {&weight, "weight"},
                                {&bias, "bias"}}) {
    check_channel_vector(*t, input, name, stats);
  }
  const int64_t channels = input.size(1);
  const int64_t count = input.numel() / std::max<int64_t>(channels, 1);  // values per channel
  Tensor mean, invstd;                                                   // [C]
  if (training) {
    TDDP_CHECK(count > 1, "batch_norm: expected more than 1 value per channel when training, got input of shape {}",
               format_shape(input.sizes()));
    NoGradGuard no_grad;
    Tensor var;  // biased: it normalises this batch
    std::tie(mean, var) = batch_norm_mean_var(input, stats);
    invstd = 1.0 / sqrt(add(var, eps));
    // The running statistics take the unbiased variance: it estimates the population's.
    if (running_mean.defined()) running_mean.mul_(1.0 - momentum).add_(mean, momentum);
    if (running_var.defined()) {
      running_var.mul_(1.0 - momentum)
          .add_(var, momentum * static_cast<double>(count) / static_cast<double>(count - 1));
    }
  } else {
    TDDP_CHECK(running_mean.defined() && running_var.defined(),
               "batch_norm: running_mean and running_var are needed outside training (training=false)");
    NoGradGuard no_grad;
    mean = running_mean.clone();
    invstd = 1.0 / sqrt(add(running_var, eps));
  }
  const Tensor out = batch_norm_elemt(input, weight, bias, mean, invstd);
  // grad_out [N, C, ...] -> grad_weight = sum(dy (x - mean)) invstd, grad_bias = sum(dy): [C];
  // grad_input: batch_norm_backward_elemt (training: the statistics depend on the input too).
  if (needs_grad({&input, &weight, &bias})) {
    const bool need_input = input.requires_grad(), need_weight = weight.defined() && weight.requires_grad();
    const bool need_bias = bias.defined() && bias.requires_grad();
    record_op("NativeBatchNormBackward", out, {input, weight, bias},
              [sx = SavedTensor(input), sw = SavedTensor(weight), mean, invstd, training, count, eps, need_input,
               need_weight, need_bias](const Tensor& g) {
                const Tensor x = sx.get("NativeBatchNormBackward");
                if (GradMode::is_enabled()) {  // create_graph: the same formulas from recorded ops
                  // (Mixed: in float32, the input's gradient rounded back to its dtype.)
                  std::vector<Tensor> grads = batch_norm_backward_graph(
                      g.to(mean.dtype()), x.to(mean.dtype()), sw.get("NativeBatchNormBackward"), mean, invstd, training,
                      eps, {need_input, need_weight, need_bias});
                  if (grads[0].defined()) grads[0] = grads[0].to(x.dtype());
                  return grads;
                }
                const auto [sum_dy, sum_dy_xmu] = batch_norm_backward_reduce(g, x, mean);
                Tensor grad_input;
                if (need_input) {
                  grad_input = training
                                   ? batch_norm_backward_elemt(g, x, mean, invstd, sw.get("NativeBatchNormBackward"),
                                                               sum_dy, sum_dy_xmu, static_cast<double>(count))
                                   : batch_norm_backward_elemt(g, x, mean, invstd, sw.get("NativeBatchNormBackward"),
                                                               Tensor(), Tensor(), 1.0);
                }
                return std::vector<Tensor>{grad_input, need_weight ? mul(sum_dy_xmu, invstd) : Tensor(),
                                           need_bias ? sum_dy : Tensor()};
              });
  }
  // In the input's memory format, as PyTorch's (a channels-last input, a channels-last output).
  return out.contiguous(input.suggest_memory_format());
}

namespace {

// Off the CPU, dropout's mask drawn where the input is, by the backend's counter-based kernel
// (internal/philox.h) under one 64-bit key drawn from the generator: no mask crosses from the
// host. Undefined on the CPU (or a backend without the kernel). Inside a CUDA graph's capture
// the key is a device word that each replay fills anew (device_random_key).
Tensor device_dropout_mask(const Tensor& input, double p, Generator* generator) {
  if (input.device().type == DeviceType::kCPU) return Tensor();
  const RandomKey key = device_random_key(input, generator, "dropout");
  const Tensor mask = empty(input.sizes(), TensorOptions(input.dtype()).device(input.device()));
  return backend_for(input.device(), "dropout").dropout_mask(mask, p, key) ? mask : Tensor();
}

}  // namespace

Tensor dropout(const Tensor& input, double p, bool training, Generator* generator) {
  check_defined(input, "dropout", "input");
  TDDP_CHECK(p >= 0.0 && p < 1.0,
             "dropout: probability p must be in [0, 1), got {} (p = 1 would zero every element, and the kept ones' "
             "scale 1 / (1 - p) is undefined)",
             p);
  TDDP_CHECK(input.is_floating_point(), "dropout: expected a floating-point input, got dtype {}",
             dtype_name(input.dtype()));
  if (!training || p == 0.0) return input;
  Tensor mask;  // 1 / (1 - p) where kept, 0 where dropped
  {
    NoGradGuard no_grad;
    mask = device_dropout_mask(input, p, generator);
    if (!mask.defined()) {  // the CPU: drawn from the generator in PyTorch's CPU order
      const Tensor kept = lt(rand_like(input, generator), 1.0 - p);
      mask = mul(kept.to(input.dtype()), 1.0 / (1.0 - p));
    }
  }
  return mul(input, mask);
}

Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  check_defined(input, "group_norm", "input");
  TDDP_CHECK(input.dim() >= 2, "group_norm: expected an input [N, C, ...], got shape {}", format_shape(input.sizes()));
  TDDP_CHECK(input.is_floating_point(), "group_norm: expected a floating-point input, got dtype {}",
             dtype_name(input.dtype()));
  const int64_t n = input.size(0), channels = input.size(1);
  TDDP_CHECK(num_groups > 0 && channels % num_groups == 0,
             "group_norm: expected the number of channels ({}) to be divisible by num_groups ({})", channels,
             num_groups);
  for (const auto& [t, name] : {std::pair{&weight, "weight"}, {&bias, "bias"}}) {
    TDDP_CHECK(!t->defined() || t->sizes() == Shape{channels}, "group_norm: expected '{}' of shape [{}], got {}", name,
               channels, format_shape(t->sizes()));
  }
  // Each group's channels and positions in one row: mean and biased variance over it.
  const Tensor x = input.reshape({n, num_groups, -1});
  const Tensor centered = sub(x, mean(x, {2}, true));
  const Tensor var = mean(mul(centered, centered), {2}, true);
  Tensor y = div(centered, sqrt(add(var, eps))).reshape(input.sizes());
  Shape per_channel(static_cast<size_t>(input.dim()), 1);
  per_channel[1] = channels;
  if (weight.defined()) y = mul(y, weight.view(per_channel));
  if (bias.defined()) y = add(y, bias.view(per_channel));
  return keep_layout(y, input);
}

}  // namespace tinyddp::tensor
