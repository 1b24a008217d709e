// examples/train_gpt as a user runs it, replayed from PyTorch: tests/ddp/fixtures/
// make_gpt_fixture.py trained nanoGPT's model 20 steps (AdamW with decay groups, clipping at
// 1.0, warmup + cosine) alone and under DDP on 2 gloo ranks. With its initial state dict
// (--init, lm_head.weight included) and batches (--data), train_gpt must write PyTorch's
// losses, gradient norms and learning rates (--metrics) and final weights (--save): alone,
// on 2 ranks, with ZeRO, and when killed mid-run and resumed from its checkpoint. Also the
// corpus run (validation below the bigram model's, a sample) and the errors for bad input.
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/ddp/gpt_reference.h"
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

const nn::OrderedDict<Tensor>& reference() { return testing::gpt_reference(); }

// The fixture's initial weights and batches (or those of `batches_from`) as files train_gpt reads.
struct Files {
  std::string init = temp_path("gpt_init.safetensors"), data = temp_path("gpt_data.safetensors");
  // The initial weights of `batches_from` when it holds them (init.<name>), else the GPT fixture's.
  explicit Files(const nn::OrderedDict<Tensor>& batches_from = reference()) {
    nn::OrderedDict<Tensor> init_state, batches;
    const bool own_init = batches_from.contains("init.transformer.wte.weight");
    for (const auto& [key, t] : own_init ? batches_from : reference()) {
      if (key.rfind("init.", 0) == 0) init_state.insert(key.substr(5), t);
    }
    batches.insert("inputs", batches_from.at("inputs"));
    batches.insert("targets", batches_from.at("targets"));
    nn::save_safetensors(init, init_state);
    nn::save_safetensors(data, batches);
  }
};

const std::string kFixtureFlags =
    " --n_layer 2 --n_head 2 --n_embd 16 --block_size 8 --vocab_size 13 --lr 3e-2 --min_lr 3e-3 --warmup_steps 5 "
    "--steps 20 --weight_decay 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-8 --grad_clip 1.0 --lr_schedule cosine";

// Compares the metrics CSV and the saved weights with the exact run `run` of `fixture` (the GPT
// fixture's, or the accumulation fixture's), within the float32 tolerances of
// tests/ddp/rounding.h (the CSV's 9 digits hold float32).
void check_against(const nn::OrderedDict<Tensor>& fixture, const std::string& run, const std::string& metrics,
                   const std::string& saved) {
  const testing::ExactRun exact(fixture, run + ".");
  std::ifstream csv(metrics);
  std::string line;
  std::getline(csv, line);
  CHECK(line == "step,loss,grad_norm,lr");
  const Tensor losses = exact.exact("loss"), norms = exact.exact("grad_norm"), lrs = exact.exact("lr");
  for (int64_t step = 0; step < losses.size(0); ++step) {
    REQUIRE(std::getline(csv, line));
    double s, loss, norm, lr;
    REQUIRE(std::sscanf(line.c_str(), "%lf,%lf,%lf,%lf", &s, &loss, &norm, &lr) == 4);
    INFO(run << " step " << step << ": " << line);
    CHECK(s == step);
    const double mean_loss = tensor::mean(losses[step]).item<double>();  // the ranks' mean
    CHECK(std::fabs(loss - mean_loss) <= exact.tolerance("loss", step, mean_loss, tensor::kFloat32));
    const double want_norm = norms[step].item<double>();
    CHECK(std::fabs(norm - want_norm) <= exact.tolerance("grad_norm", step, want_norm, tensor::kFloat32));
    CHECK(std::fabs(lr - lrs[step].item<double>()) <= 5e-9 * lr);  // 9 digits: half a unit in the last
  }
  CHECK_FALSE(std::getline(csv, line));
  const nn::SafetensorsFile file = nn::load_safetensors(saved);
  CHECK(file.tensors.size() + 1 == [&] {  // PyTorch's names, the tied head once
    size_t n = 0;
    for (const auto& key : fixture.keys()) n += key.rfind("init.", 0) == 0;
    return n;
  }());
  for (const auto& [name, t] : file.tensors) {
    INFO(run << " final " << name);
    const std::vector<std::string> failures = exact.check(t, "param." + name, tensor::kFloat32);
    for (const auto& f : failures) UNSCOPED_INFO(f);
    CHECK(failures.empty());
  }
}

}  // namespace

