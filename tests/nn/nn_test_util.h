// Helpers for the nn tests: fixture paths and tolerant comparisons with messages.
#pragma once

#include <string>

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

}  // namespace tinyddp::testing
