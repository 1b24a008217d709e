// Optimizer tests: three steps of every SGD and Adam/AdamW configuration equal PyTorch's
// parameters after each step; state saved and restored continues identically; errors.
#include <type_traits>
#include "tests/nn/json_fixture.h"

#include "tests/nn/nn_test_util.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using Catch::Contains;
using tinyddp::testing::max_abs_diff;
using tinyddp::testing::nn_fixture;

namespace {

std::unique_ptr<Optimizer> make(const std::string& name, const Tensor& p) {
  if (name == "sgd") return std::make_unique<SGD>(std::vector<Tensor>{p}, SGDOptions(0.1));
  if (name == "sgd_momentum") return std::make_unique<SGD>(std::vector<Tensor>{p}, SGDOptions(0.1).momentum(0.9));
  if (name == "sgd_dampening")
    return std::make_unique<SGD>(std::vector<Tensor>{p}, SGDOptions(0.1).momentum(0.9).dampening(0.3));
  if (name == "sgd_nesterov")
    return std::make_unique<SGD>(std::vector<Tensor>{p}, SGDOptions(0.1).momentum(0.9).nesterov(true));
  if (name == "sgd_weight_decay")
    return std::make_unique<SGD>(std::vector<Tensor>{p}, SGDOptions(0.1).momentum(0.5).weight_decay(0.1));
  if (name == "adam") return std::make_unique<Adam>(std::vector<Tensor>{p}, AdamOptions(0.01));
  if (name == "adam_weight_decay") {
    return std::make_unique<Adam>(std::vector<Tensor>{p},
                                  AdamOptions(0.01).betas(0.8, 0.9).eps(1e-6).weight_decay(0.1));
  }
  if (name == "adam_capturable")
    return std::make_unique<Adam>(std::vector<Tensor>{p}, AdamOptions(0.01).capturable(true));
  if (name == "adam_weight_decay_capturable") {
    return std::make_unique<Adam>(std::vector<Tensor>{p},
                                  AdamOptions(0.01).betas(0.8, 0.9).eps(1e-6).weight_decay(0.1).capturable(true));
  }
  if (name == "adam_amsgrad")
    return std::make_unique<Adam>(std::vector<Tensor>{p}, AdamOptions(0.01).betas(0.9, 0.5).amsgrad(true));
  if (name == "adamw_amsgrad") {
    return std::make_unique<AdamW>(std::vector<Tensor>{p},
                                   AdamOptions(0.01).betas(0.9, 0.5).weight_decay(0.1).amsgrad(true));
  }
  if (name == "adam_amsgrad_capturable") {
    return std::make_unique<Adam>(std::vector<Tensor>{p},
                                  AdamOptions(0.01).betas(0.9, 0.5).amsgrad(true).capturable(true));
  }
  if (name == "adam_capturable_lr_tensor" || name == "adamw_capturable_lr_tensor") {
    // The rate a float32 tensor (torch.tensor(0.01)); the test halves it before each later step.
    const AdamOptions options = AdamOptions(0.01).weight_decay(0.1).capturable(true);
    std::unique_ptr<Optimizer> opt =
        name[4] == 'w' ? std::unique_ptr<Optimizer>(std::make_unique<AdamW>(std::vector<Tensor>{p}, options))
                       : std::make_unique<Adam>(std::vector<Tensor>{p}, options);
    opt->set_lr_tensor(0, tensor::scalar_tensor(0.01, tensor::kFloat32));
    return opt;
  }
  if (name == "adamw_capturable") {
    return std::make_unique<AdamW>(std::vector<Tensor>{p}, AdamOptions(0.01).weight_decay(0.1).capturable(true));
  }
  return std::make_unique<AdamW>(std::vector<Tensor>{p}, AdamOptions(0.01).weight_decay(0.1));
}

const std::vector<std::string> kConfigs = {"sgd",
                                           "sgd_momentum",
                                           "sgd_dampening",
                                           "sgd_nesterov",
                                           "sgd_weight_decay",
                                           "adam",
                                           "adam_weight_decay",
                                           "adamw",
                                           "adam_capturable",
                                           "adam_weight_decay_capturable",
                                           "adamw_capturable",
                                           "adam_amsgrad",
                                           "adamw_amsgrad",
                                           "adam_amsgrad_capturable",
                                           "adam_capturable_lr_tensor",
                                           "adamw_capturable_lr_tensor"};

}  // namespace