TEST_CASE("train_gpt replays PyTorch's one-process run: losses, norms, rates and weights", "[examples][gpt][fixture]") {
  const Files files;
  const std::string metrics = temp_path("gpt_single.csv"), saved = temp_path("gpt_single.safetensors");
  const CommandResult r = run_command("examples/train_gpt" + kFixtureFlags + " --init " + files.init + " --data " +
                                      files.data + " --metrics " + metrics + " --save " + saved);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  check_against(reference(), "single", metrics, saved);
}

TEST_CASE("train_gpt on 2 ranks replays PyTorch's DDP run, with AdamW, with ZeRO and fully sharded",
          "[examples][gpt][ddp]") {
  const Files files;
  std::vector<double> state_mb;  // rank 0's optimizer state: AdamW, ZeRO, fully_shard
  for (const std::string zero : {"", " --zero", " --fsdp"}) {
    const std::string metrics = temp_path("gpt_ddp.csv"), saved = temp_path("gpt_ddp.safetensors");
    const CommandResult r =
        run_command("launcher/launch --nproc_per_node 2 -- examples/train_gpt" + kFixtureFlags + zero + " --init " +
                    files.init + " --data " + files.data + " --metrics " + metrics + " --save " + saved);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    if (zero == " --zero") CHECK_THAT(r.output, Contains("ZeRO"));
    if (zero == " --fsdp") CHECK_THAT(r.output, Contains("fully sharded (fully_shard) on 2 ranks"));
    check_against(reference(), "ddp", metrics, saved);
    const size_t at = r.output.find("optimizer state on rank 0: ");
    REQUIRE(at != std::string::npos);
    state_mb.push_back(std::stod(r.output.substr(at + 27)));
  }
  CHECK(state_mb[1] < 0.6 * state_mb[0]);  // each rank keeps Adam's moments for its share only
  CHECK(state_mb[2] < 0.6 * state_mb[0]);  // fully sharded: Adam's moments of the shards
}

TEST_CASE("train_gpt --gradient_accumulation_steps 4 replays PyTorch's accumulation, alone and under DDP's no_sync",
          "[examples][gpt][ddp][accumulation]") {
  // fixtures/make_gpt_accum_fixture.py: 12 steps of 8 rows in 4 micro-steps of 2, each
  // micro-step's loss divided by the rank's count, in one process (1 x 4) and on 2 DDP ranks
  // (2 x 2, require_backward_grad_sync on the last micro-step only, as nanoGPT's train.py). The
  // targets' ignored positions fall unevenly on the micro-steps: one 8-row step is another run.
  static const nn::SafetensorsFile accum =
      nn::load_safetensors("tests/examples/fixtures/gpt_accum_reference.safetensors");
  const Files files(accum.tensors);
  std::string flags = kFixtureFlags;
  flags.replace(flags.find("--steps 20"), 10, "--steps 12");
  const std::string metrics = temp_path("gpt_accum.csv"), saved = temp_path("gpt_accum.safetensors");
  const std::string common = flags + " --gradient_accumulation_steps 4 --init " + files.init + " --data " + files.data +
                             " --metrics " + metrics + " --save " + saved;
  const CommandResult one = run_command("examples/train_gpt" + common);
  INFO(one.output);
  REQUIRE(one.exit_code == 0);
  CHECK_THAT(one.output, Contains("12 steps of 8 x 8 tokens in 4 micro-steps per rank"));
  check_against(accum.tensors, "accum1x4", metrics, saved);

  // On 2 ranks: 2 micro-steps each, one reduction per step (PyTorch's hook counted its bucket
  // allreduces), and on the timeline every micro-step's forward but one allreduce per step.
  const std::string timeline = temp_path("gpt_accum_tl");
  const CommandResult two = run_command("TINYDDP_DDP_TIMELINE=" + timeline +
                                        " launcher/launch --nproc_per_node 2 -- examples/train_gpt" + common);
  INFO(two.output);
  REQUIRE(two.exit_code == 0);
  CHECK_THAT(two.output, Contains("in 2 micro-steps per rank"));
  const int64_t allreduces = accum.tensors.at("accum2x2.allreduces").item<int64_t>();
  CHECK(allreduces == 12);
  CHECK_THAT(two.output, Contains(fmt::format("ddp: {} of 24 micro-steps reduced their gradients, in 1 bucket(s) each",
                                              allreduces)));
  check_against(accum.tensors, "accum2x2", metrics, saved);
  std::ifstream in(timeline + ".rank0.json");
  REQUIRE(in.good());
  const nlohmann::json trace = nlohmann::json::parse(in);
  int64_t forwards = 0, reductions = 0;
  for (const auto& e : trace["traceEvents"]) {
    const std::string name = e["name"];
    forwards += name == "forward";
    reductions += name.rfind("allreduce bucket", 0) == 0;
  }
  CHECK(forwards == 24);
  CHECK(reductions == allreduces);

  // The count is over all ranks, and each rank's rows must split into its micro-steps.
  const CommandResult odd =
      run_command("launcher/launch --nproc_per_node 2 -- examples/train_gpt" + flags +
                  " --gradient_accumulation_steps 3 --init " + files.init + " --data " + files.data);
  CHECK(odd.exit_code != 0);
  CHECK_THAT(odd.output, Contains("--gradient_accumulation_steps 3 is not divisible by WORLD_SIZE 2"));
  const CommandResult uneven = run_command("examples/train_gpt" + flags + " --gradient_accumulation_steps 3 --init " +
                                           files.init + " --data " + files.data);
  CHECK(uneven.exit_code == 1);
  CHECK_THAT(uneven.output, Contains("each rank's 8 rows per step do not split into its 3 micro-steps"));
}

