// Learning-rate schedulers, parameter groups and clip_grad_norm_. References: PyTorch's
// LambdaLR, StepLR, ExponentialLR, MultiStepLR, CosineAnnealingLR, LinearLR and
// clip_grad_norm_ (fixtures/make_schedule_fixture.py), the warmup +
// cosine formula evaluated independently, nanoGPT's own get_lr (fixtures/make_nanogpt_lr_fixture.py
// runs it from nanoGPT's train.py) and separate optimizers for each group.
#include <cmath>
#include <fstream>
#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/nn/json_fixture.h"
#include "tests/nn/nn_test_util.h"
#include "tinyddp/nn/sequential_lr.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using Catch::Contains;

namespace {

const nlohmann::json& reference() {
  static const nlohmann::json j = tinyddp::testing::read_nn_json_fixture("schedule_reference.json");
  return j;
}

// Parameters of `dtype` whose gradients are the fixture case's "grads" (of its "shapes").
std::vector<Tensor> params_with_grads(const nlohmann::json& c, tensor::DType dtype = tensor::kFloat32) {
  std::vector<Tensor> params;
  for (size_t i = 0; i < c["grads"].size(); ++i) {
    const tensor::Shape shape = c["shapes"][i].get<tensor::Shape>();
    Tensor p = tensor::zeros(shape, dtype).requires_grad_();
    p.mutable_grad() = tensor::from_vector(c["grads"][i].get<std::vector<float>>(), shape).to(dtype);
    params.push_back(p);
  }
  return params;
}

// Two groups as the fixture has them: lr 0.1 (the optimizer's) and 0.02.
struct TwoGroups {
  Tensor p = tensor::zeros({2}).requires_grad_(), q = tensor::zeros({3}).requires_grad_();
  SGD opt{{ParamGroup({p}), ParamGroup({q}).set_lr(0.02)}, SGDOptions(0.1)};
};

// The rates before each step, as the fixture lists them.
template <typename Scheduler>
void expect_rates(const std::string& key, TwoGroups& g, Scheduler& scheduler) {
  const nlohmann::json& want = reference()[key];
  for (size_t step = 0; step < want.size(); ++step) {
    INFO(key << " step " << step);
    CHECK(g.opt.lr(0) == want[step][0].get<double>());
    CHECK(g.opt.lr(1) == want[step][1].get<double>());
    g.opt.step();
    scheduler.step();
  }
}

}  // namespace

TEST_CASE("LambdaLR and StepLR set the groups' rates PyTorch sets, to the last bit", "[nn][schedule][fixture]") {
  {
    TwoGroups g;
    LambdaLR s(g.opt, [](int64_t e) { return std::pow(0.9, static_cast<double>(e)); });
    expect_rates("lambda", g, s);
  }
  {
    TwoGroups g;
    LambdaLR s(g.opt, {[](int64_t e) { return 1.0 / static_cast<double>(e + 1); },
                       [](int64_t e) { return std::min(1.0, static_cast<double>(e + 1) / 4); }});
    expect_rates("lambda_per_group", g, s);
  }
  {
    TwoGroups g;
    StepLR s(g.opt, 3, 0.3);
    expect_rates("step", g, s);
    CHECK(s.last_epoch() == 12);
    CHECK(s.base_lrs() == std::vector<double>{0.1, 0.02});
  }
}