TEST_CASE("every optimizer configuration matches PyTorch step by step", "[nn][optim][fixture]") {
  const auto f = load_safetensors(nn_fixture("optim.safetensors")).tensors;
  for (const std::string& name : kConfigs) {
    const Tensor p = f.at("p0").clone().requires_grad_();
    auto optimizer = make(name, p);
    for (int k = 0; k < 3; ++k) {
      INFO(name << " step " << k);
      // A tensor rate: halved in place before each later step, as a scheduler fills it.
      if (optimizer->lr_tensor(0).defined()) optimizer->set_lr(0, 0.01 * std::pow(0.5, k));
      p.mutable_grad() = f.at("grad" + std::to_string(k)).clone();
      optimizer->step();
      CHECK(max_abs_diff(p, f.at(name + ".step" + std::to_string(k))) < 1e-6);
      // capturable: PyTorch's tensor arithmetic op for op, to the bit
      if (name.find("capturable") != std::string::npos)
        CHECK(tensor::equal(p, f.at(name + ".step" + std::to_string(k))));
    }
  }
}

TEST_CASE("options left unset take torch.optim's defaults (AdamW's weight decay 1e-2)", "[nn][optim][fixture]") {
  // fixtures/make_optimizer_defaults.py: torch.optim's own defaults, lr given.
  const nlohmann::json want = testing::read_nn_json_fixture("optimizer_defaults.json");
  const Tensor p = tensor::zeros({2}).requires_grad_();
  const SGD sgd({p}, SGDOptions(0.1));
  CHECK(sgd.defaults().momentum() == want["SGD"]["momentum"].get<double>());
  CHECK(sgd.defaults().dampening() == want["SGD"]["dampening"].get<double>());
  CHECK(sgd.defaults().nesterov() == want["SGD"]["nesterov"].get<bool>());
  CHECK(sgd.weight_decay(0) == want["SGD"]["weight_decay"].get<double>());
  const Adam adam({p}, AdamOptions(0.01));
  const AdamW adamw({p}, AdamOptions(0.01));
  for (const auto& [name, opt] : {std::pair<std::string, const Adam*>{"Adam", &adam}, {"AdamW", &adamw}}) {
    INFO(name);
    const nlohmann::json& w = want[name];
    CHECK(opt->defaults().beta1() == w["betas"][0].get<double>());
    CHECK(opt->defaults().beta2() == w["betas"][1].get<double>());
    CHECK(opt->defaults().eps() == w["eps"].get<double>());
    CHECK(opt->defaults().amsgrad() == w["amsgrad"].get<bool>());
    CHECK(opt->defaults().weight_decay() == w["weight_decay"].get<double>());
    CHECK(opt->weight_decay(0) == w["weight_decay"].get<double>());
  }
  CHECK(adamw.weight_decay(0) == 1e-2);  // torch's AdamW default, unlike Adam's 0
  // Set explicitly, 0 stays 0; and the unset default decays as 1e-2 set by hand does.
  CHECK(AdamW({p}, AdamOptions(0.01).weight_decay(0)).weight_decay(0) == 0.0);
  const Tensor a = tensor::ones({3}).requires_grad_(), b = tensor::ones({3}).requires_grad_();
  AdamW unset({a}, AdamOptions(0.1)), set({b}, AdamOptions(0.1).weight_decay(1e-2));
  a.mutable_grad() = tensor::full({3}, 0.5);
  b.mutable_grad() = tensor::full({3}, 0.5);
  unset.step();
  set.step();
  CHECK(tensor::equal(a, b));
}

// libtorch's AdamWOptions: chaining keeps the type, AdamW takes them (decay 1e-2 unless set),
// and nn::Adam refuses them at compile time (its decay is an L2 term, not AdamW's).
static_assert(std::is_same_v<decltype(AdamWOptions(0.1).betas(0.9, 0.95).eps(1e-6)), AdamWOptions&>);
static_assert(std::is_constructible_v<AdamW, std::vector<Tensor>, AdamWOptions>);
static_assert(!std::is_constructible_v<Adam, std::vector<Tensor>, AdamWOptions>);
static_assert(!std::is_constructible_v<Adam, std::vector<ParamGroup>, AdamWOptions>);
static_assert(std::is_constructible_v<Adam, std::vector<Tensor>, AdamOptions>);

