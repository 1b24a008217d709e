// train_gpt without host round trips (examples/train_gpt_lib.cc): the losses of steps that print
// nothing, read back later, are every step's; --capturable (AdamW with its step count and rate
// on the device) follows the ordinary run within float32's rounding of those two; the options'
// errors; with a GPU, --cuda_graph's captured and replayed steps give the capturable eager
// run's losses and norms bit for bit, also under DDP over NCCL. The same for nanoGPT's mode
// (--dataset): capturable=True and cuda_graph=True, whose captured iteration holds its micro-steps.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "examples/nanogpt_train.h"
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

// `launcher`: a prefix such as "launcher/launch --nproc_per_node 1 -- " (DDP on a world of one).
std::vector<std::vector<double>> run(const std::string& extra, const std::string& launcher = "") {
  const std::string metrics = temp_path("graph_metrics.csv");
  const CommandResult r = run_command(launcher + "examples/train_gpt" + flags() + " --metrics " + metrics + extra);
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
             Contains("--cuda_graph does not take --fsdp, --zero, --deterministic, --comm_hook powersgd or "
                      "--profile_phases"));
  CHECK_THAT(error_of("--cuda_graph --device cuda --comm_hook powersgd"), Contains("does not take"));
  CHECK_THAT(error_of("--cuda_graph --device cuda --profile_phases"), Contains("does not take"));
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
  // With dropout (embeddings, attention weights, residuals, MLP): each replay draws its masks'
  // keys from the generator in the order the eager step does, so the masks are the eager run's.
  const auto eager_dropped = run(" --device cuda --capturable --dropout 0.2"),
             graphed_dropped = run(" --device cuda --cuda_graph --dropout 0.2");
  REQUIRE(graphed_dropped.size() == 12);
  for (size_t s = 0; s < eager.size(); ++s) {
    INFO("dropout, step " << s);
    CHECK(graphed_dropped[s] == eager_dropped[s]);
  }
  CHECK(eager_dropped[5][1] != eager[5][1]);  // dropout did drop (guards the comparison above)
  // Under DDP over NCCL (a world of one on this one GPU): the captured step holds the buckets'
  // allreduces, and replays the eager DDP run's steps bit for bit; with the bf16 hook too.
  const std::string one = "launcher/launch --nproc_per_node 1 -- ";
  for (const std::string hook : {"allreduce", "bf16"}) {
    const auto eager_ddp = run(" --device cuda --capturable --comm_hook " + hook, one),
               graphed_ddp = run(" --device cuda --cuda_graph --comm_hook " + hook, one);
    REQUIRE(graphed_ddp.size() == 12);
    for (size_t s = 0; s < eager.size(); ++s) {
      INFO("DDP, comm hook " << hook << ", step " << s);
      CHECK(graphed_ddp[s] == eager_ddp[s]);
    }
  }
  // Gloo's collectives run on the host: a graph cannot hold them.
  const CommandResult two = run_command(
      "launcher/launch --nproc_per_node 2 -- examples/train_gpt --steps 2 --device cuda --backend gloo --cuda_graph");
  CHECK(two.exit_code != 0);
  CHECK_THAT(two.output, Contains("--cuda_graph captures DDP's collectives only on the nccl backend"));
}

namespace {

// nanoGPT's mode on the story data: 2 micro-steps an iteration, clipping on, the rate warming
// up then decaying, an evaluation at 0 and 8 (eager, between replays).
tinyddp::examples::NanoGptConfig nanogpt_config(const std::string& device) {
  tinyddp::examples::NanoGptConfig c;
  c.dataset = "tests/examples/fixtures/nanogpt_data/story";
  c.out_dir = temp_path("graph_nanogpt_" + device);
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  c.block_size = 16;
  c.batch_size = 4;
  c.gradient_accumulation_steps = 2;
  c.max_iters = 11;
  c.eval_interval = 8;
  c.eval_iters = 2;
  c.learning_rate = 1e-2;
  c.warmup_iters = 3;
  c.lr_decay_iters = 11;
  c.min_lr = 1e-3;
  c.always_save_checkpoint = false;
  c.device = device;
  return c;
}

tinyddp::examples::NanoGptResult train(const tinyddp::examples::NanoGptConfig& c, std::string* printed = nullptr) {
  std::ostringstream log;
  const auto result = tinyddp::examples::train_nanogpt(c, log);
  INFO(log.str());
  REQUIRE(result.iter_losses.size() == 12);  // iterations 0 to max_iters
  if (printed != nullptr) *printed = log.str();
  return result;
}

}  // namespace

