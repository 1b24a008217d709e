// Batch normalisation's four steps on a GPU (cuda/backend.h), composed from the elementwise and
// reduction kernels through the tensor ops (no graph is recorded: callers hold a NoGradGuard).
#include "tinyddp/tensor/cuda/backend.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::tensor::cuda {

namespace {

// The reduced dims (all but 1) of x, and a [C] tensor viewed as [1, C, 1, ...].
Shape reduced_dims(const Tensor& x) {
  Shape dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}
Tensor per_channel(const Tensor& v, const Tensor& x) {
  Shape shape(static_cast<size_t>(x.dim()), 1);
  shape[1] = x.size(1);
  return v.view(shape);
}

}  // namespace

std::tuple<Tensor, Tensor> batch_norm_mean_var(const Tensor& x) {
  const Tensor m = mean(x, reduced_dims(x));
  const Tensor centered = sub(x, per_channel(m, x));
  return {m, mean(mul(centered, centered), reduced_dims(x))};
}

void batch_norm_elemt(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& mean,
                      const Tensor& invstd) {
  Tensor y = mul(sub(x, per_channel(mean, x)), per_channel(invstd, x));
  if (weight.defined()) y = mul(y, per_channel(weight, x));
  if (bias.defined()) y = add(y, per_channel(bias, x));
  copy(out, y);
}

std::tuple<Tensor, Tensor> batch_norm_backward_reduce(const Tensor& dy, const Tensor& x, const Tensor& mean) {
  return {sum(dy, reduced_dims(x)), sum(mul(dy, sub(x, per_channel(mean, x))), reduced_dims(x))};
}

void batch_norm_backward_elemt(const Tensor& grad_x, const Tensor& dy, const Tensor& x, const Tensor& mean,
                               const Tensor& invstd, const Tensor& weight, const Tensor& sum_dy,
                               const Tensor& sum_dy_xmu, double count) {
  Tensor g = dy;
  if (sum_dy.defined()) {
    const Tensor k = div(mul(mul(invstd, invstd), sum_dy_xmu), count);
    g = sub(sub(dy, per_channel(div(sum_dy, count), x)), mul(sub(x, per_channel(mean, x)), per_channel(k, x)));
  }
  Tensor scale = invstd;
  if (weight.defined()) scale = mul(scale, weight);
  copy(grad_x, mul(g, per_channel(scale, x)));
}

}  // namespace tinyddp::tensor::cuda