TEST_CASE("train_gpt --autocast bf16 follows PyTorch's autocast run and the float32 one, alone and on 2 ranks",
          "[examples][gpt][autocast]") {
  // The reference: fixtures/make_autocast_train_fixtures.py trains the fixture's GPT (its
  // weights, AdamW, batches by its rule) for 50 steps at a learning rate of 2e-2 under
  // torch.autocast("cpu", torch.bfloat16) and in float32, in one process and with DDP on 2
  // ranks. (At the fixture's 3e-2 the runs pass gradient spikes that make bfloat16's rounding
  // noise chaotic: 0.10 of loss between PyTorch's own autocast and float32 runs.) Both
  // frameworks' autocast runs round different float32 sums to bfloat16 and drift apart, as
  // PyTorch's autocast run drifts from its float32 run (0.0053 in loss in one process, 0.0034
  // on 2 ranks): stated bound 0.02 on every step's loss against PyTorch's autocast and float32
  // runs of the same world size.
  static const nn::SafetensorsFile autocast_ref =
      nn::load_safetensors("tests/examples/fixtures/autocast_gpt_reference.safetensors");
  const int64_t steps = autocast_ref.tensors.at("loss_bf16").size(0);
  const auto ref = [&](const std::string& key, int64_t step) {
    return tensor::mean(autocast_ref.tensors.at(key)[step].to(tensor::kFloat64)).item<double>();
  };
  std::string flags = kFixtureFlags;
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"--lr 3e-2", "--lr 2e-2"},
                                 {"--min_lr 3e-3", "--min_lr 2e-3"},
                                 {"--steps 20", "--steps " + std::to_string(steps)}}) {
    const size_t at = flags.find(from);
    REQUIRE(at != std::string::npos);
    flags.replace(at, from.size(), to);
  }
  const Files files(autocast_ref.tensors);
  const auto losses_of = [&](const std::string& launcher) {
    const std::string metrics = temp_path("gpt_autocast.csv");
    const CommandResult r = run_command(launcher + "examples/train_gpt" + flags + " --autocast bf16 --init " +
                                        files.init + " --data " + files.data + " --metrics " + metrics);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    return read_losses(metrics);
  };
  const std::vector<double> one = losses_of("");
  REQUIRE(one.size() == static_cast<size_t>(steps));
  bool differs_from_float32 = false;
  for (int64_t step = 0; step < steps; ++step) {
    INFO("step " << step << ": " << one[step] << ", PyTorch's autocast " << ref("loss_bf16", step) << ", float32 "
                 << ref("loss_float32", step));
    CHECK(std::fabs(one[step] - ref("loss_bf16", step)) < 0.02);
    CHECK(std::fabs(one[step] - ref("loss_float32", step)) < 0.02);
    differs_from_float32 |= std::fabs(one[step] - ref("loss_float32", step)) > 1e-5;
  }
  CHECK(differs_from_float32);  // autocast did change the arithmetic
  const std::vector<double> two = losses_of("launcher/launch --nproc_per_node 2 -- ");
  REQUIRE(two.size() == static_cast<size_t>(steps));
  for (int64_t step = 0; step < steps; ++step) {
    INFO("2 ranks, step " << step << ": " << two[step] << ", PyTorch's autocast " << ref("ddp_loss_bf16", step)
                          << ", float32 " << ref("ddp_loss_float32", step));
    CHECK(std::fabs(two[step] - ref("ddp_loss_bf16", step)) < 0.02);
    CHECK(std::fabs(two[step] - ref("ddp_loss_float32", step)) < 0.02);
  }
}