TEST_CASE("ExponentialLR, MultiStepLR, CosineAnnealingLR and LinearLR: PyTorch's rates to the last bit",
          "[nn][schedule][fixture]") {
  {
    TwoGroups g;
    ExponentialLR s(g.opt, 0.8);
    expect_rates("exponential", g, s);
  }
  {
    TwoGroups g;
    MultiStepLR s(g.opt, {2, 5, 5, 9}, 0.5);  // 5 listed twice: gamma squared there
    expect_rates("multistep", g, s);
  }
  {
    TwoGroups g;
    CosineAnnealingLR s(g.opt, 4);
    expect_rates("cosine", g, s);
  }
  {
    TwoGroups g;
    CosineAnnealingLR s(g.opt, 5, 0.001);
    expect_rates("cosine_eta_min", g, s);
  }
  {
    TwoGroups g;
    LinearLR s(g.opt);  // PyTorch's defaults: 1/3 to 1 over 5 epochs
    expect_rates("linear", g, s);
  }
  {
    TwoGroups g;
    LinearLR s(g.opt, 0.5, 0.9, 7);
    expect_rates("linear_custom", g, s);
  }
  TwoGroups g;
  CHECK_THROWS_WITH(LinearLR(g.opt, 0.0), Contains("LinearLR: start_factor expected to be greater than 0"));
  CHECK_THROWS_WITH(LinearLR(g.opt, 0.5, 1.5),
                    Contains("LinearLR: end_factor expected to be between 0 and 1, got 1.5"));
  CHECK_THROWS_WITH(CosineAnnealingLR(g.opt, 0), Contains("CosineAnnealingLR: T_max must be at least 1, got 0"));
}

// nanoGPT's rates are a handful of float64 operations and one cos, the same ones in the same
// order on both sides; only cos may differ between C libraries (by an ulp or so). So: equal to
// 4 ulps of the rate.
bool same_rate(double got, double want) { return std::abs(got - want) <= 4 * 0x1p-52 * std::abs(want); }

TEST_CASE("NanoGptLR sets the rates nanoGPT's get_lr gives, at every iteration", "[nn][schedule][fixture]") {
  static const nlohmann::json fixture = tinyddp::testing::read_nn_json_fixture("nanogpt_lr_reference.json");
  for (const auto& c : fixture["cases"]) {
    TwoGroups g;
    NanoGptLR s(g.opt, c["warmup_iters"].get<int64_t>(), c["lr_decay_iters"].get<int64_t>(), c["min_lr"].get<double>());
    const auto& rates = c["rates"];
    for (size_t it = 0; it < rates.size(); ++it) {
      for (size_t group = 0; group < 2; ++group) {
        std::ostringstream rate;
        rate << std::setprecision(17) << g.opt.lr(group) << " against nanoGPT's " << rates[it][group].get<double>();
        INFO(c["name"].get<std::string>() << " iteration " << it << " group " << group << ": " << rate.str());
        CHECK(same_rate(g.opt.lr(group), rates[it][group].get<double>()));
      }
      g.opt.step();
      s.step();
    }
  }
  const auto& d = fixture["defaults"];
  for (size_t i = 0; i < d["iterations"].size(); ++i) {
    const int64_t it = d["iterations"][i].get<int64_t>();
    INFO("nanoGPT's defaults, iteration " << it);
    CHECK(same_rate(NanoGptLR::at(it, d["learning_rate"].get<double>(), d["warmup_iters"].get<int64_t>(),
                                  d["lr_decay_iters"].get<int64_t>(), d["min_lr"].get<double>()),
                    d["rates"][i].get<double>()));
  }
}

TEST_CASE("NanoGptLR: decay_lr off keeps the rate; bad settings are clear errors", "[nn][schedule]") {
  TwoGroups g;
  NanoGptLR s(g.opt, 3, 3, 0.001, /*decay_lr=*/false);  // equal ends are fine without the decay
  for (int it = 0; it < 6; ++it) {
    CHECK(g.opt.lr(0) == 0.1);
    CHECK(g.opt.lr(1) == 0.02);
    s.step();
  }
  CHECK_THROWS_WITH(NanoGptLR(g.opt, 4, 4, 0.0), Contains("NanoGptLR: lr_decay_iters (4) equals warmup_iters"));
  CHECK_THROWS_WITH(NanoGptLR(g.opt, -1, 4, 0.0), Contains("need warmup_iters >= 0"));
  CHECK_THROWS_WITH(NanoGptLR(g.opt, 1, 4, -0.5), Contains("min_lr must not be negative, got -0.5"));
}

