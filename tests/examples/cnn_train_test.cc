// examples/train --model cnn as a user runs it, replayed from PyTorch: the fixture of
// tests/ddp (fixtures/make_cnn_fixture.py: the digits CNN trained 10 SGD-momentum steps under
// PyTorch's DDP on 2 gloo ranks) gives the initial state dict (--init) and the batches
// (--data, [steps, batch, 1, 8, 8]); the saved state dict (--save, buffers included) and the
// losses (--metrics) must be the fixture's exact run's within its float32 spread
// (tests/ddp/rounding.h). Also the CNN's clear errors.
#include <cmath>
#include <fstream>

#include "tests/ddp/rounding.h"
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
  static const nn::SafetensorsFile file = nn::load_safetensors("tests/ddp/fixtures/cnn_ddp_reference.safetensors");
  return file.tensors;
}

}  // namespace

namespace {

// Runs train --model cnn on 2 ranks (with `extra` options) from the fixture's start and
// checks its saved state dict and losses against PyTorch's DDP run.
void check_against_pytorch_ddp(const std::string& extra) {
  nn::OrderedDict<Tensor> init, data;
  for (const auto& [key, t] : reference()) {
    if (key.rfind("init.", 0) == 0) init.insert(key.substr(5), t);
  }
  data.insert("inputs", reference().at("inputs"));
  data.insert("targets", reference().at("targets"));
  const std::string init_path = temp_path("cnn_init.safetensors"), data_path = temp_path("cnn_data.safetensors");
  const std::string saved = temp_path("cnn_saved.safetensors"), metrics = temp_path("cnn_metrics.csv");
  nn::save_safetensors(init_path, init);
  nn::save_safetensors(data_path, data);
  const CommandResult r = run_command(
      "launcher/launch --nproc_per_node 2 -- examples/train --model cnn --dropout 0 --lr 0.05 --momentum 0.9 --steps "
      "10 --init " +
      init_path + " --data " + data_path + " --save " + saved + " --metrics " + metrics + extra);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains(extra.empty() ? "data-parallel on 2 ranks" : "fully sharded (fully_shard) on 2 ranks"));
  const nn::SafetensorsFile file = nn::load_safetensors(saved);
  CHECK(file.tensors.keys() == init.keys());  // PyTorch's names, buffers included, in its order
  const testing::ExactRun exact(reference(), "");
  for (const auto& [name, t] : file.tensors) {
    INFO(name);
    // Parameters are the same on every rank; buffers are rank 0's (the rank that saves).
    const std::string key =
        reference().contains("param.step9." + name) ? "param.step9." + name : "buffers.rank0.step9." + name;
    const std::vector<std::string> failures = exact.check(t, key, tensor::kFloat32);
    for (const auto& f : failures) UNSCOPED_INFO(f);
    CHECK(failures.empty());
  }
  std::ifstream csv(metrics);
  std::string line;
  std::getline(csv, line);
  const Tensor losses = exact.exact("loss");
  for (int64_t step = 0; step < losses.size(0); ++step) {
    REQUIRE(std::getline(csv, line));
    const double mean_over_ranks = tensor::mean(losses[step]).item<double>();
    CHECK(std::fabs(std::stod(line.substr(line.find(',') + 1)) - mean_over_ranks) <=
          exact.tolerance("loss", step, mean_over_ranks, tensor::kFloat32));
  }
}

}  // namespace

TEST_CASE(
    "examples: train --model cnn on 2 ranks from PyTorch's initial state and batches ends with PyTorch's "
    "state dict, buffers included",
    "[examples][train][cnn]") {
  check_against_pytorch_ddp("");
}

// fully_shard computes DDP's average (each gradient divided by W, then summed over the two
// ranks), so the same float32 spread holds.
TEST_CASE("examples: train --model cnn --fsdp on 2 ranks ends with PyTorch's DDP state dict too",
          "[examples][train][cnn][fsdp]") {
  check_against_pytorch_ddp(" --fsdp");
}

