// Double backward against PyTorch (fixtures/make_double_backward_fixture.py, float64): a
// Hessian-vector product through an MLP with tanh, gelu, LayerNorm and cross_entropy; .grad
// with a graph after backward(create_graph) and a second backward adding into it; a WGAN-GP
// critic step (the gradient penalty through conv, leaky_relu, max pooling and linear). Then the
// losses' second derivatives (gradgradcheck), the layers whose backward is not itself
// differentiable, refused with an error that names them, and leaky_relu's and norm's values and
// gradients.
#include <nlohmann/json.hpp>

#include "tests/nn/json_fixture.h"
#include "tinyddp/autograd/autograd.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using Catch::Contains;
using tensor::Tensor;

namespace {

const nlohmann::json& fixture() {
  static const nlohmann::json json = testing::read_nn_json_fixture("double_backward_reference.json");
  return json;
}

using tinyddp::testing::doubles;

// Float64 sums of a few dozen terms, each product rounded once: 1e-12 relative is far above
// their rounding (1e-15) and far below any wrong term.
void check_close(const Tensor& got, const nlohmann::json& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.defined());
  CHECK(tensor::allclose(got, doubles(want, got.sizes()), 1e-10, 1e-12));
}

// The module in float64 with the fixture's parameter values.
void load(Module& model, const nlohmann::json& params) {
  model.to(tensor::kFloat64);
  tensor::NoGradGuard no_grad;
  for (const auto& [name, p] : model.named_parameters()) p.copy_(doubles(params.at(name), p.sizes()));
}

}  // namespace

TEST_CASE("double backward: a Hessian-vector product equals PyTorch's", "[autograd][double_backward][fixture]") {
  const nlohmann::json& c = fixture()["hvp"];
  Sequential model({std::make_shared<Linear>(5, 8), std::make_shared<Tanh>(), std::make_shared<Linear>(8, 8),
                    std::make_shared<GELU>("tanh"), std::make_shared<LayerNorm>(tensor::Shape{8}),
                    std::make_shared<Linear>(8, 3)});
  load(model, c["params"]);
  const Tensor x = doubles(c["x"], {6, 5});
  const Tensor targets = tensor::from_vector(c["targets"].get<std::vector<int64_t>>());
  const Tensor loss = cross_entropy(model(x), targets, -100, "mean", 0.1);
  CHECK(loss.item<double>() == Approx(c["loss"].get<double>()).epsilon(1e-12));
  std::vector<Tensor> params;
  std::vector<std::string> names;
  for (const auto& [name, p] : model.named_parameters()) {
    params.push_back(p);
    names.push_back(name);
  }
  const std::vector<Tensor> grads = autograd::grad({loss}, params, {}, std::nullopt, /*create_graph=*/true);
  Tensor dot = tensor::zeros({}, tensor::kFloat64);
  for (size_t i = 0; i < params.size(); ++i) {
    check_close(grads[i], c["grads"][names[i]], "gradient of " + names[i]);
    CHECK(grads[i].requires_grad());
    dot = dot + tensor::sum(grads[i] * doubles(c["v"][names[i]], params[i].sizes()));
  }
  const std::vector<Tensor> hv = autograd::grad({dot}, params);
  for (size_t i = 0; i < params.size(); ++i) check_close(hv[i], c["hvp"][names[i]], "Hv of " + names[i]);
}

TEST_CASE("double backward: backward(create_graph) leaves .grad with a graph; a second backward adds into it",
          "[autograd][double_backward][fixture]") {
  const nlohmann::json& c = fixture()["accumulate"];
  const Tensor x = doubles(c["x"], {4}).requires_grad_();
  tensor::sum(tensor::pow(x, 3.0)).backward({}, std::nullopt, /*create_graph=*/true);
  check_close(x.grad(), c["first"], "x.grad after the first backward");
  REQUIRE(x.grad().requires_grad());  // 3 x^2, recorded
  const Tensor first = x.grad();
  tensor::sum(x.grad() * x.grad()).backward();
  check_close(x.grad(), c["final"], "x.grad after the second");
  // A plain backward sums into the same tensor in place; it keeps its grad_fn (as PyTorch's).
  CHECK(x.grad().is_same(first));
  CHECK(x.grad().requires_grad());
}

