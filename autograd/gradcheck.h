// gradcheck: compares the Jacobian that backward computes with central finite differences
// in float64. Reusable from any test: REQUIRE(gradcheck(f, {x, y}) == ""); gradgradcheck
// does the same for second derivatives (double backward).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tinyddp/tensor/tensor.h"

namespace tinyddp::autograd {

// torch.autograd.gradcheck's eps, atol and rtol (its defaults).
struct GradcheckOptions {
  GradcheckOptions& eps(double v) {
    eps_ = v;
    return *this;
  }  // finite-difference step
  GradcheckOptions& atol(double v) {
    atol_ = v;
    return *this;
  }  // |analytic - numerical| <= atol + rtol * |numerical|
  GradcheckOptions& rtol(double v) {
    rtol_ = v;
    return *this;
  }
  double eps() const { return eps_; }
  double atol() const { return atol_; }
  double rtol() const { return rtol_; }

 private:
  double eps_ = 1e-6;
  double atol_ = 1e-5;
  double rtol_ = 1e-3;
};

// `inputs`: float64 tensors; those that require grad are checked (they must be leaves).
// Builds the full analytic Jacobian (one backward per output element, on one retained
// graph) and the numerical one (two evaluations of f per input element), and returns "" when
// they agree, else a message naming the input, the elements and both values. The inputs'
// .grad are left undefined and their values unchanged.
std::string gradcheck(const std::function<tensor::Tensor(const std::vector<tensor::Tensor>&)>& f,
                      const std::vector<tensor::Tensor>& inputs, const GradcheckOptions& options = {});

// torch.autograd.gradgradcheck: checks second derivatives. The function checked by gradcheck
// is (inputs, v) -> the gradients of f at `inputs` weighted by v (autograd::grad with
// create_graph, flattened into one vector), so both d/d(inputs) (double backward through
// every op of f) and d/dv are compared with finite differences. `grad_outputs` (v) defaults to
// random float64 values of f's output shape from a fixed seed; they require grad.
std::string gradgradcheck(const std::function<tensor::Tensor(const std::vector<tensor::Tensor>&)>& f,
                          const std::vector<tensor::Tensor>& inputs, const tensor::Tensor& grad_outputs = {},
                          const GradcheckOptions& options = {});

}  // namespace tinyddp::autograd
