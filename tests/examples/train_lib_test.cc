// //examples:train's loop fed PyTorch's initial weights and data (--init, --data) ends where
// PyTorch does: the same per-step losses (--metrics) and final weights (--save), within the
// float32 spread of the exact run (tests/nn/nn_test_util.h).
#include <fstream>
#include <sstream>

#include "examples/train_lib.h"
#include "tests/nn/nn_test_util.h"
#include "tinyddp/launcher/spawn.h"

using namespace tinyddp;
using Catch::Contains;
using tinyddp::testing::nn_fixture;
using tinyddp::testing::read_losses;

namespace {
// The run of tests/nn/fixtures/make_nn_fixtures.py: ToyModel, MSE, SGD lr 0.01 momentum 0.9,
// 8 steps from PyTorch's initial weights on its data.
examples::TrainConfig pytorch_run_config() {
  examples::TrainConfig config;
  config.model = "toy";
  config.loss = "mse";
  config.lr = 0.01;
  config.momentum = 0.9;
  config.steps = 8;
  config.init = nn_fixture("toy_init.safetensors");
  config.data = nn_fixture("toy_data.safetensors");
  return config;
}

// Trains `config` on 2 ranks (spawn_local: WORLD_SIZE=2 over loopback); rank 0 writes its files.
void train_on_two_ranks(const examples::TrainConfig& config) {
  const int failed = launcher::spawn_local(2, [&](int rank) {
    try {
      std::ostringstream log;
      examples::train(config, log);
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
      return 1;
    }
  });
  REQUIRE(failed == 0);
}

// Rank 0's losses of `config` trained on 2 ranks.
std::vector<double> losses_on_two_ranks(examples::TrainConfig config) {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  config.metrics = dir + "/two_rank_losses.csv";
  train_on_two_ranks(config);
  std::vector<double> losses = read_losses(config.metrics);
  REQUIRE(losses.size() == static_cast<size_t>(config.steps));
  return losses;
}
}  // namespace

TEST_CASE("the training example reproduces PyTorch's ToyModel run", "[examples][train][fixture]") {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  examples::TrainConfig config = pytorch_run_config();
  config.save = dir + "/trained.safetensors";
  config.metrics = dir + "/metrics.csv";
  std::ostringstream log;
  const examples::TrainResult result = examples::train(config, log);
  CHECK_THAT(log.str(), Contains("step 8/8"));
  REQUIRE(result.losses.size() == 8);
  testing::check_toy_losses(result.losses);
  testing::check_toy_state(nn::load_safetensors(config.save).tensors);
  std::ifstream csv(config.metrics);
  std::string header;
  std::getline(csv, header);
  CHECK(header == "step,loss");
  testing::check_toy_losses(read_losses(config.metrics));
}

TEST_CASE("the training example rejects data that does not fit the model", "[examples][train][errors]") {
  examples::TrainConfig config;
  config.model = "toy";
  config.steps = 9;
  config.data = nn_fixture("toy_data.safetensors");
  std::ostringstream log;
  CHECK_THROWS_WITH(examples::train(config, log), Contains("--steps 9 but the file holds 8 batches"));
  config.steps = 2;
  config.loss = "ce";
  CHECK_THROWS_WITH(examples::train(config, log),
                    Contains("'targets' must be int64 [8, 20] for this loss, got float32 [8, 20, 5]"));
  config.loss = "mse";
  config.model = "mlp";
  config.widths = {12, 5};
  CHECK_THROWS_WITH(examples::train(config, log), Contains("'inputs' must be float32 [steps, batch, 12]"));
  config.data = nn_fixture("layers.safetensors");
  config.widths = {10, 5};
  CHECK_THROWS_WITH(examples::train(config, log), Contains("expected tensors named 'inputs' and 'targets'"));
}

