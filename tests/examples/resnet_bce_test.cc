// examples/resnet_bce as a user runs it (launch, 2 ranks) against the PyTorch script it was
// translated from, run under PyTorch's DDP (fixtures/make_resnet_bce_fixture.py): from the same
// seed the same initial weights (torchvision's initialisation), the same DistributedSampler
// order, and then, step by step, the loss averaged over the ranks and OneCycleLR's rate, and at
// the end every entry of the state dict under PyTorch's names. Tolerances: the fixture's
// (absolute 1e-5; runs whose weights differ by one unit in the last place take under a tenth of
// it). Then a run stopped after its first epoch and resumed from its checkpoint: the same
// records and the same final bits as the uninterrupted run.
#include <cmath>
#include <fstream>

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

const std::vector<const char*> kOptions = {"epochs", "samples", "batch_size", "lr", "weight_decay", "seed"};

nlohmann::json reference() {
  std::ifstream in("tests/examples/fixtures/resnet_bce_reference.json");
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

CommandResult run_resnet(const std::string& args) {
  const CommandResult r = run_command("launcher/launch --nproc_per_node 2 -- examples/resnet_bce" +
                                      options_of(reference()["config"], kOptions) + " " + args);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return r;
}

}  // namespace

TEST_CASE("examples: resnet_bce on 2 ranks trains as PyTorch's DDP run of the same script, step by step",
          "[examples][resnet_bce][fixture]") {
  const nlohmann::json ref = reference();
  const std::string metrics = temp_path("resnet_metrics.csv"), saved = temp_path("resnet.safetensors");
  const CommandResult r = run_resnet("--metrics " + metrics + " --save " + saved);
  CHECK_THAT(r.output, Contains("[rank 0] epoch 2: last loss"));
  testing::check_metrics(metrics, ref);
  check_saved_state(saved, ref["state"], ref["weight_tolerance"].get<double>());
}

TEST_CASE("examples: resnet_bce stopped after an epoch and resumed from its checkpoint equals the run never stopped",
          "[examples][resnet_bce][checkpoint]") {
  const std::string whole = temp_path("resnet_whole.csv"), first = temp_path("resnet_first.csv"),
                    rest = temp_path("resnet_rest.csv"), checkpoint = temp_path("resnet_ck.safetensors"),
                    saved_whole = temp_path("resnet_whole.safetensors"),
                    saved_resumed = temp_path("resnet_resumed.safetensors");
  std::remove(checkpoint.c_str());
  run_resnet("--metrics " + whole + " --save " + saved_whole);
  const CommandResult stopped = run_resnet("--stop_epoch 1 --checkpoint " + checkpoint + " --metrics " + first);
  CHECK_THAT(stopped.output, !Contains("epoch 1:"));
  const CommandResult resumed = run_resnet("--resume " + checkpoint + " --checkpoint " + checkpoint + " --metrics " +
                                           rest + " --save " + saved_resumed);
  CHECK_THAT(resumed.output, !Contains("epoch 0:"));
  const std::string rest_text = read_file(rest);
  REQUIRE(rest_text.rfind("step,loss,lr\n", 0) == 0);
  CHECK(read_file(first) + rest_text.substr(std::string("step,loss,lr\n").size()) == read_file(whole));
  const nn::SafetensorsFile a = nn::load_safetensors(saved_whole), b = nn::load_safetensors(saved_resumed);
  REQUIRE(a.tensors.keys() == b.tensors.keys());
  for (const auto& [name, t] : a.tensors) {
    INFO(name);
    CHECK(tensor::equal(t, b.tensors.at(name)));
  }
}

TEST_CASE("examples: resnet_bce's clear errors", "[examples][resnet_bce][errors]") {
  const CommandResult r = run_command("examples/resnet_bce --nproc 1 --resume /nonexistent/ck.safetensors");
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Contains("/nonexistent/ck.safetensors"));
}
