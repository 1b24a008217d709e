// train_gpt --profile_ops and --profile_trace (examples/op_profile.h) as a user runs them: on 2
// ranks, rank 0 prints the op table of the profiled steps and each rank writes its own Chrome
// trace (its pid the rank), with a range per profiled step holding that step's kernels; bad
// values of the options, in both of train_gpt's modes, are errors that name them.
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/test_util.h"

using Catch::Contains;
using tinyddp::testing::CommandResult;
using tinyddp::testing::run_command;
using tinyddp::testing::temp_path;

TEST_CASE("train_gpt --profile_ops prints rank 0's op table and writes each rank's trace", "[examples][profiler]") {
  const std::string corpus = temp_path("profile_words.txt"), trace = temp_path("ops.json");
  {
    std::ofstream out(corpus);
    for (int i = 0; i < 2000; ++i) out << (i % 3 == 0 ? "the cat " : i % 3 == 1 ? "sat on " : "a mat.\n");
  }
  const CommandResult r = run_command(
      "launcher/launch --nproc_per_node 2 -- examples/train_gpt --corpus " + corpus +
      " --n_layer 1 --n_head 2 --n_embd 16 --block_size 8 --batch 4 --steps 5 --eval_every 0 --eval_windows 2 "
      "--sample_tokens 0 --profile_ops 2 --profile_trace " +
      trace);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("op profile of steps 1 to 2") && Contains("linear") && Contains("GEMM") &&
                           Contains("time per kind") && Contains("ms/step"));
  CHECK(r.output.find("[rank 1] op profile") == std::string::npos);  // rank 0's table only

  for (const auto& [rank, path] : {std::pair<int, std::string>{0, trace}, {1, temp_path("ops.rank1.json")}}) {
    INFO("rank " << rank << ": " << path);
    std::ifstream file(path);
    REQUIRE(file.good());
    const nlohmann::json doc = nlohmann::json::parse(file);
    CHECK(doc["otherData"]["steps"] == 2);
    std::map<std::string, std::pair<double, double>> steps;  // "step N" range: start, end
    std::vector<std::pair<double, int64_t>> kernels;         // start, step
    for (const auto& e : doc["traceEvents"]) {
      CHECK(e["pid"] == rank);
      if (e["ph"] != "X") continue;
      if (e["args"]["kind"] == "user") {
        steps[e["name"]] = {e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()};
      } else {
        kernels.push_back({e["ts"].get<double>(), e["args"]["step"].get<int64_t>()});
      }
    }
    REQUIRE(steps.size() == 2);
    REQUIRE(steps.count("step 1") == 1);
    REQUIRE(steps.count("step 2") == 1);
    CHECK_FALSE(kernels.empty());
    for (const auto& [start, step] : kernels) {  // each kernel inside its own step's range
      const auto& range = steps.at("step " + std::to_string(step + 1));
      CHECK(start >= range.first);
      CHECK(start <= range.second);
    }
  }

  // scripts/profile_compare.py on a CPU trace: host time per kind, the kinds adding up.
  const CommandResult table = run_command("python3 scripts/profile_compare.py " + trace);
  INFO(table.output);
  REQUIRE(table.exit_code == 0);
  CHECK_THAT(table.output, Contains("tinyddp host ms/step") && Contains("GEMM"));
  double kinds = 0, all = -1;
  int rows = 0;
  std::istringstream lines(table.output);
  for (std::string line; std::getline(lines, line);) {
    double ms = 0, calls = 0;
    char kind[32] = {};
    if (line.rfind("all kernels", 0) == 0) {
      REQUIRE(std::sscanf(line.c_str(), "all kernels %lf %lf", &all, &calls) == 2);
    } else if (std::sscanf(line.c_str(), "%31s %lf %lf", kind, &ms, &calls) == 3) {
      CHECK(calls > 0);
      kinds += ms;
      ++rows;
    }
  }
  CHECK(all > 0);
  CHECK(rows >= 2);
  CHECK(kinds == Approx(all).margin(0.0005 * (rows + 1)));  // each row and the total rounded to 3 decimals
}

TEST_CASE("train_gpt names bad --profile_ops and --profile_trace values", "[examples][profiler][errors]") {
  const auto error_of = [](const std::string& args) {
    const CommandResult r = run_command("examples/train_gpt " + args);
    CHECK(r.exit_code == 1);
    return r.output;
  };
  CHECK_THAT(error_of("--steps 2 --profile_ops -1"), Contains("--profile_ops must not be negative, got -1"));
  CHECK_THAT(error_of("--steps 2 --profile_trace x.json"), Contains("--profile_trace needs --profile_ops N"));
  // nanoGPT's mode (--dataset): the same keys.
  const std::string data = tinyddp::testing::fresh_directory("profile_nanogpt");
  CHECK_THAT(error_of("--dataset=" + data + " --profile_trace=x.json"),
             Contains("profile_ops=0 must not be negative, and profile_trace needs profile_ops"));
  CHECK_THAT(error_of("--dataset=" + data + " --profile_ops=-2"), Contains("profile_ops=-2 must not be negative"));
}
