// Reduction tests: sum, mean, max/argmax over all or some dims, keepdim, on non-contiguous
// inputs, against naive loops; NaN and empty-tensor behaviour; softmax and log_softmax
// against their formulas and PyTorch's numbers; errors.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "tests/fixture_case.h"
#include "tests/test_util.h"
#include "tinyddp/autograd/gradcheck.h"

using namespace tinyddp::tensor;
using Catch::Contains;
using tinyddp::testing::all_indices;
using tinyddp::testing::at;
using tinyddp::testing::load_fixture;

namespace {

const char* kFixture = "tests/tensor/fixtures/torch_reference.txt";

// Naive reduction of x over `dims` (sorted, wrapped): returns the result for every output
// index in row-major order of the keepdim=false shape.
std::vector<double> naive_reduce(const Tensor& x, const std::vector<int64_t>& dims, double init,
                                 const std::function<double(double, double)>& combine) {
  Shape out_shape;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) out_shape.push_back(x.sizes()[d]);
  }
  std::vector<double> out(static_cast<size_t>(shape_numel(out_shape)), init);
  for (const auto& index : all_indices(x.sizes())) {
    int64_t linear = 0;
    for (int64_t d = 0; d < x.dim(); ++d) {
      if (std::find(dims.begin(), dims.end(), d) == dims.end()) linear = linear * x.sizes()[d] + index[d];
    }
    out[linear] = combine(out[linear], at(x, index));
  }
  return out;
}

void check_close(const Tensor& got, const std::vector<double>& expected, double tol) {
  const std::vector<double> values = got.to(kFloat64).to_vector<double>();
  REQUIRE(values.size() == expected.size());
  for (size_t i = 0; i < values.size(); ++i) {
    INFO("element " << i);
    REQUIRE(std::fabs(values[i] - expected[i]) <= tol * std::max(1.0, std::fabs(expected[i])));
  }
}

}  // namespace

TEST_CASE("sum and mean over dims match naive loops on non-contiguous inputs", "[reduce]") {
  Generator g(21);
  const Tensor base = randn({5, 4, 6}, {}, &g);
  const Tensor strided = randn({6, 9, 5}, {}, &g).permute({2, 0, 1}).narrow(2, 1, 4).transpose(1, 2);  // [5, 4, 6]
  for (const Tensor& x : {base, strided}) {
    for (const std::vector<int64_t>& dims :
         std::vector<std::vector<int64_t>>{{0}, {1}, {2}, {0, 2}, {1, 2}, {0, 1, 2}}) {
      INFO("dims size " << dims.size() << " first " << dims[0]);
      const auto plus = [](double acc, double v) { return acc + v; };
      const std::vector<double> expected_sum = naive_reduce(x, dims, 0.0, plus);
      const Shape dim_list(dims.begin(), dims.end());
      check_close(sum(x, dim_list), expected_sum, 1e-6);
      int64_t count = 1;
      for (int64_t d : dims) count *= x.sizes()[d];
      std::vector<double> expected_mean = expected_sum;
      for (double& v : expected_mean) v /= static_cast<double>(count);
      check_close(mean(x, dim_list), expected_mean, 1e-6);
      const Tensor kept = sum(x, dim_list, true);
      CHECK(kept.dim() == 3);
      for (int64_t d : dims) CHECK(kept.sizes()[d] == 1);
    }
  }
  // Negative dims and the all-dims forms.
  CHECK(sum(base, {-1}).sizes() == Shape{5, 4});
  check_close(sum(base), naive_reduce(base, {0, 1, 2}, 0.0, [](double a, double v) { return a + v; }), 1e-6);
  CHECK(sum(base).dim() == 0);
  CHECK(sum(base, {}).dim() == 0);
}

TEST_CASE("sum dtypes: int64 stays int64, bool counts, float16 accumulates wide", "[reduce][dtype]") {
  CHECK(sum(arange(101)).item<int64_t>() == 5050);
  CHECK(sum(arange(101)).dtype() == kInt64);
  const Tensor mask = gt(tensor({1.0, 5.0, 7.0, 0.0}), 2);
  CHECK(sum(mask).dtype() == kInt64);
  CHECK(sum(mask).item<int64_t>() == 2);
  // 4096 halves of 1.0: a float16 running sum would stall at 2048.
  CHECK(sum(ones({4096}, kFloat16)).item<float>() == 4096.0f);
  CHECK(mean(ones({4}, kBFloat16)).item<float>() == 1.0f);
  // A bfloat16 [N, C, L] summed over N and L (a bias gradient) is rounded once: the float64
  // sum of its values (exact here), rounded.
  Generator g(22);
  const Tensor channels = randn({8, 3, 500}, {}, &g).to(kBFloat16);
  CHECK(equal(sum(channels, {0, 2}), sum(channels.to(kFloat64), {0, 2}).to(kBFloat16)));
  CHECK(equal(sum(channels, {0, 2}, true), sum(channels.to(kFloat64), {0, 2}, true).to(kBFloat16)));
  CHECK_THROWS_WITH(mean(arange(3)),
                    Contains("mean: could not infer output dtype; input dtype must be floating point, got int64"));
}