TEST_CASE("WarmupCosineLR: linear warmup to lr, cosine to min_lr, then min_lr", "[nn][schedule]") {
  TwoGroups g;
  WarmupCosineLR s(g.opt, 4, 14, 0.001);
  for (int64_t step = 0; step < 20; ++step) {
    for (size_t group = 0; group < 2; ++group) {
      const double lr = group == 0 ? 0.1 : 0.02;
      double want = 0.001;
      if (step < 4) {
        want = lr * static_cast<double>(step + 1) / 4;
      } else if (step < 14) {  // cos from 0 to pi over the 10 decay steps
        want = 0.001 + (lr - 0.001) * (1 + std::cos(M_PI * static_cast<double>(step - 4) / 10)) / 2;
      }
      INFO("step " << step << " group " << group);
      CHECK(g.opt.lr(group) == Approx(want).epsilon(1e-14));
    }
    s.step();
  }
  CHECK(WarmupCosineLR::at(3, 1.0, 4, 14, 0.0) == 1.0);          // the peak at the end of warmup
  CHECK(WarmupCosineLR::at(9, 1.0, 4, 14, 0.0) == Approx(0.5));  // half way down
  CHECK_THROWS_WITH(WarmupCosineLR(g.opt, 2, 0), Contains("total_steps >= 1"));
  CHECK_THROWS_WITH(StepLR(g.opt, 0), Contains("StepLR: step_size must be at least 1, got 0"));
  CHECK_THROWS_WITH(LambdaLR(g.opt, std::vector<LambdaLR::Lambda>(3, [](int64_t) { return 1.0; })),
                    Contains("LambdaLR: expected 2 lr_lambdas (one per group), got 3"));
}

TEST_CASE("a scheduler's state resumes a run where it stopped", "[nn][schedule][checkpoint]") {
  TwoGroups a;
  StepLR sa(a.opt, 2, 0.5);
  for (int i = 0; i < 5; ++i) sa.step();
  const OrderedDict<Tensor> saved = sa.state_dict();
  TwoGroups b;
  StepLR sb(b.opt, 2, 0.5);
  sb.load_state_dict(saved);
  CHECK(b.opt.lr(0) == a.opt.lr(0));
  CHECK(b.opt.lr(1) == a.opt.lr(1));
  for (int i = 0; i < 4; ++i) {
    sa.step();
    sb.step();
    CHECK(b.opt.lr(0) == a.opt.lr(0));
    CHECK(sb.get_last_lr() == sa.get_last_lr());
  }
  OrderedDict<Tensor> bad = saved;
  bad.set("last_lr", tensor::zeros({3}, tensor::kFloat64));
  CHECK_THROWS_WITH(sb.load_state_dict(bad),
                    Contains("'last_lr' must be float64 with one rate per parameter group (2)"));
  CHECK_THROWS_WITH(sb.load_state_dict({}), Contains("StepLR: load_state_dict: missing 'last_epoch'"));
}

