// The composites of tensor/native/composite.h (what the GPU runs for batch normalisation, max
// pooling and layer normalisation's parameter gradients, composed from other ops) run on CPU
// tensors here and are held to the CPU's own kernels, which the op tests hold to PyTorch. In
// float64 both sides round at 2^-53 per operation over a few dozen terms: 1e-12 leaves room
// for that and none for a wrong formula.
#include <cmath>
#include <limits>

#include "tests/test_util.h"
#include "tinyddp/tensor/all.h"
#include "tinyddp/tensor/native/composite.h"
#include "tinyddp/tensor/native/window.h"

using namespace tinyddp::tensor;

namespace {

constexpr double kTol = 1e-12;

double max_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  return max(abs(sub(a.to(kFloat64), b.to(kFloat64)))).item<double>();
}

Tensor random(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return randn(shape, TensorOptions(kFloat64), &g);
}

}  // namespace

TEST_CASE("composite batch normalisation equals the CPU kernels, step by step", "[tensor][composite]") {
  NoGradGuard no_grad;
  const Tensor x = random({4, 3, 5, 5}, 1), dy = random({4, 3, 5, 5}, 2);
  const Tensor weight = random({3}, 3), bias = random({3}, 4);
  const auto [mean, var] = batch_norm_mean_var(x);
  const auto [c_mean, c_var] = composite::batch_norm_mean_var(x);
  CHECK(max_diff(c_mean, mean) < kTol);
  CHECK(max_diff(c_var, var) < kTol);
  const Tensor invstd = pow(add(var, 1e-5), -0.5);
  const Tensor out = empty_like(x);
  composite::batch_norm_elemt(out, x, weight, bias, mean, invstd);
  CHECK(max_diff(out, batch_norm_elemt(x, weight, bias, mean, invstd)) < kTol);
  composite::batch_norm_elemt(out, x, Tensor(), Tensor(), mean, invstd);  // no affine parameters
  CHECK(max_diff(out, batch_norm_elemt(x, Tensor(), Tensor(), mean, invstd)) < kTol);

  const auto [sum_dy, sum_dy_xmu] = batch_norm_backward_reduce(dy, x, mean);
  const auto [c_sum_dy, c_sum_dy_xmu] = composite::batch_norm_backward_reduce(dy, x, mean);
  CHECK(max_diff(c_sum_dy, sum_dy) < kTol);
  CHECK(max_diff(c_sum_dy_xmu, sum_dy_xmu) < kTol);
  const Tensor grad_x = empty_like(x);
  const double count = 4 * 5 * 5;
  composite::batch_norm_backward_elemt(grad_x, dy, x, mean, invstd, weight, sum_dy, sum_dy_xmu, count);
  CHECK(max_diff(grad_x, batch_norm_backward_elemt(dy, x, mean, invstd, weight, sum_dy, sum_dy_xmu, count)) < kTol);
  // Fixed statistics (eval mode): no sums.
  composite::batch_norm_backward_elemt(grad_x, dy, x, mean, invstd, weight, Tensor(), Tensor(), count);
  CHECK(max_diff(grad_x, batch_norm_backward_elemt(dy, x, mean, invstd, weight, Tensor(), Tensor(), count)) < kTol);
}