TEST_CASE("examples: train --model cnn's bad options and data get clear errors", "[examples][train][cnn][errors]") {
  const auto error_of = [](const std::string& args) {
    const CommandResult r = run_command("examples/train " + args);
    CHECK(r.exit_code == 1);
    return r.output;
  };
  CHECK_THAT(error_of("--model cnn"), Contains("--model cnn classifies 8x8 images: use it with --dataset digits"));
  CHECK_THAT(error_of("--model cnn --dataset digits --dropout 1"), Contains("--dropout must be in [0, 1), got 1"));
  CHECK_THAT(error_of("--model mlp --dataset digits --sync_bn"), Contains("--sync_bn applies to --model cnn"));
  CHECK_THAT(error_of("--model cnn --dataset digits --fsdp --sync_bn"),
             Contains("--fsdp does not take --sync_bn, --comm_hook or --autocast"));
  nn::OrderedDict<Tensor> flat;
  flat.insert("inputs", tensor::zeros({2, 4, 64}));
  flat.insert("targets", tensor::zeros({2, 4}, tensor::kInt64));
  const std::string path = temp_path("cnn_flat.safetensors");
  nn::save_safetensors(path, flat);
  CHECK_THAT(error_of("--model cnn --steps 2 --data " + path),
             Contains("'inputs' must be float32 [steps, batch, 1, 8, 8], got float32 [2, 4, 64]"));
  // A checkpoint without BatchNorm's buffers is refused, naming them.
  nn::OrderedDict<Tensor> init;
  for (const auto& [key, t] : reference()) {
    if (key.rfind("init.", 0) == 0 && key.find("running_var") == std::string::npos) init.insert(key.substr(5), t);
  }
  const std::string partial = temp_path("cnn_partial.safetensors");
  nn::save_safetensors(partial, init);
  const std::string message = error_of("--model cnn --dataset digits --steps 1 --init " + partial);
  CHECK_THAT(message, Contains("1.running_var"));
  CHECK_THAT(message, Contains("5.running_var"));
}

TEST_CASE("train --model cnn with Dropout on 2 ranks, restarted by launch, resumes each rank's own generator",
          "[examples][train][cnn][restart]") {
  // Each rank draws its own Dropout masks (seeded seed + rank after the model is built; nanoGPT
  // seeds with its seed_offset before), so rank 0's checkpoint holds every rank's generator: a restarted run
  // that gave rank 1 rank 0's stream would take other masks after step 20 and end elsewhere.
  const std::string args = "examples/train --model cnn --dataset digits --steps 30 --log_every 30 --batch 32";
  const std::string full = temp_path("cnn_full.safetensors"), restarted = temp_path("cnn_restarted.safetensors");
  const std::string checkpoint = temp_path("cnn_dropout.checkpoint");
  std::remove(checkpoint.c_str());
  const CommandResult once = run_command("launcher/launch --nproc_per_node 2 -- " + args + " --save " + full);
  INFO(once.output);
  REQUIRE(once.exit_code == 0);
  const CommandResult twice =
      run_command("launcher/launch --nproc_per_node 2 --max_restarts 1 -- " + args + " --save " + restarted +
                  " --checkpoint " + checkpoint + " --checkpoint_every 10 --resume --fail_at_step 25");
  INFO(twice.output);
  REQUIRE(twice.exit_code == 0);
  CHECK_THAT(twice.output, Contains("resuming from " + checkpoint + " after 20 steps"));
  CHECK(nn::load_safetensors(checkpoint).metadata.count("user.rng.cpu.rank1") == 1);
  const auto a = nn::load_safetensors(full).tensors, b = nn::load_safetensors(restarted).tensors;
  for (const auto& [name, t] : a) CHECK(tensor::equal(t, b.at(name)));
  // At another world size no rank's stream can be given back: each starts a fresh one, and
  // the run goes on (one process, from the 2 ranks' checkpoint of step 30).
  const std::string more = args.substr(0, args.find(" --steps 30")) + " --steps 34 --log_every 34 --batch 32";
  const CommandResult alone = run_command(more + " --checkpoint " + checkpoint + " --resume");
  INFO(alone.output);
  CHECK(alone.exit_code == 0);
  CHECK_THAT(alone.output, Contains("resuming from " + checkpoint + " after 30 steps"));
}