TEST_CASE("clip_grad_norm_ returns PyTorch's total norm and leaves PyTorch's gradients", "[nn][clip][fixture]") {
  for (const nlohmann::json& c : reference()["clip"]) {
    std::vector<Tensor> params = params_with_grads(c);
    const double norm_type = c["norm_type"] == "inf" ? INFINITY : c["norm_type"].get<double>();
    INFO("max_norm " << c["max_norm"] << " norm_type " << norm_type);
    const Tensor total = clip_grad_norm_(params, c["max_norm"].get<double>(), norm_type);
    CHECK(total.dim() == 0);  // PyTorch's 0-d tensor in the gradients' dtype
    CHECK(total.dtype() == tensor::kFloat32);
    CHECK(total.item<double>() == Approx(c["total"].get<double>()).epsilon(1e-6));
    for (size_t i = 0; i < params.size(); ++i) {
      const std::vector<float> got = params[i].grad().to_vector<float>();
      const std::vector<float> want = c["clipped"][i].get<std::vector<float>>();
      for (size_t k = 0; k < got.size(); ++k) CHECK(got[k] == Approx(want[k]).epsilon(1e-6).margin(1e-7));
    }
  }
  // bfloat16 gradients: the norm, the coefficient and the scaled gradients to PyTorch's bits.
  for (const nlohmann::json& c : reference()["clip_bf16"]) {
    const std::vector<Tensor> params = params_with_grads(c, tensor::kBFloat16);
    const double norm_type = c["norm_type"] == "inf" ? INFINITY : c["norm_type"].get<double>();
    INFO("bfloat16, max_norm " << c["max_norm"] << " norm_type " << norm_type);
    const Tensor total = clip_grad_norm_(params, c["max_norm"].get<double>(), norm_type);
    CHECK(total.dtype() == tensor::kBFloat16);
    CHECK(total.item<double>() == c["total"].get<double>());
    for (size_t i = 0; i < params.size(); ++i) {
      CHECK(params[i].grad().to(tensor::kFloat32).to_vector<float>() == c["clipped"][i].get<std::vector<float>>());
    }
  }
  // clip_grad_value_: every gradient clamped into [-c, c], PyTorch's values; NaN stays NaN.
  {
    const nlohmann::json& c = reference()["clip_value"];
    std::vector<Tensor> params = params_with_grads(c);
    params.push_back(tensor::zeros({2}).requires_grad_());  // no gradient: skipped
    clip_grad_value_(params, c["clip_value"].get<double>());
    for (size_t i = 0; i < c["clipped"].size(); ++i) {
      CHECK(params[i].grad().to_vector<float>() == c["clipped"][i].get<std::vector<float>>());
    }
    Tensor with_nan = tensor::zeros({3}).requires_grad_();
    with_nan.mutable_grad() = tensor::tensor({NAN, -2.0, 0.25});
    clip_grad_value_({with_nan}, 1.0);
    const std::vector<float> v = with_nan.grad().to_vector<float>();
    CHECK((std::isnan(v[0]) && v[1] == -1.0f && v[2] == 0.25f));
    CHECK_THROWS_WITH(clip_grad_value_({with_nan}, -1.0), Contains("clip_value must not be negative, got -1"));
  }
  Tensor nan_grad = tensor::zeros({2}).requires_grad_();
  nan_grad.mutable_grad() = tensor::tensor({1.0, NAN});
  CHECK_THROWS_WITH(clip_grad_norm_({nan_grad}, 1.0, 2.0, true),
                    Contains("the total norm of order 2 of the gradients is nan"));
  CHECK(std::isnan(clip_grad_norm_({nan_grad}, 1.0).item<double>()));               // PyTorch's default: scale anyway
  const Tensor none = clip_grad_norm_({tensor::zeros({2}).requires_grad_()}, 1.0);  // no gradients: nothing to do
  CHECK((none.dim() == 0 && none.dtype() == tensor::kFloat32 && none.item<double>() == 0.0));
  CHECK_THROWS_WITH(clip_grad_norm_({nan_grad}, 1.0, 0.5), Contains("norm_type must be >= 1 or infinity, got 0.5"));
}

