// The Adam step of a whole group at once (tensor::fused_adam_steps_: on a GPU a few launches for
// every parameter, backends/cuda/optim.cu) against the op-by-op update (transposed copies of the
// same parameters, which the fused paths decline), bit for bit, on the CPU and on a GPU: a
// group of more parameters than one launch takes, one of more elements than a block's chunk,
// parameters whose step counts differ, Adam and AdamW with their options, capturable too (the
// numbers from the counts on the device; the rate a host number or a tensor).
#include <memory>

#include "tests/nn/nn_test_util.h"
#include "tinyddp/tensor/cuda.h"

using namespace tinyddp;
using namespace tinyddp::nn;

namespace {

struct Options {
  AdamOptions options;
  bool decoupled = false;  // AdamW
  bool lr_tensor = false;  // capturable, the rate a tensor on the parameters' device (halved each step)
};

std::unique_ptr<Optimizer> make(const std::vector<Tensor>& params, const Options& options) {
  std::unique_ptr<Optimizer> out;
  if (options.decoupled) {
    out = std::make_unique<AdamW>(params, options.options);
  } else {
    out = std::make_unique<Adam>(params, options.options);
  }
  if (options.lr_tensor) {
    out->set_lr_tensor(0, tensor::full({1}, options.options.lr(), tensor::TensorOptions().device(params[0].device())));
  }
  return out;
}

// The twin parameters (nn_test_util.h: twin_params), each stepped 4 times with
// fused_adam_steps_' group path and with the op-by-op path; the last parameter has no gradient
// at the first step, so its step count lags and the group's first steps go one parameter at a
// time (capturable: the counts of the stepped parameters added one by one).
void check_group(const tensor::Device& device, const Options& options, tensor::DType dtype) {
  tensor::Generator g(9);
  testing::TwinParams twins = testing::twin_params(g, device, dtype);
  const auto a = make(twins.fused, options), b = make(twins.strided, options);
  for (int step = 0; step < 4; ++step) {
    testing::twin_grads(twins, g, step);
    a->step();
    b->step();
    testing::require_twins_equal(twins, step);
    if (options.lr_tensor) {  // a rate that changes between steps: read where it is
      a->set_lr(0, a->lr(0) / 2);
      b->set_lr(0, b->lr(0) / 2);
    }
  }
  const OrderedDict<Tensor> sa = a->state_dict(), sb = b->state_dict();
  for (const std::string key : {"state.0.exp_avg", "state.0.exp_avg_sq", "state.44.exp_avg_sq", "state.44.step"}) {
    INFO(key);
    REQUIRE(sa.find(key) != nullptr);
    CHECK(tensor::equal(*sa.find(key), *sb.find(key)));
  }
}

const std::vector<Options>& all_options() {
  static const std::vector<Options> options{
      {AdamOptions(0.01), false},
      {AdamOptions(0.01).weight_decay(0.1), false},
      {AdamOptions(0.02).weight_decay(0.1), true},
      {AdamOptions(0.003).betas(0.8, 0.99).eps(1e-3).maximize(true).weight_decay(0.05), true},
      // capturable: the counts and the numbers that depend on them computed on the device
      {AdamOptions(0.01).capturable(true), false},
      {AdamOptions(0.01).weight_decay(0.1).capturable(true), false},
      {AdamOptions(0.02).weight_decay(0.1).capturable(true), true},
      {AdamOptions(0.003).betas(0.8, 0.99).eps(1e-3).maximize(true).weight_decay(0.05).capturable(true), true, true},
      {AdamOptions(0.01).weight_decay(0.1).capturable(true), false, true}};
  return options;
}

}  // namespace

TEST_CASE("Adam's whole-group step equals the op-by-op update bit for bit", "[nn][optim]") {
  for (const Options& options : all_options()) {
    for (const tensor::DType dtype : {tensor::kFloat32, tensor::kFloat64}) {
      INFO("decoupled " << options.decoupled << ", capturable " << options.options.capturable() << ", lr tensor "
                        << options.lr_tensor << ", " << tensor::dtype_name(dtype));
      check_group(tensor::kCPU, options, dtype);
    }
  }
}

