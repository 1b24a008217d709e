// The GPT fixture (fixtures/make_gpt_fixture.py: nanoGPT's model trained 20 steps by PyTorch,
// alone and under DDP) and the tolerances a run is held to against it, shared by
// tests/ddp/gpt_test.cc and tests/examples/train_gpt_test.cc.
//
// Where the tolerances come from. A float32 run of this training is not one number per step:
// 20 steps of Adam amplify rounding (the DDP run's gradient norm at step 10, a spike, moves by
// 4e-5 when the initial weights move by one unit in the last place), so two correct
// implementations that sum in different orders (another GEMM kernel, another CPU, another
// thread count) land apart by that much. The fixture measures it: beside PyTorch's float32
// run it holds the exact run (float64) and the float32 spread, the largest distance from the
// exact run over eight float32 runs that differ only in rounding. A run is held to the exact
// run within twice that spread (up to this step for a per-step value, since an error once made
// stays in the weights), plus 16 units of rounding of the largest value compared. A float64
// run is held to the same rule with float64's rounding: the spread scaled by 2^-29 (the ratio
// of the two formats' units of rounding), which leaves no room for a wrong formula.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>

#include "tinyddp/nn/nn.h"

namespace tinyddp::testing {

inline const nn::OrderedDict<tensor::Tensor>& gpt_reference() {
  static const nn::SafetensorsFile file = nn::load_safetensors("tests/ddp/fixtures/gpt_reference.safetensors");
  return file.tensors;
}

// The unit of rounding of float32 or float64 (2^-24, 2^-53).
inline double unit_roundoff(tensor::DType dtype) { return std::ldexp(1.0, dtype == tensor::kFloat64 ? -53 : -24); }

// How far `run`'s (single, ddp) `key` (loss, grad_norm) at `step` may be from the exact run's
// value `exact`, for a run in `dtype`.
inline double gpt_tolerance(const std::string& run, const std::string& key, int64_t step, double exact,
                            tensor::DType dtype) {
  const tensor::Tensor spread = gpt_reference().at(run + ".f32_spread." + key);  // [steps] or [steps, ranks]
  const double so_far = tensor::max(spread.narrow(0, 0, step + 1)).item<double>();
  const double scale = unit_roundoff(dtype) / unit_roundoff(tensor::kFloat32);
  return 2 * so_far * scale + 16 * unit_roundoff(dtype) * std::max(1.0, std::fabs(exact));
}

// Checks `got` (any dtype) against the exact run's tensor `run`.f64.`key` (param.<name> or
// grad0.<name>) part by part along dim 0 (c_attn's query, key and value apart), each within
// the rule above; returns the failures' descriptions (empty when it holds).
inline std::vector<std::string> gpt_check_tensor(const tensor::Tensor& got, const std::string& run,
                                                 const std::string& key, tensor::DType dtype) {
  const tensor::Tensor exact = gpt_reference().at(run + ".f64." + key);
  const tensor::Tensor spread = gpt_reference().at(run + ".f32_spread." + key);
  const double scale = unit_roundoff(dtype) / unit_roundoff(tensor::kFloat32);
  const double floor = 16 * unit_roundoff(dtype) * tensor::max(tensor::abs(exact)).item<double>();
  const int64_t parts = spread.size(0), rows = exact.size(0) / parts;
  std::vector<std::string> failures;
  for (int64_t part = 0; part < parts; ++part) {
    const tensor::Tensor want = exact.narrow(0, part * rows, rows);
    const tensor::Tensor have = got.to(tensor::kFloat64).narrow(0, part * rows, rows);
    const double bound = 2 * spread[part].item<double>() * scale + floor;
    const double worst = tensor::max(tensor::abs(tensor::sub(have, want))).item<double>();
    if (!(worst <= bound)) {
      failures.push_back(fmt::format("{} {} part {} of {}: off the exact run by {:.3g}, allowed {:.3g}", run, key, part,
                                     parts, worst, bound));
    }
  }
  return failures;
}

}  // namespace tinyddp::testing