TEST_CASE("AdamWOptions: AdamW's defaults, chained as AdamWOptions", "[nn][optim]") {
  const Tensor p = tensor::ones({2}).requires_grad_();
  CHECK(AdamW({p}, AdamWOptions(0.01)).weight_decay(0) == 1e-2);
  CHECK(AdamW({p}, AdamWOptions(0.01).weight_decay(0.2).betas(0.8, 0.9)).weight_decay(0) == 0.2);
  CHECK(AdamWOptions().lr() == 1e-3);
  CHECK(AdamWOptions(0.5).amsgrad(true).amsgrad());
}

TEST_CASE("optimizer state round-trips through a checkpoint", "[nn][optim][checkpoint]") {
  const auto f = load_safetensors(nn_fixture("optim.safetensors")).tensors;
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  for (const std::string& name : {std::string("sgd_momentum"), std::string("adam_weight_decay"),
                                  std::string("adam_weight_decay_capturable"), std::string("adamw_amsgrad")}) {
    INFO(name);
    // Straight through three steps ...
    const Tensor p = f.at("p0").clone().requires_grad_();
    auto straight = make(name, p);
    for (int k = 0; k < 3; ++k) {
      p.mutable_grad() = f.at("grad" + std::to_string(k)).clone();
      straight->step();
    }
    // ... equals two steps, a save, a fresh optimizer that loads, and the third step.
    const Tensor q = f.at("p0").clone().requires_grad_();
    auto first = make(name, q);
    for (int k = 0; k < 2; ++k) {
      q.mutable_grad() = f.at("grad" + std::to_string(k)).clone();
      first->step();
    }
    const std::string path = dir + "/" + name + "_state.safetensors";
    save_optimizer_state(*first, path);
    auto resumed = make(name, q);
    load_optimizer_state(*resumed, path);
    q.mutable_grad() = f.at("grad2").clone();
    resumed->step();
    CHECK(tensor::equal(p, q));
  }
  // Loading the wrong kind or mismatched shapes is refused.
  const Tensor p = tensor::zeros({3, 2}).requires_grad_();
  SGD sgd({p}, SGDOptions(0.1).momentum(0.9));
  p.mutable_grad() = tensor::ones({3, 2});
  sgd.step();
  const std::string path = dir + "/sgd_state.safetensors";
  save_optimizer_state(sgd, path);
  Adam adam({p}, AdamOptions());
  CHECK_THROWS_WITH(load_optimizer_state(adam, path), Contains("holds SGD state, not Adam"));
  SGD other({tensor::zeros({2}).requires_grad_()}, SGDOptions(0.1).momentum(0.9));
  CHECK_THROWS_WITH(load_optimizer_state(other, path),
                    Contains("'state.0.momentum_buffer' has shape [3, 2] but parameter 0 has shape [2]"));
}

