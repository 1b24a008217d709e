// The examples that teach one idea each, run on 2 ranks under //launcher:launch: ddp_rebuild
// (why the buckets are rebuilt in the order the gradients came), join_counter (a Joinable of
// one's own, PyTorch's Counter), desync (two ranks calling different collectives) and ddp_walk
// (one iteration told from the Reducer's state), with what they print checked against what the
// idea predicts and what the pages quote.
#include <cmath>
#include <cstdio>
#include <regex>
#include <set>
#include <sstream>

#include "tests/examples/example_runs.h"

using Catch::Contains;
using tinyddp::testing::all_matches;
using tinyddp::testing::CommandResult;
using tinyddp::testing::launch2;
using tinyddp::testing::read_file;

namespace {

// The lines `page` quotes from a run of `program` on 2 ranks: the code block after the line
// "$ bazel-bin/launcher/launch --nproc_per_node 2 -- bazel-bin/<program>".
std::vector<std::string> quoted_run(const std::string& page, const std::string& program) {
  const std::string text = read_file(page);
  const std::string command = "$ bazel-bin/launcher/launch --nproc_per_node 2 -- bazel-bin/" + program + "\n";
  const size_t start = text.find(command);
  INFO(page << " should quote a run after the line " << command);
  REQUIRE(start != std::string::npos);
  std::istringstream block(text.substr(start + command.size()));
  std::vector<std::string> lines;
  for (std::string line; std::getline(block, line) && line != "```";) lines.push_back(line);
  return lines;
}

}  // namespace
using tinyddp::testing::require_same_on_both_ranks;

TEST_CASE("examples: ddp_rebuild, buckets built in reverse registration order are rebuilt in gradient order",
          "[examples][ddp]") {
  const CommandResult r = launch2("examples/ddp_rebuild");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  // Registered fc2, fc3, fc4, fc1: reversed, fc1 (the gradient backward produces last) comes first.
  require_same_on_both_ranks(r.output, R"(rank [01]: buckets at construction: (.*))");
  CHECK(all_matches(r.output, R"(buckets at construction: \[(\S+))") ==
        std::vector<std::string>{"fc1.bias", "fc1.bias"});
  // Rebuilt in the order the gradients arrived: the last layer first, the first layer last.
  require_same_on_both_ranks(r.output, R"(rank [01]: buckets after the rebuild: (.*))");
  CHECK_THAT(r.output, Contains("buckets after the rebuild: [fc4.weight fc4.bias fc3.weight]"));
  CHECK(all_matches(r.output, R"(buckets after the rebuild: .* (\S+)\]\n)") ==
        std::vector<std::string>{"fc1.bias", "fc1.bias"});
  // Before the rebuild every allreduce waits for the end of backward: nothing is hidden.
  CHECK(all_matches(r.output, R"(iteration 0: (\d+)% of communication hidden)") == std::vector<std::string>{"0", "0"});
}

TEST_CASE("examples: join_counter, a Joinable of one's own counts 10 and 11 inputs on ranks with 5 and 6",
          "[examples][join]") {
  const CommandResult r = launch2("examples/join_counter");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  // PyTorch's walk-through prints the same four lines: rank 0 joins after 5 iterations of both
  // (10 inputs), rank 1 runs one more alone (11), and the broadcast total is 11 everywhere.
  CHECK_THAT(r.output, Contains("[rank 0] 10 inputs processed before rank 0 joined!"));
  CHECK_THAT(r.output, Contains("[rank 1] 11 inputs processed before rank 1 joined!"));
  require_same_on_both_ranks(r.output, R"((\d+) inputs processed across all ranks!)");
  CHECK_THAT(r.output, Contains("[rank 0] 11 inputs processed across all ranks!"));
  CHECK(r.seconds < 30);
}

TEST_CASE("examples: desync, ranks that call different collectives get the error docs/comm.md quotes",
          "[examples][comm]") {
  const CommandResult r = launch2("examples/desync");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.seconds < 30);  // at once, not after a timeout
  // Both ranks caught the same error naming both calls, kept their tensors, and then agreed.
  require_same_on_both_ranks(
      r.output, R"(\[rank [01]\] caught CollectiveMismatchError: \w+ \(rank [01] of 2, .*\) failed: (.*))");
  CHECK_THAT(r.output, Contains("[rank 0] its tensor after the refused call: [1, 1, 1, 1, 1, 1, 1, 1]"));
  CHECK_THAT(r.output, Contains("[rank 1] its tensor after the refused call: [2, 2, 2, 2, 2, 2, 2, 2]"));
  // Every line docs/comm.md quotes from the run is in the output.
  const std::vector<std::string> quoted = quoted_run("docs/comm.md", "examples/desync");
  CHECK(quoted.size() == 5);
  for (const std::string& line : quoted) {
    INFO("docs/comm.md quotes: " << line);
    CHECK(r.output.find(line) != std::string::npos);
  }
}

TEST_CASE("examples: ddp_walk tells one iteration from the Reducer's state, as docs/learn.md quotes it",
          "[examples][ddp]") {
  const CommandResult r = launch2("examples/ddp_walk");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  // Each of the six gradients arrives once, each bucket's pending count falls to 0, and the
  // buckets launch in index order, each when its last gradient is in.
  const std::vector<std::string> arrived = all_matches(r.output, R"(gradient \d of 6: (\S+) +->)");
  CHECK(std::set<std::string>(arrived.begin(), arrived.end()).size() == 6);
  CHECK(all_matches(r.output, R"(pending 1 -> 0\n\[rank 0\]   bucket (\d) complete and next in order: launched)") ==
        std::vector<std::string>{"0", "1"});
  // One number: the bucket holds half this rank's gradient, .grad the mean of both ranks'.
  const std::vector<std::string> path =
      all_matches(r.output, R"(4\.bias\[0\]: gradient (-?[0-9.]+ here, -?[0-9.]+ on rank 1; in the bucket -?[0-9.]+))");
  const std::vector<std::string> average = all_matches(r.output, R"(\.grad = (-?[0-9.]+), the average)");
  REQUIRE(path.size() == 1);
  REQUIRE(average.size() == 1);
  double here = 0, theirs = 0, in_bucket = 0;
  REQUIRE(std::sscanf(path[0].c_str(), "%lf here, %lf on rank 1; in the bucket %lf", &here, &theirs, &in_bucket) == 3);
  CHECK(std::fabs(in_bucket - here / 2) <= 1e-6);  // printed to 6 decimals
  CHECK(std::fabs(std::stod(average[0]) - (here + theirs) / 2) <= 1.5e-6);
  // docs/learn.md's quote, the numbers aside: the printed values may differ in their last
  // digits from one CPU to another, and whether a hook sees an allreduce finish is timing.
  const auto masked = [](const std::string& line) {
    return std::regex_replace(std::regex_replace(line, std::regex(R"(-?\d+\.\d+)"), "#"), std::regex(R"(saw \d of)"),
                              "saw # of");
  };
  const std::string output = masked(r.output);
  const std::vector<std::string> quoted = quoted_run("docs/learn.md", "examples/ddp_walk");
  CHECK(quoted.size() >= 15);
  for (const std::string& line : quoted) {
    INFO("docs/learn.md quotes: " << line);
    if (line.find("has finished (seen at this hook)") == std::string::npos)
      CHECK(output.find(masked(line)) != std::string::npos);
  }
}
