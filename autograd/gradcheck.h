// gradcheck: compares the Jacobian that backward computes with central finite differences
// in float64. Reusable from any test: REQUIRE(gradcheck(f, {x, y}) == "").
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tinyddp/tensor/tensor.h"

namespace tinyddp::autograd {

struct GradcheckOptions {
  double eps = 1e-6;   // finite-difference step
  double atol = 1e-5;  // |analytic - numerical| <= atol + rtol * |numerical|
  double rtol = 1e-3;
};

// `inputs`: float64 tensors; those that require grad are checked (they must be leaves).
// Builds the full analytic Jacobian (one backward per output element, on one retained
// graph) and the numerical one (two evaluations of f per input element), and returns "" when
// they agree, else a message naming the input, the elements and both values. The inputs'
// .grad are left undefined and their values unchanged.
std::string gradcheck(const std::function<tensor::Tensor(const std::vector<tensor::Tensor>&)>& f,
                      const std::vector<tensor::Tensor>& inputs, const GradcheckOptions& options = {});

}  // namespace tinyddp::autograd