TEST_CASE("optimizer option errors and zero_grad", "[nn][optim][errors]") {
  const Tensor p = tensor::zeros({2}).requires_grad_();
  CHECK_THROWS_WITH(SGD({p}, SGDOptions(-1)), Contains("SGD: invalid learning rate -1"));
  CHECK_THROWS_WITH(SGD({p}, SGDOptions(0.1).nesterov(true)),
                    Contains("nesterov momentum requires a momentum and zero dampening"));
  CHECK_THROWS_WITH(Adam({p}, AdamOptions().betas(1.0, 0.9)), Contains("Adam: invalid beta1 1"));
  CHECK_THROWS_WITH(SGD({tensor::arange(3)}, SGDOptions(0.1)), Contains("SGD: parameter 0 has dtype int64"));
  // As torch.optim: nothing to step is an error, whichever optimizer and whichever form.
  const std::vector<Tensor> none;
  CHECK_THROWS_WITH(SGD(none, SGDOptions(0.1)), Contains("SGD: optimizer got an empty parameter list"));
  CHECK_THROWS_WITH(AdamW(none, AdamWOptions()), Contains("AdamW: optimizer got an empty parameter list"));
  CHECK_THROWS_WITH(Adam(std::vector<ParamGroup>{}, AdamOptions()),
                    Contains("Adam: optimizer got an empty parameter list"));
  CHECK_THROWS_WITH(RMSprop(none), Contains("RMSprop: optimizer got an empty parameter list"));
  CHECK_NOTHROW(SGD(std::vector<ParamGroup>{ParamGroup(none)}, SGDOptions(0.1)));  // an empty group (ZeRO)
  SGD sgd({p}, SGDOptions(0.5));
  sgd.step();  // no gradient: nothing happens
  CHECK(tensor::equal(p, tensor::zeros({2})));
  p.mutable_grad() = tensor::ones({2});
  sgd.step();
  CHECK(p.to_vector<float>() == std::vector<float>{-0.5f, -0.5f});
  sgd.zero_grad();
  CHECK_FALSE(p.grad().defined());
  CHECK(AdamWOptions().weight_decay() == 0.01);
  CHECK_FALSE(AdamOptions().capturable());  // PyTorch's defaults
  CHECK_FALSE(AdamOptions().amsgrad());
  // amsgrad's state carries max_exp_avg_sq; a state without it does not fit, nor the reverse.
  Adam plain({p}, AdamOptions()), ams({p}, AdamOptions().amsgrad(true));
  p.mutable_grad() = tensor::ones({2});
  plain.step();
  ams.step();
  CHECK(ams.state_dict().contains("state.0.max_exp_avg_sq"));
  CHECK_THROWS_WITH(ams.load_state_dict(plain.state_dict()),
                    Contains("Adam: load_state_dict: parameter 0's state lacks max_exp_avg_sq, but amsgrad is on"));
  CHECK_THROWS_WITH(plain.load_state_dict(ams.state_dict()),
                    Contains("parameter 0's state has max_exp_avg_sq, but amsgrad is off"));
}

TEST_CASE("capturable Adam keeps PyTorch's float32 step tensor; states convert both ways", "[nn][optim][checkpoint]") {
  const auto f = load_safetensors(nn_fixture("optim.safetensors")).tensors;
  const Tensor p = f.at("p0").clone().requires_grad_();
  Adam capturable({p}, AdamOptions(0.01).capturable(true));
  for (int k = 0; k < 2; ++k) {
    p.mutable_grad() = f.at("grad" + std::to_string(k)).clone();
    capturable.step();
  }
  const Tensor step = capturable.state_dict().at("state.0.step");
  CHECK(step.dtype() == tensor::kFloat32);  // PyTorch's capturable state: float32, shape [1]
  CHECK(step.sizes() == tensor::Shape{1});
  CHECK(step.item<double>() == 2.0);
  // An ordinary Adam takes the state (its count from the float step), and a capturable one
  // takes an ordinary Adam's int64 count; both go on as the capturable run would within the
  // arithmetic's difference (bias corrections in double against float32).
  const Tensor q = p.detach().clone().requires_grad_(), r = p.detach().clone().requires_grad_();
  Adam plain({q}, AdamOptions(0.01));
  plain.load_state_dict(capturable.state_dict());
  Adam back({r}, AdamOptions(0.01).capturable(true));
  back.load_state_dict(plain.state_dict());
  CHECK(back.state_dict().at("state.0.step").dtype() == tensor::kFloat32);
  for (const Tensor& t : {p, q, r}) t.mutable_grad() = f.at("grad2").clone();
  capturable.step();
  plain.step();
  back.step();
  CHECK(tensor::equal(r, p));
  CHECK(max_abs_diff(q, p) < 1e-6);
  CHECK(max_abs_diff(p, f.at("adam_capturable.step2")) < 1e-6);
}

