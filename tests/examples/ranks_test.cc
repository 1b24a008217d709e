// What docs/learn.md tells about adding ranks, run as a user runs it (examples/train under
// //launcher:launch) and checked: one curve on 1, 2 and 4 processes for the same global batch
// (to float64 rounding, for the whole run), a Dropout stream of its own on every rank, and the
// learning rate scaled with the ranks when the per-rank batch is fixed (the linear scaling rule).
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "tests/examples/example_runs.h"
#include "tests/test_util.h"
#include "tinyddp/nn/nn.h"
#include "tinyddp/tensor/random.h"

using Catch::Contains;
using tinyddp::testing::all_matches;
using tinyddp::testing::CommandResult;
using tinyddp::testing::read_losses;
using tinyddp::testing::run_command;
using tinyddp::testing::temp_path;
namespace t = tinyddp::tensor;

namespace {

bool have_digits() {
  return std::filesystem::exists("/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz");
}

// examples/train `args` on `ranks` processes (one: without the launcher); it must succeed.
// The example GPT's deterministic runs (train_gpt --deterministic): 12 steps of 12 chunks of 2
// windows, AdamW with warmup and clipping at 1.0.
constexpr const char* kGptExact =
    "examples/train_gpt --steps 12 --batch 24 --n_layer 2 --n_embd 32 --n_head 2 --block_size 16 --warmup_steps 4 "
    "--log_every 12 --sample_tokens 0 --deterministic --chunk_size 2";

std::string train_on(int ranks, const std::string& args) {
  const std::string train = "examples/train " + args;
  const CommandResult r =
      run_command(ranks == 1 ? train : "launcher/launch --nproc_per_node " + std::to_string(ranks) + " -- " + train);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return r.output;
}

// train `args` on `ranks` processes, saving to files named from `stem`: the saved weights'
// bytes and the metrics file's.
std::string saved_bytes(int ranks, const std::string& stem, const std::string& args) {
  const std::string path = temp_path(stem + "_" + std::to_string(ranks));
  train_on(ranks, args + " --metrics " + path + ".csv --save " + path + ".safetensors");
  return tinyddp::testing::read_file(path + ".safetensors") + tinyddp::testing::read_file(path + ".csv");
}

// The largest |a - b| over every element of every tensor of two state dicts with the same names,
// relative to the largest |a|.
double largest_relative_difference(const std::string& a_path, const std::string& b_path) {
  const tinyddp::nn::SafetensorsFile a = tinyddp::nn::load_safetensors(a_path),
                                     b = tinyddp::nn::load_safetensors(b_path);
  REQUIRE(a.tensors.size() == b.tensors.size());
  double difference = 0, scale = 0;
  for (const auto& [name, x] : a.tensors) {
    const t::Tensor& y = b.tensors.at(name);
    REQUIRE(x.dtype() == t::kFloat64);
    difference = std::max(difference, t::max(t::abs(t::sub(x, y))).item<double>());
    scale = std::max(scale, t::max(t::abs(x)).item<double>());
  }
  return difference / scale;
}

// The largest |a[i] - b[i]| / |a[i]| of two runs' per-step losses of the same length.
double largest_relative_gap(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double gap = 0;
  for (size_t i = 0; i < a.size(); ++i) gap = std::max(gap, std::fabs(a[i] - b[i]) / std::fabs(a[i]));
  return gap;
}

// The held-out accuracy train printed, in percent.
double held_out_accuracy(const std::string& output) {
  const std::vector<std::string> found = all_matches(output, R"(held-out accuracy ([0-9.]+)% on 297 held-out digits)");
  REQUIRE(found.size() == 1);
  return std::stod(found[0]);
}

}  // namespace

