// nll_loss, the losses composed from tensor ops (nn/loss_composed.cc: l1_loss, smooth_l1_loss,
// huber_loss, binary_cross_entropy with and without logits, kl_div) and cross_entropy over positions
// ([N, C, d...], [C]) against PyTorch (fixtures/make_loss_composed_fixture.py): values and input
// gradients in float64 for every reduction (1e-12: the same few roundings on both sides), a
// float64 gradcheck of each, the module forms, autocast and the errors.
#include <functional>

#include <nlohmann/json.hpp>

#include "tests/nn/json_fixture.h"
#include "tests/nn/nn_test_util.h"
#include "tinyddp/autograd/gradcheck.h"
#include "tinyddp/tensor/autocast.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using Catch::Contains;

namespace {

const nlohmann::json& reference() {
  static const nlohmann::json j = tinyddp::testing::read_nn_json_fixture("loss_composed_reference.json");
  return j;
}

Tensor doubles(const nlohmann::json& values, const nlohmann::json& shape) {
  const std::vector<int64_t> dims = shape.get<std::vector<int64_t>>();
  return tensor::from_vector(values.get<std::vector<double>>(), tensor::Shape(dims.begin(), dims.end()));
}

using LossFn = std::function<Tensor(const Tensor&, const Tensor&, const std::string&)>;

// Every reduction the fixture holds for `name`: the value and the input's gradient.
void check_case(const std::string& name, const LossFn& loss, bool int_target) {
  const nlohmann::json& c = reference().at(name);
  const Tensor target_values = doubles(c["target"], c["target_shape"]);
  const Tensor target = int_target ? target_values.to(tensor::kInt64) : target_values;
  for (const std::string reduction : {"mean", "sum", "none", "batchmean"}) {
    if (!c.contains(reduction)) continue;
    INFO(name << " reduction " << reduction);
    const Tensor x = doubles(c["input"], c["input_shape"]).requires_grad_();
    const Tensor out = loss(x, target, reduction);
    const nlohmann::json& want = c[reduction];
    const Tensor want_out = tensor::from_vector(want["out"].get<std::vector<double>>(), out.sizes());
    CHECK(tensor::allclose(out, want_out, 1e-12, 1e-12));
    out.backward(tensor::from_vector(want["grad_out"].get<std::vector<double>>(), out.sizes()));
    CHECK(tensor::allclose(x.grad(), doubles(want["grad_input"], c["input_shape"]), 1e-12, 1e-12));
  }
}

}  // namespace

TEST_CASE("cross_entropy and nll_loss over positions ([N, C, d]) and one sample ([C]) equal PyTorch's",
          "[nn][loss][fixture]") {
  const auto ce = [](const Tensor& x, const Tensor& t, const std::string& r) { return cross_entropy(x, t, -1, r); };
  check_case("cross_entropy_ncd", ce, true);
  check_case("cross_entropy_c", ce, true);
  const auto nll = [](const Tensor& x, const Tensor& t, const std::string& r) { return nll_loss(x, t, -1, r); };
  check_case("nll_loss", nll, true);
  check_case("nll_loss_ncd", nll, true);
  // cross_entropy is nll_loss of log_softmax, position by position.
  tensor::Generator gen(3);
  const Tensor logits = tensor::randn({2, 4, 5}, tensor::kFloat64, &gen);
  const Tensor targets = tensor::randint(0, 4, {2, 5}, &gen);
  CHECK(tensor::allclose(cross_entropy(logits, targets), nll_loss(tensor::log_softmax(logits, 1), targets), 1e-12,
                         1e-12));
  CHECK_THROWS_WITH(cross_entropy(logits, tensor::zeros({2, 4}, tensor::kInt64)),
                    Contains("cross_entropy: expected targets of shape [2, 5] (the logits' shape [2, 4, 5] without "
                             "the class dim 1), got [2, 4]"));
  CHECK_THROWS_WITH(nll_loss(tensor::zeros({2, 3}), tensor::from_vector<int64_t>({0, 3}, tensor::Shape{2})),
                    Contains("nll_loss: target 3 is out of bounds for 3 classes"));
}

TEST_CASE("l1, smooth l1, huber, binary cross-entropy (with logits) and kl_div equal PyTorch's",
          "[nn][loss][fixture]") {
  check_case(
      "l1_loss", [](const Tensor& x, const Tensor& t, const std::string& r) { return l1_loss(x, t, r); }, false);
  check_case(
      "smooth_l1_loss",
      [](const Tensor& x, const Tensor& t, const std::string& r) { return smooth_l1_loss(x, t, r, 0.5); }, false);
  check_case(
      "huber_loss", [](const Tensor& x, const Tensor& t, const std::string& r) { return huber_loss(x, t, r, 0.7); },
      false);
  check_case(
      "binary_cross_entropy",
      [](const Tensor& x, const Tensor& t, const std::string& r) { return binary_cross_entropy(x, t, r); }, false);
  check_case(
      "binary_cross_entropy_with_logits",
      [](const Tensor& x, const Tensor& t, const std::string& r) { return binary_cross_entropy_with_logits(x, t, r); },
      false);
  // Logits far beyond exp's range: PyTorch's form never overflows (a naive log(1 + exp(-x))
  // would give inf at -800).
  const Tensor far = tensor::from_vector<double>({-800.0, 800.0}, tensor::Shape{2});
  const Tensor losses =
      binary_cross_entropy_with_logits(far, tensor::from_vector<double>({1.0, 0.0}, tensor::Shape{2}), "none");
  CHECK(losses.to_vector<double>() == std::vector<double>{800.0, 800.0});
  check_case(
      "kl_div", [](const Tensor& x, const Tensor& t, const std::string& r) { return kl_div(x, t, r); }, false);
  check_case(
      "kl_div_log_target", [](const Tensor& x, const Tensor& t, const std::string& r) { return kl_div(x, t, r, true); },
      false);
}