TEST_CASE("a group's tensor rate: set_lr fills it, capturable Adam and AdamW read it there", "[nn][optim]") {
  for (const bool adamw : {false, true}) {
    INFO((adamw ? "AdamW" : "Adam"));
    const Tensor p = tensor::randn({4, 3}).requires_grad_();
    const AdamOptions options = AdamOptions(0.01).weight_decay(0.1).capturable(true);
    std::unique_ptr<Optimizer> opt;
    if (adamw) {
      opt = std::make_unique<AdamW>(std::vector<Tensor>{p}, options);
    } else {
      opt = std::make_unique<Adam>(std::vector<Tensor>{p}, options);
    }
    CHECK_FALSE(opt->lr_tensor(0).defined());
    opt->set_lr_tensor(0, tensor::scalar_tensor(0.25, tensor::kFloat32));
    CHECK(opt->lr(0) == 0.25);  // the tensor's value becomes the group's rate
    opt->set_lr(0, 0.01);
    CHECK(opt->lr_tensor(0).item<double>() == static_cast<double>(0.01f));  // filled in place
    // A rate of zero in the tensor, the host's still 0.01: the step reads the tensor and leaves
    // the parameter as it was (no update, no decay); then the tensor's 0.01 moves it.
    opt->lr_tensor(0).fill_(0.0);
    const Tensor before = p.detach().clone();
    p.mutable_grad() = tensor::randn({4, 3});
    opt->step();
    CHECK(tensor::equal(p, before));
    opt->lr_tensor(0).fill_(0.01);
    opt->step();
    CHECK_FALSE(tensor::equal(p, before));
  }
  Adam adam({tensor::zeros({2}).requires_grad_()}, AdamOptions(0.01));
  CHECK_THROWS_WITH(adam.set_lr_tensor(0, tensor::zeros({2})),
                    Contains("set_lr_tensor takes a floating tensor of one element (group 0), got float32 of 2 "
                             "elements"));
  CHECK_THROWS_WITH(adam.set_lr_tensor(0, tensor::scalar_tensor(1.0, tensor::kInt64)),
                    Contains("got int64 of 1 elements"));
  CHECK_THROWS_WITH(adam.set_lr_tensor(0, tensor::scalar_tensor(-1.0)), Contains("invalid learning rate -1"));
}

TEST_CASE("add_param_group: the new group steps as its own optimizer would; the rest go on", "[nn][optim][groups]") {
  tensor::Generator g(6);
  const Tensor start_p = tensor::randn({3, 2}, {}, &g), start_q = tensor::randn({4}, {}, &g);
  std::vector<Tensor> gp, gq;
  for (int k = 0; k < 4; ++k) {
    gp.push_back(tensor::randn({3, 2}, {}, &g));
    gq.push_back(tensor::randn({4}, {}, &g));
  }
  for (const bool adam : {false, true}) {
    INFO((adam ? "AdamW" : "SGD"));
    const auto make = [&](std::vector<Tensor> params) -> std::unique_ptr<Optimizer> {
      if (adam) return std::make_unique<AdamW>(std::move(params), AdamWOptions(0.01));
      return std::make_unique<SGD>(std::move(params), SGDOptions(0.1).momentum(0.9));
    };
    const Tensor p = start_p.clone().requires_grad_(), q = start_q.clone().requires_grad_();
    const Tensor p2 = start_p.clone().requires_grad_(), q2 = start_q.clone().requires_grad_();
    auto opt = make({p});
    auto alone_p = make({p2});
    std::unique_ptr<Optimizer> alone_q;
    for (int step = 0; step < 4; ++step) {
      INFO("step " << step);
      if (step == 2) {  // q joins with its own rate; weight decay from the optimizer's options
        opt->add_param_group(ParamGroup({q}).set_lr(0.05));
        alone_q = make({q2});
        alone_q->set_lr(0, 0.05);
        CHECK(opt->lr(1) == 0.05);
        CHECK(opt->weight_decay(1) == opt->weight_decay(0));
      }
      p.mutable_grad() = gp[step].clone();
      p2.mutable_grad() = gp[step].clone();
      if (step >= 2) {
        q.mutable_grad() = gq[step].clone();
        q2.mutable_grad() = gq[step].clone();
      }
      opt->step();
      alone_p->step();
      if (alone_q) alone_q->step();
      CHECK(tensor::equal(p, p2));
      CHECK(tensor::equal(q, q2));
    }
    CHECK(opt->state_dict().contains(adam ? "state.1.exp_avg" : "state.1.momentum_buffer"));
    CHECK_THROWS_WITH(opt->add_param_group(ParamGroup({p})), Contains("parameter 2 of group 2 is also in group 0"));
    CHECK(opt->num_param_groups() == 2);  // the refused group left nothing behind
  }
  // A scheduler made before the group was added refuses to step.
  const Tensor a = tensor::zeros({2}).requires_grad_(), b = tensor::zeros({2}).requires_grad_();
  SGD sgd({a}, SGDOptions(0.1));
  StepLR schedule(sgd, 2);
  sgd.add_param_group(ParamGroup({b}));
  CHECK(sgd.lr(1) == 0.1);
  CHECK_THROWS_WITH(schedule.step(), Contains("StepLR: the optimizer has 2 parameter groups but the scheduler was made "
                                              "for 1 (make the scheduler after add_param_group)"));
}

