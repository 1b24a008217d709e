// LSTMCell, GRUCell and RNNCell against PyTorch's (fixtures/make_rnn_cell_fixture.py):
// parameter names, repr and initial weights after the same seed, one step's outputs and every
// gradient in float64 (1e-12: the same arithmetic, a handful of terms); a loop of cell steps
// equals the sequence layer over the same input; a gradcheck; the errors.
#include <nlohmann/json.hpp>

#include "tests/nn/json_fixture.h"
#include "tests/nn/nn_test_util.h"
#include "tinyddp/autograd/gradcheck.h"
#include "tinyddp/nn/rnn.h"
#include "tinyddp/nn/rnn_cell.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using Catch::Contains;

namespace {

const nlohmann::json& reference() {
  static const nlohmann::json j = tinyddp::testing::read_nn_json_fixture("rnn_cell_reference.json");
  return j;
}

using tinyddp::testing::doubles;

void check_close(const Tensor& got, const nlohmann::json& want) {
  REQUIRE(got.defined());
  CHECK(tensor::allclose(got, doubles(want, got.sizes()), 1e-12, 1e-12));
}

std::shared_ptr<Module> make(const std::string& kind, const nlohmann::json& kw) {
  const bool bias = kw.value("bias", true);
  if (kind == "LSTMCell") return std::make_shared<LSTMCell>(3, 4, bias);
  if (kind == "GRUCell") return std::make_shared<GRUCell>(3, 4, bias);
  return std::make_shared<RNNCell>(3, 4, bias, kw.value("nonlinearity", "tanh"));
}

}  // namespace

TEST_CASE("LSTMCell, GRUCell, RNNCell: PyTorch's names, repr and initial weights after the same seed",
          "[nn][rnn][fixture]") {
  for (const auto& [kind, kw] :
       std::vector<std::pair<std::string, nlohmann::json>>{{"LSTMCell", nlohmann::json::object()},
                                                           {"GRUCell", {{"bias", false}}},
                                                           {"RNNCell", {{"nonlinearity", "relu"}}}}) {
    INFO(kind);
    const nlohmann::json& want = reference()["init"][kind];
    tensor::manual_seed(7);
    const auto cell = make(kind, kw);
    CHECK(cell->state_dict().keys() == want["names"].get<std::vector<std::string>>());
    CHECK(cell->repr() == want["repr"].get<std::string>());
    for (const auto& [name, p] : cell->state_dict()) {
      INFO(name);
      CHECK(tensor::equal(p, doubles(want["values"][name], p.sizes()).to(tensor::kFloat32)));
    }
  }
}

TEST_CASE("LSTMCell, GRUCell, RNNCell equal PyTorch's in float64: outputs and every gradient", "[nn][rnn][fixture]") {
  for (const auto& [name, c] : reference()["cases"].items()) {
    INFO(name);
    const auto cell = make(c["kind"], c["kwargs"]);
    cell->to(tensor::kFloat64);
    OrderedDict<Tensor> state;
    for (const auto& [key, t] : cell->state_dict()) state.insert(key, doubles(c["state"][key], t.sizes()));
    cell->load_state_dict(state);
    const Tensor x = doubles(c["x"], c["x_shape"].get<tensor::Shape>()).requires_grad_();
    std::vector<Tensor> inputs{x};
    for (const auto& values : c["initial"]) {
      inputs.push_back(doubles(values, c["state_shape"].get<tensor::Shape>()).requires_grad_());
    }
    const std::vector<Tensor> outputs = cell->forward_many(inputs);
    REQUIRE(outputs.size() == c["outs"].size());
    Tensor loss = tensor::zeros({}, tensor::kFloat64);
    for (size_t k = 0; k < outputs.size(); ++k) {
      CHECK(outputs[k].sizes() == c["state_shape"].get<tensor::Shape>());
      check_close(outputs[k], c["outs"][k]);
      loss = loss + tensor::sum(outputs[k] * doubles(c["grad_weights"][k], outputs[k].sizes()));
    }
    loss.backward();
    check_close(x.grad(), c["grad_x"]);
    for (size_t k = 1; k < inputs.size(); ++k) check_close(inputs[k].grad(), c["grad_initial"][k - 1]);
    for (const auto& [key, p] : cell->named_parameters()) {
      INFO(key);
      check_close(p.grad(), c["grads"][key]);
    }
  }
}

TEST_CASE("A loop of LSTMCell steps is the LSTM over the sequence; the cells' gradients check",
          "[nn][rnn][gradcheck]") {
  tensor::manual_seed(2);
  LSTM lstm(3, 4);
  LSTMCell cell(3, 4);
  cell.load_state_dict([&] {
    OrderedDict<Tensor> s;
    for (const auto& [key, t] : lstm.state_dict()) s.insert(key.substr(0, key.size() - 3), t);  // "weight_ih_l0"
    return s;
  }());
  const Tensor x = tensor::randn({5, 2, 3});
  const auto [out, state] = lstm.forward(x, std::nullopt);
  std::optional<std::tuple<Tensor, Tensor>> hc;
  for (int64_t step = 0; step < 5; ++step) {
    hc = cell.forward(x.select(0, step), hc);
    CHECK(tensor::allclose(std::get<0>(*hc), out.select(0, step), 0, 0));
  }
  CHECK(tensor::allclose(std::get<1>(*hc), std::get<1>(state).select(0, 0), 0, 0));

  GRUCell gru(3, 4);
  gru.to(tensor::kFloat64);
  const auto step = [&](const std::vector<Tensor>& v) { return gru.forward(v[0], v[1]); };
  tensor::Generator gen(5);
  CHECK(autograd::gradcheck(step, {tensor::randn({2, 3}, tensor::kFloat64, &gen).requires_grad_(),
                                   tensor::randn({2, 4}, tensor::kFloat64, &gen).requires_grad_()}) == "");
}

TEST_CASE("The cells' errors name what is wrong", "[nn][rnn]") {
  LSTMCell lstm(3, 4);
  CHECK_THROWS_WITH(lstm.forward(tensor::randn({2, 5})),
                    Contains("LSTMCell: input has inconsistent input_size: got 5 expected 3"));
  CHECK_THROWS_WITH(lstm.forward(tensor::randn({1, 2, 3})),
                    Contains("LSTMCell: expected input to be 1D or 2D, got 3D"));
  CHECK_THROWS_WITH(lstm.forward(tensor::randn({2, 3}), std::tuple{tensor::zeros({3, 4}), tensor::zeros({2, 4})}),
                    Contains("LSTMCell: hx has shape [3, 4], expected [2, 4]"));
  CHECK_THROWS_WITH(GRUCell(3, 4).forward(tensor::randn({2, 3}, tensor::kFloat64)),
                    Contains("GRUCell: input (float64, cpu) and weights (float32, cpu) must have the same dtype"));
  CHECK_THROWS_WITH(RNNCell(3, 4, true, "gelu"), Contains("RNNCell: unknown nonlinearity 'gelu'"));
  CHECK_THROWS_WITH(RNNCell(3, 4).forward_many({tensor::randn({3}), tensor::zeros({4}), tensor::zeros({4})}),
                    Contains("RNNCell: forward takes (input[, h]), got 3 tensors"));
  // Unbatched in, unbatched out.
  CHECK(std::get<1>(lstm.forward(tensor::randn({3}), std::nullopt)).sizes() == tensor::Shape{4});
}
