// Memory formats as PyTorch's torch.channels_last: the strides of a channels-last tensor,
// is_contiguous(format) and suggest_memory_format, the differentiable copy into it, and conv2d
// and batch_norm taking it and giving it back with the values and gradients of the plain
// layout (the same kernels run: the formula is the reference); Module::to(format); errors.
#include "tests/test_util.h"
#include "tinyddp/autograd/autograd.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp;
using namespace tinyddp::tensor;
using Catch::Contains;

TEST_CASE("channels_last: strides, is_contiguous, suggest_memory_format, a differentiable copy",
          "[tensor][memory_format]") {
  Generator gen(1);
  const Tensor x = randn({2, 3, 4, 5}, kFloat64, &gen).requires_grad_();
  const Tensor y = x.contiguous(MemoryFormat::kChannelsLast);
  CHECK(y.strides() == Shape{60, 1, 15, 3});
  CHECK(y.is_contiguous(MemoryFormat::kChannelsLast));
  CHECK_FALSE(y.is_contiguous());
  CHECK(y.suggest_memory_format() == MemoryFormat::kChannelsLast);
  CHECK(x.suggest_memory_format() == MemoryFormat::kContiguous);
  CHECK(equal(y, x));
  CHECK(y.contiguous(MemoryFormat::kChannelsLast).is_same(y));  // already so: itself
  CHECK(y.contiguous(MemoryFormat::kPreserve).is_same(y));
  const Tensor w = randn({2, 3, 4, 5}, kFloat64, &gen);
  sum(mul(y, w)).backward();
  CHECK(allclose(x.grad(), w));
  // One channel: both layouts at once, so plain contiguous is suggested.
  CHECK(ones({2, 1, 3, 3}).contiguous(MemoryFormat::kChannelsLast).suggest_memory_format() ==
        MemoryFormat::kContiguous);
  CHECK_THROWS_WITH(ones({2, 3, 4}).contiguous(MemoryFormat::kChannelsLast),
                    Contains("channels_last needs a 4-D [N, C, H, W] tensor, got shape [2, 3, 4]"));
}

TEST_CASE("channels_last: conv2d and batch_norm take it and give it back, values and gradients as NCHW",
          "[tensor][memory_format]") {
  Generator gen(2);
  const Tensor x = randn({2, 3, 6, 6}, kFloat64, &gen);
  const Tensor weight = randn({4, 3, 3, 3}, kFloat64, &gen), bias = randn({4}, kFloat64, &gen);
  const Tensor gamma = randn({4}, kFloat64, &gen), beta = randn({4}, kFloat64, &gen);
  const auto run = [&](MemoryFormat format) {
    const Tensor in = x.contiguous(format).detach().requires_grad_();
    const Tensor w = weight.clone().requires_grad_();
    const Tensor conv = conv2d(in, w, bias, 1, 1);
    const Tensor out = batch_norm(conv, Tensor(), Tensor(), gamma, beta, /*training=*/true);
    sum(mul(out, out)).backward();
    return std::tuple{conv, out, in.grad(), w.grad()};
  };
  const auto [conv, out, grad_x, grad_w] = run(MemoryFormat::kContiguous);
  const auto [conv_cl, out_cl, grad_x_cl, grad_w_cl] = run(MemoryFormat::kChannelsLast);
  CHECK(conv_cl.is_contiguous(MemoryFormat::kChannelsLast));
  CHECK(out_cl.is_contiguous(MemoryFormat::kChannelsLast));
  CHECK(out.is_contiguous());
  CHECK(allclose(out_cl, out, 1e-12, 1e-12));
  CHECK(allclose(grad_x_cl, grad_x, 1e-12, 1e-12));
  CHECK(allclose(grad_w_cl, grad_w, 1e-12, 1e-12));
}

TEST_CASE("Module::to(channels_last) stores the 4-D weights so; a channels-last weight gives a channels-last output",
          "[tensor][memory_format]") {
  manual_seed(3);
  nn::Conv2d conv(3, 4, 3);
  conv.to(MemoryFormat::kChannelsLast);
  CHECK(conv.weight.is_contiguous(MemoryFormat::kChannelsLast));
  CHECK(conv.bias.is_contiguous());  // 1-D: as it was
  const Tensor out = conv.forward(randn({2, 3, 5, 5}));
  CHECK(out.is_contiguous(MemoryFormat::kChannelsLast));
}
