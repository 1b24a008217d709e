// F::embedding_bag and nn::EmbeddingBag against PyTorch (tests/nn/fixtures/
// make_functional_fixtures.py, the bag_ cases): sums with per-sample weights and an empty bag,
// means over a 2-D input with padding, maxima with include_last_offset, max_norm's in-place
// renormalisation; forward and gradients in float64, a gradcheck of each mode, the module's
// initial weights, repr, from_pretrained, and the errors PyTorch gives.
#include "tinyddp/nn/embedding_bag.h"

#include "tests/fixture_case.h"
#include "tests/test_util.h"
#include "tinyddp/autograd/gradcheck.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp;
using Catch::Contains;
using tensor::Tensor;
using V = std::vector<Tensor>;
namespace F = nn::functional;

namespace {
Tensor ids1d() { return tensor::tensor({1, 2, 4, 5, 4, 3, 2, 9}); }
Tensor ids2d() { return tensor::tensor({{1, 2, 0, 4}, {0, 0, 0, 0}, {5, 0, 6, 6}}); }
}  // namespace

TEST_CASE("F::embedding_bag matches PyTorch: sum, mean, max, padding, empty bags, max_norm", "[nn][embedding_bag]") {
  const testing::Fixture f("tests/nn/fixtures/functional_reference.txt");
  f.check_case("bag_sum", {{"w", {10, 3}}, {"psw", {8}}}, {4, 3}, [](const V& v) {
    return F::embedding_bag(
        ids1d(), v[0],
        F::EmbeddingBagFuncOptions().offsets(tensor::tensor({0, 2, 2, 5})).mode("sum").per_sample_weights(v[1]));
  });
  f.check_case("bag_mean_padding", {{"w", {10, 3}}}, {3, 3},
               [](const V& v) { return F::embedding_bag(ids2d(), v[0], F::EmbeddingBagFuncOptions().padding_idx(0)); });
  f.check_case("bag_max_last", {{"w", {10, 3}}}, {3, 3}, [](const V& v) {
    return F::embedding_bag(
        ids1d(), v[0],
        F::EmbeddingBagFuncOptions().offsets(tensor::tensor({0, 3, 3, 8})).mode("max").include_last_offset(true));
  });
  f.check_case("bag_max_norm", {{"w", {10, 3}}}, {2, 3}, [](const V& v) {
    return F::embedding_bag(tensor::tensor({1, 2, 2, 7}), v[0],
                            F::EmbeddingBagFuncOptions().offsets(tensor::tensor({0, 1})).max_norm(1.0));
  });
  // scale_grad_by_freq: each id's gradient divided by its count in the whole input.
  for (const std::string mode : {"sum", "mean"}) {
    f.check_case("bag_freq_" + mode, {{"w", {6, 3}}}, {3, 3}, [&](const V& v) {
      nn::EmbeddingBag bag(nn::EmbeddingBagOptions(6, 3).mode(mode).scale_grad_by_freq(true));
      bag.weight = bag.replace_parameter("weight", v[0]);
      return bag.forward(tensor::tensor({1, 2, 2, 5, 2, 1, 0}), tensor::tensor({0, 3, 5}));
    });
  }
  CHECK(nn::EmbeddingBag(nn::EmbeddingBagOptions(6, 3).mode("sum").scale_grad_by_freq(true)).repr() ==
        "EmbeddingBag(6, 3, scale_grad_by_freq=True, mode=sum)");
}

TEST_CASE("F::embedding_bag: the gradients of each mode against finite differences", "[nn][embedding_bag]") {
  tensor::Generator g(3);
  const auto random = [&](const tensor::Shape& shape) {
    return tensor::randn(shape, tensor::TensorOptions(tensor::kFloat64), &g).requires_grad_();
  };
  const Tensor offsets = tensor::tensor({0, 2, 2, 5});
  for (const std::string mode : {"sum", "mean", "max"}) {
    INFO("mode " << mode);
    CHECK(autograd::gradcheck(
              [&](const V& v) {
                return F::embedding_bag(ids1d(), v[0], F::EmbeddingBagFuncOptions().offsets(offsets).mode(mode));
              },
              {random({10, 3})}) == "");
  }
  CHECK(autograd::gradcheck(
            [&](const V& v) {
              return F::embedding_bag(ids2d(), v[0],
                                      F::EmbeddingBagFuncOptions().mode("sum").per_sample_weights(v[1]).padding_idx(0));
            },
            {random({10, 3}), random({3, 4})}) == "");
}

