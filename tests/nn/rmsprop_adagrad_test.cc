// RMSprop and Adagrad against torch.optim's (fixtures/make_rmsprop_adagrad_fixture.py): the
// parameter after each of 4 steps under five option sets, in float32 (the same operations in
// the same order: 1e-6, as the other optimizer tests), their defaults, resuming from
// state_dict, and the errors.
#include <nlohmann/json.hpp>

#include "tests/nn/json_fixture.h"
#include "tests/nn/nn_test_util.h"
#include "tinyddp/nn/rmsprop_adagrad.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using Catch::Contains;
using tinyddp::testing::max_abs_diff;

namespace {

const nlohmann::json& reference() {
  static const nlohmann::json j = tinyddp::testing::read_nn_json_fixture("rmsprop_adagrad_reference.json");
  return j;
}

Tensor values(const nlohmann::json& v) { return tensor::from_vector(v.get<std::vector<float>>(), tensor::Shape{3, 2}); }

std::unique_ptr<Optimizer> make(const std::string& name, const Tensor& p) {
  if (name == "rmsprop") return std::make_unique<RMSprop>(std::vector<Tensor>{p}, RMSpropOptions(0.01));
  if (name == "rmsprop_momentum_decay") {
    return std::make_unique<RMSprop>(std::vector<Tensor>{p},
                                     RMSpropOptions(0.01).alpha(0.9).eps(1e-6).weight_decay(0.1).momentum(0.8));
  }
  if (name == "rmsprop_centered")
    return std::make_unique<RMSprop>(std::vector<Tensor>{p}, RMSpropOptions(0.01).centered(true).momentum(0.5));
  if (name == "adagrad") return std::make_unique<Adagrad>(std::vector<Tensor>{p}, AdagradOptions(0.1));
  return std::make_unique<Adagrad>(
      std::vector<Tensor>{p},
      AdagradOptions(0.1).lr_decay(0.05).weight_decay(0.2).initial_accumulator_value(0.3).eps(1e-6));
}

}  // namespace

TEST_CASE("RMSprop and Adagrad match torch.optim step by step", "[nn][optim][fixture]") {
  for (const auto& [name, steps] : reference()["configs"].items()) {
    const Tensor p = values(reference()["p0"]).requires_grad_();
    auto optimizer = make(name, p);
    for (size_t k = 0; k < steps.size(); ++k) {
      INFO(name << " step " << k);
      p.mutable_grad() = values(reference()["grads"][k]);
      optimizer->step();
      CHECK(max_abs_diff(p, values(steps[k])) < 1e-6);
    }
  }
}

TEST_CASE("RMSprop and Adagrad: torch's defaults, resuming from state_dict, errors", "[nn][optim]") {
  const nlohmann::json& d = reference()["defaults"];
  const RMSpropOptions r;
  CHECK(r.lr() == d["RMSprop"]["lr"].get<double>());
  CHECK(r.alpha() == d["RMSprop"]["alpha"].get<double>());
  CHECK(r.eps() == d["RMSprop"]["eps"].get<double>());
  CHECK(r.momentum() == d["RMSprop"]["momentum"].get<double>());
  CHECK(r.centered() == d["RMSprop"]["centered"].get<bool>());
  const AdagradOptions a;
  CHECK(a.lr() == d["Adagrad"]["lr"].get<double>());
  CHECK(a.eps() == d["Adagrad"]["eps"].get<double>());
  CHECK(a.lr_decay() == d["Adagrad"]["lr_decay"].get<double>());
  CHECK(a.initial_accumulator_value() == d["Adagrad"]["initial_accumulator_value"].get<double>());
  // Two steps, a state_dict into a fresh optimizer, two more: as four uninterrupted steps.
  for (const std::string name : {"rmsprop_centered", "adagrad_options"}) {
    INFO(name);
    const nlohmann::json& steps = reference()["configs"][name];
    const Tensor p = values(reference()["p0"]).requires_grad_();
    auto first = make(name, p);
    for (int k = 0; k < 2; ++k) {
      p.mutable_grad() = values(reference()["grads"][k]);
      first->step();
    }
    auto second = make(name, p);
    second->load_state_dict(first->state_dict());
    for (int k = 2; k < 4; ++k) {
      p.mutable_grad() = values(reference()["grads"][k]);
      second->step();
    }
    CHECK(max_abs_diff(p, values(steps[3])) < 1e-6);
  }
  const Tensor p = tensor::zeros({2}).requires_grad_();
  CHECK_THROWS_WITH(RMSprop({p}, RMSpropOptions().momentum(-1)), Contains("RMSprop: invalid momentum value: -1"));
  CHECK_THROWS_WITH(Adagrad({p}, AdagradOptions().lr_decay(-0.5)), Contains("Adagrad: invalid lr_decay value: -0.5"));
  CHECK_THROWS_WITH(RMSprop({p}, RMSpropOptions(-0.1)), Contains("RMSprop: invalid learning rate -0.1"));
}
