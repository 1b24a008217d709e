// The losses' reductions and cross_entropy's label smoothing against PyTorch
// (fixtures/make_loss_fixture.py): values and input gradients for "mean", "sum" and "none",
// with an ignored target; the argument errors.
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/nn/json_fixture.h"
#include "tests/nn/nn_test_util.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using Catch::Contains;

namespace {

const nlohmann::json& reference() {
  static const nlohmann::json j = tinyddp::testing::read_nn_json_fixture("loss_reference.json");
  return j;
}

Tensor floats(const nlohmann::json& values, const tensor::Shape& shape) {
  return tensor::from_vector(values.get<std::vector<float>>(), shape);
}

void check_close(const Tensor& got, const nlohmann::json& want, const std::string& what) {
  const std::vector<float> g = got.reshape({-1}).to_vector<float>();
  const std::vector<double> w = want.get<std::vector<double>>();
  REQUIRE(g.size() == w.size());
  for (size_t i = 0; i < g.size(); ++i) {
    INFO(what << " [" << i << "]: " << g[i] << ", PyTorch " << w[i]);
    CHECK(g[i] == Approx(w[i]).epsilon(1e-5).margin(1e-7));
  }
}

}  // namespace

TEST_CASE("cross_entropy's reductions and label smoothing equal PyTorch's", "[nn][loss][fixture]") {
  const nlohmann::json& r = reference();
  const Tensor targets = tensor::from_vector(r["targets"].get<std::vector<int64_t>>());
  const Tensor row_grads = floats(r["row_grads"], {6});
  for (const nlohmann::json& c : r["cross_entropy"]) {
    const std::string reduction = c["reduction"];
    const double smoothing = c["label_smoothing"];
    const std::string what = reduction + ", label_smoothing " + std::to_string(smoothing);
    const Tensor logits = floats(r["logits"], {6, 5}).requires_grad_();
    const Tensor loss = CrossEntropyLoss{-100, reduction, smoothing, Tensor()}(logits, targets);
    CHECK(loss.dim() == (reduction == "none" ? 1 : 0));
    check_close(loss, c["loss"], what + " loss");
    if (reduction == "none") {
      loss.backward(row_grads);
    } else {
      loss.backward();
    }
    check_close(logits.grad(), c["grad"], what + " gradient");
  }
}

TEST_CASE("mse_loss's reductions equal PyTorch's", "[nn][loss][fixture]") {
  const nlohmann::json& r = reference();
  for (const nlohmann::json& c : r["mse_loss"]) {
    const std::string reduction = c["reduction"];
    const Tensor input = floats(r["mse_input"], {3, 4}).requires_grad_();
    const Tensor loss = MSELoss{reduction}(input, floats(r["mse_target"], {3, 4}));
    check_close(loss, c["loss"], reduction + " loss");
    if (reduction == "none") {
      loss.backward(floats(r["mse_upstream"], {3, 4}));
    } else {
      loss.backward();
    }
    check_close(input.grad(), c["grad"], reduction + " gradient");
  }
}

TEST_CASE("loss options that are not valid are errors that name them", "[nn][loss][errors]") {
  const Tensor logits = tensor::zeros({2, 3});
  const Tensor targets = tensor::tensor({0, 1}, tensor::kInt64);
  CHECK_THROWS_WITH(cross_entropy(logits, targets, -100, "avg"),
                    Contains("cross_entropy: 'avg' is not a valid value for reduction (use 'mean', 'sum' or 'none')"));
  CHECK_THROWS_WITH(cross_entropy(logits, targets, -100, "mean", 1.5),
                    Contains("cross_entropy: label_smoothing must be between 0.0 and 1.0, got 1.5"));
  CHECK_THROWS_WITH(mse_loss(logits, logits, "total"),
                    Contains("mse_loss: 'total' is not a valid value for reduction"));
}
