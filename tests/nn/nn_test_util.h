// Helpers for the nn tests: fixture paths and tolerant comparisons with messages.
#pragma once

#include <string>

#include "tests/ddp/rounding.h"
#include "tests/test_util.h"
#include "tinyddp/nn/nn.h"

namespace tinyddp::testing {

inline std::string nn_fixture(const std::string& name) { return "tests/nn/fixtures/" + name; }

// max |a - b| over all elements (after converting both to float64); shapes must match.
inline double max_abs_diff(const tensor::Tensor& a, const tensor::Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  tensor::NoGradGuard no_grad;
  const std::vector<double> x = a.to(tensor::kFloat64).to_vector<double>();
  const std::vector<double> y = b.to(tensor::kFloat64).to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]));
  return worst;
}

// The float64 run of the ToyModel training (fixtures/make_toy_exact.py: 8 SGD-momentum steps,
// losses "losses" and the final state dict) with its float32 spread: the exact answer a float32
// run rounds, and the tolerances a run is held to (tests/ddp/rounding.h).
inline const ExactRun& toy_exact_run() {
  static const nn::SafetensorsFile file = nn::load_safetensors(nn_fixture("toy_exact.safetensors"));
  static const ExactRun run(file.tensors, "");
  return run;
}

// CHECKs the float32 state dict `state` against the exact ToyModel run's final one.
inline void check_toy_state(const nn::OrderedDict<tensor::Tensor>& state) {
  for (const std::string name : {"net1.weight", "net1.bias", "net2.weight", "net2.bias"}) {
    const std::vector<std::string> failures = toy_exact_run().check(state.at(name), name, tensor::kFloat32);
    for (const auto& f : failures) UNSCOPED_INFO(f);
    CHECK(failures.empty());
  }
}

// CHECKs float32 per-step losses against the exact ToyModel run's.
inline void check_toy_losses(const std::vector<double>& losses) {
  const std::vector<double> exact = toy_exact_run().exact("losses").to_vector<double>();
  REQUIRE(losses.size() >= exact.size());
  for (size_t i = 0; i < exact.size(); ++i) {
    INFO("step " << i << ": loss " << losses[i] << ", exact " << exact[i]);
    CHECK(std::fabs(losses[i] - exact[i]) <=
          toy_exact_run().tolerance("losses", static_cast<int64_t>(i), exact[i], tensor::kFloat32));
  }
}

}  // namespace tinyddp::testing