TEST_CASE("the fused SGD path and the op-by-op path give identical parameters", "[nn][optim]") {
  // A contiguous parameter takes the fused single-pass update; a transposed view (not
  // contiguous) takes the op-by-op path. Bit-identical results are the fused path's contract.
  for (const SGDOptions& options : {SGDOptions(0.1), SGDOptions(0.1).momentum(0.9).dampening(0.2),
                                    SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(0.01)}) {
    tensor::Generator g(5);
    const Tensor start = tensor::randn({4, 3}, {}, &g);
    const Tensor fused = start.clone().requires_grad_();
    const Tensor strided = start.t().contiguous().t().requires_grad_();  // same values, transposed layout
    REQUIRE_FALSE(strided.is_contiguous());
    SGD a({fused}, options), b({strided}, options);
    for (int step = 0; step < 4; ++step) {
      const Tensor grad = tensor::randn({4, 3}, {}, &g);
      fused.mutable_grad() = grad.clone();
      strided.mutable_grad() = grad.clone();
      a.step();
      b.step();
      REQUIRE(tensor::equal(fused, strided));
    }
  }
}

TEST_CASE("the fused Adam path and the op-by-op path give identical parameters and moments", "[nn][optim]") {
  // As for SGD: a contiguous parameter takes the fused kernel, a transposed view the ops. Adam
  // with an L2 term, AdamW's decay, maximize, betas and eps of their own; float32 and float64.
  using Options = std::pair<AdamOptions, bool>;  // the options, decoupled (AdamW)
  for (const auto& [options, decoupled] :
       {Options{AdamOptions(0.01), false}, Options{AdamOptions(0.01).weight_decay(0.1), false},
        Options{AdamOptions(0.02).weight_decay(0.1), true},
        Options{AdamOptions(0.003).betas(0.8, 0.99).eps(1e-3).maximize(true).weight_decay(0.05), true}}) {
    for (const tensor::DType dtype : {tensor::kFloat32, tensor::kFloat64}) {
      INFO("decoupled " << decoupled << ", " << tensor::dtype_name(dtype));
      tensor::Generator g(6);
      const Tensor start = tensor::randn({5, 3}, {}, &g).to(dtype);
      const Tensor fused = start.clone().requires_grad_();
      const Tensor strided = start.t().contiguous().t().requires_grad_();  // same values, transposed layout
      REQUIRE_FALSE(strided.is_contiguous());
      const auto make = [&, &options = options, decoupled = decoupled](const Tensor& p) -> std::unique_ptr<Optimizer> {
        if (decoupled) return std::make_unique<AdamW>(std::vector<Tensor>{p}, options);
        return std::make_unique<Adam>(std::vector<Tensor>{p}, options);
      };
      const auto a = make(fused), b = make(strided);
      for (int step = 0; step < 5; ++step) {
        const Tensor grad = tensor::randn({5, 3}, {}, &g).to(dtype);
        fused.mutable_grad() = grad.clone();
        strided.mutable_grad() = grad.clone();
        a->step();
        b->step();
        REQUIRE(tensor::equal(fused, strided));
      }
      const OrderedDict<Tensor> sa = a->state_dict(), sb = b->state_dict();
      for (const char* key : {"state.0.exp_avg", "state.0.exp_avg_sq"}) {
        INFO(key);
        REQUIRE(sa.find(key) != nullptr);
        CHECK(tensor::equal(*sa.find(key), *sb.find(key)));
      }
    }
  }
}