TEST_CASE("parameter groups: each group steps as its own optimizer would", "[nn][optim][groups]") {
  tensor::manual_seed(5);
  const auto model = mlp({4, 6, 3});
  const std::vector<ParamGroup> groups = weight_decay_groups(*model, 0.1);
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].params.size() == 2);  // the two weights
  CHECK(groups[1].params.size() == 2);  // the two biases
  CHECK(*groups[0].weight_decay == 0.1);
  CHECK(*groups[1].weight_decay == 0.0);
  // The same model twice: one AdamW over both groups, and one AdamW per group.
  std::vector<Tensor> a, b;
  for (const Tensor& p : model->parameters()) {
    a.push_back(p.detach().clone().requires_grad_());
    b.push_back(p.detach().clone().requires_grad_());
  }
  AdamW grouped(
      {ParamGroup({a[0], a[2]}).set_weight_decay(0.1), ParamGroup({a[1], a[3]}).set_weight_decay(0).set_lr(0.05)},
      AdamOptions(0.01));
  AdamW weights({b[0], b[2]}, AdamOptions(0.01).weight_decay(0.1));
  AdamW biases({b[1], b[3]}, AdamOptions(0.05).weight_decay(0));
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < a.size(); ++i) {
      const Tensor g = tensor::randn(a[i].sizes());
      a[i].mutable_grad() = g.clone();
      b[i].mutable_grad() = g.clone();
    }
    grouped.step();
    weights.step();
    biases.step();
  }
  for (size_t i = 0; i < a.size(); ++i) CHECK(tensor::equal(a[i], b[i]));
  CHECK(grouped.num_param_groups() == 2);
  CHECK(grouped.lr(1) == 0.05);
  CHECK(grouped.weight_decay(0) == 0.1);
  CHECK(grouped.group_begin(1) == 2);
  CHECK_THROWS_WITH(
      AdamW({ParamGroup({a[0]}), ParamGroup({a[1], a[0]})}, AdamOptions()),
      Contains("AdamW: parameter 2 of group 1 is also in group 0 (a parameter may be in one group only)"));
  CHECK_THROWS_WITH(grouped.set_lr(2, 0.1), Contains("AdamW: there is no parameter group 2 (2 groups)"));
  CHECK_THROWS_WITH(grouped.set_lr(0, -1), Contains("AdamW: invalid learning rate -1 (group 0)"));
  // param_groups(): PyTorch's `for g in opt.param_groups: g["lr"] *= 0.5`, through to the optimizer
  for (auto group : grouped.param_groups()) group.set_lr(group.lr() * 0.5);
  CHECK(grouped.lr(0) == 0.005);
  CHECK(grouped.lr(1) == 0.025);
  const auto groups_now = grouped.param_groups();
  REQUIRE(groups_now.size() == 2);
  CHECK(groups_now[1].params().size() == 2);
  CHECK(groups_now[1].params()[0].is_same(a[1]));
  CHECK(groups_now[0].weight_decay() == 0.1);
  CHECK(groups_now[0].momentum() == 0.9);  // AdamW's betas[0]
}

TEST_CASE(
    "ConstantLR, PolynomialLR, CosineAnnealingWarmRestarts and OneCycleLR(epochs, steps_per_epoch): PyTorch's "
    "rates to the last bit",
    "[nn][schedule][fixture]") {
  {
    TwoGroups g;
    ConstantLR s(g.opt, 0.4, 4);
    expect_rates("constant", g, s);
  }
  {
    TwoGroups g;
    PolynomialLR s(g.opt, 8, 1.7);
    expect_rates("polynomial", g, s);
  }
  {
    TwoGroups g;
    CosineAnnealingWarmRestarts s(g.opt, 2, 2, 0.001);  // periods 2, 4, 8
    expect_rates("warm_restarts", g, s);
  }
  {
    TwoGroups g;
    CosineAnnealingWarmRestarts s(g.opt, 5);
    expect_rates("warm_restarts_flat", g, s);
  }
  {
    TwoGroups g;
    OneCycleLR s(g.opt, 0.5, 3, 4, OneCycleOptions().cycle_momentum(false));
    CHECK(s.total_steps() == 12);
    expect_rates("one_cycle_epochs", g, s);
  }
  TwoGroups g;
  CHECK_THROWS_WITH(ConstantLR(g.opt, 1.5), Contains("ConstantLR: constant factor expected to be between 0 and 1"));
  CHECK_THROWS_WITH(CosineAnnealingWarmRestarts(g.opt, 0), Contains("Expected positive integer T_0, but got 0"));
  CHECK_THROWS_WITH(OneCycleLR(g.opt, 0.5, 0, 4), Contains("OneCycleLR: expected positive epochs and steps_per_epoch"));
}

