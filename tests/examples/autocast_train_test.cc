// examples/train --autocast bf16 against PyTorch's CPU autocast: the MLP trained 50
// SGD-momentum steps from the same initial state and batches
// (fixtures/make_autocast_mlp_fixture.py) in one process and on 2 DDP ranks. Its losses stay
// near PyTorch's autocast run and near the float32 run; the 2-rank run near the 1-process one.
#include <cmath>
#include <fstream>

#include "tests/test_util.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp;
using Catch::Contains;
using tensor::Tensor;
using testing::CommandResult;
using testing::run_command;
using testing::temp_path;

namespace {

const nn::OrderedDict<Tensor>& reference() {
  static const nn::SafetensorsFile file =
      nn::load_safetensors("tests/examples/fixtures/autocast_mlp_reference.safetensors");
  return file.tensors;
}

std::vector<double> losses_in(const std::string& csv_path) {
  std::ifstream csv(csv_path);
  std::string line;
  std::getline(csv, line);  // header
  std::vector<double> losses;
  while (std::getline(csv, line)) losses.push_back(std::stod(line.substr(line.find(',') + 1)));
  return losses;
}

double max_difference(const std::vector<double>& a, const Tensor& b) {
  const std::vector<double> y = b.to(tensor::kFloat64).contiguous().to_vector<double>();
  double worst = a.size() == y.size() ? 0.0 : INFINITY;
  for (size_t i = 0; i < std::min(a.size(), y.size()); ++i) worst = std::max(worst, std::fabs(a[i] - y[i]));
  return worst;
}

// Runs examples/train on the fixture (nproc 1: directly; 2: under the launcher); returns the
// losses it logged and the path of its final state dict.
std::pair<std::vector<double>, std::string> train(int nproc, const std::string& autocast) {
  nn::OrderedDict<Tensor> init, data;
  for (const auto& [key, t] : reference()) {
    if (key.rfind("init.", 0) == 0) init.insert(key.substr(5), t);
  }
  data.insert("inputs", reference().at("inputs"));
  data.insert("targets", reference().at("targets"));
  const std::string tag = std::to_string(nproc) + autocast;
  const std::string init_path = temp_path("ac_init.safetensors"), data_path = temp_path("ac_data.safetensors");
  const std::string saved = temp_path("ac_saved" + tag + ".safetensors"), metrics = temp_path("ac" + tag + ".csv");
  nn::save_safetensors(init_path, init);
  nn::save_safetensors(data_path, data);
  const std::string args = "examples/train --model mlp --widths 16,64,10 --lr 0.1 --momentum 0.9 --steps 50 --init " +
                           init_path + " --data " + data_path + " --save " + saved + " --metrics " + metrics +
                           (autocast.empty() ? "" : " --autocast " + autocast);
  const CommandResult r = run_command(nproc == 1 ? args : "launcher/launch --nproc_per_node 2 -- " + args);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return {losses_in(metrics), saved};
}

}  // namespace

TEST_CASE("examples: train --autocast bf16 follows PyTorch's autocast run and the float32 curve, on 1 and 2 ranks",
          "[examples][train][autocast]") {
  // Tolerances: the two autocast runs round different float32 sums to bfloat16 (relative
  // 2^-8 each) and drift apart over 50 steps, as PyTorch's own autocast run drifts from its
  // float32 run: 0.0044 in loss and 0.033 in the final parameters (|w| up to 0.98) here.
  // Stated bounds: 0.02 on every step's loss (losses fall from 2.34 to 0.40), 0.05 on every
  // final parameter.
  const auto [ours, saved] = train(1, "bf16");
  const Tensor& theirs = reference().at("loss_bf16");
  REQUIRE(ours.size() == static_cast<size_t>(theirs.size(0)));
  CHECK(max_difference(ours, theirs) < 0.02);
  CHECK(max_difference(ours, reference().at("loss_float32")) < 0.02);
  const nn::SafetensorsFile file = nn::load_safetensors(saved);
  for (const auto& [name, t] : file.tensors) {
    INFO(name);
    CHECK(t.dtype() == tensor::kFloat32);  // master weights stay float32
    const Tensor diff = tensor::abs(tensor::sub(t, reference().at("final." + name)));
    CHECK(tensor::max(diff).item<float>() < 0.05f);
  }
  // Not the float32 run: autocast did change the arithmetic.
  const auto [plain, plain_saved] = train(1, "");
  CHECK(max_difference(ours, tensor::from_vector<double>(plain)) > 0.0);
  CHECK(max_difference(plain, reference().at("loss_float32")) < 1e-4);
  // DDP on 2 ranks: each rank's half batch under autocast, gradients averaged in float32.
  const auto [two, two_saved] = train(2, "bf16");
  CHECK(max_difference(two, tensor::from_vector<double>(ours)) < 0.02);
}

TEST_CASE("examples: train --autocast takes bf16 only", "[examples][train][autocast][errors]") {
  const CommandResult r = run_command("examples/train --steps 1 --autocast fp16");
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains("--autocast must be bf16 (or absent), got 'fp16'"));
}
