// gradgradcheck for every differentiable op: second derivatives (a backward with create_graph,
// then a backward through it) against central finite differences of the first derivatives, in
// float64. Each case also runs gradcheck, so a wrong first derivative is named as such.
#include "tests/test_util.h"
#include "tinyddp/autograd/autograd.h"

using namespace tinyddp::tensor;
using tinyddp::autograd::gradcheck;
using tinyddp::autograd::gradgradcheck;
using Inputs = std::vector<Tensor>;
using Fn = std::function<Tensor(const Inputs&)>;

namespace {

Tensor leaf(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, kFloat64, &gen).requires_grad_();
}

// Values in [0.5, 2.5): away from the poles of log, sqrt, division and fractional powers.
Tensor positive_leaf(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return add(mul(rand(shape, kFloat64, &gen), 2.0), 0.5).requires_grad_();
}

// First and second derivatives of f at `inputs`; "" when both agree with finite differences.
std::string check_both(const Fn& f, const Inputs& inputs) {
  const std::string first = gradcheck(f, inputs);
  return first.empty() ? gradgradcheck(f, inputs) : first;
}

}  // namespace

TEST_CASE("gradgradcheck: elementwise arithmetic", "[gradgradcheck]") {
  const Tensor a = leaf({3, 4}, 1), b = leaf({3, 4}, 2), row = leaf({4}, 3), pb = positive_leaf({3, 4}, 4);
  CHECK(check_both([](const Inputs& x) { return add(x[0], x[1], 2.5); }, {a, row}) == "");
  CHECK(check_both([](const Inputs& x) { return sub(x[0], x[1]); }, {row, a}) == "");
  CHECK(check_both([](const Inputs& x) { return mul(x[0], x[1]); }, {a, row}) == "");
  CHECK(check_both([](const Inputs& x) { return mul(x[0], x[0]); }, {a}) == "");
  CHECK(check_both([](const Inputs& x) { return div(x[0], x[1]); }, {a, pb}) == "");
  CHECK(check_both([](const Inputs& x) { return 2.0 / x[0]; }, {pb}) == "");
  CHECK(check_both([](const Inputs& x) { return maximum(x[0], x[1]); }, {a, b}) == "");
  CHECK(check_both([](const Inputs& x) { return minimum(x[0], x[1]); }, {a, row}) == "");
  CHECK(check_both([](const Inputs& x) { return neg(x[0]); }, {a}) == "");
}

TEST_CASE("gradgradcheck: unary functions and powers", "[gradgradcheck]") {
  const Tensor a = leaf({2, 5}, 5), p = positive_leaf({2, 5}, 6);
  CHECK(check_both([](const Inputs& x) { return abs(x[0]); }, {a}) == "");
  CHECK(check_both([](const Inputs& x) { return relu(x[0]); }, {a}) == "");
  CHECK(check_both([](const Inputs& x) { return exp(x[0]); }, {a}) == "");
  CHECK(check_both([](const Inputs& x) { return log(x[0]); }, {p}) == "");
  CHECK(check_both([](const Inputs& x) { return sqrt(x[0]); }, {p}) == "");
  CHECK(check_both([](const Inputs& x) { return tanh(x[0]); }, {a}) == "");
  CHECK(check_both([](const Inputs& x) { return sigmoid(x[0]); }, {a}) == "");
  CHECK(check_both([](const Inputs& x) { return gelu(x[0]); }, {a}) == "");
  CHECK(check_both([](const Inputs& x) { return gelu(x[0], "tanh"); }, {a}) == "");
  CHECK(check_both([](const Inputs& x) { return celu(x[0], 0.7); }, {a}) == "");
  CHECK(check_both([](const Inputs& x) { return mul(leaky_relu(x[0], 0.2), x[0]); }, {a}) == "");
  CHECK(check_both([](const Inputs& x) { return pow(x[0], 3.0); }, {a}) == "");
  CHECK(check_both([](const Inputs& x) { return pow(x[0], -1.5); }, {p}) == "");
  CHECK(check_both([](const Inputs& x) { return pow(1.7, x[0]); }, {a}) == "");
  CHECK(check_both([](const Inputs& x) { return clamp(x[0], -0.5, 0.8); }, {a}) == "");
  CHECK(check_both([](const Inputs& x) { return mul(masked_fill(x[0], gt(x[0], 0.5), 2.0), x[0]); }, {a}) == "");
  CHECK(check_both([](const Inputs& x) { return where(gt(x[0], 0.0), mul(x[0], x[1]), x[1]); }, {a, leaf({2, 5}, 7)}) ==
        "");
}

