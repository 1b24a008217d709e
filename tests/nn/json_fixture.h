// A JSON fixture of tests/nn/fixtures (written by a make_*.py script there), read once per
// test binary.
#pragma once

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/test_util.h"
#include "tinyddp/nn/module.h"
#include "tinyddp/nn/rnn.h"

namespace tinyddp::testing {

// The parsed file tests/nn/fixtures/<name>; a missing file fails the test that asks.
inline nlohmann::json read_nn_json_fixture(const std::string& name) {
  std::ifstream in("tests/nn/fixtures/" + name);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

// A fixture's list of numbers as a float64 tensor of `shape`.
inline tensor::Tensor doubles(const nlohmann::json& values, const tensor::Shape& shape) {
  return tensor::from_vector(values.get<std::vector<double>>(), shape);
}

// The module moved to float64 and given the fixture's state dict (every name of its own
// state_dict() must be in `state`).
inline void load_float64_state(nn::Module& module, const nlohmann::json& state) {
  module.to(tensor::kFloat64);
  nn::OrderedDict<tensor::Tensor> values;
  for (const auto& [name, t] : module.state_dict()) values.insert(name, doubles(state.at(name), t.sizes()));
  module.load_state_dict(values);
}

// `got` equals the fixture's float64 values (its shape) to 1e-12.
inline void check_close(const tensor::Tensor& got, const nlohmann::json& want) {
  REQUIRE(got.defined());
  CHECK(tensor::allclose(got, doubles(want, got.sizes()), 1e-12, 1e-12));
}

// The recurrent fixtures' module (make_rnn_fixture.py, make_packed_sequence_fixture.py): `kind`
// LSTM, GRU or RNN of input 3 and hidden 4 with the fixture's constructor arguments `kw`,
// torch's defaults for what it leaves out.
inline std::shared_ptr<nn::RNNBase> make_rnn(const std::string& kind, const nlohmann::json& kw) {
  const int64_t layers = kw.value("num_layers", 1);
  const bool bias = kw.value("bias", true), batch_first = kw.value("batch_first", false),
             bidirectional = kw.value("bidirectional", false);
  if (kind == "LSTM") {
    return std::make_shared<nn::LSTM>(3, 4, layers, bias, batch_first, 0.0, bidirectional, kw.value("proj_size", 0));
  }
  if (kind == "GRU") return std::make_shared<nn::GRU>(3, 4, layers, bias, batch_first, 0.0, bidirectional);
  return std::make_shared<nn::RNN>(3, 4, layers, kw.value("nonlinearity", "tanh"), bias, batch_first, 0.0,
                                   bidirectional);
}

}  // namespace tinyddp::testing
