// cat, split, chunk, tril/triu and masked_fill against their definitions (explicit values and
// torch's documented piece sizes), their gradients, and the errors they give.
#include <cmath>

#include "tests/fixture_case.h"
#include "tests/test_util.h"
#include "tinyddp/autograd/autograd.h"
#include "tinyddp/autograd/gradcheck.h"

using namespace tinyddp::tensor;
using Catch::Contains;

namespace {
Tensor values(std::vector<double> v, Shape shape) { return from_vector<double>(v, shape); }
}  // namespace

TEST_CASE("split and chunk give torch's piece sizes as views; cat puts them back", "[join]") {
  const Tensor x = arange(0, 30, 1, TensorOptions(kFloat64)).view({5, 6});
  const auto sizes = [](const std::vector<Tensor>& parts, int64_t dim) {
    std::vector<int64_t> s;
    for (const Tensor& p : parts) s.push_back(p.size(dim));
    return s;
  };
  CHECK(sizes(split(x, 2), 0) == std::vector<int64_t>{2, 2, 1});
  CHECK(sizes(split(x, {1, 4}, 0), 0) == std::vector<int64_t>{1, 4});
  CHECK(sizes(split(x, 4, 1), 1) == std::vector<int64_t>{4, 2});
  CHECK(sizes(chunk(x, 3), 0) == std::vector<int64_t>{2, 2, 1});
  CHECK(sizes(chunk(x, 4, 1), 1) == std::vector<int64_t>{2, 2, 2});  // ceil(6 / 4) = 2: three pieces
  CHECK(sizes(chunk(x, 6, 1), 1) == std::vector<int64_t>{1, 1, 1, 1, 1, 1});
  const std::vector<Tensor> qkv = split(x, 2, -1);  // as a GPT splits its qkv projection
  CHECK(qkv[1].shares_storage(x));
  CHECK(equal(qkv[1], values({2, 3, 8, 9, 14, 15, 20, 21, 26, 27}, {5, 2})));
  CHECK(equal(cat(qkv, 1), x));
  CHECK(equal(cat(split(x, {3, 2}, 0), 0), x));
  CHECK(equal(cat({x.narrow(0, 0, 1), x.narrow(0, 4, 1)}, 0),
              values({0, 1, 2, 3, 4, 5, 24, 25, 26, 27, 28, 29}, {2, 6})));
}

TEST_CASE("cat's and split's gradients route each slice back to its tensor", "[join][gradcheck]") {
  Generator gen(4);
  const Tensor a = randn({2, 3}, kFloat64, &gen).requires_grad_(), b = randn({2, 1}, kFloat64, &gen).requires_grad_();
  CHECK(tinyddp::autograd::gradcheck([](const std::vector<Tensor>& v) { return cat(v, 1); }, {a, b}) == "");
  const Tensor x = randn({4, 6}, kFloat64, &gen).requires_grad_();
  CHECK(tinyddp::autograd::gradcheck(
            [](const std::vector<Tensor>& v) {
              const std::vector<Tensor> p = chunk(v[0], 3, 1);
              return add(mul(p[0], p[2]), p[1]);
            },
            {x}) == "");
}

TEST_CASE("tril and triu keep the diagonals asked for, over batches of matrices", "[join]") {
  const Tensor m = arange(1, 13, 1, TensorOptions(kFloat64)).view({3, 4});
  CHECK(equal(tril(m), values({1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0}, {3, 4})));
  CHECK(equal(tril(m, -1), values({0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0}, {3, 4})));
  CHECK(equal(triu(m, 1), values({0, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 12}, {3, 4})));
  CHECK(equal(add(tril(m), triu(m, 1)), m));
  const Tensor batch = ones({2, 3, 3});
  CHECK(equal(sum(tril(batch)), scalar_tensor(12.0)));
  CHECK_THROWS_WITH(tril(ones({3})), Contains("tril: expected a tensor of at least 2 dims"));
}

