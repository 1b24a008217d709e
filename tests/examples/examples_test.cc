// The DDP examples and //examples:train, each run on 2 ranks under //launcher:launch as a user
// runs them, with their printed results checked: identical checksums on every rank, the
// input counts of the Join example, the classifier's held-out accuracy.
#include <filesystem>
#include <fstream>
#include <regex>

#include "tensor/cuda.h"
#include "tests/test_util.h"

using tinyddp::testing::CommandResult;
using tinyddp::testing::run_command;
using Catch::Contains;

namespace {

CommandResult launch2(const std::string& program_and_args) {
  return run_command("launcher/launch --nproc_per_node 2 -- " + program_and_args);
}

// examples/train with `args` must exit with status 1 and print `message`.
void expect_train_error(const std::string& args, const std::string& message) {
  const CommandResult r = run_command("examples/train " + args);
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains(message));
}

// The loss column of a metrics CSV ("step,loss").
std::vector<double> read_losses(const std::string& path) {
  std::ifstream csv(path);
  std::vector<double> losses;
  std::string line;
  std::getline(csv, line);  // header
  while (std::getline(csv, line)) losses.push_back(std::stod(line.substr(line.find(',') + 1)));
  return losses;
}

// Every value of the regex's first group, in order of appearance.
std::vector<std::string> all_matches(const std::string& text, const std::string& pattern) {
  std::vector<std::string> out;
  const std::regex re(pattern);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) {
    out.push_back((*it)[1]);
  }
  return out;
}

void require_same_on_both_ranks(const std::string& output, const std::string& pattern) {
  const std::vector<std::string> values = all_matches(output, pattern);
  REQUIRE(values.size() == 2);
  CHECK(values[0] == values[1]);
}

std::string temp_path(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return (std::filesystem::path(tmp != nullptr ? tmp : "/tmp") / name).string();
}

}  // namespace

TEST_CASE("examples: ddp_basic, one DDP step on 2 ranks, ends with identical parameters", "[examples][ddp]") {
  const CommandResult r = launch2("examples/ddp_basic");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  // Different data on each rank (different losses), the same parameters after the step.
  CHECK(all_matches(r.output, R"(loss ([0-9.]+),)").size() == 2);
  require_same_on_both_ranks(r.output, R"(\] rank [01]: loss [0-9.]+, parameter checksum ([0-9a-f]{16}))");
  // Started without the launcher it forks its two ranks itself.
  const CommandResult alone = run_command("examples/ddp_basic");
  INFO(alone.output);
  CHECK(alone.exit_code == 0);
  require_same_on_both_ranks(alone.output, R"(rank [01]: loss [0-9.]+, parameter checksum ([0-9a-f]{16}))");
}

TEST_CASE("examples: ddp_checkpoint saves on rank 0, loads everywhere, trains on identically", "[examples][ddp]") {
  const std::string path = temp_path("toy.checkpoint");
  const CommandResult r = launch2("examples/ddp_checkpoint " + path);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  require_same_on_both_ranks(r.output, R"(loaded .* \(4 tensors\), checksum ([0-9a-f]{16}))");
  require_same_on_both_ranks(r.output, R"(after 3 steps, checksum ([0-9a-f]{16}))");
  CHECK_FALSE(std::filesystem::exists(path));  // rank 0 cleaned up after the final barrier
}

TEST_CASE("examples: ddp_join, rank r has 5 + r inputs, every rank finishes", "[examples][ddp][join]") {
  const CommandResult r = launch2("examples/ddp_join");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("[rank 0] Rank 0 has exhausted all 5 of its inputs!"));
  CHECK_THAT(r.output, Contains("[rank 1] Rank 1 has exhausted all 6 of its inputs!"));
  require_same_on_both_ranks(r.output, R"(of its inputs! checksum ([0-9a-f]{16}))");
  CHECK(r.seconds < 30);
}

TEST_CASE("examples: train on 2 ranks learns the synthetic classes and reports progress", "[examples][train][ddp]") {
  const std::string metrics = temp_path("train_metrics.csv");
  const std::string save = temp_path("train.safetensors");
  const CommandResult r =
      launch2("examples/train --device cpu --widths 32,64,4 --steps 200 --log_every 50 --metrics " + metrics + " --save " + save);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("data-parallel on 2 ranks (gloo), device cpu"));
  CHECK(all_matches(r.output, R"(\[rank 0\] step +([0-9]+)/200 +loss [0-9.]+ +[0-9]+ samples/s +elapsed [0-9.]+ s)").size() == 4);
  CHECK_THAT(r.output, !Contains("[rank 1]"));  // progress from rank 0 only
  // 4 classes whose centres are ~4.2 noise deviations apart: the best possible accuracy is
  // about 95%; the trained model must come close.
  const std::vector<std::string> accuracy = all_matches(r.output, R"(held-out accuracy ([0-9.]+)% on 1024 new samples)");
  REQUIRE(accuracy.size() == 1);
  CHECK(std::stod(accuracy[0]) > 85.0);
  std::ifstream csv(metrics);
  int lines = 0;
  for (std::string line; std::getline(csv, line);) ++lines;
  CHECK(lines == 201);  // header + one row per step
  CHECK(std::filesystem::file_size(save) > 0);
}

TEST_CASE("examples: train --device cuda without a GPU says why", "[examples][train][errors]") {
  // On a GPU host train succeeds with --device cuda: there is nothing to refuse.
  if (tinyddp::tensor::cuda::is_available()) TINYDDP_SKIP("a GPU is present, so --device cuda is valid here");
  expect_train_error("--device cuda --steps 1", "train: error: --device cuda: ");
}

TEST_CASE("examples: train --backend nccl without a GPU says why", "[examples][train][errors]") {
  expect_train_error("--device cpu --backend nccl --steps 1", "--backend nccl needs --device cuda");
}

TEST_CASE("examples: train on 2 ranks sharing one GPU (gloo staging) matches the CPU run", "[examples][train][ddp][cuda]") {
  if (!tinyddp::tensor::cuda::is_available()) TINYDDP_SKIP(tinyddp::tensor::cuda::unavailable_reason());
  const std::string cpu_metrics = temp_path("train_cpu.csv"), gpu_metrics = temp_path("train_gpu.csv");
  const std::string args = " --widths 32,64,4 --steps 30 --log_every 30 --metrics ";
  const CommandResult cpu = launch2("examples/train --device cpu" + args + cpu_metrics);
  INFO(cpu.output);
  REQUIRE(cpu.exit_code == 0);
  const CommandResult gpu = launch2("examples/train --device cuda --backend gloo" + args + gpu_metrics);
  INFO(gpu.output);
  REQUIRE(gpu.exit_code == 0);
  CHECK_THAT(gpu.output, Contains("data-parallel on 2 ranks (gloo), device cuda:0"));
  const std::vector<double> on_cpu = read_losses(cpu_metrics), on_gpu = read_losses(gpu_metrics);
  REQUIRE(on_cpu.size() == 30);
  REQUIRE(on_gpu.size() == 30);
  // The same weights and data on both devices: float32 results agree to rounding (reduction
  // orders differ), after 30 steps of training too.
  for (size_t i = 0; i < on_cpu.size(); ++i) {
    INFO("step " << i);
    CHECK(on_gpu[i] == Catch::Detail::Approx(on_cpu[i]).epsilon(1e-4));
  }
}
