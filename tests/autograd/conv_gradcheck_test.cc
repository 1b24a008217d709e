// gradcheck (float64, central finite differences) for the convolution, pooling, batch-norm and
// dropout ops, over the corners of their options: stride, padding, dilation, groups, a kernel
// as large as the padded input, unbatched inputs, both batch-norm modes.
#include "tests/test_util.h"
#include "tinyddp/autograd/autograd.h"

using namespace tinyddp::tensor;
using tinyddp::autograd::gradcheck;
using Inputs = std::vector<Tensor>;

namespace {

Tensor leaf(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, kFloat64, &gen).requires_grad_();
}

}  // namespace

TEST_CASE("gradcheck: conv2d over stride, padding, dilation and groups", "[gradcheck][conv]") {
  struct Options {
    Size2d stride, padding, dilation;
    int64_t groups;
    Shape input, weight;
  };
  const std::vector<Options> cases = {
      {1, 0, 1, 1, {2, 2, 5, 4}, {3, 2, 2, 2}},      {{2, 1}, {1, 2}, 1, 1, {1, 3, 5, 5}, {2, 3, 3, 2}},
      {1, 1, {2, 1}, 1, {2, 2, 5, 5}, {2, 2, 3, 3}}, {2, 1, 1, 2, {1, 4, 4, 5}, {4, 2, 3, 3}},
      {1, 1, 1, 3, {2, 3, 3, 3}, {6, 1, 3, 3}},  // depthwise with a channel multiplier
      {1, 1, 1, 1, {1, 2, 1, 1}, {2, 2, 3, 3}},  // the kernel exactly covers the padded input
  };
  uint64_t seed = 100;
  for (const Options& o : cases) {
    INFO("input " << format_shape(o.input) << " weight " << format_shape(o.weight) << " groups " << o.groups);
    const Tensor x = leaf(o.input, ++seed), w = leaf(o.weight, ++seed), b = leaf({o.weight[0]}, ++seed);
    CHECK(
        gradcheck([&](const Inputs& v) { return conv2d(v[0], v[1], v[2], o.stride, o.padding, o.dilation, o.groups); },
                  {x, w, b}) == "");
  }
  const Tensor x3 = leaf({2, 4, 4}, 7), w3 = leaf({3, 2, 3, 3}, 8);
  CHECK(gradcheck([](const Inputs& v) { return conv2d(v[0], v[1], Tensor(), 1, 1); }, {x3, w3}) == "");
}

TEST_CASE("gradcheck: unfold, max/avg/adaptive pooling", "[gradcheck][conv]") {
  const Tensor x = leaf({2, 2, 5, 6}, 21);  // distinct values: no ties, where max is not differentiable
  CHECK(gradcheck([](const Inputs& v) { return unfold(v[0], {2, 3}, 1, 1, {2, 1}); }, {x}) == "");
  CHECK(gradcheck([](const Inputs& v) { return max_pool2d(v[0], 2); }, {x}) == "");
  CHECK(gradcheck([](const Inputs& v) { return max_pool2d(v[0], 3, Size2d(2), 1); }, {x}) == "");
  CHECK(gradcheck([](const Inputs& v) { return max_pool2d(v[0], 2, Size2d(1), 0, 2); }, {x}) == "");
  CHECK(gradcheck([](const Inputs& v) { return avg_pool2d(v[0], 3, Size2d(2), 1); }, {x}) == "");
  CHECK(gradcheck([](const Inputs& v) { return avg_pool2d(v[0], 3, Size2d(2), 1, false); }, {x}) == "");
  CHECK(gradcheck([](const Inputs& v) { return avg_pool2d(v[0], {2, 3}); }, {x}) == "");
  CHECK(gradcheck([](const Inputs& v) { return adaptive_avg_pool2d(v[0], 1); }, {x}) == "");
  CHECK(gradcheck([](const Inputs& v) { return adaptive_avg_pool2d(v[0], {5, 2}); }, {x}) == "");
}

TEST_CASE("gradcheck: batch_norm in training and eval, with and without affine parameters", "[gradcheck][conv]") {
  const Tensor x = leaf({4, 3, 2, 3}, 31), w = leaf({3}, 32), b = leaf({3}, 33);
  const Tensor x2 = leaf({5, 3}, 34);
  // Fresh running statistics per call: training updates them in place, and f runs many times.
  const auto train = [](const Inputs& v) {
    return batch_norm(v[0], zeros({3}, kFloat64), ones({3}, kFloat64), v[1], v[2], true, 0.1, 1e-5);
  };
  CHECK(gradcheck(train, {x, w, b}) == "");
  CHECK(gradcheck(train, {x2, w, b}) == "");
  CHECK(gradcheck([](const Inputs& v) { return batch_norm(v[0], Tensor(), Tensor(), Tensor(), Tensor(), true); },
                  {x}) == "");
  const Tensor rm = randn({3}, kFloat64), rv = add(rand({3}, kFloat64), 0.5);
  CHECK(gradcheck([&](const Inputs& v) { return batch_norm(v[0], rm, rv, v[1], v[2], false); }, {x, w, b}) == "");
}

TEST_CASE("gradcheck: dropout with a fixed mask", "[gradcheck][conv]") {
  const Tensor x = leaf({3, 7}, 41);
  CHECK(gradcheck(
            [](const Inputs& v) {
              Generator gen(5);  // the same mask on every evaluation
              return dropout(v[0], 0.4, true, &gen);
            },
            {x}) == "");
}
