// Tolerances for a training run against a fixture's exact run, from the fixture's measure of
// float32 rounding (tests/ddp/fixtures/rounding.py), shared by the tests that replay a
// PyTorch training step by step (gpt, cnn, train_gpt, train --model cnn).
//
// Where they come from. A float32 training run is not one number per step: the steps amplify
// rounding, so two correct implementations that sum in different orders (another GEMM kernel,
// another CPU, another thread count) land apart. The fixture measures how far: beside PyTorch's
// float32 run it holds the exact run (float64, keys <prefix>f64.<key>) and the float32 spread
// (<prefix>f32_spread.<key>), the largest distance from the exact run over float32 runs that
// differ only in rounding. A run is held to the exact run within twice that spread (for a
// per-step value, the largest spread up to this step, since an error once made stays in the
// weights), plus 16 units of rounding of the largest value compared. A float64 run is held to
// the same rule with float64's rounding: the spread scaled by 2^-29 (the ratio of the two
// formats' units of rounding), which leaves no room for a wrong formula.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tinyddp/nn/nn.h"

namespace tinyddp::testing {

// The unit of rounding of float32 or float64 (2^-24, 2^-53).
inline double unit_roundoff(tensor::DType dtype) { return std::ldexp(1.0, dtype == tensor::kFloat64 ? -53 : -24); }

// One run of a fixture: its exact records and float32 spread under `prefix` ("", "single.").
class ExactRun {
 public:
  ExactRun(const nn::OrderedDict<tensor::Tensor>& fixture, std::string prefix)
      : fixture_(fixture), prefix_(std::move(prefix)) {}

  // The exact run's record `key`.
  const tensor::Tensor& exact(const std::string& key) const { return fixture_.at(prefix_ + "f64." + key); }

  // How far a run in `dtype` may be from the exact per-step value `exact` of `key` ([steps]
  // or [steps, ranks]) at `step`.
  double tolerance(const std::string& key, int64_t step, double exact, tensor::DType dtype) const {
    const tensor::Tensor spread = fixture_.at(prefix_ + "f32_spread." + key);
    const double so_far = tensor::max(spread.narrow(0, 0, step + 1)).item<double>();
    return 2 * so_far * scale(dtype) + 16 * unit_roundoff(dtype) * std::max(1.0, std::fabs(exact));
  }

  // Checks the tensor `got` (any dtype) against the exact record `key`, part by part along
  // dim 0 (as many parts as the spread holds numbers), each within the rule above; returns the
  // failures' descriptions (empty when it holds).
  std::vector<std::string> check(const tensor::Tensor& got, const std::string& key, tensor::DType dtype) const {
    const tensor::Tensor want_all = exact(key);
    if (!got.defined() || got.sizes() != want_all.sizes()) {
      return {fmt::format("{}{}: shape {}, the exact run's {}", prefix_, key,
                          got.defined() ? tensor::format_shape(got.sizes()) : "undefined",
                          tensor::format_shape(want_all.sizes()))};
    }
    if (!tensor::is_floating_point(want_all.dtype())) {
      return tensor::equal(got, want_all) ? std::vector<std::string>{}
                                          : std::vector<std::string>{prefix_ + key + " differs from the exact run's"};
    }
    const tensor::Tensor spread = fixture_.at(prefix_ + "f32_spread." + key);
    const double floor = 16 * unit_roundoff(dtype) * tensor::max(tensor::abs(want_all)).item<double>();
    const int64_t parts = spread.size(0), rows = want_all.size(0) / parts;
    const tensor::Tensor have_all = got.detach().to(tensor::kFloat64);
    std::vector<std::string> failures;
    for (int64_t part = 0; part < parts; ++part) {
      const tensor::Tensor want = want_all.narrow(0, part * rows, rows), have = have_all.narrow(0, part * rows, rows);
      const double bound = 2 * spread[part].item<double>() * scale(dtype) + floor;
      const double worst = tensor::max(tensor::abs(tensor::sub(have, want))).item<double>();
      if (!(worst <= bound)) {
        failures.push_back(fmt::format("{}{} part {} of {}: off the exact run by {:.3g}, allowed {:.3g}", prefix_, key,
                                       part, parts, worst, bound));
      }
    }
    return failures;
  }

 private:
  static double scale(tensor::DType dtype) { return unit_roundoff(dtype) / unit_roundoff(tensor::kFloat32); }

  const nn::OrderedDict<tensor::Tensor>& fixture_;
  std::string prefix_;
};

}  // namespace tinyddp::testing
