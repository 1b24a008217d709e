// Adamax, NAdam and RAdam, and every optimizer's maximize, against torch.optim's
// (fixtures/make_moment_optimizers_fixture.py): the parameter after each of 8 steps, in float32
// (the same operations in the same order: 1e-6, as the other optimizer tests); their defaults,
// state_dict keys and resuming; what PyTorch 1.13 cannot give a fixture for (NAdam's and
// RAdam's maximize and decoupled_weight_decay, from PyTorch 2) held to their definitions;
// step(closure); the errors.
#include <nlohmann/json.hpp>

#include "tests/nn/json_fixture.h"
#include "tests/nn/nn_test_util.h"
#include "tinyddp/nn/adamax_nadam_radam.h"
#include "tinyddp/nn/rmsprop_adagrad.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using Catch::Contains;
using tinyddp::testing::max_abs_diff;

namespace {

const nlohmann::json& reference() {
  static const nlohmann::json j = tinyddp::testing::read_nn_json_fixture("moment_optimizers_reference.json");
  return j;
}

Tensor values(const nlohmann::json& v) { return tensor::from_vector(v.get<std::vector<float>>(), tensor::Shape{3, 2}); }

// The fixture's optimizers, by the script's names.
std::unique_ptr<Optimizer> make(const std::string& name, const Tensor& p) {
  const std::vector<Tensor> ps{p};
  if (name == "adamax") return std::make_unique<Adamax>(ps, AdamaxOptions(0.01));
  if (name == "adamax_options") {
    return std::make_unique<Adamax>(ps,
                                    AdamaxOptions(0.02).betas(0.8, 0.95).eps(1e-4).weight_decay(0.1).maximize(true));
  }
  if (name == "nadam") return std::make_unique<NAdam>(ps, NAdamOptions(0.01));
  if (name == "nadam_options") {
    return std::make_unique<NAdam>(
        ps, NAdamOptions(0.02).betas(0.85, 0.99).eps(1e-6).weight_decay(0.1).momentum_decay(0.01));
  }
  if (name == "radam") return std::make_unique<RAdam>(ps, RAdamOptions(0.01));
  if (name == "radam_options")
    return std::make_unique<RAdam>(ps, RAdamOptions(0.02).betas(0.8, 0.9).eps(1e-6).weight_decay(0.1));
  if (name == "sgd_maximize")
    return std::make_unique<SGD>(ps, SGDOptions(0.1).momentum(0.9).weight_decay(0.1).maximize(true));
  if (name == "adam_maximize") return std::make_unique<Adam>(ps, AdamOptions(0.01).weight_decay(0.1).maximize(true));
  if (name == "adamw_maximize") return std::make_unique<AdamW>(ps, AdamWOptions(0.01).maximize(true));
  if (name == "rmsprop_maximize")
    return std::make_unique<RMSprop>(ps, RMSpropOptions(0.01).momentum(0.5).maximize(true));
  REQUIRE(name == "adagrad_maximize");
  return std::make_unique<Adagrad>(ps, AdagradOptions(0.1).weight_decay(0.2).maximize(true));
}

// Runs steps [begin, end) of the fixture's gradients.
void run_steps(Optimizer& optimizer, const Tensor& p, size_t begin, size_t end) {
  for (size_t k = begin; k < end; ++k) {
    p.mutable_grad() = values(reference()["grads"][k]);
    optimizer.step();
  }
}

}  // namespace

TEST_CASE("Adamax, NAdam, RAdam and maximize match torch.optim step by step", "[nn][optim][fixture]") {
  for (const auto& [name, steps] : reference()["configs"].items()) {
    const Tensor p = values(reference()["p0"]).requires_grad_();
    auto optimizer = make(name, p);
    for (size_t k = 0; k < steps.size(); ++k) {
      INFO(name << " step " << k);
      run_steps(*optimizer, p, k, k + 1);
      CHECK(max_abs_diff(p, values(steps[k])) < 1e-6);
    }
    // The state under PyTorch's keys (state.0.<key>).
    std::vector<std::string> keys;
    for (const std::string& key : optimizer->state_dict().keys()) keys.push_back(parse_state_key(key)->key);
    std::sort(keys.begin(), keys.end());
    CHECK(keys == reference()["state_keys"][name].get<std::vector<std::string>>());
  }
}

TEST_CASE("Adamax, NAdam, RAdam: torch's defaults, resuming from state_dict", "[nn][optim][fixture]") {
  const nlohmann::json& d = reference()["defaults"];
  const auto check_common = [](const auto& options, const nlohmann::json& want) {
    CHECK(options.lr() == want["lr"].get<double>());
    CHECK(options.beta1() == want["betas"][0].get<double>());
    CHECK(options.beta2() == want["betas"][1].get<double>());
    CHECK(options.eps() == want["eps"].get<double>());
    CHECK(options.weight_decay() == want["weight_decay"].get<double>());
    CHECK_FALSE(options.maximize());
  };
  check_common(AdamaxOptions(), d["Adamax"]);
  check_common(NAdamOptions(), d["NAdam"]);
  check_common(RAdamOptions(), d["RAdam"]);
  CHECK(NAdamOptions().momentum_decay() == d["NAdam"]["momentum_decay"].get<double>());
  // Four steps, a state_dict into a fresh optimizer, four more: as eight uninterrupted steps
  // (NAdam's mu_product and RAdam's step count carried).
  for (const std::string name : {"adamax_options", "nadam_options", "radam"}) {
    INFO(name);
    const nlohmann::json& steps = reference()["configs"][name];
    const Tensor p = values(reference()["p0"]).requires_grad_();
    auto first = make(name, p);
    run_steps(*first, p, 0, 4);
    auto second = make(name, p);
    second->load_state_dict(first->state_dict());
    run_steps(*second, p, 4, 8);
    CHECK(max_abs_diff(p, values(steps[7])) < 1e-6);
  }
}

