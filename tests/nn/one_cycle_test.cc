// OneCycleLR against PyTorch's (fixtures/make_one_cycle_fixture.py): every rate and momentum of
// four schedules (cosine and linear, two and three phases, SGD's momentum and Adam's beta1,
// per-group max_lr, cycle_momentum off), each within a few units in the last place (the same
// formula, evaluated in the same order); a model trained under it with SGD, whose momentum the
// cycle turns on, and with Adam, in float64 (1e-12); resuming from state_dict; the errors.
#include <cmath>

#include <nlohmann/json.hpp>

#include "tests/nn/json_fixture.h"
#include "tests/nn/nn_test_util.h"
#include "tinyddp/nn/loss.h"
#include "tinyddp/nn/one_cycle.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using Catch::Contains;

namespace {

OneCycleOptions options_of(const nlohmann::json& a) {
  OneCycleOptions o;
  if (a.contains("pct_start")) o.pct_start(a["pct_start"]);
  if (a.contains("anneal_strategy")) o.anneal_strategy(a["anneal_strategy"]);
  if (a.contains("cycle_momentum")) o.cycle_momentum(a["cycle_momentum"]);
  if (a.contains("base_momentum")) {
    if (a["base_momentum"].is_array()) o.base_momentums(a["base_momentum"]);
    if (!a["base_momentum"].is_array()) o.base_momentum(a["base_momentum"]);
  }
  if (a.contains("max_momentum")) {
    if (a["max_momentum"].is_array()) o.max_momentums(a["max_momentum"]);
    if (!a["max_momentum"].is_array()) o.max_momentum(a["max_momentum"]);
  }
  if (a.contains("div_factor")) o.div_factor(a["div_factor"]);
  if (a.contains("final_div_factor")) o.final_div_factor(a["final_div_factor"]);
  if (a.contains("three_phase")) o.three_phase(a["three_phase"]);
  return o;
}

std::unique_ptr<Optimizer> optimizer_of(const nlohmann::json& c, std::vector<ParamGroup> groups) {
  const nlohmann::json& o = c["options"];
  if (c["optimizer"] == "SGD") {
    return std::make_unique<SGD>(std::move(groups), SGDOptions(o["lr"]).momentum(o.value("momentum", 0.0)));
  }
  return std::make_unique<Adam>(std::move(groups), AdamOptions(o["lr"]));
}

std::unique_ptr<OneCycleLR> schedule_of(Optimizer& opt, const nlohmann::json& a) {
  const int64_t total = a["total_steps"];
  if (a["max_lr"].is_array()) {
    return std::make_unique<OneCycleLR>(opt, a["max_lr"].get<std::vector<double>>(), total, options_of(a));
  }
  return std::make_unique<OneCycleLR>(opt, a["max_lr"].get<double>(), total, options_of(a));
}

std::vector<ParamGroup> two_groups() {
  return {ParamGroup({tensor::zeros({1}).requires_grad_()}), ParamGroup({tensor::zeros({1}).requires_grad_()})};
}

// Within 4 units in the last place: the same double formula, evaluated in the same order.
void check_ulps(double got, double want) { CHECK(std::fabs(got - want) <= 4 * 2.2e-16 * std::fabs(want)); }

}  // namespace

TEST_CASE("OneCycleLR sets PyTorch's rates and momenta at every step", "[nn][scheduler][fixture]") {
  const nlohmann::json ref = tinyddp::testing::read_nn_json_fixture("one_cycle_reference.json");
  for (const auto& [name, c] : ref["schedules"].items()) {
    INFO(name);
    auto opt = optimizer_of(c, two_groups());
    auto sched = schedule_of(*opt, c["args"]);
    const bool cycles = c["args"].value("cycle_momentum", true);
    for (size_t s = 0; s < c["lrs"].size(); ++s) {
      if (s > 0) {
        opt->step();
        sched->step();
      }
      for (size_t g = 0; g < 2; ++g) {
        INFO("step " << s << " group " << g);
        const double want = c["lrs"][s][g].get<double>();
        // (PyTorch's negative rate one past the cycle's end: the cycle's last rate instead)
        if (want >= 0) check_ulps(opt->lr(g), want);
        if (want < 0) check_ulps(opt->lr(g), sched->base_lrs()[g] / c["args"]["final_div_factor"].get<double>());
        if (cycles) check_ulps(opt->momentum(g), c["momenta"][s][g].get<double>());
        if (!cycles) CHECK(opt->momentum(g) == c["momenta"][s][g].get<double>());
      }
    }
    CHECK_THROWS_WITH(sched->step(), Contains("OneCycleLR: tried to step"));
  }
}