TEST_CASE("fused_adam_steps_ declines lists it cannot take, touching nothing", "[nn][optim]") {
  const Tensor p = tensor::ones({4}), q = tensor::ones({4}, tensor::TensorOptions(tensor::kFloat64));
  const tensor::AdamStep step{0.1, 0.9, 0.999, 1e-8, 0, 1, false, false};
  // Mixed dtypes, a transposed parameter, lists of different lengths, an empty list.
  CHECK_FALSE(
      tensor::fused_adam_steps_({p, q}, {p.clone(), q.clone()}, {p.clone(), q.clone()}, {p.clone(), q.clone()}, step));
  const Tensor t = tensor::ones({3, 2}).t();
  CHECK_FALSE(tensor::fused_adam_steps_({t}, {t.clone()}, {t.clone()}, {t.clone()}, step));
  CHECK_FALSE(tensor::fused_adam_steps_({p}, {}, {p.clone()}, {p.clone()}, step));
  CHECK_FALSE(tensor::fused_adam_steps_({}, {}, {}, {}, step));
  CHECK(tensor::equal(p, tensor::ones({4})));
}

namespace {

// Capturable AdamW over one group (its counts one tensor, its numbers computed once for all)
// against the same parameters one group each, updated op by op (torch's single-tensor
// capturable step, parameter by parameter): the same bits, with a host rate and a tensor one.
// Then the group's state saved and loaded into a second optimizer over copies: the next steps
// agree too.
void check_group_counts(const tensor::Device& device) {
  for (const bool lr_tensor : {false, true}) {
    INFO("lr tensor " << lr_tensor);
    tensor::Generator g(11);
    testing::TwinParams twins = testing::twin_params(g, device, tensor::kFloat32);
    std::vector<ParamGroup> singles;
    for (const Tensor& p : twins.strided) singles.emplace_back(std::vector<Tensor>{p});
    const AdamOptions options = AdamOptions(0.02).weight_decay(0.1).capturable(true);
    AdamW grouped(twins.fused, options), each(singles, options);
    if (lr_tensor) {
      grouped.set_lr_tensor(0, tensor::full({1}, 0.02, tensor::TensorOptions().device(device)));
      for (size_t i = 0; i < singles.size(); ++i) {
        each.set_lr_tensor(i, tensor::full({1}, 0.02, tensor::TensorOptions().device(device)));
      }
    }
    for (int step = 0; step < 3; ++step) {
      testing::twin_grads(twins, g, step);
      grouped.step();
      each.step();
      testing::require_twins_equal(twins, step);
    }
    std::vector<Tensor> copies;
    for (const Tensor& p : twins.fused) copies.push_back(p.detach().clone().requires_grad_());
    AdamW loaded(copies, options);
    if (lr_tensor) loaded.set_lr_tensor(0, tensor::full({1}, 0.02, tensor::TensorOptions().device(device)));
    loaded.load_state_dict(grouped.state_dict());
    CHECK(tensor::equal(*loaded.state_dict().find("state.44.step"), *grouped.state_dict().find("state.44.step")));
    for (int step = 3; step < 5; ++step) {
      testing::twin_grads(twins, g, step);
      for (size_t i = 0; i < copies.size(); ++i) copies[i].mutable_grad() = twins.fused[i].grad().clone();
      grouped.step();
      loaded.step();
      for (size_t i = 0; i < copies.size(); ++i) {
        INFO("step " << step << ", parameter " << i);
        REQUIRE(tensor::equal(copies[i], twins.fused[i]));
      }
    }
  }
}

}  // namespace

TEST_CASE("capturable AdamW: a group's counts in one tensor give each parameter its own step's bits", "[nn][optim]") {
  check_group_counts(tensor::kCPU);
}

TEST_CASE("CUDA: capturable AdamW: a group's counts in one tensor give each parameter its own step's bits",
          "[nn][optim][cuda]") {
  if (!tensor::cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << tensor::cuda::unavailable_reason());
  check_group_counts(tensor::Device::cuda(0));
}

TEST_CASE("CUDA: Adam's whole-group step (a few launches) equals the op-by-op update bit for bit",
          "[nn][optim][cuda]") {
  if (!tensor::cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << tensor::cuda::unavailable_reason());
  for (const Options& options : all_options()) {
    for (const tensor::DType dtype : {tensor::kFloat32, tensor::kFloat64}) {
      INFO("decoupled " << options.decoupled << ", capturable " << options.options.capturable() << ", lr tensor "
                        << options.lr_tensor << ", " << tensor::dtype_name(dtype));
      check_group(tensor::Device::cuda(0), options, dtype);
    }
  }
}
