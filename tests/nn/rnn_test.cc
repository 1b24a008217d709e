// LSTM, GRU and RNN against PyTorch's (fixtures/make_rnn_fixture.py): parameter names, repr
// and initial weights after the same seed (bit for bit), and in float64 (1e-12: the same
// roundings up to summation order) outputs, final states and every gradient for multi-layer,
// bidirectional, batch_first, bias-free and unbatched cases. Each recurrence's hand-written
// backward through time is also held to finite differences (gradcheck), forwards and reversed.
#include <nlohmann/json.hpp>

#include "tests/nn/json_fixture.h"
#include "tests/nn/nn_test_util.h"
#include "tinyddp/autograd/gradcheck.h"
#include "tinyddp/nn/rnn.h"
#include "tinyddp/nn/rnn_layer.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using Catch::Contains;

namespace {

using tinyddp::testing::check_close;
using tinyddp::testing::doubles;
using tinyddp::testing::make_rnn;

}  // namespace

TEST_CASE("LSTM, GRU, RNN: PyTorch's parameter names, repr and initial weights after the same seed",
          "[nn][rnn][fixture]") {
  const nlohmann::json ref = tinyddp::testing::read_nn_json_fixture("rnn_reference.json");
  for (const auto& [kind, kw] :
       std::vector<std::pair<std::string, nlohmann::json>>{{"LSTM", {{"num_layers", 2}}},
                                                           {"GRU", {{"bidirectional", true}}},
                                                           {"RNN", {{"nonlinearity", "relu"}, {"bias", false}}},
                                                           {"LSTM_proj", {{"num_layers", 2}, {"proj_size", 2}}}}) {
    INFO(kind);
    const nlohmann::json& want = ref["init"][kind];
    tensor::manual_seed(7);
    const auto module = make_rnn(kind == "LSTM_proj" ? "LSTM" : kind, kw);
    CHECK(module->state_dict().keys() == want["names"].get<std::vector<std::string>>());
    CHECK(module->repr() == want["repr"].get<std::string>());
    for (const auto& [name, p] : module->state_dict()) {
      INFO(name);
      CHECK(tensor::equal(p, doubles(want["values"][name], p.sizes()).to(tensor::kFloat32)));
    }
  }
}

TEST_CASE("LSTM, GRU, RNN equal PyTorch's in float64: outputs, final states, every gradient", "[nn][rnn][fixture]") {
  const nlohmann::json ref = tinyddp::testing::read_nn_json_fixture("rnn_reference.json");
  for (const auto& [name, c] : ref["cases"].items()) {
    INFO(name);
    const auto module = make_rnn(c["kind"], c["kwargs"]);
    module->to(tensor::kFloat64);
    OrderedDict<Tensor> state;
    for (const auto& [key, t] : module->state_dict()) state.insert(key, doubles(c["state"][key], t.sizes()));
    module->load_state_dict(state);
    const Tensor x = doubles(c["x"], c["shape"].get<tensor::Shape>()).requires_grad_();
    std::vector<Tensor> inputs{x};
    for (size_t k = 0; k < c["initial"].size(); ++k) {  // h0 (of proj_size, when set), then c0
      inputs.push_back(doubles(c["initial"][k], c["initial_shapes"][k].get<tensor::Shape>()).requires_grad_());
    }
    const std::vector<Tensor> outputs = module->forward_many(inputs);
    REQUIRE(outputs.size() == c["finals"].size() + 1);
    CHECK(outputs[0].sizes() == c["out_shape"].get<tensor::Shape>());
    check_close(outputs[0], c["out"]);
    Tensor loss = tensor::zeros({}, tensor::kFloat64);
    for (size_t k = 0; k < outputs.size(); ++k) {
      if (k > 0) check_close(outputs[k], c["finals"][k - 1]);
      loss = loss + tensor::sum(outputs[k] * doubles(c["grad_weights"][k], outputs[k].sizes()));
    }
    loss.backward();
    check_close(x.grad(), c["grad_x"]);
    for (size_t k = 1; k < inputs.size(); ++k) check_close(inputs[k].grad(), c["grad_initial"][k - 1]);
    for (const auto& [key, p] : module->named_parameters()) {
      INFO(key);
      check_close(p.grad(), c["grads"][key]);
    }
  }
}

