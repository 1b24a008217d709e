// train_gpt without host round trips (examples/train_gpt_lib.cc): the losses of steps that print
// nothing, read back later, are every step's; --capturable (AdamW with its step count and rate
// on the device) follows the ordinary run within float32's rounding of those two; the options'
// errors; with a GPU, --cuda_graph's captured and replayed steps give the capturable eager
// run's losses and norms bit for bit.
#include <cmath>
#include <fstream>
#include <sstream>

#include "examples/train_gpt_lib.h"
#include "tests/test_util.h"
#include "tinyddp/tensor/cuda.h"

using Catch::Contains;
using tinyddp::testing::CommandResult;
using tinyddp::testing::run_command;
using tinyddp::testing::temp_path;

namespace {

// The corpus the runs read, and their common flags.
std::string flags() {
  const std::string corpus = temp_path("graph_words.txt");
  std::ofstream out(corpus);
  for (int i = 0; i < 3000; ++i)
    out << (i % 4 == 0 ? "the cat " : i % 4 == 1 ? "sat on " : i % 4 == 2 ? "a " : "mat.\n");
  return " --corpus " + corpus +
         " --n_layer 2 --n_head 2 --n_embd 32 --block_size 16 --batch 8 --steps 12 --lr 1e-2 --warmup_steps 4 "
         "--eval_every 0 --eval_windows 2 --sample_tokens 0";
}

// Each metrics row: step, loss, grad_norm, lr.
std::vector<std::vector<double>> rows_of(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // the header
  std::vector<std::vector<double>> rows;
  while (std::getline(in, line)) {
    std::vector<double> row;
    std::stringstream cells(line);
    for (std::string cell; std::getline(cells, cell, ',');) row.push_back(std::stod(cell));
    rows.push_back(row);
  }
  return rows;
}

std::vector<std::vector<double>> run(const std::string& extra) {
  const std::string metrics = temp_path("graph_metrics.csv");
  const CommandResult r = run_command("examples/train_gpt" + flags() + " --metrics " + metrics + extra);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return rows_of(metrics);
}

}  // namespace

TEST_CASE("train_gpt keeps quiet steps' losses on the device and reads them all back", "[examples][gpt]") {
  tinyddp::examples::GPTTrainConfig config;
  config.n_layer = 1;
  config.n_head = 2;
  config.n_embd = 16;
  config.block_size = 8;
  config.batch = 4;
  config.steps = 10;
  config.log_every = 4;  // steps 4 and 8 print, and the last: the others' losses wait on the device
  config.eval_every = 0;
  config.eval_windows = 2;
  config.sample_tokens = 0;
  std::ostringstream log;
  const auto quiet = tinyddp::examples::train_gpt(config, log);
  config.metrics = temp_path("every_step.csv");  // a row per step: every loss read at its step
  const auto each = tinyddp::examples::train_gpt(config, log);
  REQUIRE(quiet.losses.size() == 10);
  CHECK(quiet.losses == each.losses);
}

TEST_CASE("train_gpt --capturable follows the ordinary run within float32's rounding of the rate and corrections",
          "[examples][gpt][graph]") {
  const auto plain = run(""), capturable = run(" --capturable");
  REQUIRE(plain.size() == 12);
  REQUIRE(capturable.size() == 12);
  for (size_t s = 0; s < plain.size(); ++s) {
    INFO("step " << s);
    // The rate a float32 tensor (its relative rounding at most 2^-24) and the bias corrections
    // float32 tensor ops, where the ordinary run computes both in double: each update differs
    // by a few parts in 10^7 of itself; over 12 steps the loss (about 3) moves by far less than
    // 1e-4.
    CHECK(capturable[s][1] == Approx(plain[s][1]).margin(1e-4));
    CHECK(capturable[s][3] == Approx(plain[s][3]).epsilon(std::ldexp(1.0, -23)));
  }
}

TEST_CASE("train_gpt --cuda_graph names what it cannot capture", "[examples][gpt][graph][errors]") {
  const auto error_of = [](const std::string& args) {
    const CommandResult r = run_command("examples/train_gpt --steps 2 " + args);
    CHECK(r.exit_code == 1);
    return r.output;
  };
  CHECK_THAT(error_of("--cuda_graph"), Contains("--cuda_graph captures the step on a GPU: pass --device cuda"));
  CHECK_THAT(error_of("--cuda_graph --device cuda --zero"),
             Contains("--cuda_graph does not take --fsdp, --zero, --deterministic, --profile_phases or --dropout"));
  CHECK_THAT(error_of("--cuda_graph --device cuda --dropout 0.1"), Contains("does not take"));
}

TEST_CASE("CUDA: train_gpt --cuda_graph replays the capturable eager run's steps bit for bit",
          "[examples][gpt][graph][cuda]") {
  if (!tinyddp::tensor::cuda::is_available()) {
    TINYDDP_SKIP("no CUDA device: " << tinyddp::tensor::cuda::unavailable_reason());
  }
  const auto eager = run(" --device cuda --capturable"), graphed = run(" --device cuda --cuda_graph");
  REQUIRE(eager.size() == 12);
  REQUIRE(graphed.size() == 12);
  for (size_t s = 0; s < eager.size(); ++s) {
    INFO("step " << s);
    CHECK(graphed[s] == eager[s]);  // the same kernels on the same values: the same bits (9 digits here)
  }
  const CommandResult two =
      run_command("launcher/launch --nproc_per_node 2 -- examples/train_gpt --steps 2 --device cuda --cuda_graph");
  CHECK(two.exit_code != 0);
  CHECK_THAT(two.output, Contains("--cuda_graph runs one process (2 ranks here)"));
}
