// ReduceLROnPlateau against PyTorch's (fixtures/make_plateau_fixture.py): the rates of two
// parameter groups after each step(metric) of one metric sequence, under four option sets
// (the products of factors: equal to a few ulp); resuming from state_dict; the errors.
#include <nlohmann/json.hpp>

#include "tests/nn/json_fixture.h"
#include "tests/nn/nn_test_util.h"
#include "tinyddp/nn/plateau.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using Catch::Contains;

namespace {

PlateauOptions options_of(const nlohmann::json& o) {
  PlateauOptions p;
  if (o.contains("mode")) p.mode(o["mode"]);
  if (o.contains("patience")) p.patience(o["patience"]);
  if (o.contains("factor")) p.factor(o["factor"]);
  if (o.contains("threshold")) p.threshold(o["threshold"]);
  if (o.contains("threshold_mode")) p.threshold_mode(o["threshold_mode"]);
  if (o.contains("cooldown")) p.cooldown(o["cooldown"]);
  if (o.contains("min_lr")) p.min_lrs(o["min_lr"].get<std::vector<double>>());
  return p;
}

// SGD over two groups at 0.1 and 0.5, as the fixture's.
std::unique_ptr<SGD> two_groups() {
  std::vector<ParamGroup> groups{ParamGroup({tensor::zeros({1}).requires_grad_()}),
                                 ParamGroup({tensor::zeros({1}).requires_grad_()}).set_lr(0.5)};
  return std::make_unique<SGD>(std::move(groups), SGDOptions(0.1));
}

}  // namespace

TEST_CASE("ReduceLROnPlateau sets PyTorch's rates step by step", "[nn][scheduler][fixture]") {
  const nlohmann::json ref = tinyddp::testing::read_nn_json_fixture("plateau_reference.json");
  const std::vector<double> metrics = ref["metrics"].get<std::vector<double>>();
  for (const auto& [name, c] : ref["cases"].items()) {
    INFO(name);
    auto opt = two_groups();
    ReduceLROnPlateau plateau(*opt, options_of(c["options"]));
    for (size_t s = 0; s < metrics.size(); ++s) {
      plateau.step(metrics[s]);
      for (size_t g = 0; g < 2; ++g) {
        INFO("step " << s << " group " << g);
        const double want = c["lrs"][s][g].get<double>();
        CHECK(std::fabs(opt->lr(g) - want) <= 1e-15 * want);
        CHECK(plateau.get_last_lr()[g] == opt->lr(g));
      }
    }
  }
}

TEST_CASE("ReduceLROnPlateau resumes from its state_dict; bad options are named", "[nn][scheduler]") {
  const std::vector<double> metrics{1.0, 0.9, 0.95, 0.96, 0.97, 0.98, 0.99, 1.0};
  auto whole = two_groups();
  ReduceLROnPlateau a(*whole, PlateauOptions().patience(1).cooldown(1));
  auto resumed_opt = two_groups();
  ReduceLROnPlateau b(*resumed_opt, PlateauOptions().patience(1).cooldown(1));
  for (size_t s = 0; s < metrics.size(); ++s) {
    a.step(metrics[s]);
    if (s == 3) {  // b takes over a's state (and the rates, as the optimizer's checkpoint would)
      b.load_state_dict(a.state_dict());
      for (size_t g = 0; g < 2; ++g) resumed_opt->set_lr(g, whole->lr(g));
    } else if (s > 3) {
      b.step(metrics[s]);
      CHECK(resumed_opt->lr(0) == whole->lr(0));
    }
  }
  CHECK(b.num_bad_epochs() == a.num_bad_epochs());
  auto opt = two_groups();
  CHECK_THROWS_WITH(ReduceLROnPlateau(*opt, PlateauOptions().factor(1.0)),
                    Contains("ReduceLROnPlateau: factor should be < 1.0, got 1"));
  CHECK_THROWS_WITH(ReduceLROnPlateau(*opt, PlateauOptions().mode("lowest")), Contains("mode lowest is unknown"));
  CHECK_THROWS_WITH(ReduceLROnPlateau(*opt, PlateauOptions().min_lrs({0.1, 0.2, 0.3})),
                    Contains("expected 2 min_lrs, got 3"));
}