TEST_CASE("train_gpt --comm_hook bf16 trains on 2 ranks within bf16's rounding of PyTorch's DDP run",
          "[examples][gpt][ddp][hooks]") {
  const Files files;
  const std::string metrics = temp_path("gpt_bf16.csv");
  const CommandResult r =
      run_command("launcher/launch --nproc_per_node 2 -- examples/train_gpt" + kFixtureFlags +
                  " --comm_hook bf16 --init " + files.init + " --data " + files.data + " --metrics " + metrics);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::ifstream csv(metrics);
  std::string line, last;
  while (std::getline(csv, line)) last = line;
  double step, loss, norm, lr;
  REQUIRE(std::sscanf(last.c_str(), "%lf,%lf,%lf,%lf", &step, &loss, &norm, &lr) == 4);
  CHECK(step == 19);
  // The gradients travel in bfloat16 (8 bits of mantissa): the run follows PyTorch's closely
  // but not within float32's spread (tests/ddp/rounding.h).
  const double want = tensor::mean(reference().at("ddp.loss")[19]).item<double>();
  CHECK(std::fabs(loss - want) < 0.05);
}

TEST_CASE("train_gpt killed at step 13 resumes from its step-10 checkpoint and ends as PyTorch's DDP run",
          "[examples][gpt][ddp][checkpoint]") {
  const Files files;
  // With ZeRO (one consolidated file), and fully sharded (a file per rank of its shards).
  for (const std::string mode : {"zero", "fsdp"}) {
    const std::string metrics = temp_path("gpt_resumed.csv"), saved = temp_path("gpt_resumed.safetensors");
    const std::string checkpoint = temp_path("gpt_checkpoint_" + mode + ".safetensors");
    for (const std::string& stale : {checkpoint, checkpoint + ".rank0-of-2", checkpoint + ".rank1-of-2"}) {
      std::remove(stale.c_str());
    }
    const CommandResult r = run_command("launcher/launch --nproc_per_node 2 --max_restarts 1 -- examples/train_gpt" +
                                        kFixtureFlags + " --" + mode + " --checkpoint " + checkpoint +
                                        " --checkpoint_every 5 --resume --fail_at_step 13 --init " + files.init +
                                        " --data " + files.data + " --metrics " + metrics + " --save " + saved);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Contains("fails on purpose before step 13"));
    CHECK_THAT(r.output, Contains("resuming from " + checkpoint + " after 10 steps"));
    check_against(reference(), "ddp", metrics, saved);
  }
}

TEST_CASE("train_gpt stopped on 2 ranks resumes on 1 (an elastic job that lost a node) as PyTorch does",
          "[examples][gpt][ddp][checkpoint][elastic]") {
  // The global batch stays the fixture's: each rank's rows and micro-steps follow the world
  // (2 x half the rows, then 1 x all of them) and the schedule continues from the saved step.
  // The reference is PyTorch's own (the fixture's "shrink" run: DDP's first 10 steps, then one
  // process from DDP's model and AdamW state); it is not the DDP run's second half, since the
  // ignored targets fall unevenly on the ranks and DDP averages the ranks' means.
  const Files files;
  const std::string metrics = temp_path("gpt_shrunk.csv"), saved = temp_path("gpt_shrunk.safetensors");
  const std::string checkpoint = temp_path("gpt_checkpoint_shrunk.safetensors");
  std::remove(checkpoint.c_str());
  const std::string job = " -- examples/train_gpt" + kFixtureFlags + " --checkpoint " + checkpoint +
                          " --checkpoint_every 5 --resume --init " + files.init + " --data " + files.data +
                          " --metrics " + metrics + " --save " + saved;
  const CommandResult two = run_command("launcher/launch --nproc_per_node 2" + job + " --fail_at_step 13");
  INFO(two.output);
  REQUIRE(two.exit_code == 3);
  const CommandResult one = run_command("launcher/launch --nproc_per_node 1" + job);
  INFO(one.output);
  REQUIRE(one.exit_code == 0);
  CHECK_THAT(one.output, Contains("resuming from " + checkpoint + " after 10 steps"));
  check_against(reference(), "shrink", metrics, saved);
  // A world the global batch does not split over is named.
  std::remove(checkpoint.c_str());
  const CommandResult four = run_command("launcher/launch --nproc_per_node 4" + job);
  CHECK(four.exit_code != 0);
  CHECK_THAT(four.output, Contains("does not split over 4 ranks"));
}