TEST_CASE("TrainConfig::validate names the option that is out of range", "[examples][train][errors]") {
  const auto message = [](auto change) -> std::string {
    examples::TrainConfig config;
    change(config);
    try {
      config.validate();
    } catch (const Error& e) {
      return e.what();
    }
    return "(valid)";
  };
  CHECK(message([](examples::TrainConfig&) {}) == "(valid)");
  CHECK_THAT(message([](auto& c) { c.model = "resnet"; }), Contains("--model must be toy, mlp or cnn, got 'resnet'"));
  CHECK_THAT(message([](auto& c) { c.model = "cnn"; }),
             Contains("--model cnn classifies 8x8 images: use it with --dataset digits or --data"));
  CHECK(message([](auto& c) {
          c.model = "cnn";
          c.dataset = "digits";
        }) == "(valid)");
  CHECK_THAT(message([](auto& c) { c.dropout = 1; }), Contains("--dropout must be in [0, 1), got 1"));
  CHECK_THAT(message([](auto& c) { c.lr = 0; }), Contains("--lr must be positive, got 0"));
  CHECK_THAT(message([](auto& c) { c.bucket_cap_mb = -1; }), Contains("--bucket_cap_mb and --first_bucket_cap_mb"));
  CHECK_THAT(message([](auto& c) { c.comm_hook = "topk"; }),
             Contains("--comm_hook must be allreduce, fp16, bf16 or powersgd"));
  CHECK_THAT(message([](auto& c) { c.powersgd_start_iter = 1; }), Contains("--powersgd_start_iter must be at least 2"));
  CHECK_THAT(message([](auto& c) { c.resume = true; }), Contains("--resume needs --checkpoint PATH"));
  CHECK_THAT(message([](auto& c) {
               c.dataset = "digits";
               c.model = "toy";
             }),
             Contains("--dataset digits trains a classifier"));
}

TEST_CASE("the training example on 2 ranks (WORLD_SIZE=2) reproduces the one-process run", "[examples][train][ddp]") {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  examples::TrainConfig config = pytorch_run_config();  // global batches of 20 rows: 10 per rank
  config.save = dir + "/ddp_trained.safetensors";
  config.metrics = dir + "/ddp_metrics.csv";
  train_on_two_ranks(config);
  // Rank 0 wrote both files; they match the single-process run (the ranks' mean of the two
  // halves' losses and gradients rounds differently from one mean over all rows: within the
  // float32 spread).
  testing::check_toy_state(nn::load_safetensors(dir + "/ddp_trained.safetensors").tensors);
  testing::check_toy_losses(read_losses(dir + "/ddp_metrics.csv"));
}

TEST_CASE("train --comm_hook sum and none are wrong in the way they say (what averaging does)",
          "[examples][train][ddp]") {
  std::ostringstream quiet;
  examples::TrainConfig doubled = pytorch_run_config();
  doubled.lr *= 2;
  const std::vector<double> one_process = examples::train(pytorch_run_config(), quiet).losses;
  const std::vector<double> one_process_doubled_lr = examples::train(doubled, quiet).losses;

  SECTION("sum: the ranks' gradients added, so SGD with momentum takes steps twice as long") {
    examples::TrainConfig config = pytorch_run_config();
    config.comm_hook = "sum";
    const std::vector<double> summed = losses_on_two_ranks(config);
    for (size_t i = 0; i < summed.size(); ++i) {
      INFO("step " << i);
      CHECK(std::fabs(summed[i] - one_process_doubled_lr[i]) < 1e-5);
    }
    CHECK(std::fabs(summed.back() - one_process.back()) > 1e-3);
  }
  SECTION("none: each rank follows its own share, so the mean loss leaves the one-process curve") {
    examples::TrainConfig config = pytorch_run_config();
    config.comm_hook = "none";
    const std::vector<double> local = losses_on_two_ranks(config);
    CHECK(std::fabs(local[0] - one_process[0]) < 1e-6);  // the same start: every rank has rank 0's weights
    double largest = 0;
    for (size_t i = 0; i < local.size(); ++i) largest = std::max(largest, std::fabs(local[i] - one_process[i]));
    CHECK(largest > 1e-4);
  }
}