TEST_CASE("double backward: a WGAN-GP critic step equals PyTorch's", "[autograd][double_backward][fixture]") {
  const nlohmann::json& c = fixture()["penalty"];
  Sequential critic({std::make_shared<Conv2d>(1, 3, 3, 1, 1), std::make_shared<LeakyReLU>(0.2),
                     std::make_shared<MaxPool2d>(2), std::make_shared<Flatten>(), std::make_shared<Linear>(27, 1)});
  load(critic, c["params"]);
  const Tensor real = doubles(c["real"], {4, 1, 6, 6}), fake = doubles(c["fake"], {4, 1, 6, 6});
  const Tensor alpha = doubles(c["alpha"], {4, 1, 1, 1});
  const Tensor interp = (alpha * real + (1.0 - alpha) * fake).requires_grad_();
  const Tensor grad = autograd::grad({tensor::sum(critic(interp))}, {interp}, {}, std::nullopt, true)[0];
  check_close(grad, c["input_grad"], "the critic's gradient at the interpolates");
  const Tensor penalty = tensor::mean(tensor::pow(tensor::norm(grad.flatten(1), 2.0, {1}) - 1.0, 2.0));
  CHECK(penalty.item<double>() == Approx(c["penalty"].get<double>()).epsilon(1e-12));
  const Tensor loss = tensor::mean(critic(fake)) - tensor::mean(critic(real)) + penalty * 10.0;
  CHECK(loss.item<double>() == Approx(c["loss"].get<double>()).epsilon(1e-12));
  loss.backward();
  for (const auto& [name, p] : critic.named_parameters()) check_close(p.grad(), c["grads"][name], name + ".grad");
}

TEST_CASE("double backward: the losses' second derivatives (gradgradcheck)", "[autograd][double_backward]") {
  using Inputs = std::vector<Tensor>;
  tensor::Generator gen(3);
  const Tensor logits = tensor::randn({4, 3}, tensor::kFloat64, &gen).requires_grad_();
  const Tensor target = tensor::randn({4, 3}, tensor::kFloat64, &gen).requires_grad_();
  const Tensor probs = tensor::add(tensor::mul(tensor::rand({4, 3}, tensor::kFloat64, &gen), 0.8), 0.1);
  const Tensor classes = tensor::from_vector<int64_t>({2, 0, 1, 2});
  const Tensor weight = tensor::from_vector<double>({0.5, 2.0, 1.0});
  const auto check = [](const std::function<Tensor(const Inputs&)>& f, const Inputs& in) {
    const std::string first = autograd::gradcheck(f, in);
    return first.empty() ? autograd::gradgradcheck(f, in) : first;
  };
  CHECK(check([&](const Inputs& v) { return cross_entropy(v[0], classes, -100, "mean", 0.2, weight); }, {logits}) ==
        "");
  CHECK(check([&](const Inputs& v) { return cross_entropy(v[0], classes, 1, "none"); }, {logits}) == "");
  CHECK(check([&](const Inputs& v) { return nll_loss(tensor::log_softmax(v[0], 1), classes); }, {logits}) == "");
  CHECK(check([](const Inputs& v) { return mse_loss(v[0], v[1]); }, {logits, target}) == "");
  CHECK(check([](const Inputs& v) { return huber_loss(v[0], v[1], "sum", 0.5); }, {logits, target}) == "");
  CHECK(check([&](const Inputs& v) { return binary_cross_entropy(tensor::sigmoid(v[0]), probs); }, {logits}) == "");
  CHECK(check([&](const Inputs& v) { return binary_cross_entropy_with_logits(v[0], probs); }, {logits}) == "");
  CHECK(check([&](const Inputs& v) { return kl_div(tensor::log_softmax(v[0], 1), probs, "batchmean"); }, {logits}) ==
        "");
  CHECK(check([](const Inputs& v) { return tensor::norm(v[0], 2.0, {1}); }, {logits}) == "");
  CHECK(check([](const Inputs& v) { return tensor::norm(v[0], 1.0); }, {logits}) == "");
}

