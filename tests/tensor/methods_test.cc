// The ops as Tensor methods and operators (tensor/methods.inc, the end of ops.h), written as a
// PyTorch user writes them (x.sum(1), x.softmax(-1), x == y, x += y), against values worked out
// by hand and against the free functions they stand for.
#include <sstream>

#include "tests/test_util.h"
#include "tinyddp/autograd/autograd.h"

using namespace tinyddp::tensor;
using Catch::Contains;

namespace {
// [[0, 1, 2], [3, 4, 5]] in float64.
Tensor grid() { return arange(0, 6, 1, TensorOptions(kFloat64)).view({2, 3}); }
Tensor values(std::vector<double> v, Shape shape) { return from_vector<double>(v, shape); }
// A bool mask from 0s and 1s.
Tensor mask(std::vector<double> v, Shape shape) { return ne(values(std::move(v), std::move(shape)), 0.0); }
}  // namespace

TEST_CASE("reductions as methods: x.sum(1), x.mean(-1, true), x.max(1), x.argmax()", "[tensor][methods]") {
  const Tensor x = grid();
  CHECK(x.sum().item<double>() == 15);
  CHECK(equal(x.sum(1), values({3, 12}, {2})));
  CHECK(equal(x.sum({0}), values({3, 5, 7}, {3})));
  CHECK(equal(x.sum({0, 1}), sum(x)));
  CHECK(equal(x.mean(-1, true), values({1, 4}, {2, 1})));
  CHECK(x.mean().item<double>() == 2.5);
  const auto [largest, where] = x.max(1);
  CHECK(equal(largest, values({2, 5}, {2})));
  CHECK(equal(where, from_vector<int64_t>({2, 2}, Shape{2})));
  CHECK(x.max().item<double>() == 5);
  CHECK(x.min().item<double>() == 0);
  CHECK(x.argmax().item<int64_t>() == 5);
  CHECK(equal(x.argmin(0), from_vector<int64_t>({0, 0, 0}, Shape{3})));
  CHECK(equal(x.cumsum(1), values({0, 1, 3, 3, 7, 12}, {2, 3})));
  CHECK(std::abs(x.norm().item<double>() - std::sqrt(55.0)) < 1e-12);
  const auto [top, top_at] = x.topk(2);
  CHECK(equal(top, values({2, 1, 5, 4}, {2, 2})));
  CHECK(equal(top_at, from_vector<int64_t>({2, 1, 2, 1}, Shape{2, 2})));
  CHECK(allclose(x.softmax(-1).sum(-1), ones({2}, kFloat64), 1e-15, 1e-15));
  CHECK(allclose(x.log_softmax(1).exp(), x.softmax(1), 1e-15, 1e-15));
}

TEST_CASE("elementwise methods and operators: x.relu(), x.pow(2), x == y, x > 2, x.clamp(1, 4)", "[tensor][methods]") {
  const Tensor x = grid();
  const Tensor y = values({0, 9, 2, 9, 4, 9}, {2, 3});
  CHECK(equal(x.sub(2.5).relu(), values({0, 0, 0, 0.5, 1.5, 2.5}, {2, 3})));
  CHECK(equal(x.pow(2), mul(x, x)));
  CHECK(equal(x.neg().abs(), x));
  CHECK(equal(x.exp().log(), log(exp(x))));
  CHECK(equal(x.clamp(1, 4), values({1, 1, 2, 3, 4, 4}, {2, 3})));
  CHECK(equal(x.clamp_min(2), values({2, 2, 2, 3, 4, 5}, {2, 3})));
  CHECK(equal(x.clamp_max(1), values({0, 1, 1, 1, 1, 1}, {2, 3})));
  CHECK(equal(x.add(y, 2.0), values({0, 19, 6, 21, 12, 23}, {2, 3})));  // x + 2 y
  CHECK(equal(x.sub(y), sub(x, y)));
  CHECK(equal(x.mul(2.0).div(4.0), values({0, 0.5, 1, 1.5, 2, 2.5}, {2, 3})));
  CHECK(equal(x.maximum(y), values({0, 9, 2, 9, 4, 9}, {2, 3})));
  CHECK(equal(x.sigmoid(), sigmoid(x)));
  CHECK(equal(x.tanh(), tanh(x)));
  CHECK(equal(x.sqrt(), sqrt(x)));
  CHECK(equal(x.gelu("tanh"), gelu(x, "tanh")));
  const Tensor same = x == y;
  CHECK(same.dtype() == kBool);
  CHECK(equal(same, mask({1, 0, 1, 0, 1, 0}, {2, 3})));
  CHECK(equal(x != y, mask({0, 1, 0, 1, 0, 1}, {2, 3})));
  CHECK(equal(x > 2, mask({0, 0, 0, 1, 1, 1}, {2, 3})));
  CHECK(equal(x <= 1, mask({1, 1, 0, 0, 0, 0}, {2, 3})));
  CHECK(equal(x >= y, ge(x, y)));
  CHECK(equal(x < y, lt(x, y)));
  CHECK(equal(x.eq(2.0), eq(x, 2.0)));
  CHECK(equal(x.where(x > 2, y), values({0, 9, 2, 3, 4, 5}, {2, 3})));
  CHECK(equal(x.masked_fill(x > 2, -1), values({0, 1, 2, -1, -1, -1}, {2, 3})));
}

