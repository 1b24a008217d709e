// Ten mistakes a PyTorch user makes on a first day, written as the PyTorch line would be
// translated: each is a clear error that names what was wrong (the op, the shapes, dtypes or
// versions involved, and the fix) with the words a PyTorch user knows from its message ("a
// second time", "retain_graph", "leaf", "modified by an in-place operation"), thrown where
// the mistake is made, and leaves what it touched usable. The DDP
// mistakes (a parameter without gradient, ranks that disagree, a rank that never shows up) are
// held in tests/ddp/unused_parameters_test.cc, errors_test.cc and tests/comm/faults_test.cc.
#include "tests/test_util.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp;
using Catch::Contains;
using tensor::Tensor;
namespace F = tinyddp::nn::functional;

TEST_CASE("user mistakes: a Linear given the wrong number of features names both", "[nn][mistakes]") {
  nn::Linear fc(10, 5);
  const Tensor x = tensor::randn({4, 8});
  CHECK_THROWS_WITH(fc.forward(x), Contains("last dimension 10") && Contains("[4, 8]"));
  CHECK(fc.forward(tensor::randn({4, 10})).sizes() == tensor::Shape{4, 5});  // still usable
}

TEST_CASE("user mistakes: backward of a non-scalar without a gradient", "[nn][mistakes]") {
  const Tensor w = tensor::randn({3}).requires_grad_();
  const Tensor y = w * 2.0;
  CHECK_THROWS_WITH(y.backward(), Contains("only for one-element outputs") && Contains("[3]"));
  y.sum().backward();
  CHECK(tensor::allclose(w.grad(), tensor::full({3}, 2.0), 0, 0));
}

TEST_CASE("user mistakes: a second backward through a freed graph says retain_graph", "[nn][mistakes]") {
  const Tensor w = tensor::randn({3}).requires_grad_();
  const Tensor loss = (w * w).sum();
  loss.backward();
  CHECK_THROWS_WITH(loss.backward(), Contains("SumBackward") && Contains("a second time") && Contains("retain_graph"));
}

TEST_CASE("user mistakes: an in-place op on a leaf that requires grad", "[nn][mistakes]") {
  const Tensor w = tensor::randn({3}).requires_grad_();
  CHECK_THROWS_WITH(w.add_(1.0), Contains("add_: a leaf tensor that requires grad is used in an in-place operation"));
  {
    tensor::NoGradGuard no_grad;  // the fix PyTorch's users write: with torch.no_grad()
    w.add_(1.0);
  }
  CHECK(w.requires_grad());
}

TEST_CASE("user mistakes: a tensor saved for backward, then modified in place", "[nn][mistakes]") {
  const Tensor w = tensor::randn({3}).requires_grad_();
  const Tensor h = w.exp();  // exp saves its output
  const Tensor loss = h.sum();
  h.mul_(2.0);
  CHECK_THROWS_WITH(loss.backward(),
                    Contains("ExpBackward") && Contains("modified by an in-place operation") && Contains("version 1"));
}

TEST_CASE("user mistakes: cross_entropy given float class indices, and a class out of range", "[nn][mistakes]") {
  const Tensor logits = tensor::randn({4, 3});
  const Tensor float_targets = tensor::tensor({0.0, 2.0, 1.0, 1.0});
  CHECK_THROWS_WITH(F::cross_entropy(logits, float_targets), Contains("float") && Contains("int64"));
  const Tensor out_of_range = tensor::tensor({0, 3, 1, 1}, tensor::kLong);
  CHECK_THROWS_WITH(F::cross_entropy(logits, out_of_range), Contains("3"));
}

TEST_CASE("user mistakes: view of a transposed tensor says to use reshape", "[nn][mistakes]") {
  const Tensor x = tensor::randn({3, 4}).t();
  CHECK_THROWS_WITH(x.view({12}), Contains("reshape"));
  CHECK(x.reshape({12}).sizes() == tensor::Shape{12});
}

TEST_CASE("user mistakes: float32 times float64 names both dtypes", "[nn][mistakes]") {
  const Tensor a = tensor::randn({2, 3}), b = tensor::randn({3, 2}).to(tensor::kFloat64);
  CHECK_THROWS_WITH(tensor::matmul(a, b), Contains("float32") && Contains("float64"));
}

TEST_CASE("user mistakes: a DDP state dict loaded into the plain model says how to fix it", "[nn][mistakes]") {
  auto model = nn::mlp({4, 3, 2});
  nn::OrderedDict<Tensor> ddp_state;  // as torch.save(ddp_model.state_dict()) writes it
  for (const auto& [name, t] : model->state_dict()) ddp_state.insert("module." + name, t.clone());
  CHECK_THROWS_WITH(model->load_state_dict(ddp_state), Contains("module."));
}

TEST_CASE("user mistakes: an optimizer given no parameters, and item() of many elements", "[nn][mistakes]") {
  CHECK_THROWS_WITH(nn::AdamW(std::vector<Tensor>{}, nn::AdamWOptions(1e-3)), Contains("empty parameter list"));
  CHECK_THROWS_WITH(tensor::randn({2}).item<double>(), Contains("2 elements"));
  nn::Embedding embed(5, 2);
  CHECK_THROWS_WITH(embed.forward(tensor::tensor({1, 7}, tensor::kLong)), Contains("7"));
}