TEST_CASE("double backward: a gradient penalty through LSTM, GRU and RNN layers equals PyTorch's",
          "[autograd][double_backward][fixture][rnn]") {
  const nlohmann::json& c = fixture()["recurrent"];
  const Tensor x = doubles(c["x"], {4, 2, 3});
  const auto run = [&](const std::string& name, Module& model, const std::function<Tensor(const Tensor&)>& loss_of) {
    INFO(name);
    const nlohmann::json& want = c[name];
    load(model, want["params"]);
    const Tensor input = x.clone().requires_grad_();
    const Tensor loss = loss_of(input);
    CHECK(loss.item<double>() == Approx(want["loss"].get<double>()).epsilon(1e-12));
    std::vector<Tensor> wrt = model.parameters();
    wrt.push_back(input);
    Tensor penalty = tensor::zeros({}, tensor::kFloat64);
    for (const Tensor& g : autograd::grad({loss}, wrt, {}, std::nullopt, /*create_graph=*/true)) {
      penalty = penalty + tensor::sum(g * g);
    }
    CHECK(penalty.item<double>() == Approx(want["penalty"].get<double>()).epsilon(1e-12));
    penalty.backward();
    check_close(input.grad(), want["x_grad"], "x.grad");
    for (const auto& [key, p] : model.named_parameters()) check_close(p.grad(), want["grads"][key], key + ".grad");
  };
  // sum(output * w), w evenly spaced over [-1, 1] as the fixture's linspace
  const auto weighted = [](const Tensor& y) {
    const double step = 2.0 / static_cast<double>(y.numel() - 1);
    const Tensor w = (tensor::arange(y.numel(), tensor::kFloat64) * step - 1.0).reshape(y.sizes());
    return tensor::sum(y * w);
  };
  LSTM lstm(3, 4, 1, true, false, 0.0, /*bidirectional=*/true);
  run("lstm", lstm, [&](const Tensor& in) {
    const auto [y, state] = lstm.forward(in, std::nullopt);
    return weighted(y) + tensor::sum(std::get<1>(state)) * 0.5;
  });
  GRU gru(3, 4, /*num_layers=*/2);
  run("gru", gru, [&](const Tensor& in) { return weighted(std::get<0>(gru.forward(in, Tensor()))); });
  RNN rnn(3, 4);
  run("rnn", rnn, [&](const Tensor& in) { return weighted(std::get<0>(rnn.forward(in, Tensor()))); });
}

TEST_CASE("norm refuses the p it does not have", "[autograd]") {
  CHECK(tensor::norm(tensor::zeros({3}, tensor::kFloat64)).item<double>() == 0.0);
  CHECK_THROWS_WITH(tensor::norm(tensor::randn({2, 3}), 3.0), Contains("norm: p = 3 is not supported"));
}

TEST_CASE("leaky_relu and norm equal PyTorch's, values and gradients (at 0 too)", "[autograd][fixture]") {
  const nlohmann::json& c = fixture()["ops"];
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> ops = {
      {"leaky_relu", [](const Tensor& t) { return tensor::leaky_relu(t, 0.2); }},
      {"norm2", [](const Tensor& t) { return tensor::norm(t, 2.0, {1}); }},
      {"norm1", [](const Tensor& t) { return tensor::norm(t, 1.0); }}};
  for (const auto& [name, f] : ops) {
    const Tensor x = doubles(c["x"], {3, 4}).requires_grad_();
    const Tensor y = f(x);
    check_close(y, c[name]["out"], name + " values");
    // The gradient of sum(y * w), w = 1, 2, ... as the fixture's.
    const Tensor w = tensor::add(tensor::arange(y.numel(), tensor::kFloat64), 1.0).reshape(y.sizes());
    tensor::sum(y * w).backward();
    check_close(x.grad(), c[name]["grad"], name + " gradient");
  }
}