TEST_CASE("gradgradcheck: views and copies", "[gradgradcheck]") {
  const Tensor a = leaf({3, 4}, 8), c = leaf({2, 4}, 9);
  const auto sq = [](const Tensor& t) { return mul(t, t); };  // makes the second derivative non-zero
  CHECK(check_both([&](const Inputs& x) { return sq(x[0].reshape({4, 3})); }, {a}) == "");
  CHECK(check_both([&](const Inputs& x) { return sq(x[0].narrow(1, 1, 2)); }, {a}) == "");
  CHECK(check_both([&](const Inputs& x) { return sq(x[0].select(0, 2)); }, {a}) == "");
  CHECK(check_both([&](const Inputs& x) { return sq(x[0].t()); }, {a}) == "");
  CHECK(check_both([&](const Inputs& x) { return sq(x[0].permute({1, 0})); }, {a}) == "");
  CHECK(check_both([&](const Inputs& x) { return sq(x[0].unsqueeze(0).expand({2, 3, 4})); }, {a}) == "");
  CHECK(check_both([&](const Inputs& x) { return sq(x[0].t().contiguous()); }, {a}) == "");
  CHECK(check_both([&](const Inputs& x) { return sq(x[0].as_strided({2, 2}, {1, 4}, 1)); }, {a}) == "");
  CHECK(check_both([&](const Inputs& x) { return sq(cat({x[0], x[1]}, 0)); }, {a, c}) == "");
  CHECK(check_both([&](const Inputs& x) { return sq(stack({x[0], x[0]}, 1)); }, {a}) == "");
  CHECK(check_both([&](const Inputs& x) { return sq(tril(x[0], 1)); }, {a}) == "");
}

TEST_CASE("gradgradcheck: reductions and softmax", "[gradgradcheck]") {
  const Tensor a = leaf({3, 5}, 10);
  CHECK(check_both([](const Inputs& x) { return sum(mul(x[0], x[0]), {1}); }, {a}) == "");
  CHECK(check_both([](const Inputs& x) { return mean(mul(x[0], x[0]), {0}, true); }, {a}) == "");
  CHECK(check_both([](const Inputs& x) { return mul(max(x[0]), max(x[0])); }, {a}) == "");
  CHECK(check_both([](const Inputs& x) { return std::get<0>(max(mul(x[0], x[0]), 1)); }, {a}) == "");
  CHECK(check_both([](const Inputs& x) { return std::get<0>(min(mul(x[0], x[0]), 0)); }, {a}) == "");
  CHECK(check_both([](const Inputs& x) { return softmax(x[0], 1); }, {a}) == "");
  CHECK(check_both([](const Inputs& x) { return log_softmax(x[0], 0); }, {a}) == "");
  CHECK(check_both(
            [](const Inputs& x) {
              return causal_softmax(x[0].narrow(1, 0, 4).reshape({1, 3, 4}), 0.7);
            },
            {a}) == "");
  CHECK(check_both([](const Inputs& x) { return cumsum(mul(x[0], x[0]), 1); }, {a}) == "");
  CHECK(check_both([](const Inputs& x) { return std::get<0>(topk(mul(x[0], x[0]), 2, 1)); }, {a}) == "");
}

TEST_CASE("gradgradcheck: indexing", "[gradgradcheck]") {
  const Tensor a = leaf({4, 3}, 11), src = leaf({3, 3}, 12);
  const Tensor index = from_vector<int64_t>({2, 0, 2}, Shape{3});
  const Tensor gidx = from_vector<int64_t>({1, 0, 3, 2, 2, 0}, Shape{2, 3});
  CHECK(check_both([&](const Inputs& x) { return mul(index_select(x[0], 0, index), x[0].narrow(0, 0, 3)); }, {a}) ==
        "");
  CHECK(check_both([&](const Inputs& x) { return mul(gather(x[0], 0, gidx), gather(x[0], 0, gidx)); }, {a}) == "");
  CHECK(check_both([&](const Inputs& x) { return mul(index_add(x[0], 0, index, x[1]), x[0]); }, {a, src}) == "");
  CHECK(check_both([&](const Inputs& x) { return mul(scatter_add(x[0], 0, gidx, x[1].narrow(0, 0, 2)), x[0]); },
                   {a, src}) == "");
  const Tensor ids = from_vector<int64_t>({3, 1, 3}, Shape{3});
  CHECK(check_both([&](const Inputs& x) { return mul(embedding(ids, x[0]), embedding(ids, x[0])); }, {a}) == "");
}