TEST_CASE("train --dtype float64: 1, 2 and 4 ranks give one curve and one model, to float64 rounding",
          "[examples][train][ddp][digits]") {
  if (!have_digits()) TINYDDP_SKIP("python3-sklearn's digits are missing: bash scripts/setup.sh installs them");
  // The main job's settings. In float32, 4 ranks follow one process to 3e-8 for 37 steps and then
  // part to 1e-5 (a ReLU whose input is 1e-7 in one run and 0 in the other: docs/ddp.md); in
  // float64 the same runs differ by rounding only. The ranks' partial means and their sum round
  // differently from one mean: a few units of float64's 1.1e-16 per step, which the float32
  // runs show as 1e-6 of the loss for 2 ranks (10 units of float32's 1.2e-7). 1e-12 leaves
  // room for any CPU and thread count and is a millionth of what one flipped ReLU gives.
  const std::string args = "--dataset digits --steps 300 --lr 0.05 --momentum 0.9 --log_every 300 --dtype float64";
  std::map<int, std::vector<double>> losses;
  for (int ranks : {1, 2, 4}) {
    const std::string csv = temp_path("float64_" + std::to_string(ranks) + ".csv");
    const std::string saved = temp_path("float64_" + std::to_string(ranks) + ".safetensors");
    const std::string output = train_on(ranks, args + " --metrics " + csv + " --save " + saved);
    CHECK_THAT(output, Contains("ce loss, float64, 300 steps"));
    losses[ranks] = read_losses(csv);
    REQUIRE(losses[ranks].size() == 300);
    if (ranks == 1) continue;
    INFO(ranks << " ranks");
    CHECK(largest_relative_gap(losses[1], losses[ranks]) < 1e-12);
    CHECK(largest_relative_difference(temp_path("float64_1.safetensors"), saved) < 1e-12);
  }
  CHECK(losses[1].back() < 0.1 * losses[1].front());  // and it trained
}

TEST_CASE("train gives each rank its own random stream: the ranks' Dropout masks differ",
          "[examples][train][ddp][digits]") {
  if (!have_digits()) TINYDDP_SKIP("python3-sklearn's digits are missing: bash scripts/setup.sh installs them");
  // One step of the CNN (Dropout 0.25) on 2 ranks; the checkpoint keeps every rank's generator.
  const std::string checkpoint = temp_path("dropout_ranks.ckpt");
  std::filesystem::remove(checkpoint);
  train_on(2, "--model cnn --dataset digits --steps 1 --log_every 1 --checkpoint " + checkpoint);
  const std::map<std::string, std::string> metadata = tinyddp::nn::load_safetensors(checkpoint).metadata;
  REQUIRE(metadata.count("user.rng.cpu.rank0") == 1);
  REQUIRE(metadata.count("user.rng.cpu.rank1") == 1);
  // The masks each rank's Dropout draws next, from its generator: with one seed on both ranks
  // (the mistake seed + rank avoids) they would be the same draw twice.
  std::vector<t::Tensor> masks;
  const t::Tensor ones = t::ones({32, 128});
  for (const char* rank : {"user.rng.cpu.rank0", "user.rng.cpu.rank1"}) {
    t::default_generator().set_state(metadata.at(rank));
    masks.push_back(t::ne(t::dropout(ones, 0.25, /*training=*/true), t::zeros({32, 128})));
  }
  const double agree = t::mean(t::eq(masks[0], masks[1]).to(t::kFloat64)).item<double>();
  // Independent masks with keep probability 0.75 agree on 0.75^2 + 0.25^2 = 62.5% of the units
  // (4096 of them: a standard deviation of 0.8 points); one stream repeated agrees on all.
  CHECK(agree > 0.55);
  CHECK(agree < 0.70);
}

TEST_CASE("train --batch_per_rank --scale_lr: more ranks, a larger batch, and the linear scaling rule",
          "[examples][train][ddp][digits]") {
  if (!have_digits()) TINYDDP_SKIP("python3-sklearn's digits are missing: bash scripts/setup.sh installs them");
  const std::string common = "--dataset digits --momentum 0.9 --log_every 1000 --dtype float64";
  SECTION("2 ranks of 32 rows at lr 0.025 x 2 are one process's batch of 64 at lr 0.05") {
    const std::string one = temp_path("scaled_one.csv"), two = temp_path("scaled_two.csv");
    train_on(1, common + " --steps 50 --batch 64 --lr 0.05 --metrics " + one);
    const std::string output =
        train_on(2, common + " --steps 50 --batch_per_rank 32 --lr 0.025 --scale_lr --metrics " + two);
    CHECK_THAT(output, Contains("sgd lr 0.05 (0.025 x 2 ranks: --scale_lr)"));
    CHECK_THAT(output, Contains("(23 batches of 64 per epoch)"));
    CHECK(largest_relative_gap(read_losses(one), read_losses(two)) < 1e-12);
  }
  SECTION("4 ranks of 16 rows for 100 steps: with lr x 4 they reach one process's 400 steps of 16; without, not") {
    // The same samples seen in every run. Measured: 94.9% held out for one process, 93.6% with
    // the rate scaled, 87.5% without (each step then moves 4x less per sample).
    const double alone = held_out_accuracy(train_on(1, common + " --lr 0.01 --batch 16 --steps 400"));
    const double scaled =
        held_out_accuracy(train_on(4, common + " --lr 0.01 --batch_per_rank 16 --scale_lr --steps 100"));
    const double unscaled = held_out_accuracy(train_on(4, common + " --lr 0.01 --batch_per_rank 16 --steps 100"));
    CHECK(scaled > alone - 3);
    CHECK(unscaled < scaled - 4);
  }
}