TEST_CASE("composite batch normalisation takes a bfloat16 input with float32 vectors, as the CPU kernels do",
          "[tensor][composite]") {
  // The route of a backend without batch-norm kernels (CUDA) under autocast: a bfloat16 input,
  // float32 statistics and parameters. Results within one bfloat16 step of the CPU's mixed
  // kernels (both compute in float32 and round once; the sums agree to float32's precision).
  NoGradGuard no_grad;
  const Tensor x = random({4, 3, 5, 5}, 7).to(kBFloat16), dy = random({4, 3, 5, 5}, 8).to(kBFloat16);
  const Tensor weight = random({3}, 9).to(kFloat32), bias = random({3}, 10).to(kFloat32);
  const auto [mean, var] = batch_norm_mean_var(x, kFloat32);
  REQUIRE(mean.dtype() == kFloat32);
  const auto [c_mean, c_var] = composite::batch_norm_mean_var(x.to(kFloat32));
  // float32 sums of 100 terms against double ones: at most 100 eps32 times the sum of |terms|
  // (the variance's terms hold the mean's error too: twice that).
  const auto bound = [](const Tensor& terms) { return 100 * std::ldexp(1.0, -24) * sum(abs(terms)).item<double>(); };
  const Tensor centered = sub(x.to(kFloat64), mean.to(kFloat64).view({1, 3, 1, 1}));
  CHECK(max_diff(c_mean, mean) <= bound(x.to(kFloat64)) / 100);
  CHECK(max_diff(c_var, var) <= 2 * bound(mul(centered, centered)) / 100);
  const Tensor invstd = pow(add(var, 1e-5), -0.5);
  const auto within_a_step = [](const Tensor& got, const Tensor& want) {
    return got.dtype() == kBFloat16 && allclose(got.to(kFloat32), want.to(kFloat32), 1.0 / 128, 1e-6);
  };
  const Tensor out = empty_like(x);
  composite::batch_norm_elemt(out, x, weight, bias, mean, invstd);
  CHECK(within_a_step(out, batch_norm_elemt(x, weight, bias, mean, invstd)));
  const auto [sum_dy, sum_dy_xmu] = batch_norm_backward_reduce(dy, x, mean);
  REQUIRE(sum_dy.dtype() == kFloat32);
  const auto [c_sum_dy, c_sum_dy_xmu] = composite::batch_norm_backward_reduce(dy.to(kFloat32), x.to(kFloat32), mean);
  CHECK(max_diff(c_sum_dy, sum_dy) <= bound(dy.to(kFloat64)));
  CHECK(max_diff(c_sum_dy_xmu, sum_dy_xmu) <= bound(mul(dy.to(kFloat64), centered)));
  const Tensor grad_x = empty_like(x);
  composite::batch_norm_backward_elemt(grad_x, dy, x, mean, invstd, weight, sum_dy, sum_dy_xmu, 100.0);
  CHECK(within_a_step(grad_x, batch_norm_backward_elemt(dy, x, mean, invstd, weight, sum_dy, sum_dy_xmu, 100.0)));
}

TEST_CASE("composite max pooling equals the CPU kernel, forward and backward", "[tensor][composite]") {
  const Tensor x = random({2, 3, 7, 6}, 5).requires_grad_(true);
  const Tensor out = max_pool2d(x, 3, Size2d(2, 1), 1);
  const Tensor g = random(out.sizes(), 6);
  sum(mul(out, g)).backward();
  NoGradGuard no_grad;
  const Window2d w = detail::make_window(x.sizes(), 3, Size2d(2, 1), 1, 1, "max_pool2d");
  const Tensor c_out = empty_like(out), indices = empty(out.sizes(), TensorOptions(kInt64));
  composite::max_pool2d(c_out, indices, x.detach(), w);
  CHECK(max_diff(c_out, out) == 0.0);  // a maximum is one of the inputs
  const Tensor grad_x = empty_like(x);
  composite::max_pool2d_backward(grad_x, g, indices, w);
  CHECK(max_diff(grad_x, x.grad()) < kTol);
}

TEST_CASE("composite layer normalisation parameter gradients equal the CPU kernel's", "[tensor][composite]") {
  const int64_t rows = 6, n = 10;
  const Tensor x = random({rows, n}, 7), dy = random({rows, n}, 8);
  const Tensor weight = random({n}, 9).requires_grad_(true), bias = random({n}, 10).requires_grad_(true);
  sum(mul(layer_norm(x, {n}, weight, bias, 1e-5), dy)).backward();
  NoGradGuard no_grad;
  const Tensor mean = tinyddp::tensor::mean(x, {1});
  const Tensor centered = sub(x, mean.view({rows, 1}));
  const Tensor rstd = pow(add(tinyddp::tensor::mean(mul(centered, centered), {1}), 1e-5), -0.5);
  const Tensor grad_weight = empty({n}, TensorOptions(kFloat64)), grad_bias = empty({n}, TensorOptions(kFloat64));
  composite::layer_norm_param_grads(grad_weight, grad_bias, dy, x, mean, rstd);
  CHECK(max_diff(grad_weight, weight.grad()) < kTol);
  CHECK(max_diff(grad_bias, bias.grad()) < kTol);
}
