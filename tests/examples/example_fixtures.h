// What the examples' PyTorch fixtures hold an example's run to: its options from the fixture's
// config, and the state dict it saved against the fixture's.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tinyddp/nn/safetensors.h"

namespace tinyddp::testing {

// " --key value" for each of `keys` in a fixture's config (its values as JSON writes them).
inline std::string options_of(const nlohmann::json& config, const std::vector<const char*>& keys) {
  std::string s;
  for (const char* key : keys) s += fmt::format(" --{} {}", key, config[key].dump());
  return s;
}

// A metrics CSV an example wrote ("step,loss,lr", then a line per step) against a fixture's
// "records": the same steps, each loss within the fixture's loss_tolerance, each rate to the 9
// digits printed, and no line more.
inline void check_metrics(const std::string& path, const nlohmann::json& fixture) {
  std::ifstream csv(path);
  std::string line;
  std::getline(csv, line);
  CHECK(line == "step,loss,lr");
  const double loss_tolerance = fixture["loss_tolerance"].get<double>();
  for (const auto& record : fixture["records"]) {
    REQUIRE(std::getline(csv, line));
    INFO(line);
    double step = 0, loss = 0, lr = 0;
    REQUIRE(std::sscanf(line.c_str(), "%lf,%lf,%lf", &step, &loss, &lr) == 3);
    CHECK(step == record["step"].get<double>());
    CHECK(std::fabs(loss - record["loss"].get<double>()) <= loss_tolerance);
    CHECK(lr == Approx(record["lr"].get<double>()).epsilon(1e-8));  // printed to 9 digits
  }
  CHECK_FALSE(std::getline(csv, line));
}

// A state dict an example saved (safetensors) against a fixture's "state" (name -> float32
// values): the same names, and every value within `tolerance`.
inline void check_saved_state(const std::string& path, const nlohmann::json& state, double tolerance) {
  const nn::SafetensorsFile file = nn::load_safetensors(path);
  std::vector<std::string> names, got = file.tensors.keys();
  for (const auto& [name, values] : state.items()) names.push_back(name);
  std::sort(names.begin(), names.end());  // (the JSON object's order is by name)
  std::sort(got.begin(), got.end());
  CHECK(got == names);
  for (const auto& [name, t] : file.tensors) {
    INFO(name);
    REQUIRE(state.contains(name));
    const std::vector<float> values = t.to(tensor::kFloat32).contiguous().to_vector<float>();
    const std::vector<float> want = state[name].get<std::vector<float>>();
    REQUIRE(values.size() == want.size());
    double worst = 0;
    for (size_t i = 0; i < values.size(); ++i) worst = std::max(worst, std::fabs(double(values[i]) - want[i]));
    CHECK(worst <= tolerance);
  }
}

}  // namespace tinyddp::testing
