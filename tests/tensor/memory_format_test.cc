// Memory formats as PyTorch's torch.channels_last: the strides of a channels-last tensor,
// is_contiguous(format) and suggest_memory_format, the differentiable copy into it, and conv2d
// and batch_norm taking it and giving it back with the values and gradients of the plain
// layout (the same kernels run: the formula is the reference); Module::to(format); errors.
#include <functional>
#include <map>
#include <string>
#include <utility>

#include "tests/fixture_case.h"
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

// ---- results keep channels last as PyTorch's do ----------------------------------------------
// PyTorch's layout for each op's result from a channels-last input (make_memory_format_fixtures.py):
// the same op here gives a result of the same layout and, where it draws nothing, the values
// and input gradient it gives for the row-major input.
namespace F = tinyddp::nn::functional;

namespace {

struct LayoutOp {
  std::function<Tensor(const Tensor& x, const Tensor& c, const Tensor& b)> fn;
  bool draws = false;  // random: the values differ from the row-major run's, as in PyTorch
};

using T = const Tensor&;
LayoutOp f(std::function<Tensor(T, T, T)> fn) { return LayoutOp{std::move(fn), false}; }
LayoutOp drawn(std::function<Tensor(T, T, T)> fn) { return LayoutOp{std::move(fn), true}; }

// Elementwise and unary ops, activations and dropout.
std::map<std::string, LayoutOp> elementwise_layout_ops() {
  return {
      {"add_cl_rowmajor", f([](T x, T c, T) { return x + c; })},
      {"add_rowmajor_cl", f([](T x, T c, T) { return c + x; })},
      {"add_cl_channel", f([](T x, T, T b) { return x + b; })},
      {"add_channel_cl", f([](T x, T, T b) { return b + x; })},
      {"add_cl_cl", f([](T x, T, T) { return x + x; })},
      {"mul_scalar", f([](T x, T, T) { return x * 2; })},
      {"mul_cl_rowmajor", f([](T x, T c, T) { return x * c; })},
      {"mul_rowmajor_cl", f([](T x, T c, T) { return c * x; })},
      {"sub_scalar", f([](T x, T, T) { return x - 1; })},
      {"div_channel", f([](T x, T, T b) { return x / b.abs().add(1); })},
      {"maximum", f([](T x, T c, T) { return maximum(x, c); })},
      {"pow_scalar", f([](T x, T, T) { return x.pow(2); })},
      {"pow_tensor", f([](T x, T c, T) { return x.abs().pow(c); })},
      {"gt_scalar", f([](T x, T, T) { return x > 0; })},
      {"eq_tensor", f([](T x, T c, T) { return x == c; })},
      {"where", f([](T x, T c, T) { return where(x > 0, x, c); })},
      {"clamp", f([](T x, T, T) { return x.clamp(-1, 1); })},
      {"lerp", f([](T x, T c, T) { return lerp(x, c, 0.5); })},
      {"addcmul", f([](T x, T c, T) { return addcmul(x, c, c); })},
      {"masked_fill", f([](T x, T, T) { return x.masked_fill(x > 0, 0.0); })},
      {"nan_to_num", f([](T x, T, T) { return x.nan_to_num(); })},
      {"neg", f([](T x, T, T) { return -x; })},
      {"abs", f([](T x, T, T) { return x.abs(); })},
      {"exp", f([](T x, T, T) { return x.exp(); })},
      {"sqrt", f([](T x, T, T) { return x.abs().sqrt(); })},
      {"sign", f([](T x, T, T) { return x.sign(); })},
      {"tanh", f([](T x, T, T) { return x.tanh(); })},
      {"sigmoid", f([](T x, T, T) { return x.sigmoid(); })},
      {"relu", f([](T x, T, T) { return F::relu(x); })},
      {"gelu", f([](T x, T, T) { return F::gelu(x); })},
      {"silu", f([](T x, T, T) { return F::silu(x); })},
      {"leaky_relu", f([](T x, T, T) { return F::leaky_relu(x); })},
      {"elu", f([](T x, T, T) { return F::elu(x); })},
      {"selu", f([](T x, T, T) { return F::selu(x); })},
      {"celu", f([](T x, T, T) { return F::celu(x); })},
      {"softplus", f([](T x, T, T) { return F::softplus(x); })},
      {"hardtanh", f([](T x, T, T) { return F::hardtanh(x); })},
      {"relu6", f([](T x, T, T) { return F::relu6(x); })},
      {"hardsigmoid", f([](T x, T, T) { return F::hardsigmoid(x); })},
      {"hardswish", f([](T x, T, T) { return F::hardswish(x); })},
      {"mish", f([](T x, T, T) { return F::mish(x); })},
      {"prelu", f([](T x, T, T) { return F::prelu(x, tensor::tensor({0.25})); })},
      {"dropout", drawn([](T x, T, T) { return F::dropout(x, 0.5, true); })},
      {"dropout2d", drawn([](T x, T, T) { return F::dropout2d(x, 0.5, true); })},
  };
}

// Pooling, resampling, joining, copies and factories, indexing, normalisation.
std::map<std::string, LayoutOp> layout_ops() {
  std::map<std::string, LayoutOp> ops = elementwise_layout_ops();
  ops.merge(std::map<std::string, LayoutOp>{
      {"max_pool2d", f([](T x, T, T) { return F::max_pool2d(x, 2); })},
      {"avg_pool2d", f([](T x, T, T) { return F::avg_pool2d(x, 2); })},
      {"adaptive_avg_pool2d", f([](T x, T, T) {
         return F::adaptive_avg_pool2d(x, {2, 5});
       })},
      {"adaptive_max_pool2d", f([](T x, T, T) {
         return F::adaptive_max_pool2d(x, {2, 5});
       })},
      {"interpolate_nearest", f([](T x, T, T) {
         return F::interpolate(x, F::InterpolateFuncOptions().scale_factor({2.0, 2.0}));
       })},
      {"interpolate_bilinear", f([](T x, T, T) {
         return F::interpolate(x, F::InterpolateFuncOptions().scale_factor({2.0, 2.0}).mode("bilinear"));
       })},
      {"pad", f([](T x, T, T) {
         return F::pad(x, {1, 1, 1, 1});
       })},
      {"cat_dim0", f([](T x, T, T) {
         return cat({x, x}, 0);
       })},
      {"cat_dim1", f([](T x, T, T) {
         return cat({x, x}, 1);
       })},
      {"cat_cl_rowmajor", f([](T x, T c, T) {
         return cat({x, c}, 0);
       })},
      {"cat_rowmajor_cl", f([](T x, T c, T) {
         return cat({c, x}, 0);
       })},
      {"clone", f([](T x, T, T) { return x.clone(); })},
      {"contiguous", f([](T x, T, T) { return x.contiguous(); })},
      {"to_float64", f([](T x, T, T) { return x.to(kFloat64); })},
      {"empty_like", drawn([](T x, T, T) { return empty_like(x); })},
      {"zeros_like", f([](T x, T, T) { return zeros_like(x); })},
      {"ones_like", f([](T x, T, T) { return ones_like(x); })},
      {"full_like", f([](T x, T, T) { return full_like(x, 2.0); })},
      {"rand_like", drawn([](T x, T, T) { return rand_like(x); })},
      {"randn_like", drawn([](T x, T, T) { return randn_like(x); })},
      {"index_randperm", f([](T x, T, T) {
         return x.index({tensor::tensor({1, 0})});
       })},
      {"index_select", f([](T x, T, T) {
         return x.index_select(0, tensor::tensor({1, 0}));
       })},
      {"flip", f([](T x, T, T) { return x.flip({3}); })},
      {"roll", f([](T x, T, T) { return x.roll({1}, {3}); })},
      {"softmax_dim1", f([](T x, T, T) { return x.softmax(1); })},
      {"log_softmax_dim1", f([](T x, T, T) { return F::log_softmax(x, 1); })},
      {"normalize_dim1", f([](T x, T, T) { return F::normalize(x, 2.0, 1); })},
      {"batch_norm_eval", f([](T x, T, T) { return F::batch_norm(x, zeros({3}), ones({3})); })},
      {"group_norm", f([](T x, T, T) { return F::group_norm(x, 3); })},
      {"instance_norm", f([](T x, T, T) { return F::instance_norm(x); })},
      {"layer_norm", f([](T x, T, T) { return F::layer_norm(x, {5}); })},
      {"sum_keepdim_dim1", f([](T x, T, T) { return x.sum({1}, true); })},
      {"conv_transpose2d", f([](T x, T, T) {
         Generator gen(4);
         return F::conv_transpose2d(x, randn({3, 2, 3, 3}, {}, &gen));
       })},
  });
  return ops;
}

}  // namespace

