// examples/wgan_gp as a user runs it (launch, 2 ranks) against the same script in PyTorch under
// its DDP (fixtures/make_wgan_gp_fixture.py): from the same seed the same initial weights and
// draws, and then, step by step, rank 0's critic loss, gradient penalty and Wasserstein
// estimate (each critic step's penalty a double backward, averaged over the ranks by DDP) and
// generator loss, and at the end both models' weights under PyTorch's names. Tolerances: the
// fixture's (absolute 1e-5; runs whose weights differ by one unit in the last place stay within
// a small part of it: the script's --spread).
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/examples/example_fixtures.h"
#include "tests/examples/example_runs.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp;
using Catch::Contains;
using testing::check_saved_state;
using testing::CommandResult;
using testing::launch2;
using testing::options_of;
using testing::temp_path;

namespace {

nlohmann::json reference() {
  std::ifstream in("tests/examples/fixtures/wgan_gp_reference.json");
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

const std::vector<const char*> kOptions = {"steps",  "critic_iters", "batch_size", "latent",
                                           "hidden", "lr",           "lambda_gp",  "seed"};

// The numbers of a CSV row after its step and phase (empty fields dropped).
std::vector<double> numbers_of(const std::string& line, std::string& phase) {
  std::stringstream row(line);
  std::string field;
  std::getline(row, field, ',');  // the step
  std::getline(row, phase, ',');
  std::vector<double> out;
  while (std::getline(row, field, ',')) {
    if (!field.empty()) out.push_back(std::stod(field));
  }
  return out;
}

}  // namespace

TEST_CASE("examples: wgan_gp on 2 ranks trains as PyTorch's DDP run of the same script, step by step",
          "[examples][wgan_gp][double_backward][fixture]") {
  const nlohmann::json ref = reference();
  const std::string metrics = temp_path("wgan_gp_metrics.csv"), saved = temp_path("wgan_gp.safetensors");
  const CommandResult r =
      launch2("examples/wgan_gp" + options_of(ref["config"], kOptions) + " --metrics " + metrics + " --save " + saved);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("[rank 0] generated points: mean distance to the nearest mode"));
  std::ifstream csv(metrics);
  std::string line;
  std::getline(csv, line);
  CHECK(line == "step,phase,loss,penalty,wasserstein");
  const double loss_tolerance = ref["loss_tolerance"].get<double>();
  const int64_t critic_iters = ref["config"]["critic_iters"].get<int64_t>();
  int64_t row = 0;
  for (const auto& want : ref["losses"]) {
    REQUIRE(std::getline(csv, line));
    INFO("row " << row << ": " << line);
    std::string phase;
    const std::vector<double> got = numbers_of(line, phase);
    CHECK(phase == (row % (critic_iters + 1) == critic_iters ? "generator" : "critic"));
    REQUIRE(got.size() == want.size());
    for (size_t k = 0; k < got.size(); ++k) CHECK(std::fabs(got[k] - want[k].get<double>()) <= loss_tolerance);
    ++row;
  }
  CHECK_FALSE(std::getline(csv, line));
  check_saved_state(saved, ref["state"], ref["weight_tolerance"].get<double>());
}
