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

TEST_CASE("checkpoint: a function with several outputs, some unused or not differentiable", "[nn][checkpoint]") {
  tensor::manual_seed(2);
  auto a = std::make_shared<nn::Linear>(8, 5), b = std::make_shared<nn::Linear>(8, 3);
  nn::Sequential model(std::vector<std::shared_ptr<nn::Module>>{a, b});
  // (tanh(a(x)), b(x) * 2, argmax of a(x) as int64): the last has no gradient.
  const auto heads = [&](const std::vector<Tensor>& v) {
    const Tensor h = (*a)(v[0]);
    return std::vector<Tensor>{tensor::tanh(h), (*b)(v[0]) * 2.0, tensor::argmax(h, 1)};
  };
  const auto loss_of = [](const std::vector<Tensor>& out, bool use_second) {
    const Tensor first = tensor::sum(out[0] * out[0]);
    return use_second ? first + tensor::sum(tensor::exp(out[1])) : first;
  };
  for (const bool use_second : {true, false}) {
    INFO("the second output used: " << use_second);
    const auto plain = gradients(model, [&](const Tensor& x) { return loss_of(heads({x}), use_second); });
    const auto checkpointed = gradients(model, [&](const Tensor& x) {
      const std::vector<Tensor> out = nn::checkpoint(heads, std::vector<Tensor>{x});
      CHECK(out[0].requires_grad());
      CHECK(out[1].requires_grad());
      CHECK_FALSE(out[2].requires_grad());
      CHECK(out[2].dtype() == tensor::kInt64);
      CHECK(tensor::equal(out[2], tensor::argmax((*a)(x), 1)));
      return loss_of(out, use_second);
    });
    REQUIRE(checkpointed.size() == plain.size());
    for (size_t i = 0; i < plain.size(); ++i) {
      INFO("gradient " << i);
      REQUIRE(checkpointed[i].defined());
      // b's parameters (gradients 3 and 4) when its output is unused: zeros, as PyTorch's
      // checkpoint gives (its backward runs from every output that requires grad, with zeros
      // for the unused ones), where the plain run leaves them undefined.
      if (!plain[i].defined()) {
        CHECK((!use_second && (i == 3 || i == 4)));
        CHECK(tensor::equal(checkpointed[i], tensor::zeros_like(checkpointed[i])));
        continue;
      }
      // The same ops in the same order on the used outputs' paths.
      CHECK(tensor::equal(checkpointed[i], plain[i]));
    }
  }
  const Tensor x = tensor::randn({2, 8}).requires_grad_();
  CHECK_THROWS_WITH(nn::checkpoint(
                        [](const std::vector<Tensor>& v) {
                          return std::vector<Tensor>{v[0] * 2.0, v[0].to(tensor::kFloat64)};
                        },
                        std::vector<Tensor>{x}),
                    Contains("checkpoint: the function's floating-point outputs must share a dtype and device, got "
                             "float32 on cpu and float64 on cpu"));
  CHECK_THROWS_WITH(
      nn::checkpoint([](const std::vector<Tensor>& v) { return std::vector<Tensor>{tensor::argmax(v[0], 1)}; },
                     std::vector<Tensor>{x}),
      Contains("checkpoint: the function returned no floating-point tensor"));
}