TEST_CASE("nn::EmbeddingBag: PyTorch's initial weights, repr, forward with offsets, from_pretrained",
          "[nn][embedding_bag]") {
  tensor::manual_seed(5);
  nn::EmbeddingBag bag(nn::EmbeddingBagOptions(10, 3).mode("sum").padding_idx(-10).max_norm(1.0));
  tensor::manual_seed(5);
  Tensor expected = tensor::randn({10, 3});
  expected.select(0, 0).fill_(0.0);
  CHECK(tensor::equal(bag.weight.detach(), expected));  // N(0, 1), the padding row zeros
  CHECK(bag.repr() == "EmbeddingBag(10, 3, max_norm=1.0, mode=sum, padding_idx=0)");
  CHECK(nn::EmbeddingBag(10, 3).repr() == "EmbeddingBag(10, 3, mode=mean)");
  const Tensor out = bag.forward(ids1d(), tensor::tensor({0, 4}));
  CHECK(out.sizes() == tensor::Shape{2, 3});
  // The rows looked up were renormalised in place: each of norm at most max_norm.
  CHECK(tensor::amax(tensor::norm(tensor::index_select(bag.weight, 0, ids1d()), 2.0, {1})).item<float>() <=
        1.0f + 1e-6f);
  const Tensor weights = tensor::randn({4, 2});
  auto pretrained = nn::EmbeddingBag::from_pretrained(weights, true, "max");
  CHECK(pretrained->weight.is_same(weights) == false);
  CHECK(tensor::equal(pretrained->weight, weights));
  CHECK_FALSE(pretrained->weight.requires_grad());
  CHECK(tensor::equal((*pretrained)(tensor::tensor({{0, 3}})), tensor::maximum(weights[0], weights[3]).unsqueeze(0)));
}

TEST_CASE("F::embedding_bag refuses what PyTorch refuses, naming it", "[nn][embedding_bag]") {
  const Tensor w = tensor::randn({10, 3});
  const auto bag = [&](const Tensor& input, const F::EmbeddingBagFuncOptions& o) {
    return F::embedding_bag(input, w, o);
  };
  CHECK_THROWS_WITH(bag(ids2d(), F::EmbeddingBagFuncOptions().offsets(tensor::tensor({0, 1}))),
                    Contains("if input is 2D, then offsets has to be undefined"));
  CHECK_THROWS_WITH(bag(ids1d(), {}), Contains("a 1D input needs offsets"));
  CHECK_THROWS_WITH(bag(ids1d(), F::EmbeddingBagFuncOptions().offsets(tensor::tensor({1, 2}))),
                    Contains("offsets[0] has to be 0"));
  CHECK_THROWS_WITH(bag(ids1d(), F::EmbeddingBagFuncOptions().offsets(tensor::tensor({0, 9}))),
                    Contains("offsets[-1] can not be greater than input's length 8 but got offsets[-1] of 9"));
  CHECK_THROWS_WITH(bag(ids1d(), F::EmbeddingBagFuncOptions().offsets(tensor::tensor({0, 5, 3}))),
                    Contains("offsets must be non-decreasing"));
  CHECK_THROWS_WITH(
      bag(ids1d(), F::EmbeddingBagFuncOptions().offsets(tensor::tensor({0})).per_sample_weights(tensor::ones({8}))),
      Contains("only supported for mode='sum' (got mode='mean')"));
  CHECK_THROWS_WITH(
      bag(ids1d(),
          F::EmbeddingBagFuncOptions().offsets(tensor::tensor({0})).mode("sum").per_sample_weights(tensor::ones({2}))),
      Contains("per_sample_weights ([2]) must have the same shape as the input ([8])"));
  CHECK_THROWS_WITH(bag(ids1d(), F::EmbeddingBagFuncOptions().offsets(tensor::tensor({0})).mode("median")),
                    Contains("mode has to be one of sum, mean or max, got 'median'"));
  CHECK_THROWS_WITH(bag(ids2d(), F::EmbeddingBagFuncOptions().padding_idx(12)),
                    Contains("padding_idx must be within the number of embeddings, -10 through 9, but got 12"));
  CHECK_THROWS_WITH(bag(ids2d(), F::EmbeddingBagFuncOptions().sparse(true)), Contains("sparse=true is not supported"));
  CHECK_THROWS_WITH(bag(ids2d(), F::EmbeddingBagFuncOptions().mode("max").scale_grad_by_freq(true)),
                    Contains("max mode does not support scaling the gradient by the frequency"));
  CHECK_THROWS_WITH(bag(tensor::tensor({{1, 30}}), {}), Contains("out of range"));
  CHECK_THROWS_WITH(nn::EmbeddingBag(nn::EmbeddingBagOptions(10, 3).mode("avg")), Contains("mode has to be one of"));
}
