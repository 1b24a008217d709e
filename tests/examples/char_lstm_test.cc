// examples/char_lstm as a user runs it (launch, 2 ranks) against the same script in PyTorch
// under its DDP (fixtures/make_char_lstm_fixture.py): from the same seed the same initial
// weights (Embedding, LSTM, the ModuleList head re-initialised by apply), the same windows, and
// then, step by step, the loss averaged over the ranks and OneCycleLR's rate, and at the end
// every weight of the state dict under PyTorch's names. Tolerances: the fixture's (absolute
// 1e-5; runs whose weights differ by one unit in the last place stay within 3% of it).
#include <cmath>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "tests/examples/example_fixtures.h"
#include "tests/test_util.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp;
using Catch::Contains;
using testing::check_saved_state;
using testing::CommandResult;
using testing::options_of;
using testing::read_file;
using testing::run_command;
using testing::temp_path;

namespace {

const char* const kText = "tests/examples/fixtures/char_lstm_text.txt";
const std::vector<const char*> kOptions = {"steps",  "batch_size", "seq_len",      "embed", "hidden",
                                           "layers", "lr",         "weight_decay", "seed",  "accum"};

nlohmann::json reference() {
  std::ifstream in("tests/examples/fixtures/char_lstm_reference.json");
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("examples: char_lstm on 2 ranks trains as PyTorch's DDP run of the same script, step by step",
          "[examples][char_lstm][fixture]") {
  const nlohmann::json ref = reference();
  const std::string metrics = temp_path("char_lstm_metrics.csv"), saved = temp_path("char_lstm.safetensors");
  const CommandResult r =
      run_command("launcher/launch --nproc_per_node 2 -- examples/char_lstm --text " + std::string(kText) +
                  options_of(ref["config"], kOptions) + " --metrics " + metrics + " --save " + saved + " --sample 20");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("[rank 0] sample: The "));
  testing::check_metrics(metrics, ref);
  check_saved_state(saved, ref["state"], ref["weight_tolerance"].get<double>());
}

TEST_CASE("examples: char_lstm samples with a temperature: characters of the text, the same for the same seed",
          "[examples][char_lstm][sample]") {
  const auto sample_of = [](const std::string& args) {
    const CommandResult r =
        run_command(fmt::format("examples/char_lstm --nproc 1 --steps 2 --sample 40 --text {} {}", kText, args));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const size_t at = r.output.find("sample: The ");
    REQUIRE(at != std::string::npos);
    return r.output.substr(at + 12, 40);
  };
  const std::string sampled = sample_of("--temperature 1"), text = read_file(kText);
  CHECK(sample_of("--temperature 1") == sampled);
  CHECK(sample_of("--temperature 1 --seed 5") != sampled);
  std::set<char> distinct;
  for (const char ch : sampled) {
    CHECK(text.find(ch) != std::string::npos);
    distinct.insert(ch);
  }
  CHECK(distinct.size() >= 5);  // after 2 steps the model is near uniform over the vocabulary
}

TEST_CASE("examples: char_lstm's clear errors", "[examples][char_lstm][errors]") {
  const auto error_of = [](const std::string& args) {
    const CommandResult r = run_command("examples/char_lstm --nproc 1 --steps 1 --sample 5 " + args);
    CHECK(r.exit_code != 0);
    return r.output;
  };
  const std::string prompt = error_of(fmt::format("--text {} --prompt Zebra", kText));
  CHECK_THAT(prompt, Contains("character 0 of \"Zebra\" (byte 0x5a) is not in the corpus's vocabulary"));
  CHECK_THAT(prompt, !Contains("step 0"));  // before any training
  CHECK_THAT(error_of(fmt::format("--text {} --seq_len 5000", kText)), Contains("is shorter than --seq_len + 2"));
  CHECK_THAT(error_of("--text /nonexistent/text"), Contains("corpus: /nonexistent/text does not exist"));
}
