// The composites of composite.h, written on the public ops (and the backends' im2col and
// col2im through the dispatch), for whichever device the tensors are on.
#include "tinyddp/tensor/native/composite.h"

#include <limits>

#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/internal/backend.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::tensor::composite {

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
  out.copy_(y);
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
  grad_x.copy_(mul(g, per_channel(scale, x)));
}

void max_pool2d(const Tensor& out, const Tensor& indices, const Tensor& x, const Window2d& w) {
  const Tensor col = empty({w.n, w.c, w.kh, w.kw, w.oh, w.ow}, TensorOptions(x.dtype()).device(x.device()));
  const double pad = -std::numeric_limits<double>::infinity();
  backend_for(x.device(), "max_pool2d").im2col(col, x, w, pad);
  const auto [values, taps] = max(col.view({w.n, w.c, w.kh * w.kw, w.oh, w.ow}), {2}, false);
  out.copy_(values);
  indices.copy_(taps);  // the window's tap i * kw + j
}

void max_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& indices, const Window2d& w) {
  const Tensor taps = arange(w.kh * w.kw, TensorOptions(kInt64).device(grad_out.device())).view({1, 1, -1, 1, 1});
  const Tensor chosen = eq(indices.unsqueeze(2), taps).to(grad_out.dtype());  // one-hot over the window
  const Tensor col = mul(chosen, grad_out.unsqueeze(2)).view({w.n, w.c, w.kh, w.kw, w.oh, w.ow});
  // col2im writes a row-major gradient: a channels-last one takes it through a stand-in.
  Backend& backend = backend_for(grad_x.device(), "max_pool2d backward");
  const Tensor target = backend.stand_in(grad_x);
  backend.col2im(target, col, w);
  backend.settle(grad_x, target);
}

void layer_norm_param_grads(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& dy, const Tensor& x,
                            const Tensor& mean, const Tensor& rstd) {
  if (grad_weight.defined()) {
    const int64_t rows = x.size(0);
    const Tensor xhat = mul(sub(x.to(mean.dtype()), mean.view({rows, 1})), rstd.view({rows, 1}));
    grad_weight.copy_(sum(mul(dy.to(mean.dtype()), xhat), {0}));
  }
  if (grad_bias.defined()) grad_bias.copy_(sum(dy, {0}));
}

}  // namespace tinyddp::tensor::composite