TEST_CASE("max and argmax return the first maximum; NaN counts as the maximum", "[reduce][max]") {
  Generator g(5);
  const Tensor x = randn({4, 7}, {}, &g).t();  // [7, 4], non-contiguous
  const auto [values, indices] = max(x, 0);
  CHECK(values.sizes() == Shape{4});
  CHECK(indices.dtype() == kInt64);
  for (int64_t j = 0; j < 4; ++j) {
    int64_t best = 0;
    for (int64_t i = 1; i < 7; ++i) {
      if (at(x, {i, j}) > at(x, {best, j})) best = i;
    }
    CHECK(at(indices, {j}) == best);
    CHECK(at(values, {j}) == at(x, {best, j}));
  }
  const auto [kv, ki] = max(x, 1, true);
  CHECK(kv.sizes() == Shape{7, 1});
  CHECK(equal(argmax(x, 1, true), ki));
  // Ties: first index. NaN: wins and is reported.
  const Tensor ties = tensor({1.0, 3.0, 3.0, 2.0});
  CHECK(argmax(ties).item<int64_t>() == 1);
  const Tensor with_nan = tensor({1, std::nan(""), 5, std::nan("")});
  CHECK(argmax(with_nan).item<int64_t>() == 1);
  CHECK(std::isnan(max(with_nan).item<float>()));
  // Over all elements of a 2-D tensor: the flat index in row-major order.
  const Tensor m = tensor({{1.0, 9.0, 2.0}, {9.0, 0.0, 3.0}});
  CHECK(argmax(m).item<int64_t>() == 1);
  CHECK(argmax(m.t()).item<int64_t>() == 1);  // m.t() is [[1, 9], [9, 0], [2, 3]]
  CHECK(max(m).item<float>() == 9);
  CHECK(argmax(arange(5) * -1).item<int64_t>() == 0);
}

TEST_CASE("reductions of empty tensors", "[reduce][empty]") {
  CHECK(sum(zeros({0, 3})).item<float>() == 0);
  CHECK(sum(zeros({0, 3}), {0}).to_vector<float>() == std::vector<float>{0, 0, 0});
  CHECK(std::isnan(mean(zeros({0})).item<float>()));
  CHECK_THROWS_WITH(max(zeros({0, 3})), Contains("max: expected a non-empty tensor, got shape [0, 3]"));
  CHECK_THROWS_WITH(max(zeros({0, 3}), 0), Contains("max: cannot reduce over dimension 0 of size 0"));
  CHECK(std::get<0>(max(zeros({0, 3}), 1)).sizes() == Shape{0});
  CHECK_THROWS_WITH(argmax(zeros({0})), Contains("argmax: expected a non-empty tensor"));
}

TEST_CASE("reduction errors", "[reduce][errors]") {
  const Tensor x = zeros({2, 3});
  CHECK_THROWS_WITH(sum(x, {2}),
                    Contains("sum: dimension out of range (expected to be in range of [-2, 1], but got 2)"));
  CHECK_THROWS_WITH(sum(x, {1, -1}), Contains("sum: dim 1 appears multiple times in the list of dims [1, -1]"));
  CHECK_THROWS_WITH(softmax(arange(3), 0), Contains("softmax: expected a floating-point tensor, got dtype int64"));
  CHECK_THROWS_WITH(log_softmax(x, 3), Contains("log_softmax: dimension out of range"));
  // 0-d tensors reduce over dim 0 / -1 like PyTorch.
  CHECK(sum(scalar_tensor(4), {0}).item<float>() == 4);
  CHECK(std::get<1>(max(scalar_tensor(4), -1)).item<int64_t>() == 0);
}

