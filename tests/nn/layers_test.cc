// Layer and loss tests against PyTorch fixtures: default initialisation after manual_seed,
// Linear forward and gradients, activations, MSE and cross-entropy (including huge logits).
#include <algorithm>

#include "tests/nn/nn_test_util.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using Catch::Contains;
using tinyddp::testing::max_abs_diff;
using tinyddp::testing::nn_fixture;

TEST_CASE("default initialisation equals PyTorch's after the same seed", "[nn][layers][fixture]") {
  const SafetensorsFile toy = load_safetensors(nn_fixture("toy_init.safetensors"));
  tensor::manual_seed(0);
  ToyModel model;
  for (const auto& [name, expected] : toy.tensors) {
    INFO(name);
    CHECK(tensor::equal(model.state_dict().at(name), expected));  // bit for bit
  }
  const SafetensorsFile seq = load_safetensors(nn_fixture("mlp_init.safetensors"));
  tensor::manual_seed(3);
  const auto net = mlp({6, 8, 8, 3});
  std::vector<std::string> ours = net->state_dict().keys(), theirs = seq.tensors.keys();
  std::sort(ours.begin(), ours.end());
  std::sort(theirs.begin(), theirs.end());  // the safetensors writer orders entries its own way
  CHECK(ours == theirs);
  for (const auto& [name, expected] : seq.tensors) {
    INFO(name);
    CHECK(tensor::equal(net->state_dict().at(name), expected));
  }
}

TEST_CASE("Linear forward and gradients equal PyTorch's", "[nn][layers][fixture]") {
  const auto f = load_safetensors(nn_fixture("layers.safetensors")).tensors;
  Linear linear(3, 2);
  OrderedDict<Tensor> state;
  state.insert("weight", f.at("linear.weight"));
  state.insert("bias", f.at("linear.bias"));
  linear.load_state_dict(state);
  const Tensor x = f.at("linear.x").clone().requires_grad_();
  const Tensor y = linear(x);
  CHECK(max_abs_diff(y, f.at("linear.y")) < 1e-6);
  y.backward(f.at("linear.grad_out"));
  CHECK(max_abs_diff(x.grad(), f.at("linear.grad_x")) < 1e-6);
  CHECK(max_abs_diff(linear.weight.grad(), f.at("linear.grad_weight")) < 1e-6);
  CHECK(max_abs_diff(linear.bias.grad(), f.at("linear.grad_bias")) < 1e-6);
}

TEST_CASE("activations equal PyTorch's forward and backward", "[nn][layers][fixture]") {
  const auto f = load_safetensors(nn_fixture("layers.safetensors")).tensors;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>> activations = {
      {"relu", std::make_shared<ReLU>()}, {"tanh", std::make_shared<Tanh>()}, {"sigmoid", std::make_shared<Sigmoid>()}};
  for (const auto& [name, module] : activations) {
    INFO(name);
    const Tensor x = f.at(name + ".x").clone().requires_grad_();
    const Tensor y = module->forward(x);
    CHECK(max_abs_diff(y, f.at(name + ".y")) < 1e-6);
    y.backward(f.at(name + ".grad_out"));
    CHECK(max_abs_diff(x.grad(), f.at(name + ".grad_x")) < 1e-6);
  }
}

TEST_CASE("MSE and cross-entropy equal PyTorch's values and gradients", "[nn][loss][fixture]") {
  const auto f = load_safetensors(nn_fixture("layers.safetensors")).tensors;
  const Tensor input = f.at("mse.input").clone().requires_grad_();
  const Tensor mse = mse_loss(input, f.at("mse.target"));
  CHECK(mse.dim() == 0);
  CHECK(max_abs_diff(mse, f.at("mse.loss")) < 1e-6);
  mse.backward();
  CHECK(max_abs_diff(input.grad(), f.at("mse.grad_input")) < 1e-6);
  for (const std::string prefix : {"ce", "ce_big"}) {
    INFO(prefix);
    const Tensor logits = f.at(prefix + ".logits").clone().requires_grad_();
    const Tensor ce = CrossEntropyLoss()(logits, f.at(prefix + ".targets"));
    CHECK(std::isfinite(ce.item<double>()));
    CHECK(max_abs_diff(ce, f.at(prefix + ".loss")) < 1e-5);
    ce.backward();
    CHECK(max_abs_diff(logits.grad(), f.at(prefix + ".grad_logits")) < 1e-6);
  }
}