TEST_CASE("train --batch_per_rank, --dtype and --find_unused_parameters refuse what they cannot do",
          "[examples][train][errors]") {
  const CommandResult both = run_command("examples/train --batch 64 --batch_per_rank 32");
  CHECK(both.exit_code == 1);
  CHECK_THAT(both.output, Contains("--batch_per_rank sets the global batch (it times the world size)"));
  const CommandResult dtype = run_command("examples/train --dtype float16");
  CHECK(dtype.exit_code == 1);
  CHECK_THAT(dtype.output, Contains("--dtype must be float32 or float64, got 'float16'"));
  const CommandResult autocast = run_command("examples/train --dtype float64 --autocast bf16");
  CHECK(autocast.exit_code == 1);
  CHECK_THAT(autocast.output, Contains("--autocast bf16 keeps float32 master weights: drop --dtype float64"));
  const CommandResult fsdp = run_command("examples/train --fsdp --find_unused_parameters");
  CHECK(fsdp.exit_code == 1);
  CHECK_THAT(fsdp.output, Contains("--fsdp does not take --find_unused_parameters (an option of DDP)"));
}

TEST_CASE("train --find_unused_parameters: the same run, and PyTorch's warning when nothing is unused",
          "[examples][train][ddp]") {
  const std::string args = "--steps 20 --log_every 20 --metrics ";
  const std::string plain = temp_path("unused_off.csv"), searched = temp_path("unused_on.csv");
  const std::string quiet = train_on(2, args + plain);
  const std::string warned = train_on(2, args + searched + " --find_unused_parameters");
  // The MLP uses every parameter: the same reduction, so the same bits, and the search reported
  // once per process (PyTorch's Reducer warns once, when it finds no unused parameter).
  CHECK(read_losses(plain) == read_losses(searched));
  CHECK(quiet.find("find_unused_parameters is on") == std::string::npos);
  CHECK(all_matches(warned, R"((find_unused_parameters is on, but this forward pass used every parameter))").size() ==
        2);
}

TEST_CASE("train --deterministic: 1, 2, 3, 4, 6 and 8 ranks train the MLP to the same bytes",
          "[examples][train][exact]") {
  if (!have_digits()) TINYDDP_SKIP("python3-sklearn's digits are missing: bash scripts/setup.sh installs them");
  // 24 chunks of 4 rows per global batch of 96: every world size that divides 24. The saved
  // weights and the losses are compared byte for byte.
  const std::string args =
      "--dataset digits --steps 60 --lr 0.05 --momentum 0.9 --batch 96 --log_every 60 --deterministic --chunk_size 4";
  const std::string alone = saved_bytes(1, "exact", args);
  REQUIRE(alone.size() > 1000);
  for (int ranks : {2, 3, 4, 6, 8}) {
    INFO(ranks << " ranks");
    CHECK(saved_bytes(ranks, "exact", args) == alone);
  }
  // And it trains as the plain run does: the same data and rate, the mean over the same rows.
  // In float64, where no ReLU flips on the difference: the grid's resolution (2^-54 of each
  // gradient's bound) and float64's rounding of the chunked sums, grown over 60 steps, stay far
  // below 1e-10.
  const std::string plain = temp_path("exact_plain.csv"), exact = temp_path("exact_float64.csv");
  const std::string common = "--dataset digits --steps 60 --lr 0.05 --momentum 0.9 --batch 96 --dtype float64 ";
  train_on(1, common + "--metrics " + plain);
  train_on(2, common + "--deterministic --chunk_size 8 --metrics " + exact);
  CHECK(largest_relative_gap(read_losses(plain), read_losses(exact)) < 1e-10);
}

TEST_CASE("train --deterministic refuses chunks that do not split and options it cannot take",
          "[examples][train][exact][errors]") {
  const CommandResult uneven = run_command("examples/train --deterministic --batch 64 --chunk_size 24 --steps 1");
  CHECK(uneven.exit_code == 1);
  CHECK_THAT(uneven.output, Contains("--chunk_size 24 does not divide the global batch of 64 rows"));
  const CommandResult world = run_command(
      "launcher/launch --nproc_per_node 3 -- examples/train --deterministic --batch 64 --chunk_size 16 --steps 1");
  CHECK(world.exit_code != 0);
  CHECK_THAT(world.output, Contains("the 4 chunks of 16 rows do not split over WORLD_SIZE 3"));
  const CommandResult sync = run_command("examples/train --deterministic --model cnn --sync_bn --dataset digits");
  CHECK(sync.exit_code == 1);
  CHECK_THAT(sync.output, Contains("--deterministic replaces DDP's reduction: it does not take --fsdp, --sync_bn"));
}

