// Helpers for the nn tests: fixture paths and tolerant comparisons with messages.
#pragma once

#include <string>
#include <vector>

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

// The parameters of the fused optimizer-step tests (fused_adam_test, fused_sgd_test), twice: 45
// of them (past the 40 a GPU launch takes), the first of 70,000 elements (past the 65,536 of a
// block's chunk); `fused` contiguous, `strided` the same values in transposed memory, which the
// fused paths decline (so its optimizer updates op by op).
struct TwinParams {
  std::vector<tensor::Tensor> fused, strided;
};
inline TwinParams twin_params(tensor::Generator& g, const tensor::Device& device, tensor::DType dtype) {
  TwinParams twins;
  for (int i = 0; i < 45; ++i) {
    const tensor::Shape shape = i == 0 ? tensor::Shape{700, 100} : tensor::Shape{3 + i % 5, 4};
    const tensor::Tensor start = tensor::randn(shape, {}, &g).to(dtype).to(device);
    twins.fused.push_back(start.clone().requires_grad_());
    twins.strided.push_back(start.t().contiguous().t().requires_grad_());
  }
  return twins;
}
// The same random gradient on both twins of each parameter; at step 0 the last gets none (so
// its state starts a step later than the others').
inline void twin_grads(TwinParams& twins, tensor::Generator& g, int step) {
  for (size_t i = 0; i < twins.fused.size(); ++i) {
    const bool skip = step == 0 && i + 1 == twins.fused.size();
    const tensor::Tensor grad =
        tensor::randn(twins.fused[i].sizes(), {}, &g).to(twins.fused[i].dtype()).to(twins.fused[i].device());
    twins.fused[i].mutable_grad() = skip ? tensor::Tensor() : grad.clone();
    twins.strided[i].mutable_grad() = skip ? tensor::Tensor() : grad.clone();
  }
}
// Both twins equal, parameter by parameter, after `step`.
inline void require_twins_equal(const TwinParams& twins, int step) {
  for (size_t i = 0; i < twins.fused.size(); ++i) {
    INFO("step " << step << ", parameter " << i);
    REQUIRE(tensor::equal(twins.fused[i], twins.strided[i]));
  }
}

}  // namespace tinyddp::testing