TEST_CASE("channels_last: each op's result is laid out as PyTorch's, with the row-major values and gradients",
          "[tensor][memory_format][fixture]") {
  const testing::Fixture fixture("tests/tensor/fixtures/memory_format_reference.txt");
  const std::map<std::string, LayoutOp> ops = layout_ops();
  const std::vector<std::string> names = fixture.names("layout_");
  REQUIRE(names.size() == ops.size());  // one op here for each PyTorch case
  Generator gen(1);
  const Tensor x_rows = randn({2, 3, 4, 5}, {}, &gen), c = randn({2, 3, 4, 5}, {}, &gen),
               b = randn({1, 3, 1, 1}, {}, &gen);
  for (const std::string& name : names) {
    const std::string op_name = name.substr(std::string("layout_").size());
    INFO("op " << op_name);
    REQUIRE(ops.count(op_name) == 1);
    const LayoutOp& op = ops.at(op_name);
    const Tensor expected_layout = fixture.value(name, {2});
    const Tensor x = x_rows.contiguous(MemoryFormat::kChannelsLast).requires_grad_();
    const Tensor out = op.fn(x, c, b);
    CHECK(out.is_contiguous() == (expected_layout[0].item<double>() == 1.0));
    CHECK(out.is_contiguous(MemoryFormat::kChannelsLast) == (expected_layout[1].item<double>() == 1.0));
    if (op.draws) continue;
    const Tensor x_plain = x_rows.clone().requires_grad_();
    const Tensor out_plain = op.fn(x_plain, c, b);
    CHECK(allclose(out.to(kFloat64), out_plain.to(kFloat64), 1e-6, 1e-6));
    if (!out.requires_grad()) continue;
    sum(out * out).backward();
    sum(out_plain * out_plain).backward();
    CHECK(allclose(x.grad(), x_plain.grad(), 1e-5, 1e-5));
  }
}

TEST_CASE("channels_last: rand_like and randn_like draw in memory order, the numbers of PyTorch's",
          "[tensor][memory_format][fixture]") {
  const testing::Fixture fixture("tests/tensor/fixtures/memory_format_reference.txt");
  const Tensor like = empty({2, 3, 4, 5}).contiguous(MemoryFormat::kChannelsLast);
  manual_seed(0);
  const Tensor u = rand_like(like);
  CHECK(u.is_contiguous(MemoryFormat::kChannelsLast));
  CHECK(equal(u, fixture.value("draw_rand_like", {2, 3, 4, 5}, kFloat32)));  // uniform: exactly
  manual_seed(0);
  const Tensor n = randn_like(like);
  CHECK(n.is_contiguous(MemoryFormat::kChannelsLast));
  // Normal: PyTorch's element-by-element draws (not its batched layout: the tensor is not
  // row-major), each rounded once to float32.
  CHECK(allclose(n, fixture.value("draw_randn_like", {2, 3, 4, 5}, kFloat32), 1.2e-7, 0));
}