TEST_CASE("shape and selection methods: x.T(), x.chunk(3, 1), x.index_select, x.gather, x.repeat",
          "[tensor][methods]") {
  const Tensor x = grid();
  CHECK(x.size() == Shape{2, 3});
  CHECK(x.T().sizes() == Shape{3, 2});
  CHECK(equal(x.T(), x.t()));
  CHECK(zeros({2, 3, 4}).T().sizes() == Shape{4, 3, 2});
  CHECK(zeros({5, 2, 3}).mT().sizes() == Shape{5, 3, 2});
  CHECK(equal(x.matmul(x.T()), matmul(x, x.t())));
  CHECK(equal(x.mm(x.T()), values({5, 14, 14, 50}, {2, 2})));
  CHECK(x.chunk(3, 1).size() == 3);
  CHECK(x.split(2, 1)[1].sizes() == Shape{2, 1});
  CHECK(x.split(std::vector<int64_t>{1, 2}, 1)[1].sizes() == Shape{2, 2});
  CHECK(x.unbind(1).size() == 3);
  CHECK(equal(x.unbind()[1], values({3, 4, 5}, {3})));
  const Tensor index = from_vector<int64_t>({2, 0}, Shape{2});
  CHECK(equal(x.index_select(1, index), values({2, 0, 5, 3}, {2, 2})));
  CHECK(equal(x.gather(1, from_vector<int64_t>({1, 0}, Shape{2, 1})), values({1, 3}, {2, 1})));
  CHECK(equal(x.repeat({1, 2}), values({0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5}, {2, 6})));
  CHECK(equal(x.tril(), values({0, 0, 0, 3, 4, 0}, {2, 3})));
  CHECK(equal(x.triu(1), values({0, 1, 2, 0, 0, 5}, {2, 3})));
  CHECK(equal(x.index_add(1, index, ones({2, 2}, kFloat64)), values({1, 1, 3, 4, 4, 6}, {2, 3})));
  CHECK(equal(x.scatter_add(1, from_vector<int64_t>({0, 0}, Shape{2, 1}), ones({2, 1}, kFloat64)),
              values({1, 1, 2, 4, 4, 5}, {2, 3})));
  std::ostringstream printed;
  printed << x.sizes();
  CHECK(printed.str() == "[2, 3]");
}

TEST_CASE("new tensors like this one: new_zeros, new_full, type_as, cpu; random fills", "[tensor][methods]") {
  const Tensor x = grid();
  CHECK(x.new_zeros({4}).dtype() == kFloat64);
  CHECK(equal(x.new_full({2}, 7), values({7, 7}, {2})));
  CHECK(equal(x.new_ones({1, 2}), ones({1, 2}, kFloat64)));
  CHECK(x.new_empty({3}).sizes() == Shape{3});
  CHECK(x.new_zeros({4}, kInt64).dtype() == kInt64);
  CHECK(x.new_ones({2}, TensorOptions()).dtype() == kFloat64);  // unset: this tensor's
  CHECK(x.type_as(zeros({1}, kFloat32)).dtype() == kFloat32);
  CHECK(x.cpu().is_same(x));
  Generator a(9), b(9);
  const Tensor drawn = zeros({8}).normal_(1.0, 2.0, &a);
  CHECK(equal(drawn, normal_(zeros({8}), 1.0, 2.0, &b)));
  const Tensor u = zeros({100}).uniform_(-1, 1, &a);
  CHECK(u.min().item<float>() >= -1);
  CHECK(u.max().item<float>() < 1);
}

TEST_CASE("in-place methods and operators write into the tensor and return it: x += y, x.relu_()",
          "[tensor][methods]") {
  Tensor x = grid();
  const Tensor y = ones({2, 3}, kFloat64);
  x += y;
  CHECK(equal(x, values({1, 2, 3, 4, 5, 6}, {2, 3})));
  x *= 2;
  CHECK(equal(x, values({2, 4, 6, 8, 10, 12}, {2, 3})));
  x -= 2;
  x /= 2;
  CHECK(equal(x, grid()));
  x -= y;
  x *= y;
  x /= y;
  CHECK(equal(x, sub(grid(), 1)));
  const Tensor& same = x.sub_(y).relu_();
  CHECK(same.is_same(x));
  CHECK(equal(x, values({0, 0, 0, 1, 2, 3}, {2, 3})));
  x.clamp_(std::nullopt, 2).masked_fill_(x == 0, -1);
  CHECK(equal(x, values({-1, -1, -1, 1, 2, 2}, {2, 3})));
  x.neg_().exp_().log_();
  CHECK(allclose(x, values({1, 1, 1, -1, -2, -2}, {2, 3}), 1e-15, 1e-15));
  x.pow_(2).sqrt_().clamp_min_(1.5).clamp_max_(1.75);
  CHECK(equal(x, values({1.5, 1.5, 1.5, 1.5, 1.75, 1.75}, {2, 3})));
  x.tril_().abs_();
  CHECK(equal(x, values({1.5, 0, 0, 1.5, 1.75, 0}, {2, 3})));
  // A leaf that requires grad, under grad mode: refused, naming the op, as PyTorch.
  const Tensor w = ones({2}).requires_grad_();
  CHECK_THROWS_WITH(w.relu_(), Contains("relu_: a leaf tensor that requires grad is used in an in-place operation"));
  {
    NoGradGuard no_grad;
    w.mul_(3).sigmoid_();  // fine outside it, as an optimizer's update
  }
  CHECK(std::abs(w.sum().item<float>() - 2 / (1 + std::exp(-3.0))) < 1e-6);
}