TEST_CASE("softmax and log_softmax: formula, stability, PyTorch's numbers", "[reduce][softmax]") {
  Generator g(8);
  const Tensor x = randn({3, 4, 5}, {}, &g).transpose(0, 2);  // [5, 4, 3], non-contiguous
  for (int64_t dim = 0; dim < 3; ++dim) {
    INFO("dim " << dim);
    const Tensor s = softmax(x, dim);
    const Tensor ls = log_softmax(x, dim);
    CHECK(s.sizes() == x.sizes());
    for (const auto& index : all_indices(x.sizes())) {
      double total = 0;
      auto other = index;
      for (int64_t k = 0; k < x.sizes()[dim]; ++k) {
        other[dim] = k;
        total += std::exp(at(x, other));
      }
      const double expected = std::exp(at(x, index)) / total;
      REQUIRE(std::fabs(at(s, index) - expected) <= 1e-6 * std::max(1.0, expected));
      REQUIRE(std::fabs(at(ls, index) - std::log(expected)) <= 1e-6 * std::max(1.0, std::fabs(std::log(expected))));
    }
  }
  // Large logits: the naive formula overflows, the stable one does not.
  const Tensor big = tensor({1000.0, 1001.0, 1002.0});
  const std::vector<float> sb = softmax(big, 0).to_vector<float>();
  CHECK(std::fabs(sb[2] - 0.66524096f) < 1e-6f);
  const std::vector<float> lb = log_softmax(tensor({-1000.0, 0.0}), 0).to_vector<float>();
  CHECK(lb[0] == -1000.0f);
  CHECK(lb[1] == 0.0f);
  // PyTorch fixtures.
  const auto fixture = load_fixture(kFixture);
  const auto& input = fixture.at("op_input_3x5");
  const Tensor a = from_vector(std::vector<float>(input.begin(), input.end()), Shape{3, 5});
  check_close(softmax(a, 1), fixture.at("op_softmax_dim1"), 1e-6);
  check_close(log_softmax(a, 0), fixture.at("op_log_softmax_dim0"), 1e-6);
  check_close(tanh(a), fixture.at("op_tanh"), 1e-6);
  check_close(sigmoid(a), fixture.at("op_sigmoid"), 1e-6);
}

// ---- var, std, amax, amin, logsumexp, all, any against PyTorch (fixtures/make_math_fixtures.py) ----

namespace {
const tinyddp::testing::Fixture& math_fixture() {
  static const tinyddp::testing::Fixture f("tests/tensor/fixtures/math_reference.txt");
  return f;
}
Tensor random64(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return randn(shape, TensorOptions(kFloat64), &g).requires_grad_();
}
}  // namespace

TEST_CASE("var, std, amax, amin and logsumexp match PyTorch, gradients too", "[tensor][reduce]") {
  const auto& f = math_fixture();
  using V = std::vector<Tensor>;
  f.check_case("var_all", {{"x", {3, 4}}}, {}, [](const V& v) { return var(v[0]); });
  f.check_case("var_dim1", {{"x", {3, 4}}}, {3, 1}, [](const V& v) { return var(v[0], 1, 0, true); });
  f.check_case("std_dim1", {{"x", {3, 4}}}, {3},
               [](const V& v) { return tinyddp::tensor::std(v[0], 1); });  // a row of std 0
  f.check_case("std_dims", {{"x", {3, 4}}}, {}, [](const V& v) { return v[0].std({0, 1}); });
  f.check_case("amax02", {{"x", {2, 3, 4}}}, {3}, [](const V& v) { return amax(v[0], {0, 2}); });
  f.check_case("amin1", {{"x", {2, 3, 4}}}, {2, 1, 4}, [](const V& v) { return v[0].amin(1, true); });
  f.check_case("logsumexp1", {{"x", {3, 5}}}, {3}, [](const V& v) { return logsumexp(v[0], 1); });
  const Tensor t = f.value("truth_x", {2, 3});
  CHECK(equal(all(t, 1), f.value("all_dim1", {2}, kBool)));
  CHECK(equal(t.any(0), f.value("any_dim0", {3}, kBool)));
  CHECK(all(t).item<bool>() == false);
  CHECK(any(t).item<bool>() == true);
  CHECK(all(ones({2, 2}, TensorOptions(kBool))).dtype() == kBool);
}

TEST_CASE("var, std, amax and logsumexp pass gradcheck; their errors name the op", "[tensor][reduce]") {
  using tinyddp::autograd::gradcheck;
  using V = std::vector<Tensor>;
  CHECK(gradcheck([](const V& v) { return var(v[0], {0, 2}, 1, true); }, {random64({2, 3, 4}, 1)}) == "");
  CHECK(gradcheck([](const V& v) { return tinyddp::tensor::std(v[0], 1); }, {random64({3, 4}, 2)}) == "");
  CHECK(gradcheck([](const V& v) { return amax(v[0], 1); }, {random64({3, 4}, 3)}) == "");
  CHECK(gradcheck([](const V& v) { return logsumexp(v[0], {0, 1}); }, {random64({3, 4}, 4)}) == "");
  CHECK(tinyddp::autograd::gradgradcheck([](const V& v) { return logsumexp(v[0], 1); }, {random64({2, 3}, 5)}) == "");
  // a correction at least N divides by 0, as PyTorch's (inf or NaN)
  CHECK(std::isinf(var(from_vector<double>({1.0, 2.0}, Shape{2}), {}, 2).item<double>()));
  CHECK_THROWS_WITH(var(ones({2}, TensorOptions(kInt64))), Contains("var: expected a floating-point input"));
  CHECK_THROWS_WITH(amax(zeros({0, 3}), 0), Contains("amax: cannot reduce dim 0 of size 0"));
  CHECK_THROWS_WITH(amax(zeros({2, 3}), {1, 1}), Contains("amax: dim 1 appears multiple times"));
}
