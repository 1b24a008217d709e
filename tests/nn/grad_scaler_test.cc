// GradScaler against its definition (PyTorch's GradScaler and its update kernel, written out
// as formulas here): with finite gradients and a power-of-two scale, training is bit for bit
// the same as without it; an inf or NaN skips the step and backs the scale off; growth after
// growth_interval clean steps, kept only if finite; the order of calls is enforced; state.
#include <cmath>

#include "tests/nn/nn_test_util.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using Catch::Contains;

namespace {

// A small MLP and its batches; `scaler` null trains plainly. Returns the parameters after
// `steps` steps; `poison(step)` may spoil a gradient after backward.
struct Run {
  std::shared_ptr<Module> model;
  std::unique_ptr<SGD> opt;
  Run() {
    tensor::manual_seed(21);
    model = mlp({5, 8, 3});
    opt = std::make_unique<SGD>(model->parameters(), SGDOptions(0.05).momentum(0.9));
  }
  Tensor loss(int step) const {
    tensor::Generator g(100 + step);
    return mse_loss(model->forward(tensor::randn({4, 5}, {}, &g)), tensor::randn({4, 3}, {}, &g));
  }
  std::vector<Tensor> params() const {
    std::vector<Tensor> out;
    for (const Tensor& p : model->parameters()) out.push_back(p.detach().clone());
    return out;
  }
};

bool same(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!tensor::equal(a[i], b[i])) return false;
  return true;
}

}  // namespace

TEST_CASE("GradScaler with finite gradients trains bit for bit as without it", "[nn][grad_scaler]") {
  Run plain, scaled;
  GradScaler scaler(GradScalerOptions{.growth_interval = 3});
  for (int step = 0; step < 5; ++step) {
    plain.opt->zero_grad();
    plain.loss(step).backward();
    plain.opt->step();
    scaled.opt->zero_grad();
    const Tensor loss = scaled.loss(step);
    const Tensor s = scaler.scale(loss);
    CHECK(s.item<double>() == loss.item<double>() * scaler.get_scale());
    s.backward();
    CHECK(scaler.step(*scaled.opt));
    scaler.update();
    REQUIRE(same(plain.params(), scaled.params()));
  }
  CHECK(scaler.get_scale() == 131072.0);  // grown once, after 3 clean steps
}

TEST_CASE("GradScaler: an inf or NaN skips the step and backs off; growth after clean steps", "[nn][grad_scaler]") {
  Run run;
  GradScaler scaler(GradScalerOptions{.init_scale = 1024.0, .growth_interval = 2});
  // What each step's gradient holds, and the scale after its update (PyTorch's rule).
  const std::vector<std::pair<double, double>> plan = {{0, 1024},  {INFINITY, 512},  {0, 512}, {0, 1024},
                                                       {NAN, 512}, {-INFINITY, 256}, {0, 256}, {0, 512}};
  for (size_t step = 0; step < plan.size(); ++step) {
    INFO("step " << step);
    run.opt->zero_grad();
    scaler.scale(run.loss(static_cast<int>(step))).backward();
    if (plan[step].first != 0) run.model->parameters()[1].grad().narrow(0, 2, 1).fill_(plan[step].first);
    const std::vector<Tensor> before = run.params();
    CHECK(scaler.step(*run.opt) == (plan[step].first == 0));
    CHECK(same(before, run.params()) == (plan[step].first != 0));  // skipped: nothing moved
    scaler.update();
    CHECK(scaler.get_scale() == plan[step].second);
  }
  // A grown scale that would not be finite in float32 is not taken (the count restarts).
  GradScaler top(GradScalerOptions{.init_scale = std::ldexp(1.0, 127), .growth_interval = 1});
  run.opt->zero_grad();
  top.scale(run.loss(0) * 1e-30).backward();
  top.step(*run.opt);
  top.update();
  CHECK(top.get_scale() == std::ldexp(1.0, 127));
  CHECK(top.state_dict().at("_growth_tracker").item<int64_t>() == 0);
}