TEST_CASE("NAdam and RAdam: maximize and decoupled_weight_decay as PyTorch 2 defines them", "[nn][optim]") {
  const Tensor g = values(reference()["grads"][0]);
  // maximize with g is the plain step with -g, bit for bit.
  const auto maximized = [&](auto options) {
    const Tensor a = values(reference()["p0"]).requires_grad_(), b = values(reference()["p0"]).requires_grad_();
    using O = std::conditional_t<std::is_same_v<decltype(options), NAdamOptions>, NAdam, RAdam>;
    O up({a}, options), down({b}, decltype(options)(options).maximize(true));
    for (int k = 0; k < 8; ++k) {
      a.mutable_grad() = tensor::neg(g);
      b.mutable_grad() = g;
      up.step();
      down.step();
    }
    return max_abs_diff(a, b);
  };
  CHECK(maximized(NAdamOptions(0.01).weight_decay(0.1)) == 0);
  CHECK(maximized(RAdamOptions(0.01).weight_decay(0.1)) == 0);
  // decoupled: the weights times (1 - lr wd), then the step without decay, bit for bit.
  const auto decoupled = [&](auto options) {
    const Tensor a = values(reference()["p0"]).requires_grad_(), b = values(reference()["p0"]).requires_grad_();
    using O = std::conditional_t<std::is_same_v<decltype(options), NAdamOptions>, NAdam, RAdam>;
    O with({a}, decltype(options)(options).weight_decay(0.3).decoupled_weight_decay(true)), without({b}, options);
    for (int k = 0; k < 8; ++k) {
      a.mutable_grad() = g;
      b.mutable_grad() = g;
      with.step();
      {
        tensor::NoGradGuard no_grad;
        b.mul_(1 - options.lr() * 0.3);
      }
      without.step();
    }
    return max_abs_diff(a, b);
  };
  CHECK(decoupled(NAdamOptions(0.01)) == 0);
  CHECK(decoupled(RAdamOptions(0.01)) == 0);
}

TEST_CASE("step(closure) runs the closure with gradients on, then steps, and returns its loss", "[nn][optim]") {
  const Tensor w = tensor::from_vector(std::vector<float>{1.0f, -2.0f}, tensor::Shape{2}).requires_grad_();
  SGD sgd({w}, SGDOptions(0.5));
  int calls = 0;
  tensor::NoGradGuard no_grad;  // as an evaluation loop around it would be
  const Tensor loss = sgd.step([&] {
    ++calls;
    sgd.zero_grad();
    Tensor l = tensor::sum(tensor::mul(w, w));  // d/dw = 2w
    l.backward();
    return l;
  });
  CHECK(calls == 1);
  CHECK(loss.item<float>() == 5.0f);
  CHECK(max_abs_diff(w, tensor::from_vector(std::vector<float>{0.0f, 0.0f}, tensor::Shape{2})) == 0);  // w - 0.5 * 2w
  CHECK_THROWS_WITH(sgd.step(std::function<Tensor()>()), Contains("SGD.step: the closure is empty"));
}

TEST_CASE("Adamax, NAdam, RAdam: errors", "[nn][optim]") {
  const Tensor p = tensor::zeros({2}).requires_grad_();
  CHECK_THROWS_WITH(Adamax({p}, AdamaxOptions().betas(1.0, 0.9)),
                    Contains("Adamax: invalid beta parameter at index 0: 1"));
  CHECK_THROWS_WITH(RAdam({p}, RAdamOptions().betas(0.9, -0.1)),
                    Contains("RAdam: invalid beta parameter at index 1: -0.1"));
  CHECK_THROWS_WITH(NAdam({p}, NAdamOptions().momentum_decay(-1)), Contains("NAdam: invalid momentum_decay value: -1"));
  CHECK_THROWS_WITH(NAdam({p}, NAdamOptions().eps(-1)), Contains("NAdam: invalid epsilon value: -1"));
  CHECK_THROWS_WITH(Adamax(std::vector<Tensor>{}), Contains("Adamax: optimizer got an empty parameter list"));
  // A state without mu_product is not NAdam's.
  Adamax adamax({p});
  p.mutable_grad() = tensor::ones({2});
  adamax.step();
  NAdam nadam({p});
  CHECK_THROWS(nadam.load_state_dict(adamax.state_dict()));
}
