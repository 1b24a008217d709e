// What the elastic-job and stop-and-resume tests share (tests/launcher/elastic_launch_test.cc
// and preemption_test.cc with nodes on loopback, tests/cluster's with nodes in network
// namespaces and under Slurm, tests/examples/nanogpt_train_test.cc): the training jobs, the
// reference made of the same pieces, and the checks that nothing was lost.
// Paths are the tests' runfiles (launcher/launch, examples/train, examples/train_gpt).
#pragma once

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <string>

#include <fmt/format.h>

#include "tests/test_util.h"
#include "tinyddp/nn/nn.h"

namespace tinyddp::testing::elastic {

// Whether `text` has a match of the regular expression `pattern` somewhere.
inline bool has_match(const std::string& text, const std::string& pattern) {
  return std::regex_search(text, std::regex(pattern));
}

// The step the survivors resumed from ("resuming from PATH after N steps").
inline int64_t resumed_step(const std::string& output) {
  std::smatch m;
  REQUIRE(std::regex_search(output, m, std::regex(R"(resuming from \S+ after ([0-9]+) steps)")));
  return std::stoll(m[1]);
}

inline double max_difference(const std::string& a, const std::string& b) {
  namespace t = tinyddp::tensor;
  const auto x = tinyddp::nn::load_safetensors(a).tensors, y = tinyddp::nn::load_safetensors(b).tensors;
  REQUIRE(x.size() == y.size());
  double worst = 0;
  for (const auto& [name, value] : x) worst = std::max(worst, t::max(t::abs(t::sub(value, y.at(name)))).item<double>());
  return worst;
}

// The training job of these tests: the global batch of 24 splits over 2, 3 and 4 ranks.
inline std::string train(const std::string& dir, const std::string& name) {
  return fmt::format(
      "examples/train --widths 32,64,4 --batch 24 --steps 3000 --log_every 100 --timeout 10 --checkpoint {0}/{1}.ckpt "
      "--checkpoint_every 100 --resume --save {0}/{1}.safetensors",
      dir, name);
}

// The same job with examples/train_gpt: a small GPT on the fortune-cookie text, its rate
// constant after the warmup (a cosine's would depend on --steps, which the pieces change).
inline std::string train_gpt(const std::string& dir, const std::string& name) {
  return fmt::format(
      "examples/train_gpt --n_layer 1 --n_head 2 --n_embd 16 --block_size 16 --batch 12 --steps 3000 --lr_schedule "
      "constant --log_every 100 --eval_every 0 --sample_tokens 0 --timeout 10 --checkpoint {0}/{1}.ckpt "
      "--checkpoint_every 100 --resume --save {0}/{1}.safetensors",
      dir, name);
}

using Job = std::string (*)(const std::string& dir, const std::string& name);

// The reference made of the same pieces: `before` ranks for the first `step` steps (the run
// ends there and writes its checkpoint), then `after` ranks from that checkpoint to the end.
inline std::string reference(const std::string& dir, int before, int64_t step, int after, Job job = train) {
  const std::string first_piece =
      std::regex_replace(job(dir, "ref"), std::regex("--steps 3000"), "--steps " + std::to_string(step));
  const CommandResult first =
      run_command(fmt::format("launcher/launch --nproc_per_node {} -- {}", before, first_piece));
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  const CommandResult rest =
      run_command(fmt::format("launcher/launch --nproc_per_node {} -- {}", after, job(dir, "ref")));
  INFO(rest.output);
  REQUIRE(rest.exit_code == 0);
  CHECK_THAT(rest.output, Catch::Contains(fmt::format("after {} steps", step)));
  return dir + "/ref.safetensors";
}

// train_gpt --dataset's job for the stop-and-resume tests: 400 iterations of nanoGPT's loop on
// `dataset` (tests/examples/fixtures/nanogpt_data/story), 4 micro-steps over the ranks.
inline std::string nanogpt_job_keys(const std::string& dataset) {
  return "--dataset=" + dataset +
         " --device=cpu --compile=False --dtype=float32 --n_layer=2 --n_head=2 --n_embd=32 --block_size=32 "
         "--learning_rate=1e-3 --min_lr=1e-4 --eval_iters=4 --batch_size=4 --gradient_accumulation_steps=4 "
         "--max_iters=400 --eval_interval=100 --warmup_iters=5 --lr_decay_iters=400 --always_save_checkpoint=True";
}

// train_gpt --dataset's printed losses ("iter N: loss X", "step N: train loss X, val loss Y";
// under launch with its "[rank 0] " prefix), by line ("iter N", "step N"), from iteration `from` on.
inline std::map<std::string, std::string> nanogpt_losses(const std::string& output, int64_t from) {
  std::map<std::string, std::string> lines;
  const std::regex line(R"((?:^|\n|\[rank 0\] )(iter|step) (\d+): ([^\n]*loss [0-9.]+))");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), line); it != std::sregex_iterator(); ++it) {
    if (std::stoll((*it)[2]) >= from) lines[(*it)[1].str() + " " + (*it)[2].str()] = (*it)[3].str();
  }
  return lines;
}

// Nothing lost: the last checkpoint loads, no temporary file is left, no worker still runs.
inline void require_clean(const std::string& dir, const std::string& checkpoint) {
  CHECK(tinyddp::nn::load_safetensors(checkpoint).tensors.size() > 0);
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    CHECK_THAT(entry.path().filename().string(), !Catch::Contains(".tmp"));
  }
  CHECK(run_command("pgrep -f '[e]xamples/train.* .*" + dir + "'").exit_code != 0);
}

}  // namespace tinyddp::testing::elastic