TEST_CASE("the new losses pass gradcheck in float64, and their module forms are the functions", "[nn][loss]") {
  using Inputs = std::vector<Tensor>;
  tensor::Generator gen(5);
  const Tensor x = tensor::randn({3, 4}, tensor::kFloat64, &gen).requires_grad_();
  const Tensor t = tensor::randn({3, 4}, tensor::kFloat64, &gen);
  const Tensor p = tensor::rand({3, 4}, tensor::kFloat64, &gen);
  CHECK(autograd::gradcheck([&](const Inputs& v) { return l1_loss(v[0], t); }, {x}) == "");
  CHECK(autograd::gradcheck([&](const Inputs& v) { return smooth_l1_loss(v[0], t, "sum", 0.5); }, {x}) == "");
  CHECK(autograd::gradcheck([&](const Inputs& v) { return huber_loss(v[0], t, "mean", 0.8); }, {x}) == "");
  CHECK(autograd::gradcheck([&](const Inputs& v) { return binary_cross_entropy_with_logits(v[0], p); }, {x}) == "");
  const Tensor probs = tensor::add(tensor::mul(p, 0.8), 0.1).requires_grad_();
  CHECK(autograd::gradcheck([&](const Inputs& v) { return binary_cross_entropy(v[0], p); }, {probs}) == "");
  const Tensor log_probs = tensor::log_softmax(x.detach(), 1).requires_grad_();
  CHECK(autograd::gradcheck([&](const Inputs& v) { return kl_div(v[0], tensor::softmax(t, 1), "batchmean"); },
                            {log_probs}) == "");
  const Tensor ids = tensor::from_vector<int64_t>({0, 3, 1}, tensor::Shape{3});
  CHECK(autograd::gradcheck([&](const Inputs& v) { return nll_loss(v[0], ids); }, {log_probs}) == "");
  CHECK(tensor::equal(NLLLoss{}(log_probs, ids), nll_loss(log_probs, ids)));
  CHECK(tensor::equal(L1Loss{"sum"}(x, t), l1_loss(x, t, "sum")));
  CHECK(tensor::equal(SmoothL1Loss{"mean", 0.5}(x, t), smooth_l1_loss(x, t, "mean", 0.5)));
  CHECK(tensor::equal(HuberLoss{"none", 2.0}(x, t), huber_loss(x, t, "none", 2.0)));
  CHECK(tensor::equal(BCELoss{}(probs, p), binary_cross_entropy(probs, p)));
  CHECK(tensor::equal(BCEWithLogitsLoss{}(x, p), binary_cross_entropy_with_logits(x, p)));
  CHECK(tensor::equal(KLDivLoss{"batchmean", false}(log_probs, p), kl_div(log_probs, p, "batchmean")));
}

TEST_CASE("the new losses' errors, and autocast: float32, binary_cross_entropy refused", "[nn][loss][errors]") {
  const Tensor a = tensor::zeros({2, 3}), b = tensor::zeros({3, 2});
  CHECK_THROWS_WITH(l1_loss(a, b), Contains("l1_loss: input shape [2, 3] and target shape [3, 2] differ"));
  CHECK_THROWS_WITH(l1_loss(a, a, "avg"),
                    Contains("l1_loss: 'avg' is not a valid value for reduction (use 'mean', 'sum' or 'none')"));
  CHECK_THROWS_WITH(kl_div(a, a, "avg"), Contains("(use 'mean', 'sum', 'batchmean' or 'none')"));
  CHECK_THROWS_WITH(binary_cross_entropy(tensor::full({2}, 1.5), tensor::zeros({2})),
                    Contains("binary_cross_entropy: all elements of input should be between 0 and 1, got 1.5"));
  CHECK_THROWS_WITH(smooth_l1_loss(a, a, "mean", -1.0), Contains("smooth_l1_loss: beta must be non-negative"));
  const Tensor x = tensor::ones({2, 3});
  tensor::Autocast autocast(tensor::DeviceType::kCPU);
  CHECK(l1_loss(x.to(tensor::kBFloat16), x.to(tensor::kBFloat16)).dtype() == tensor::kFloat32);
  CHECK_THROWS_WITH(binary_cross_entropy(tensor::full({2}, 0.5), tensor::zeros({2})),
                    Contains("binary_cross_entropy is unsafe to autocast"));
}