TEST_CASE("CyclicLR cycles the rate and the momentum as PyTorch's, in its three modes", "[nn][schedule][fixture]") {
  const auto check = [](const std::string& key, const CyclicLROptions& options) {
    Tensor p = tensor::zeros({2}).requires_grad_(), q = tensor::zeros({3}).requires_grad_();
    SGD opt{{ParamGroup({p}), ParamGroup({q}).set_lr(0.02)}, SGDOptions(0.1).momentum(0.9)};
    CyclicLR s(opt, 0.01, 0.1, options);
    const nlohmann::json& want = reference()[key];
    for (size_t step = 0; step < want.size(); ++step) {
      INFO(key << " step " << step);
      for (size_t group = 0; group < 2; ++group) {
        CHECK(opt.lr(group) == want[step][0][group].get<double>());
        CHECK(opt.momentum(group) == want[step][1][group].get<double>());
      }
      opt.step();
      s.step();
    }
  };
  check("cyclic", CyclicLROptions().step_size_up(3).step_size_down(2));
  check("cyclic_triangular2",
        CyclicLROptions().step_size_up(2).mode("triangular2").base_momentum(0.7).max_momentum(0.95));
  check("cyclic_exp_range", CyclicLROptions().step_size_up(2).mode("exp_range").gamma(0.9));
  TwoGroups g;
  CHECK_THROWS_WITH(CyclicLR(g.opt, 0.01, 0.1, CyclicLROptions().mode("saw")), Contains("CyclicLR: mode is invalid"));
}

TEST_CASE("SequentialLR and ChainedScheduler set PyTorch's rates to the last bit, and resume",
          "[nn][schedule][fixture]") {
  {
    TwoGroups g;
    LinearLR warmup(g.opt, 0.1, 1.0, 3);
    ExponentialLR decay(g.opt, 0.9);
    SequentialLR s(g.opt, {warmup, decay}, {3});
    expect_rates("sequential", g, s);
  }
  {
    TwoGroups g;
    ConstantLR constant(g.opt, 0.5, 2);
    StepLR step(g.opt, 2, 0.5);
    CosineAnnealingLR cosine(g.opt, 4, 0.001);  // restarts from the base rate at its milestone
    SequentialLR s(g.opt, {constant, step, cosine}, {2, 6});
    expect_rates("sequential_three", g, s);
  }
  {
    TwoGroups g;
    ExponentialLR halve(g.opt, 0.5);
    MultiStepLR steps(g.opt, {0, 3}, 0.1);  // its milestone 0 counts at its epoch 0
    SequentialLR s(g.opt, {halve, steps}, {2});
    expect_rates("sequential_multistep", g, s);
  }
  {
    TwoGroups g;
    PolynomialLR poly(g.opt, 4, 2.0);
    LinearLR linear(g.opt, 0.2, 0.8, 5);
    SequentialLR s(g.opt, {poly, linear}, {5});
    expect_rates("sequential_polynomial", g, s);
  }
  {
    TwoGroups g;
    ConstantLR constant(g.opt, 0.5, 3);
    ExponentialLR decay(g.opt, 0.9);
    ChainedScheduler s({constant, decay});
    expect_rates("chained", g, s);
  }
  // resume: a SequentialLR's state carries its schedulers'
  const auto run = [](int steps, const OrderedDict<Tensor>* resume, OrderedDict<Tensor>* save) {
    auto g = std::make_unique<TwoGroups>();
    LinearLR warmup(g->opt, 0.1, 1.0, 3);
    CosineAnnealingLR decay(g->opt, 6);
    SequentialLR s(g->opt, {warmup, decay}, {3});
    if (resume) s.load_state_dict(*resume);
    for (int i = 0; i < steps; ++i) s.step();
    if (save) *save = s.state_dict();
    return std::vector<double>{g->opt.lr(0), g->opt.lr(1)};
  };
  OrderedDict<Tensor> saved;
  run(2, nullptr, &saved);
  CHECK(saved.contains("_schedulers.1.last_epoch"));
  CHECK(run(5, &saved, nullptr) == run(7, nullptr, nullptr));  // 2 + 5 steps either way

  TwoGroups g, other;
  ExponentialLR a(g.opt, 0.9), b(other.opt, 0.9);
  CHECK_THROWS_WITH(SequentialLR(g.opt, {a, b}, {2}),
                    Contains("expects all schedulers to belong to the same optimizer"));
  CHECK_THROWS_WITH(SequentialLR(g.opt, {a}, {2}),
                    Contains("expects number of schedulers provided to be one more than the number of milestone"));
  CHECK(g.opt.initial_lr(1) == 0.02);  // the groups' rates when the first scheduler was made
}