TEST_CASE("train --deterministic: the CNN (BatchNorm, Dropout) trains to the same bytes on 1, 2, 3 and 4 ranks",
          "[examples][train][exact]") {
  if (!have_digits()) TINYDDP_SKIP("python3-sklearn's digits are missing: bash scripts/setup.sh installs them");
  // 12 chunks of 8 rows: each chunk normalises with its own statistics and draws its own
  // masks; the running statistics move chunk by chunk in chunk order on every world size.
  const std::string args =
      "--model cnn --dataset digits --steps 30 --lr 0.05 --momentum 0.9 --batch 96 --log_every 30 --deterministic "
      "--chunk_size 8";
  const std::string alone = saved_bytes(1, "exact_cnn", args);
  REQUIRE(alone.size() > 1000);
  for (int ranks : {2, 3, 4}) {
    INFO(ranks << " ranks");
    CHECK(saved_bytes(ranks, "exact_cnn", args) == alone);
  }
}

TEST_CASE(
    "train --deterministic resumed on another world size (3, then 2, then 3 ranks) ends in the static run's bytes",
    "[examples][train][exact]") {
  if (!have_digits()) TINYDDP_SKIP("python3-sklearn's digits are missing: bash scripts/setup.sh installs them");
  // What an elastic job that loses a node and gets it back does: the checkpoint of 3 ranks
  // resumed on 2, theirs on 3 again, against one process that never stopped.
  const std::string args =
      "--dataset digits --lr 0.05 --momentum 0.9 --batch 96 --log_every 100 --deterministic --chunk_size 8";
  const std::string checkpoint = temp_path("elastic_exact.ckpt"), saved = temp_path("elastic_exact.safetensors");
  const std::string alone = temp_path("static_exact.safetensors");
  std::filesystem::remove(checkpoint);
  train_on(1, args + " --steps 45 --save " + alone);
  train_on(3, args + " --steps 10 --checkpoint " + checkpoint);  // epochs are 15 steps: cut inside them
  train_on(2, args + " --steps 25 --checkpoint " + checkpoint + " --resume");
  const std::string output =
      train_on(3, args + " --steps 45 --checkpoint " + checkpoint + " --resume --stats --save " + saved);
  CHECK_THAT(output, Contains("resuming from " + checkpoint + " after 25 steps"));
  // The grids came with the checkpoint: the resumed steps round on the static run's grids, and
  // none runs twice (a checkpoint without them makes the first step calibrate again).
  CHECK_THAT(output,
             Contains("deterministic: 12 chunks of 8 rows a step, 54 bits below each bound, 0 step(s) run twice"));
  const std::string expected = tinyddp::testing::read_file(alone);
  REQUIRE(expected.size() > 1000);
  CHECK(tinyddp::testing::read_file(saved) == expected);
}

TEST_CASE(
    "train_gpt --deterministic: the GPT (AdamW, clipping, warmup) trains to the same bytes on 1, 2, 3 and 4 ranks",
    "[examples][gpt][exact]") {
  if (!std::filesystem::exists("/usr/share/games/fortunes")) {
    TINYDDP_SKIP("the fortunes corpus is missing: bash scripts/setup.sh installs it");
  }
  // 12 chunks of 2 windows a step; clipping at 1.0 (the default) acts on the exact mean, which
  // every rank holds, so the clipped step is the same bits too.
  const std::string args = std::string(kGptExact) + " --save ";
  std::string alone;
  for (int ranks : {1, 2, 3, 4}) {
    INFO(ranks << " ranks");
    const std::string saved = temp_path("gpt_exact_" + std::to_string(ranks) + ".safetensors");
    const std::string command =
        ranks == 1 ? args : "launcher/launch --nproc_per_node " + std::to_string(ranks) + " -- " + args;
    const CommandResult r = run_command(command + saved);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Contains("--deterministic: chunks of 2 windows, 12 a step"));
    if (ranks == 1) {
      alone = tinyddp::testing::read_file(saved);
      REQUIRE(alone.size() > 1000);
    } else {
      CHECK(tinyddp::testing::read_file(saved) == alone);
    }
  }
  // With dropout: each chunk draws its masks from a seed of its own (the step and the chunk's
  // index), so 3 ranks still give one process's bytes.
  const std::string dropout_alone = temp_path("gpt_exact_dropout_1.safetensors"),
                    dropout_three = temp_path("gpt_exact_dropout_3.safetensors");
  REQUIRE(run_command(args + dropout_alone + " --dropout 0.1").exit_code == 0);
  REQUIRE(run_command("launcher/launch --nproc_per_node 3 -- " + args + dropout_three + " --dropout 0.1").exit_code ==
          0);
  const std::string dropped = tinyddp::testing::read_file(dropout_alone);
  CHECK(dropped != alone);  // the masks changed the run
  CHECK(tinyddp::testing::read_file(dropout_three) == dropped);
  // ZeroRedundancyOptimizer: each rank steps its share of the parameters on the exact mean
  // (AdamW is elementwise), so 3 ranks with --zero still give one process's bytes.
  const std::string zero_three = temp_path("gpt_exact_zero_3.safetensors");
  REQUIRE(run_command("launcher/launch --nproc_per_node 3 -- " + args + zero_three + " --zero").exit_code == 0);
  CHECK(tinyddp::testing::read_file(zero_three) == alone);
  const CommandResult hooked = run_command("examples/train_gpt --deterministic --comm_hook fp16 --steps 1");
  CHECK(hooked.exit_code == 1);
  CHECK_THAT(hooked.output, Contains("(DDP's, or fully_shard's with --fsdp): it does not take --comm_hook"));
}

