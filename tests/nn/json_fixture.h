// A JSON fixture of tests/nn/fixtures (written by a make_*.py script there), read once per
// test binary.
#pragma once

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/test_util.h"
#include "tinyddp/nn/module.h"

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

}  // namespace tinyddp::testing
