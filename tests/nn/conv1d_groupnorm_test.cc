// Conv1d and GroupNorm against PyTorch (fixtures/make_conv1d_groupnorm_fixture.py): Conv1d's
// initial weights after the same seed (the same uniform draws), and both modules' outputs and
// gradients of input, weight and bias in float64 (1e-12: the same roundings up to summation
// order over a few dozen terms); gradchecks; errors.
#include <nlohmann/json.hpp>

#include "tests/nn/json_fixture.h"
#include "tests/nn/nn_test_util.h"
#include "tinyddp/autograd/gradcheck.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using Catch::Contains;

namespace {

using tinyddp::testing::doubles;

tensor::Shape shape_of(const nlohmann::json& dims) {
  const std::vector<int64_t> d = dims.get<std::vector<int64_t>>();
  return tensor::Shape(d.begin(), d.end());
}

// Loads the fixture's weights into `module` (float64), runs the recorded input and gradient,
// and compares the output and the three gradients.
void check_module(Module& module, Tensor& weight, Tensor& bias, const nlohmann::json& c) {
  module.to(tensor::kFloat64);
  {
    tensor::NoGradGuard no_grad;
    weight.copy_(doubles(c["weight"], weight.sizes()));
    bias.copy_(doubles(c["bias"], bias.sizes()));
  }
  const Tensor x = doubles(c["input"], shape_of(c["input_shape"])).requires_grad_();
  const Tensor out = module(x);
  REQUIRE(out.sizes() == shape_of(c["out_shape"]));
  CHECK(tensor::allclose(out, doubles(c["out"], out.sizes()), 1e-12, 1e-12));
  out.backward(doubles(c["grad_out"], out.sizes()));
  CHECK(tensor::allclose(x.grad(), doubles(c["grad_input"], x.sizes()), 1e-12, 1e-12));
  CHECK(tensor::allclose(weight.grad(), doubles(c["grad_weight"], weight.sizes()), 1e-12, 1e-12));
  CHECK(tensor::allclose(bias.grad(), doubles(c["grad_bias"], bias.sizes()), 1e-12, 1e-12));
}

}  // namespace

TEST_CASE("Conv1d and GroupNorm equal PyTorch's: initial weights, outputs, gradients", "[nn][layers][fixture]") {
  const nlohmann::json ref = tinyddp::testing::read_nn_json_fixture("conv1d_groupnorm_reference.json");
  tensor::manual_seed(ref["conv1d_init"]["seed"].get<uint64_t>());
  Conv1d conv(4, 6, 3, 2, 1, 2, 2);
  CHECK(tensor::equal(conv.weight.detach(), doubles(ref["conv1d_init"]["weight"], {6, 2, 3}).to(tensor::kFloat32)));
  CHECK(tensor::equal(conv.bias.detach(), doubles(ref["conv1d_init"]["bias"], {6}).to(tensor::kFloat32)));
  CHECK(conv.repr() == "Conv1d(4, 6, kernel_size=(3,), stride=(2,), padding=(1,), dilation=(2,), groups=2)");
  check_module(conv, conv.weight, conv.bias, ref["conv1d"]);
  GroupNorm norm(3, 6);
  CHECK(norm.repr() == "GroupNorm(3, 6, eps=1e-05, affine=True)");
  check_module(norm, norm.weight, norm.bias, ref["group_norm"]);
}

TEST_CASE("conv1d and group_norm pass gradcheck; bad shapes are named", "[nn][layers]") {
  using Inputs = std::vector<Tensor>;
  tensor::Generator gen(2);
  const auto leaf = [&](const tensor::Shape& s) { return tensor::randn(s, tensor::kFloat64, &gen).requires_grad_(); };
  CHECK(autograd::gradcheck([](const Inputs& v) { return tensor::conv1d(v[0], v[1], v[2], 2, 1); },
                            {leaf({2, 3, 7}), leaf({4, 3, 3}), leaf({4})}) == "");
  CHECK(autograd::gradcheck([](const Inputs& v) { return tensor::group_norm(v[0], 2, v[1], v[2]); },
                            {leaf({2, 4, 3}), leaf({4}), leaf({4})}) == "");
  CHECK_THROWS_WITH(tensor::group_norm(tensor::zeros({2, 6, 3}), 4),
                    Contains("group_norm: expected the number of channels (6) to be divisible by num_groups (4)"));
  CHECK_THROWS_WITH(GroupNorm(4, 6), Contains("GroupNorm: num_channels (6) must be divisible by num_groups (4)"));
  Conv1d conv(3, 2, 3);
  CHECK_THROWS_WITH(conv(tensor::zeros({2, 4, 9})), Contains("Conv1d: expected input [N, 3, L] or [3, L]"));
  CHECK_THROWS_WITH(tensor::conv1d(tensor::zeros({2, 3, 9}), tensor::zeros({2, 3, 3, 3})),
                    Contains("conv1d: expected a 3-D weight"));
}