TEST_CASE("GradScaler: unscale_ before clipping; the order of calls is enforced", "[nn][grad_scaler]") {
  Run plain, scaled;
  plain.loss(0).backward();
  GradScaler scaler;
  scaler.scale(scaled.loss(0)).backward();
  scaler.unscale_(*scaled.opt);  // the true gradients, e.g. for clip_grad_norm_
  for (size_t i = 0; i < plain.params().size(); ++i) {
    CHECK(tensor::equal(scaled.model->parameters()[i].grad(), plain.model->parameters()[i].grad()));
  }
  CHECK_THROWS_WITH(scaler.unscale_(*scaled.opt), Contains("already called on this optimizer since the last update()"));
  CHECK(scaler.step(*scaled.opt));  // does not unscale again
  plain.opt->step();
  CHECK(same(plain.params(), scaled.params()));
  CHECK_THROWS_WITH(scaler.step(*scaled.opt), Contains("GradScaler::step: already called since the last update()"));
  CHECK_THROWS_WITH(scaler.unscale_(*scaled.opt), Contains("called after step()"));
  scaler.update();
  CHECK_THROWS_WITH(scaler.update(), Contains("no inf checks were recorded before update()"));
  GradScaler fresh;
  CHECK_THROWS_WITH(fresh.update(), Contains("GradScaler::update: no scale yet; call scaler.scale(loss)"));
  // float16 gradients are refused, as in PyTorch.
  const Tensor half = tensor::zeros({2}, tensor::kFloat16).requires_grad_();
  half.mutable_grad() = tensor::ones({2}, tensor::kFloat16);
  SGD opt({half}, SGDOptions(0.1));
  fresh.scale(tensor::ones({1}));
  CHECK_THROWS_WITH(fresh.unscale_(opt), Contains("attempting to unscale float16 gradients"));
  CHECK_THROWS_WITH(GradScaler(GradScalerOptions{.backoff_factor = 1.5}), Contains("backoff_factor should be"));
  CHECK_THROWS_WITH(GradScaler(GradScalerOptions{.init_scale = 1e39}), Contains("positive and finite in float32"));
}

TEST_CASE("GradScaler: disabled it passes through; state round-trips", "[nn][grad_scaler]") {
  Run run;
  GradScaler off(GradScalerOptions{.enabled = false});
  const Tensor loss = run.loss(0);
  CHECK(off.scale(loss).is_same(loss));
  CHECK(off.get_scale() == 1.0);
  CHECK(off.state_dict().empty());
  loss.backward();
  CHECK(off.step(*run.opt));
  off.update();

  GradScaler scaler(GradScalerOptions{.init_scale = 256.0, .growth_interval = 5});
  run.opt->zero_grad();
  scaler.scale(run.loss(1)).backward();
  scaler.step(*run.opt);
  scaler.update(100.0);  // an explicit new scale (rounded to float32)
  CHECK(scaler.get_scale() == 100.0);
  const OrderedDict<Tensor> state = scaler.state_dict();
  CHECK(state.at("scale").item<double>() == 100.0);
  CHECK(state.at("growth_interval").item<int64_t>() == 5);
  GradScaler other;
  other.load_state_dict(state);
  CHECK(other.get_scale() == 100.0);
  CHECK(other.options().growth_interval == 5);
  CHECK(other.state_dict().at("_growth_tracker").item<int64_t>() == 0);
  CHECK_THROWS_WITH(other.load_state_dict(off.state_dict()), Contains("the state is empty"));
  OrderedDict<Tensor> bad = state;
  bad.set("backoff_factor", tensor::scalar_tensor(2.0, tensor::kFloat64));
  CHECK_THROWS_WITH(other.load_state_dict(bad), Contains("backoff_factor should be between 0 and 1, got 2"));
  CHECK(other.get_scale() == 100.0);  // unchanged by the refused load
}
