// The SGD step of a whole group at once (tensor::fused_sgd_steps_: on a GPU a few launches for
// every parameter, backends/cuda/optim.cu; SGD takes it there) and of each parameter in one pass
// (the CPU's) against the op-by-op update (transposed copies of the same parameters, which the
// fused paths decline), bit for bit: a group of more parameters than one launch takes, one of
// more elements than a block's chunk, a parameter whose momentum buffer starts a step later than
// the others', SGD's options. fused_sgd_steps_ itself on the CPU: its refusals and a first step.
#include "tests/nn/nn_test_util.h"
#include "tinyddp/tensor/cuda.h"

using namespace tinyddp;
using namespace tinyddp::nn;

namespace {

// The twin parameters (nn_test_util.h: twin_params), each stepped 4 times with the fused path
// and with the op-by-op path; the last parameter has no gradient at the first step, so its
// buffer's first step is the group's second.
void check_group(const tensor::Device& device, const SGDOptions& options, tensor::DType dtype) {
  tensor::Generator g(11);
  testing::TwinParams twins = testing::twin_params(g, device, dtype);
  SGD a(twins.fused, options), b(twins.strided, options);
  for (int step = 0; step < 4; ++step) {
    testing::twin_grads(twins, g, step);
    a.step();
    b.step();
    testing::require_twins_equal(twins, step);
  }
  const OrderedDict<Tensor> sa = a.state_dict(), sb = b.state_dict();
  CHECK(sa.size() == sb.size());
  for (const std::string key : {"state.0.momentum_buffer", "state.44.momentum_buffer"}) {
    INFO(key);
    REQUIRE((sa.find(key) != nullptr) == (options.momentum() != 0));
    if (options.momentum() != 0) CHECK(tensor::equal(*sa.find(key), *sb.find(key)));
  }
}

const std::vector<SGDOptions>& all_options() {
  static const std::vector<SGDOptions> options{SGDOptions(0.1),
                                               SGDOptions(0.1).weight_decay(0.01),
                                               SGDOptions(0.05).momentum(0.9),
                                               SGDOptions(0.05).momentum(0.9).dampening(0.1).weight_decay(0.01),
                                               SGDOptions(0.02).momentum(0.8).nesterov(true).weight_decay(0.05),
                                               SGDOptions(0.02).momentum(0.9).maximize(true)};
  return options;
}

}  // namespace

TEST_CASE("SGD's fused step equals the op-by-op update bit for bit", "[nn][optim]") {
  for (size_t k = 0; k < all_options().size(); ++k) {
    for (const tensor::DType dtype : {tensor::kFloat32, tensor::kFloat64}) {
      INFO("options " << k << ", " << tensor::dtype_name(dtype));
      check_group(tensor::kCPU, all_options()[k], dtype);
    }
  }
}

TEST_CASE("fused_sgd_steps_ declines lists it cannot take, touching nothing", "[nn][optim]") {
  const Tensor p = tensor::ones({4}), q = tensor::ones({4}, tensor::TensorOptions(tensor::kFloat64));
  const tensor::SgdStep plain{0.1, 0, 0, 0, false}, momentum{0.1, 0.9, 0, 0, false};
  std::vector<Tensor> two(2), one(1);
  // Mixed dtypes, a transposed parameter, a buffer of another shape, lists of different
  // lengths, momentum without buffers, an empty list.
  CHECK_FALSE(tensor::fused_sgd_steps_({p, q}, {p.clone(), q.clone()}, &two, momentum));
  const Tensor t = tensor::ones({3, 2}).t();
  CHECK_FALSE(tensor::fused_sgd_steps_({t}, {t.clone()}, nullptr, plain));
  std::vector<Tensor> wrong_buffer{tensor::ones({5})};
  CHECK_FALSE(tensor::fused_sgd_steps_({p}, {p.clone()}, &wrong_buffer, momentum));
  CHECK_FALSE(tensor::fused_sgd_steps_({p}, {}, &one, momentum));
  CHECK_FALSE(tensor::fused_sgd_steps_({p}, {p.clone()}, nullptr, momentum));
  CHECK_FALSE(tensor::fused_sgd_steps_({p}, {p.clone()}, &two, momentum));
  CHECK_FALSE(tensor::fused_sgd_steps_({}, {}, nullptr, plain));
  CHECK(tensor::equal(p, tensor::ones({4})));
  CHECK_FALSE(two[0].defined());
  // Taken: the buffers of a first step are made, and hold the gradient.
  const Tensor r = tensor::ones({4});
  CHECK(tensor::fused_sgd_steps_({r}, {tensor::full({4}, 2.0)}, &one, momentum));
  CHECK(tensor::equal(one[0], tensor::full({4}, 2.0)));
  CHECK(tensor::allclose(r, tensor::full({4}, 0.8)));
}

TEST_CASE("CUDA: SGD's whole-group step (a few launches) equals the op-by-op update bit for bit", "[nn][optim][cuda]") {
  if (!tensor::cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << tensor::cuda::unavailable_reason());
  for (size_t k = 0; k < all_options().size(); ++k) {
    for (const tensor::DType dtype : {tensor::kFloat32, tensor::kFloat64}) {
      INFO("options " << k << ", " << tensor::dtype_name(dtype));
      check_group(tensor::Device::cuda(0), all_options()[k], dtype);
    }
  }
}
