// nn::checkpoint (torch.utils.checkpoint's reentrant variant): the gradients of a checkpointed
// model are the gradients of the same model run without it (the reference: plain autograd,
// itself held to PyTorch elsewhere), with dropout inside (the generator replayed), nested
// checkpoints (a backward three deep), and a parameter used both inside and outside the
// checkpointed part (its accumulator waits in the outer pass while the nested one runs it).
#include <functional>

#include "tests/test_util.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp;
using Catch::Contains;
using tensor::Tensor;

namespace {

// Every parameter's gradient and the input's after backward of `loss(x)`, from one seed.
std::vector<Tensor> gradients(nn::Module& model, const std::function<Tensor(const Tensor&)>& loss) {
  tensor::manual_seed(11);
  const Tensor x = tensor::randn({6, 8}).requires_grad_();
  model.zero_grad();
  tensor::manual_seed(12);  // what dropout draws
  loss(x).backward();
  std::vector<Tensor> grads{x.grad().clone()};
  for (const Tensor& p : model.parameters()) grads.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
  return grads;
}

void expect_same(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("gradient " << i);
    REQUIRE(got[i].defined() == want[i].defined());
    // The same ops on the same values in the same order: the same bits.
    if (got[i].defined()) CHECK(tensor::equal(got[i], want[i]));
  }
}

}  // namespace

TEST_CASE("checkpoint: the gradients are those of the model run without it, dropout included", "[nn][checkpoint]") {
  tensor::manual_seed(1);
  auto block = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(8, 16), std::make_shared<nn::GELU>(), std::make_shared<nn::Dropout>(0.3),
      std::make_shared<nn::Linear>(16, 8)});
  auto head = std::make_shared<nn::Linear>(8, 1);
  nn::Sequential model(std::vector<std::shared_ptr<nn::Module>>{block, head});
  const auto plain = gradients(model, [&](const Tensor& x) { return tensor::sum((*head)((*block)(x))); });
  const auto checkpointed = gradients(model, [&](const Tensor& x) {
    return tensor::sum((*head)(nn::checkpoint([&](const Tensor& v) { return (*block)(v); }, x)));
  });
  expect_same(checkpointed, plain);
  // Without the generator replayed, the recomputation draws another dropout mask.
  const auto unreplayed = gradients(model, [&](const Tensor& x) {
    return tensor::sum((*head)(nn::checkpoint([&](const Tensor& v) { return (*block)(v); }, x, false)));
  });
  CHECK_FALSE(tensor::equal(unreplayed[0], plain[0]));
}

TEST_CASE("checkpoint: nested checkpoints and a parameter used inside and outside", "[nn][checkpoint]") {
  tensor::manual_seed(2);
  auto first = std::make_shared<nn::Linear>(8, 8), second = std::make_shared<nn::Linear>(8, 8);
  nn::Sequential model(std::vector<std::shared_ptr<nn::Module>>{first, second});
  // `second` is used before the checkpointed part and inside it: when the nested pass runs its
  // accumulator, the outer pass still waits for the gradient of its first use.
  const auto forward = [&](const Tensor& v) { return (*second)(tensor::tanh((*first)(v))); };
  const auto plain = gradients(model, [&](const Tensor& x) { return tensor::sum(forward((*second)(x))); });
  const auto once =
      gradients(model, [&](const Tensor& x) { return tensor::sum(nn::checkpoint(forward, (*second)(x))); });
  expect_same(once, plain);
  const auto nested = gradients(model, [&](const Tensor& x) {
    const auto inner = [&](const Tensor& v) { return nn::checkpoint(forward, v); };
    return tensor::sum(nn::checkpoint(inner, (*second)(x)));
  });
  expect_same(nested, plain);
}

TEST_CASE("checkpoint: PyTorch's reentrant rules", "[nn][checkpoint][errors]") {
  nn::Linear layer(4, 4);
  // No input requires grad: the output does not either (the parameters get no gradient).
  const Tensor out = nn::checkpoint([&](const Tensor& v) { return layer(v); }, tensor::randn({2, 4}));
  CHECK_FALSE(out.requires_grad());
  // An input changed in place before the backward.
  const Tensor x = tensor::randn({2, 4}).requires_grad_();
  const Tensor h = tensor::mul(x, 2.0);
  const Tensor y = nn::checkpoint([&](const Tensor& v) { return layer(v); }, h);
  {
    tensor::NoGradGuard no_grad;
    h.add_(1.0);
  }
  CHECK_THROWS_WITH(tensor::sum(y).backward(), Contains("CheckpointFunctionBackward"));
}
