// The losses' weights against PyTorch's (fixtures/make_loss_weight_fixture.py), in float64
// (1e-12): cross_entropy and nll_loss with a class weight (every reduction, an ignored row or
// class, label smoothing, [N, C, d] scores), binary_cross_entropy with a broadcast weight,
// binary_cross_entropy_with_logits with weight and pos_weight: values and input gradients.
// Also gradchecks of the weighted forms and their errors.
#include <nlohmann/json.hpp>

#include "tests/nn/json_fixture.h"
#include "tests/nn/nn_test_util.h"
#include "tinyddp/autograd/gradcheck.h"
#include "tinyddp/nn/loss.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using Catch::Contains;

namespace {

using tinyddp::testing::doubles;

// The fixture case's loss of `input`.
Tensor loss_of(const nlohmann::json& c, const Tensor& input) {
  const std::string fn = c["fn"], reduction = c["reduction"];
  const tensor::Shape target_shape = c["target_shape"].get<tensor::Shape>();
  if (fn == "cross_entropy" || fn == "nll_loss") {
    const Tensor target = doubles(c["target"], target_shape).to(tensor::kInt64);
    const Tensor weight = doubles(c["weight"], {4});
    if (fn == "nll_loss") return nll_loss(input, target, c["ignore_index"], reduction, weight);
    return cross_entropy(input, target, c["ignore_index"], reduction, c["label_smoothing"], weight);
  }
  const Tensor target = doubles(c["target"], target_shape);
  const Tensor weight = doubles(c["weight"], c["weight_shape"].get<tensor::Shape>());
  if (fn == "binary_cross_entropy") return binary_cross_entropy(input, target, reduction, weight);
  return binary_cross_entropy_with_logits(input, target, reduction, weight, doubles(c["pos_weight"], {4}));
}

}  // namespace

TEST_CASE("Weighted losses equal PyTorch's: class weights, BCE weights, pos_weight", "[nn][loss][fixture]") {
  const nlohmann::json ref = tinyddp::testing::read_nn_json_fixture("loss_weight_reference.json");
  for (const auto& c : ref["cases"]) {
    INFO(c["fn"].get<std::string>() << " reduction " << c["reduction"].get<std::string>() << " smoothing "
                                    << c.value("label_smoothing", 0.0));
    const Tensor x = doubles(c["input"], c["input_shape"].get<tensor::Shape>()).requires_grad_();
    const Tensor out = loss_of(c, x);
    CHECK(tensor::allclose(out, doubles(c["out"], out.sizes()), 1e-12, 1e-12));
    out.backward(doubles(c["upstream"], out.sizes()));
    CHECK(tensor::allclose(x.grad(), doubles(c["grad"], x.sizes()), 1e-12, 1e-12));
  }
}

TEST_CASE("Weighted losses: gradchecks and errors", "[nn][loss]") {
  using Inputs = std::vector<Tensor>;
  tensor::Generator gen(4);
  const Tensor logits = tensor::randn({4, 3}, tensor::kFloat64, &gen).requires_grad_();
  const Tensor targets = tensor::from_vector(std::vector<int64_t>{2, 0, -100, 1}, tensor::Shape{4});
  const Tensor weight = tensor::from_vector(std::vector<double>{0.5, 2.0, 1.5}, tensor::Shape{3});
  for (const double smoothing : {0.0, 0.3}) {
    CHECK(autograd::gradcheck(
              [&](const Inputs& v) { return cross_entropy(v[0], targets, -100, "mean", smoothing, weight); },
              {logits}) == "");
  }
  const Tensor soft = tensor::rand({4, 3}, tensor::kFloat64, &gen);
  CHECK(autograd::gradcheck(
            [&](const Inputs& v) { return binary_cross_entropy_with_logits(v[0], soft, "sum", Tensor(), weight); },
            {logits}) == "");
  CHECK_THROWS_WITH(cross_entropy(logits, targets, -100, "mean", 0.0, tensor::ones({4}, tensor::kFloat64)),
                    Contains("cross_entropy: weight should be defined for all 3 classes or no classes, got a weight "
                             "of shape [4]"));
  CHECK_THROWS_WITH(nll_loss(logits, targets, -100, "mean", tensor::ones({3})),
                    Contains("nll_loss: weight (float32, cpu) must have the input's dtype and device (float64, cpu)"));
  CHECK_THROWS_WITH(binary_cross_entropy_with_logits(logits, soft, "mean", tensor::ones({2, 3}, tensor::kFloat64)),
                    Contains("binary_cross_entropy_with_logits"));
  CHECK_THROWS_WITH(
      binary_cross_entropy_with_logits(logits, soft, "mean", Tensor(), tensor::ones({2, 4, 3}, tensor::kFloat64)),
      Contains("pos_weight of shape [2, 4, 3] does not broadcast to the input's shape [4, 3]"));
}