TEST_CASE("train_gpt --fsdp --fsdp_param_dtype bfloat16 follows FSDP2's bfloat16 run, written out in PyTorch",
          "[examples][gpt][fsdp][autocast]") {
  // tests/ddp/fixtures/make_fsdp_mixed_precision_fixture.py: the GPT fixture's training at a
  // tenth of its rate, in bfloat16 mixed precision ("mp") and in float32 ("f32"). Tolerances as
  // tests/ddp/fully_shard_gpt_test.cc's: three times PyTorch's own bfloat16-vs-float32 distance
  // so far (plus a bfloat16 unit of the loss, a bfloat16 number), the final weights as one vector
  // at most twice as far from the float32 run as PyTorch's bfloat16 run.
  static const nn::SafetensorsFile mixed = nn::load_safetensors("tests/ddp/fixtures/fsdp_mixed_precision.safetensors");
  const nn::OrderedDict<Tensor>& ref = mixed.tensors;
  const Files files;
  std::string flags = kFixtureFlags;
  flags.replace(flags.find("--lr 3e-2 --min_lr 3e-3"), 23, "--lr 3e-3 --min_lr 3e-4");
  const std::string metrics = temp_path("gpt_mixed.csv"), saved = temp_path("gpt_mixed.safetensors");
  const CommandResult r = run_command("launcher/launch --nproc_per_node 2 -- examples/train_gpt" + flags +
                                      " --fsdp --fsdp_param_dtype bfloat16 --init " + files.init + " --data " +
                                      files.data + " --metrics " + metrics + " --save " + saved);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::ifstream csv(metrics);
  std::string line;
  std::getline(csv, line);
  double loss_drift = 0, norm_drift = 0, from_float32 = 0;
  for (int64_t step = 0; step < 20; ++step) {
    REQUIRE(std::getline(csv, line));
    double s, loss, norm, lr;
    REQUIRE(std::sscanf(line.c_str(), "%lf,%lf,%lf,%lf", &s, &loss, &norm, &lr) == 4);
    INFO("step " << step << ": " << line);
    const double want = tensor::mean(ref.at("mp.loss")[step]).item<double>();
    const double want_norm = ref.at("mp.grad_norm")[step].item<double>();
    loss_drift = std::max(loss_drift, std::fabs(want - tensor::mean(ref.at("f32.loss")[step]).item<double>()));
    norm_drift = std::max(norm_drift, std::fabs(want_norm - ref.at("f32.grad_norm")[step].item<double>()));
    CHECK(std::fabs(loss - want) <= 3 * loss_drift + std::ldexp(1.0, std::ilogb(want) - 7));
    CHECK(std::fabs(norm - want_norm) <= 3 * norm_drift);
    from_float32 = std::max(from_float32, std::fabs(loss - tensor::mean(ref.at("f32.loss")[step]).item<double>()));
  }
  // And not the float32 run, which lands within about 1e-5 of PyTorch's (the GPT fixture's spread).
  CHECK(from_float32 > 1e-3);
  double ours = 0, theirs = 0;
  for (const auto& [name, t] : nn::load_safetensors(saved).tensors) {
    CHECK(t.dtype() == tensor::kFloat32);
    const Tensor& f32 = ref.at("f32.param." + name);
    ours += tensor::sum(tensor::pow(tensor::sub(t, f32), 2.0)).item<double>();
    theirs += tensor::sum(tensor::pow(tensor::sub(ref.at("mp.param." + name), f32), 2.0)).item<double>();
  }
  CHECK(std::sqrt(ours) <= 2 * std::sqrt(theirs));
}