TEST_CASE("train_gpt --deterministic --fsdp: the sharded GPT trains to the same bytes on 1, 2, 3 and 4 ranks",
          "[examples][gpt][exact][fsdp]") {
  if (!std::filesystem::exists("/usr/share/games/fortunes")) {
    TINYDDP_SKIP("the fortunes corpus is missing: bash scripts/setup.sh installs it");
  }
  // Each Block a unit: the chunks' int64 sums reduce-scattered to the shards, AdamW on the
  // shards, clipping's norm summed exactly over them; one process shards over a world of one.
  const auto run = [](int ranks, const std::string& more) {
    const std::string command =
        std::string(ranks == 1 ? "" : "launcher/launch --nproc_per_node " + std::to_string(ranks) + " -- ") +
        kGptExact + " --fsdp " + more;
    const CommandResult r = run_command(command);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    return r.output;
  };
  std::string alone;
  for (int ranks : {1, 2, 3, 4}) {
    INFO(ranks << " ranks");
    const std::string saved = temp_path("gpt_exact_fsdp_" + std::to_string(ranks) + ".safetensors");
    const std::string output = run(ranks, "--save " + saved);
    if (ranks > 1)
      CHECK_THAT(output, Contains("fully sharded, exact sums (--deterministic) on " + std::to_string(ranks)));
    if (ranks == 1) {
      alone = tinyddp::testing::read_file(saved);
      REQUIRE(alone.size() > 1000);
    } else {
      CHECK(tinyddp::testing::read_file(saved) == alone);
    }
  }
  // A job stopped after 5 steps and resumed from its sharded checkpoints (the grids among
  // them) ends in the bytes of one process that never stopped (a constant rate after warmup:
  // the stopped run's schedule is the whole run's).
  const std::string checkpoint = temp_path("gpt_exact_fsdp.ckpt"), resumed = temp_path("gpt_exact_fsdp_r.safetensors");
  const std::string straight = temp_path("gpt_exact_fsdp_s.safetensors");
  for (int r = 0; r < 3; ++r) std::filesystem::remove(checkpoint + ".rank" + std::to_string(r) + "-of-3");
  run(1, "--lr_schedule constant --save " + straight);
  run(3, "--lr_schedule constant --checkpoint " + checkpoint + " --steps 5");
  CHECK_THAT(run(3, "--lr_schedule constant --checkpoint " + checkpoint + " --resume --save " + resumed),
             Contains("resuming from " + checkpoint + " after 5 steps"));
  CHECK(tinyddp::testing::read_file(resumed) == tinyddp::testing::read_file(straight));
  // bfloat16 gathers: the gradients arrive in bfloat16, exact in float32's sums.
  const std::string bf16_one = temp_path("gpt_exact_fsdp_bf16_1.safetensors"),
                    bf16_two = temp_path("gpt_exact_fsdp_bf16_2.safetensors");
  run(1, "--fsdp_param_dtype bfloat16 --save " + bf16_one);
  run(2, "--fsdp_param_dtype bfloat16 --save " + bf16_two);
  CHECK(tinyddp::testing::read_file(bf16_two) == tinyddp::testing::read_file(bf16_one));
  CHECK(tinyddp::testing::read_file(bf16_one) != alone);
}
