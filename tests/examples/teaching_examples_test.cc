// The examples that teach one idea each, run on 2 ranks under //launcher:launch: ddp_rebuild
// (why the buckets are rebuilt in the order the gradients came), join_counter (a Joinable of
// one's own, PyTorch's Counter) and desync (two ranks calling different collectives), with what
// they print checked against what the idea predicts and what the pages quote.
#include <sstream>

#include "tests/examples/example_runs.h"

using Catch::Contains;
using tinyddp::testing::all_matches;
using tinyddp::testing::CommandResult;
using tinyddp::testing::launch2;
using tinyddp::testing::read_file;
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
  // Every line docs/comm.md quotes from the run (the block after the command) is in the output.
  const std::string page = read_file("docs/comm.md");
  const std::string command = "$ bazel-bin/launcher/launch --nproc_per_node 2 -- bazel-bin/examples/desync\n";
  const size_t start = page.find(command);
  REQUIRE(start != std::string::npos);
  std::istringstream block(page.substr(start + command.size()));
  int quoted = 0;
  for (std::string line; std::getline(block, line) && line != "```"; ++quoted) {
    INFO("docs/comm.md quotes: " << line);
    CHECK(r.output.find(line) != std::string::npos);
  }
  CHECK(quoted == 5);
}