TEST_CASE("masked_fill: the causal mask of attention, its gradient, and bad masks", "[join][masked_fill]") {
  // A 3x3 causal mask filled with -inf, then softmax: row i averages the first i + 1 entries.
  const Tensor causal = tril(ones({3, 3}, kFloat64));
  const Tensor att = masked_fill(zeros({3, 3}, kFloat64), eq(causal, 0.0), -INFINITY);
  CHECK(equal(softmax(att, -1), values({1, 0, 0, 0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3}, {3, 3})));
  // The mask broadcasts over leading dims; the gradient is zero where the value was filled.
  Generator gen(6);
  const Tensor x = randn({2, 3, 3}, kFloat64, &gen).requires_grad_();
  const Tensor mask = eq(causal, 0.0);
  CHECK(tinyddp::autograd::gradcheck([&](const std::vector<Tensor>& v) { return masked_fill(v[0], mask, 2.5); }, {x}) ==
        "");
  masked_fill(x, mask, 2.5).backward(ones({2, 3, 3}, kFloat64));
  CHECK(equal(x.grad(), causal.expand({2, 3, 3})));
  CHECK(equal(masked_fill(arange(4), lt(arange(4), 2), 7.0), from_vector<int64_t>({7, 7, 2, 3}, Shape{4})));
  // Rows of 64 or more run in the instruction-set kernels (float32, float64): the same rule.
  for (const DType dtype : {kFloat32, kFloat64}) {
    const Tensor wide = randn({2, 100}, dtype, &gen), picked = lt(randn({2, 100}, dtype, &gen), 0.0);
    const Tensor m = picked.to(dtype);
    CHECK(equal(masked_fill(wide, picked, 7.0), add(mul(wide, 1.0 - m), mul(m, 7.0))));
  }
  CHECK_THROWS_WITH(masked_fill(x, ones({3, 3}), 0.0),
                    Contains("masked_fill: expected a bool mask, got dtype float32"));
  CHECK_THROWS_WITH(masked_fill(x, mask.view({9}), 0.0),
                    Contains("masked_fill: a mask of shape [9] cannot be broadcast to the input's shape [2, 3, 3]"));
  CHECK_THROWS_WITH(masked_fill(arange(4), lt(arange(4), 2), 0.5),
                    Contains("masked_fill: value 0.5 cannot be stored in a tensor of dtype int64"));
}

TEST_CASE("cat refuses mismatched tensors, naming which", "[join][errors]") {
  CHECK_THROWS_WITH(cat({}), Contains("cat: expected a non-empty list of tensors"));
  CHECK_THROWS_WITH(cat({ones({2, 3}), ones({2, 4})}, 0),
                    Contains("cat: tensors[1] has shape [2, 4], which does not match tensors[0]'s shape [2, 3] "
                             "outside dim 0"));
  CHECK_THROWS_WITH(cat({ones({2}), ones({2}, kFloat64)}), Contains("cat") && Contains("tensors[1]"));
  CHECK_THROWS_WITH(split(ones({5}), {2, 2}), Contains("split: split sizes [2, 2] sum to 4, but dim 0"));
  CHECK_THROWS_WITH(chunk(ones({5}), 0), Contains("chunk: expected a positive number of chunks, got 0"));
}

TEST_CASE("flip, roll, repeat_interleave, diag and meshgrid match PyTorch, gradients too", "[join]") {
  const tinyddp::testing::Fixture f("tests/tensor/fixtures/math_reference.txt");
  using V = std::vector<Tensor>;
  f.check_case("flip", {{"x", {2, 3, 4}}}, {2, 3, 4}, [](const V& v) { return flip(v[0], {0, 2}); });
  f.check_case("roll", {{"x", {3, 4}}}, {3, 4}, [](const V& v) { return roll(v[0], {1, -2}, {0, 1}); });
  f.check_case("roll_flat", {{"x", {3, 4}}}, {3, 4}, [](const V& v) { return v[0].roll(5); });
  f.check_case("repeat_interleave", {{"x", {3, 2}}}, {5, 2}, [](const V& v) {
    return repeat_interleave(v[0], from_vector<int64_t>({2, 0, 3}, Shape{3}), 0);
  });
  f.check_case("repeat_interleave_flat", {{"x", {2, 2}}}, {8}, [](const V& v) { return v[0].repeat_interleave(2); });
  f.check_case("diag_embed", {{"x", {3}}}, {4, 4}, [](const V& v) { return diag(v[0], 1); });
  f.check_case("diag_take", {{"x", {4, 3}}}, {3}, [](const V& v) { return v[0].diag(-1); });
  const auto grids = meshgrid({arange(3.0, TensorOptions(kFloat64)), arange(2.0, TensorOptions(kFloat64))}, "xy");
  CHECK(equal(grids[0].contiguous(), f.value("meshgrid_xy_0", {2, 3})));
  CHECK(equal(grids[1].contiguous(), f.value("meshgrid_xy_1", {2, 3})));
  const auto ij = meshgrid({arange(3.0), arange(2.0)});
  CHECK(ij[0].sizes() == Shape{3, 2});
  CHECK(equal(broadcast_to(arange(3.0), {2, 3}), arange(3.0).expand({2, 3})));
  CHECK_THROWS_WITH(broadcast_to(zeros({3}), {2, 4}),
                    Contains("broadcast_to: shape [3] cannot be broadcast to [2, 4]"));
  CHECK_THROWS_WITH(flip(zeros({2, 3}), {1, -1}), Contains("flip: dim 1 appears multiple times"));
  CHECK_THROWS_WITH(roll(zeros({2, 3}), {1, 2}, {0}), Contains("roll: shifts and dimensions must align"));
  CHECK_THROWS_WITH(repeat_interleave(zeros({3}), from_vector<int64_t>({1, 2}, Shape{2})),
                    Contains("repeat_interleave: repeats must have the same size as input along dim (2 != 3)"));
  CHECK(tinyddp::autograd::gradcheck([](const V& v) { return roll(flip(v[0], {1}), {2}, {1}); },
                                     {randn({2, 3}, TensorOptions(kFloat64)).requires_grad_()}) == "");
}