TEST_CASE("train_gpt on a corpus: validation below the bigram model's, and a sample", "[examples][gpt][corpus]") {
  // A small corpus with structure (words from a small lexicon) learnt in a few hundred steps.
  const std::string corpus = temp_path("words.txt");
  {
    std::ofstream out(corpus);
    const char* words[] = {"the ", "cat ", "sat ", "on ", "a ", "mat. ", "then ", "it ", "ran ", "away\n"};
    uint64_t x = 1;
    for (int i = 0; i < 30000; ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      out << words[(i % 10 + (x >> 60) % 2) % 10];
    }
  }
  const std::string flags = " --corpus " + corpus +
                            " --n_layer 1 --n_head 2 --n_embd 32 --block_size 16 --batch 16 --steps 150 --lr 1e-2 "
                            "--min_lr 1e-3 --warmup_steps 10 --eval_every 75 --eval_windows 32 --sample_tokens 40 "
                            "--prompt 'the '";
  for (const std::string mode : {"", " --fsdp"}) {  // DDP, and fully sharded (its sample gathers the units)
    const CommandResult r = run_command("launcher/launch --nproc_per_node 2 -- examples/train_gpt" + flags + mode);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output,
               Contains(mode.empty() ? "data-parallel on 2 ranks" : "fully sharded (fully_shard) on 2 ranks"));
    CHECK_THAT(r.output, Contains("step 75: validation loss"));
    double validation = 0, bigram = 0;
    const size_t at = r.output.find("[rank 0] validation loss ");  // the launcher prefixes each line
    REQUIRE(at != std::string::npos);
    REQUIRE(std::sscanf(r.output.c_str() + at, "[rank 0] validation loss %lf (bigram model: %lf)", &validation,
                        &bigram) == 2);
    CHECK(validation < bigram - 0.2);
    CHECK_THAT(r.output, Contains("sample (temperature 0.8, top-k 40, seed 1337):\n[rank 0] the "));
  }
}

TEST_CASE("train_gpt names what is wrong with its input", "[examples][gpt][errors]") {
  const auto error_of = [](const std::string& args) {
    const CommandResult r = run_command("examples/train_gpt --steps 2 " + args);
    CHECK(r.exit_code == 1);
    return r.output;
  };
  CHECK_THAT(error_of("--top_k 0"), Contains("--top_k must be at least 1, got 0"));
  CHECK_THAT(error_of("--temperature 0"), Contains("--temperature must be positive, got 0"));
  CHECK_THAT(error_of("--n_embd 30 --n_head 4"), Contains("--n_embd 30 is not divisible by --n_head 4"));
  CHECK_THAT(error_of("--fsdp --zero"), Contains("--fsdp does not take --zero, --comm_hook or --autocast"));
  CHECK_THAT(error_of("--fsdp_param_dtype bfloat16"), Contains("--fsdp_param_dtype takes bfloat16 or float32, with "
                                                               "--fsdp; got 'bfloat16' without --fsdp"));
  CHECK_THAT(error_of("--fsdp --fsdp_param_dtype float16"),
             Contains("--fsdp_param_dtype takes bfloat16 or float32, with --fsdp; got 'float16'"));
  CHECK_THAT(error_of("--corpus /nonexistent/text"), Contains("corpus: /nonexistent/text does not exist"));
  const std::string empty = temp_path("empty.txt"), binary = temp_path("binary.bin");
  std::ofstream(empty).close();
  std::ofstream(binary, std::ios::binary) << std::string("ab\0\xff", 4);
  CHECK_THAT(error_of("--corpus " + empty), Contains("is empty"));
  CHECK_THAT(error_of("--corpus " + binary), Contains("is not text (byte 0x00 at offset 2"));
  const Files files;
  CHECK_THAT(error_of("--data " + files.data), Contains("--data needs --vocab_size"));
  CHECK_THAT(error_of("--data " + files.data + " --vocab_size 10"),
             Contains("token id 12 is outside the vocabulary of --vocab_size 10"));
  CHECK_THAT(error_of("--data " + files.data + " --vocab_size 13 --block_size 4"),
             Contains("sequences of 8 tokens, longer than --block_size 4"));
  CHECK_THAT(error_of("--lr_schedule linear"), Contains("--lr_schedule must be constant or cosine, got 'linear'"));
  CHECK_THAT(error_of("--gradient_accumulation_steps -1"),
             Contains("--gradient_accumulation_steps must be positive (or 0: one micro-step per rank), got -1"));
  CHECK_THAT(error_of("--learning_rate=1e-3"),
             Contains("--learning_rate is nanoGPT's key, taken in nanoGPT's mode (with --dataset=DIR or a config "
                      "file); without them train_gpt's own option is --lr"));
  CHECK_THAT(error_of("--max_iters 5"), Contains("train_gpt's own option is --steps"));
  CHECK_THAT(error_of("--threads -3"), Contains("--threads must be positive (or 0: the default), got -3"));
  const CommandResult threads = run_command("TINYDDP_NUM_THREADS=-2 examples/train_gpt --steps 2");
  CHECK(threads.exit_code == 1);
  CHECK_THAT(threads.output, Contains("train_gpt: error: TINYDDP_NUM_THREADS='-2': not a whole number"));
}