TEST_CASE("gradgradcheck: matrix products", "[gradgradcheck]") {
  const Tensor a = leaf({3, 4}, 13), b = leaf({4, 2}, 14), w = leaf({2, 4}, 15), bias = leaf({2}, 16);
  const Tensor batched = leaf({2, 3, 4}, 17);
  CHECK(check_both([](const Inputs& x) { return mm(x[0], x[1]); }, {a, b}) == "");
  CHECK(check_both([](const Inputs& x) { return matmul(x[0], x[1]); }, {batched, b}) == "");
  CHECK(check_both([](const Inputs& x) { return matmul(x[0], x[0].transpose(1, 2)); }, {batched}) == "");
  CHECK(check_both([](const Inputs& x) { return linear(x[0], x[1], x[2]); }, {batched, w, bias}) == "");
  CHECK(check_both([](const Inputs& x) { return tanh(linear(tanh(linear(x[0], x[1])), x[1].narrow(1, 0, 2))); },
                   {a, w}) == "");
}

TEST_CASE("gradgradcheck: normalisation", "[gradgradcheck]") {
  const Tensor x = leaf({4, 3, 2}, 18), w = leaf({3}, 19), b = leaf({3}, 20), lw = leaf({2}, 21), lb = leaf({2}, 22);
  CHECK(check_both([](const Inputs& v) { return layer_norm(v[0], {2}, v[1], v[2]); }, {x, lw, lb}) == "");
  CHECK(check_both([](const Inputs& v) { return layer_norm(v[0], {3, 2}); }, {x}) == "");
  CHECK(check_both([](const Inputs& v) { return batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], /*training=*/true); },
                   {x, w, b}) == "");
  const Tensor rm = zeros({3}, kFloat64), rv = ones({3}, kFloat64);
  CHECK(check_both([&](const Inputs& v) { return mul(batch_norm(v[0], rm, rv, v[1], v[2]), v[0]); }, {x, w, b}) == "");
  CHECK(check_both([](const Inputs& v) { return group_norm(v[0].reshape({2, 6, 2}), 3); }, {x}) == "");
}

TEST_CASE("gradgradcheck: convolution and pooling", "[gradgradcheck]") {
  const Tensor x = leaf({2, 2, 5, 4}, 23), w = leaf({3, 2, 3, 2}, 24), b = leaf({3}, 25);
  CHECK(check_both([](const Inputs& v) { return conv2d(v[0], v[1], v[2], {2, 1}, 1); }, {x, w, b}) == "");
  CHECK(check_both([](const Inputs& v) { return conv2d(v[0], v[1], Tensor(), 1, 0, {1, 2}); }, {x, w}) == "");
  const Tensor gw = leaf({4, 1, 2, 2}, 26);
  CHECK(check_both([](const Inputs& v) { return conv2d(v[0], v[1], Tensor(), 1, 1, 1, 2); }, {x, gw}) == "");
  CHECK(check_both([](const Inputs& v) { return conv1d(v[0].select(3, 0), v[1].select(3, 0)); }, {x, w}) == "");
  CHECK(check_both([](const Inputs& v) { return mul(unfold(v[0], 2, 1, 1, 2), unfold(v[0], 2, 1, 1, 2)); }, {x}) == "");
  const auto sq = [](const Tensor& t) { return mul(t, t); };
  CHECK(check_both([&](const Inputs& v) { return sq(max_pool2d(v[0], 2, 1, 1)); }, {x}) == "");
  CHECK(check_both([&](const Inputs& v) { return sq(avg_pool2d(v[0], 3, 2, 1, false)); }, {x}) == "");
  CHECK(check_both([&](const Inputs& v) { return sq(adaptive_avg_pool2d(v[0], {1, 2})); }, {x}) == "");
}
