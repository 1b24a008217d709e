// What the elastic-job tests share (tests/launcher/elastic_launch_test.cc with nodes on
// loopback, tests/cluster/elastic_cluster_test.cc with nodes in network namespaces): the
// training job, the reference made of the same pieces, and the checks that nothing was lost.
// Paths are the tests' runfiles (launcher/launch, examples/train).
#pragma once

#include <algorithm>
#include <filesystem>
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

// The reference made of the same pieces: `before` ranks for the first `step` steps (the run
// ends there and writes its checkpoint), then `after` ranks from that checkpoint to the end.
inline std::string reference(const std::string& dir, int before, int64_t step, int after) {
  const std::string first_piece =
      std::regex_replace(train(dir, "ref"), std::regex("--steps 3000"), "--steps " + std::to_string(step));
  const CommandResult first =
      run_command(fmt::format("launcher/launch --nproc_per_node {} -- {}", before, first_piece));
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  const CommandResult rest =
      run_command(fmt::format("launcher/launch --nproc_per_node {} -- {}", after, train(dir, "ref")));
  INFO(rest.output);
  REQUIRE(rest.exit_code == 0);
  CHECK_THAT(rest.output, Catch::Contains(fmt::format("after {} steps", step)));
  return dir + "/ref.safetensors";
}

// Nothing lost: the last checkpoint loads, no temporary file is left, no worker still runs.
inline void require_clean(const std::string& dir, const std::string& checkpoint) {
  CHECK(tinyddp::nn::load_safetensors(checkpoint).tensors.size() > 0);
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    CHECK_THAT(entry.path().filename().string(), !Catch::Contains(".tmp"));
  }
  CHECK(run_command("pgrep -f '[e]xamples/train .*" + dir + "'").exit_code != 0);
}

}  // namespace tinyddp::testing::elastic