TEST_CASE("OneCycleLR: a model trained under it with SGD and Adam ends with PyTorch's weights",
          "[nn][scheduler][fixture]") {
  const nlohmann::json ref = tinyddp::testing::read_nn_json_fixture("one_cycle_reference.json");
  for (const auto& [name, c] : ref["training"].items()) {
    INFO(name);
    Linear model(3, 2);
    model.to(tensor::kFloat64);
    {
      tensor::NoGradGuard no_grad;
      model.weight.copy_(tensor::from_vector(c["initial"]["weight"].get<std::vector<double>>(), tensor::Shape{2, 3}));
      model.bias.copy_(tensor::from_vector(c["initial"]["bias"].get<std::vector<double>>(), tensor::Shape{2}));
    }
    const Tensor x = tensor::from_vector(c["x"].get<std::vector<double>>(), tensor::Shape{5, 3});
    const Tensor y = tensor::from_vector(c["y"].get<std::vector<double>>(), tensor::Shape{5, 2});
    auto opt = optimizer_of(c, {ParamGroup(model.parameters())});
    auto sched = schedule_of(*opt, c["args"]);
    for (int64_t step = 0; step < c["args"]["total_steps"].get<int64_t>(); ++step) {
      opt->zero_grad();
      mse_loss(model.forward(x), y).backward();
      opt->step();
      sched->step();
    }
    CHECK(tensor::allclose(model.weight,
                           tensor::from_vector(c["final"]["weight"].get<std::vector<double>>(), tensor::Shape{2, 3}),
                           1e-12, 1e-12));
    CHECK(tensor::allclose(model.bias,
                           tensor::from_vector(c["final"]["bias"].get<std::vector<double>>(), tensor::Shape{2}), 1e-12,
                           1e-12));
  }
}

TEST_CASE("OneCycleLR: resumed from its state_dict, rates and momentum go on; errors", "[nn][scheduler]") {
  SGD first(two_groups(), SGDOptions(0.1).momentum(0.9));
  OneCycleLR a(first, 1.0, 10);
  for (int i = 0; i < 4; ++i) a.step();
  SGD second(two_groups(), SGDOptions(0.1).momentum(0.9));
  OneCycleLR b(second, 1.0, 10);
  b.load_state_dict(a.state_dict());
  CHECK(second.lr(1) == first.lr(1));
  CHECK(second.momentum(1) == first.momentum(1));
  a.step();
  b.step();
  CHECK(second.lr(0) == first.lr(0));
  CHECK(second.momentum(0) == first.momentum(0));

  Adagrad adagrad(std::vector<Tensor>{tensor::zeros({1}).requires_grad_()}, AdagradOptions(0.1));
  CHECK_THROWS_WITH(OneCycleLR(adagrad, 1.0, 10), Contains("OneCycleLR: Adagrad has no momentum or beta1 to cycle"));
  OneCycleLR no_momentum(adagrad, 1.0, 10, OneCycleOptions().cycle_momentum(false));
  CHECK(adagrad.lr() == Approx(1.0 / 25).epsilon(1e-15));
  CHECK_THROWS_WITH(OneCycleLR(first, std::vector<double>{1.0}, 10),
                    Contains("expected 2 values for max_lr (one per parameter group), got 1"));
  CHECK_THROWS_WITH(OneCycleLR(first, 1.0, 0), Contains("expected a positive total_steps, got 0"));
  CHECK_THROWS_WITH(OneCycleLR(first, 1.0, 10, OneCycleOptions().max_momentums({0.9, 0.9, 0.9})),
                    Contains("expected 2 momentums (one per parameter group), got 3"));
  CHECK_THROWS_WITH(OneCycleLR(first, 1.0, 10, OneCycleOptions().anneal_strategy("exp")),
                    Contains("anneal_strategy must be 'cos' or 'linear', got 'exp'"));
  CHECK_THROWS_WITH(first.set_momentum(0, -1), Contains("SGD: invalid momentum -1 (group 0)"));
  Adam adam(two_groups(), AdamOptions());
  CHECK(adam.momentum_name() == "beta1");
  CHECK_THROWS_WITH(adam.set_momentum(1, 1.0), Contains("Adam: invalid beta1 1 (group 1)"));
}