TEST_CASE("train_gpt --dataset --capturable=True follows the ordinary run within float32's rounding; report_memory",
          "[examples][nanogpt][graph]") {
  auto c = nanogpt_config("cpu");
  const auto plain = train(c);
  c.capturable = true;
  c.report_memory = true;
  std::string printed;
  const auto capturable = train(c, &printed);
  CHECK_THAT(printed, Contains("peak CPU tensor memory on rank 0: "));
  for (size_t i = 0; i < plain.iter_losses.size(); ++i) {
    INFO("iter " << i);
    // As the replay mode's case above: the rate and bias corrections in float32 tensors.
    CHECK(capturable.iter_losses[i] == Approx(plain.iter_losses[i]).margin(1e-4));
  }
  CHECK(capturable.iter_losses[0] == plain.iter_losses[0]);  // before any update: the same forward
}

TEST_CASE("train_gpt --dataset --cuda_graph=True names what it cannot capture", "[examples][nanogpt][graph][errors]") {
  const auto error_of = [](const std::string& keys) {
    const CommandResult r = run_command(
        "examples/train_gpt --dataset=tests/examples/fixtures/nanogpt_data/story --n_layer=1 --n_head=1 --n_embd=8 "
        "--block_size=8 --max_iters=2 --out_dir=" +
        temp_path("graph_nanogpt_errors") + " " + keys);
    CHECK(r.exit_code == 1);
    return r.output;
  };
  CHECK_THAT(error_of("--cuda_graph=True"),
             Contains("cuda_graph=True captures the iteration on a GPU: pass --device=cuda"));
  CHECK_THAT(error_of("--cuda_graph=True --device=cuda --deterministic=True"),
             Contains("cuda_graph=True does not take deterministic=True"));
}

TEST_CASE("CUDA: train_gpt --dataset --cuda_graph=True replays the capturable eager iterations bit for bit",
          "[examples][nanogpt][graph][cuda]") {
  if (!tinyddp::tensor::cuda::is_available()) {
    TINYDDP_SKIP("no CUDA device: " << tinyddp::tensor::cuda::unavailable_reason());
  }
  for (const std::string dtype : {"float32", "bfloat16"}) {
    INFO(dtype);
    auto c = nanogpt_config("cuda");
    c.dtype = dtype;
    c.capturable = true;
    const auto eager = train(c);
    c.capturable = false;
    c.cuda_graph = true;
    const auto graphed = train(c);
    CHECK(graphed.iter_losses == eager.iter_losses);  // the same kernels on the same values and batches
    CHECK(graphed.train_evals == eager.train_evals);
    CHECK(graphed.val_evals == eager.val_evals);
  }
  // With dropout the replays draw fresh masks, their keys after the iteration's batches (which
  // an eager iteration draws between its micro-steps): the eager iterations agree, the rest
  // train on.
  auto c = nanogpt_config("cuda");
  c.dropout = 0.2;
  c.capturable = true;
  const auto eager = train(c);
  c.capturable = false;
  c.cuda_graph = true;
  const auto graphed = train(c);
  for (size_t i = 0; i < graphed.iter_losses.size(); ++i) {
    INFO("dropout, iter " << i);
    CHECK(std::isfinite(graphed.iter_losses[i]));
    if (i < 3) CHECK(graphed.iter_losses[i] == eager.iter_losses[i]);
  }
}

TEST_CASE("scripts/nanogpt_log_summary.py: the median iteration time after the warm-up, as tokens/s",
          "[examples][nanogpt][graph]") {
  const std::string log = temp_path("summary_b4_cpu.log");
  const CommandResult r = run_command(
      "examples/train_gpt --dataset=tests/examples/fixtures/nanogpt_data/story --n_layer=1 --n_head=2 --n_embd=16 "
      "--block_size=16 --batch_size=4 --gradient_accumulation_steps=1 --max_iters=9 --eval_interval=100 "
      "--eval_iters=1 --always_save_checkpoint=False --report_memory=True --out_dir=" +
      temp_path("summary_out") + " > " + log + " 2>&1");
  REQUIRE(r.exit_code == 0);
  // The times of iterations 5 to 9 from the log itself, their median by hand.
  std::ifstream in(log);
  std::vector<double> times;
  for (std::string line; std::getline(in, line);) {
    int iter = -1;
    double loss = 0, ms = 0;
    if (std::sscanf(line.c_str(), "iter %d: loss %lf, time %lfms", &iter, &loss, &ms) == 3 && iter >= 5) {
      times.push_back(ms);
    }
  }
  REQUIRE(times.size() == 5);
  std::sort(times.begin(), times.end());
  const CommandResult summary = run_command("python3 scripts/nanogpt_log_summary.py --tokens 64 " + log);
  INFO(summary.output);
  REQUIRE(summary.exit_code == 0);
  CHECK_THAT(summary.output,
             Contains("work=summary_b4_cpu iterations=5 ms_per_iter=" + fmt::format("{:.1f}", times[2])));
  CHECK_THAT(summary.output, Contains(fmt::format("tokens_per_s={:.0f}", 64 / times[2] * 1e3)));
  CHECK_THAT(summary.output, Contains("peak_mib=") && !Contains("peak_mib=?"));
}
