// examples/train --autocast bf16 against PyTorch's CPU autocast: the MLP and the digits CNN
// trained 50 SGD-momentum steps from the same initial state and batches
// (fixtures/make_autocast_train_fixtures.py) in one process and on 2 DDP ranks (the CNN with
// SyncBatchNorm, so that its statistics are the whole batch's). Losses stay near PyTorch's
// autocast run and near the float32 run; the 2-rank run near the 1-process one.
#include <algorithm>
#include <cmath>
#include <map>

#include "tests/test_util.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp;
using Catch::Contains;
using tensor::Tensor;
using testing::CommandResult;
using testing::read_losses;
using testing::run_command;
using testing::temp_path;

namespace {

struct Model {
  std::string name, args;  // "mlp" or "cnn"; examples/train's options for it
  const nn::OrderedDict<Tensor>& reference() const {
    static std::map<std::string, nn::SafetensorsFile> files;
    if (files.count(name) == 0) {
      files.emplace(name, nn::load_safetensors("tests/examples/fixtures/autocast_" + name + "_reference.safetensors"));
    }
    return files.at(name).tensors;
  }
};

const Model kMlp{"mlp", "--model mlp --widths 16,64,10 --lr 0.1"};
const Model kCnn{"cnn", "--model cnn --dropout 0 --lr 0.01"};

double max_difference(const std::vector<double>& a, const Tensor& b) {
  const std::vector<double> y = b.to(tensor::kFloat64).contiguous().to_vector<double>();
  double worst = a.size() == y.size() ? 0.0 : INFINITY;
  for (size_t i = 0; i < std::min(a.size(), y.size()); ++i) worst = std::max(worst, std::fabs(a[i] - y[i]));
  return worst;
}

// Runs examples/train on the fixture (nproc 1: directly; 2: under the launcher); returns the
// losses it logged and the path of its final state dict.
std::pair<std::vector<double>, std::string> train(const Model& model, int nproc, const std::string& options) {
  nn::OrderedDict<Tensor> init, data;
  for (const auto& [key, t] : model.reference()) {
    if (key.rfind("init.", 0) == 0) init.insert(key.substr(5), t);
  }
  data.insert("inputs", model.reference().at("inputs"));
  data.insert("targets", model.reference().at("targets"));
  std::string tag = model.name + std::to_string(nproc) + options;
  std::replace(tag.begin(), tag.end(), ' ', '_');
  const std::string init_path = temp_path("ac_init" + tag + ".safetensors");
  const std::string data_path = temp_path("ac_data" + tag + ".safetensors");
  const std::string saved = temp_path("ac_saved" + tag + ".safetensors"), metrics = temp_path("ac" + tag + ".csv");
  nn::save_safetensors(init_path, init);
  nn::save_safetensors(data_path, data);
  const std::string args = "examples/train " + model.args + " --momentum 0.9 --steps 50 --init " + init_path +
                           " --data " + data_path + " --save " + saved + " --metrics " + metrics + " " + options;
  const CommandResult r = run_command(nproc == 1 ? args : "launcher/launch --nproc_per_node 2 -- " + args);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return {read_losses(metrics), saved};
}

// Checks one model's runs. Tolerances: the two autocast runs round different float32 sums to
// bfloat16 (relative 2^-8 each) and drift apart over 50 steps, as PyTorch's own autocast run
// drifts from its float32 run (make_autocast_train_fixtures.py prints it: 0.0044 in loss for
// the MLP, 0.043 for the CNN). Stated bounds: `loss_bound` on every step's loss; on every final
// parameter and buffer (which stay float32, the master weights), three times the distance
// between PyTorch's autocast and float32 runs' final values of that tensor (it ranges from
// 3e-5 for a bias to 0.11 for the second BatchNorm's running mean, relative to the tensor's
// largest magnitude, at least 1), plus 1e-6 of that magnitude.
void check_model(const Model& model, double loss_bound, const std::string& two_rank_options) {
  INFO("model " << model.name);
  const auto [ours, saved] = train(model, 1, "--autocast bf16");
  const Tensor& theirs = model.reference().at("loss_bf16");
  REQUIRE(ours.size() == static_cast<size_t>(theirs.size(0)));
  CHECK(max_difference(ours, theirs) < loss_bound);
  CHECK(max_difference(ours, model.reference().at("loss_float32")) < loss_bound);
  const nn::SafetensorsFile file = nn::load_safetensors(saved);
  for (const auto& [name, t] : file.tensors) {
    INFO(name);
    if (name.find("num_batches_tracked") != std::string::npos) continue;  // int64
    CHECK(t.dtype() == tensor::kFloat32);
    const Tensor& expected = model.reference().at("final." + name);
    const auto distance = [&](const Tensor& a) {
      return tensor::max(tensor::abs(tensor::sub(a, expected))).item<float>();
    };
    const float scale = std::max(1.0f, tensor::max(tensor::abs(expected)).item<float>());
    const float drift = distance(model.reference().at("final_float32." + name));  // PyTorch's autocast vs float32
    CHECK(distance(t) <= 3 * drift + 1e-6f * scale);
  }
  // Not the float32 run: autocast did change the arithmetic; the float32 run is PyTorch's.
  const auto [plain, plain_saved] = train(model, 1, "");
  CHECK(max_difference(ours, tensor::from_vector<double>(plain)) > 0.0);
  CHECK(max_difference(plain, model.reference().at("loss_float32")) < 1e-4);
  // DDP on 2 ranks: each rank's half batch under autocast, gradients averaged in float32.
  const auto [two, two_saved] = train(model, 2, "--autocast bf16 " + two_rank_options);
  CHECK(max_difference(two, tensor::from_vector<double>(ours)) < loss_bound);
}

}  // namespace

TEST_CASE("examples: train --autocast bf16 follows PyTorch's autocast run and the float32 curve, on 1 and 2 ranks",
          "[examples][train][autocast]") {
  check_model(kMlp, 0.02, "");
  check_model(kCnn, 0.1, "--sync_bn");
}

TEST_CASE("examples: train --autocast takes bf16 only", "[examples][train][autocast][errors]") {
  const CommandResult r = run_command("examples/train --steps 1 --autocast fp16");
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains("--autocast must be bf16 (or absent), got 'fp16'"));
}