TEST_CASE("loss argument errors", "[nn][loss][errors]") {
  CHECK_THROWS_WITH(mse_loss(tensor::zeros({2, 3}), tensor::zeros({3, 2})),
                    Contains("mse_loss: input shape [2, 3] and target shape [3, 2] differ"));
  const Tensor logits = tensor::zeros({2, 3});
  CHECK_THROWS_WITH(cross_entropy(logits, tensor::tensor({0.0, 1.0})),
                    Contains("cross_entropy: expected int64 class targets, or class probabilities of the logits' shape "
                             "[2, 3]; got float32 targets of shape [2]"));
  CHECK_THROWS_WITH(cross_entropy(logits, tensor::arange(3)),
                    Contains("expected targets of shape [2] for logits of shape [2, 3], got [3]"));
  CHECK_THROWS_WITH(cross_entropy(logits, tensor::tensor({0, 3}, tensor::kInt64)),
                    Contains("cross_entropy: target 3 is out of bounds for 3 classes"));
  CHECK_THROWS_WITH(cross_entropy(logits, tensor::tensor({-1, 0}, tensor::kInt64)),
                    Contains("target -1 is out of bounds"));
  // Logits [C] are one sample (as PyTorch's): its target is 0-d, not [3].
  CHECK_THROWS_WITH(cross_entropy(tensor::zeros({3}), tensor::arange(3)),
                    Contains("cross_entropy: expected targets of shape [] (the logits' shape [3] without the class "
                             "dim 0), got [3]"));
  CHECK_THROWS_WITH(cross_entropy(tensor::zeros({}), tensor::arange(1)),
                    Contains("cross_entropy: expected logits with a class dim, got a 0-d tensor"));
}

TEST_CASE("gradcheck: the fused losses", "[nn][loss][gradcheck]") {
  using tinyddp::autograd::gradcheck;
  using Inputs = std::vector<Tensor>;
  tensor::Generator g(9);
  const Tensor input = tensor::randn({4, 3}, tensor::kFloat64, &g).requires_grad_();
  const Tensor target = tensor::randn({4, 3}, tensor::kFloat64, &g).requires_grad_();
  CHECK(gradcheck([](const Inputs& x) { return mse_loss(x[0], x[1]); }, {input, target}) == "");
  const Tensor logits = tensor::randn({5, 4}, tensor::kFloat64, &g).t().contiguous().t().requires_grad_();
  const Tensor labels = tensor::tensor({3, 0, 1, 3, 2}, tensor::kInt64);
  CHECK(gradcheck([&](const Inputs& x) { return cross_entropy(x[0], labels); }, {logits}) == "");
  // The other reductions and label smoothing (a weighted sum of each row's output for "none").
  const Tensor weights = tensor::randn({5}, tensor::kFloat64, &g);
  const Tensor ignored = tensor::tensor({3, -100, 1, 3, 2}, tensor::kInt64);
  CHECK(gradcheck([&](const Inputs& x) { return cross_entropy(x[0], ignored, -100, "sum", 0.2); }, {logits}) == "");
  CHECK(gradcheck([&](const Inputs& x) { return cross_entropy(x[0], ignored, -100, "mean", 0.2); }, {logits}) == "");
  CHECK(gradcheck(
            [&](const Inputs& x) {
              return tensor::sum(tensor::mul(cross_entropy(x[0], ignored, -100, "none", 0.1), weights));
            },
            {logits}) == "");
  CHECK(gradcheck([](const Inputs& x) { return tensor::sum(tensor::mul(mse_loss(x[0], x[1], "none"), x[1])); },
                  {input, target}) == "");
  CHECK(gradcheck([](const Inputs& x) { return mse_loss(x[0], x[1], "sum"); }, {input, target}) == "");
}