TEST_CASE("The recurrences' backward through time against finite differences, and its own gradient",
          "[nn][rnn][gradcheck][double_backward]") {
  using Inputs = std::vector<Tensor>;
  tensor::Generator gen(3);
  const auto randn = [&](const tensor::Shape& s) {
    return (tensor::randn(s, tensor::kFloat64, &gen) * 0.5).requires_grad_();
  };
  const Tensor x = randn({4, 2, 3}), h0 = randn({2, 3}), c0 = randn({2, 3});
  for (const bool reverse : {false, true}) {
    INFO("reverse " << reverse);
    const Tensor w4 = randn({12, 3}), u4 = randn({12, 3}), b4 = randn({12}), v4 = randn({12});
    // gradgradcheck: under create_graph the layers' gradients come from the recorded cells.
    const auto lstm = [&](const Inputs& v) { return lstm_layer(v[0], v[1], v[2], v[3], v[4], v[5], v[6], reverse); };
    CHECK(autograd::gradcheck(lstm, {x, h0, c0, w4, u4, b4, v4}) == "");
    CHECK(autograd::gradgradcheck(lstm, {x, h0, c0, w4, u4, b4, v4}) == "");
    const Tensor w3 = randn({9, 3}), u3 = randn({9, 3}), b3 = randn({9}), v3 = randn({9});
    const auto gru = [&](const Inputs& v) { return gru_layer(v[0], v[1], v[2], v[3], v[4], v[5], reverse); };
    CHECK(autograd::gradcheck(gru, {x, h0, w3, u3, b3, v3}) == "");
    CHECK(autograd::gradgradcheck(gru, {x, h0, w3, u3, b3, v3}) == "");
    const Tensor w1 = randn({3, 3}), u1 = randn({3, 3}), b1 = randn({3}), v1 = randn({3});
    // with a projection (P = 2 of H = 3), its one node's output as both parts joined
    const Tensor hp0 = randn({2, 2}), up = randn({12, 2}), wr = randn({2, 3});
    const auto projected = [&](const Inputs& v) {
      const auto [hs, c] = lstm_projected_layer(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], reverse);
      return tensor::cat({hs.flatten(), c.flatten()});
    };
    CHECK(autograd::gradcheck(projected, {x, hp0, c0, w4, up, b4, v4, wr}) == "");
    CHECK(autograd::gradgradcheck(projected, {x, hp0, c0, w4, up, b4, v4, wr}) == "");
    for (const char* act : {"tanh", "relu"}) {
      INFO(act);
      const auto rnn = [&](const Inputs& v) { return rnn_layer(v[0], v[1], v[2], v[3], v[4], v[5], reverse, act); };
      CHECK(autograd::gradcheck(rnn, {x, h0, w1, u1, b1, v1}) == "");
      CHECK(autograd::gradgradcheck(rnn, {x, h0, w1, u1, b1, v1}) == "");
    }
  }
}

TEST_CASE("LSTM: dropout between layers in training only, and clear errors", "[nn][rnn]") {
  tensor::manual_seed(1);
  const Tensor x = tensor::randn({5, 2, 3});
  LSTM one(3, 4, 1, true, false, 0.5);  // one layer: nothing to drop between
  CHECK(tensor::equal(one.forward(x), [&] {
    one.eval();
    return one.forward(x);
  }()));
  LSTM two(3, 4, 2, true, false, 0.5);
  const Tensor trained = two.forward(x);
  two.eval();
  const Tensor evaluated = two.forward(x);
  CHECK(tensor::equal(evaluated, two.forward(x)));
  CHECK_FALSE(tensor::equal(trained, evaluated));

  CHECK_THROWS_WITH(one.forward(tensor::randn({5, 2, 4})),
                    Contains("LSTM: input.size(-1) must be equal to input_size: expected 3, got 4"));
  CHECK_THROWS_WITH(one.forward(x, std::tuple{tensor::zeros({2, 2, 4}), tensor::zeros({1, 2, 4})}),
                    Contains("LSTM: expected h0 of shape [1, 2, 4], got [2, 2, 4]"));
  CHECK_THROWS_WITH(one.forward(tensor::randn({5, 3}), std::tuple{tensor::zeros({1, 1, 4}), tensor::zeros({1, 4})}),
                    Contains("for a 2-D input, h0 should be 2-D, got shape [1, 1, 4]"));
  CHECK_THROWS_WITH(one.forward(tensor::randn({5, 2, 3}, tensor::kFloat64)),
                    Contains("LSTM: input (float64, cpu) and weights (float32, cpu) must have the same dtype"));
  CHECK_THROWS_WITH(one.forward_many({x, tensor::zeros({1, 2, 4})}),
                    Contains("LSTM: forward takes (input[, h0, c0]), got 2"));
  CHECK_THROWS_WITH(GRU(3, 4).forward(tensor::randn({0, 2, 3})),
                    Contains("GRU: expected a sequence of at least one step"));
  CHECK_THROWS_WITH(RNN(3, 4, 1, "sigmoid"), Contains("RNN: unknown nonlinearity 'sigmoid'"));
  CHECK_THROWS_WITH(GRU(3, 4, 0), Contains("GRU: num_layers must be at least 1, got 0"));
  // proj_size: LSTM only, below hidden_size, h of its size and c of the hidden size.
  CHECK_THROWS_WITH(GRU(GRUOptions(3, 4).proj_size(2)),
                    Contains("GRU: proj_size argument is only supported for LSTM, not RNN or GRU"));
  CHECK_THROWS_WITH(LSTM(LSTMOptions(3, 4).proj_size(4)),
                    Contains("LSTM: proj_size has to be smaller than hidden_size"));
  CHECK_THROWS_WITH(LSTM(LSTMOptions(3, 4).proj_size(-1)), Contains("proj_size should be a positive integer or zero"));
  LSTM projected(LSTMOptions(3, 4).proj_size(2));
  CHECK(projected.repr() == "LSTM(3, 4, proj_size=2)");
  CHECK(projected.clone_structure()->repr() == projected.repr());
  CHECK_THROWS_WITH(projected.forward(x, std::tuple{tensor::zeros({1, 2, 4}), tensor::zeros({1, 2, 4})}),
                    Contains("LSTM: expected h0 of shape [1, 2, 2], got [1, 2, 4]"));
  // An unbatched input gives unbatched states.
  const auto [out, state] = one.forward(tensor::randn({5, 3}), {});
  CHECK(out.sizes() == tensor::Shape{5, 4});
  CHECK(std::get<0>(state).sizes() == tensor::Shape{1, 4});
  CHECK(std::get<1>(state).sizes() == tensor::Shape{1, 4});
}
