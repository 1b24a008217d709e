// A JSON fixture of tests/nn/fixtures (written by a make_*.py script there), read once per
// test binary.
#pragma once

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/test_util.h"

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

}  // namespace tinyddp::testing
