// Factory and random tests: zeros/ones/full/arange/tensor/from_vector/*_like, and the
// seeded generator reproducing PyTorch's CPU random streams (from committed fixtures).
#include <cmath>

#include "tests/fixture_case.h"
#include "tests/test_util.h"
#include "tinyddp/autograd/gradcheck.h"

using namespace tinyddp::tensor;
using Catch::Contains;
using tinyddp::testing::load_fixture;

namespace {
const char* kFixture = "tests/tensor/fixtures/torch_reference.txt";

void check_matches(const Tensor& got, const std::vector<double>& expected, double tol) {
  const std::vector<double> values = got.to(kFloat64).to_vector<double>();
  REQUIRE(values.size() == expected.size());
  for (size_t i = 0; i < values.size(); ++i) {
    INFO("element " << i << ": got " << values[i] << ", PyTorch " << expected[i]);
    REQUIRE(std::fabs(values[i] - expected[i]) <= tol * std::max(1.0, std::fabs(expected[i])));
  }
}
}  // namespace

TEST_CASE("constant factories", "[factory]") {
  CHECK(zeros({2, 2}).to_vector<float>() == std::vector<float>(4, 0.0f));
  CHECK(ones({3}, kInt64).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 1});
  CHECK(full({2}, 2.5, kFloat64).to_vector<double>() == std::vector<double>{2.5, 2.5});
  CHECK(empty({0}).numel() == 0);
  CHECK(scalar_tensor(7, kInt64).item<int64_t>() == 7);
  CHECK_THROWS_WITH(zeros({2, -1}), Contains("empty: negative dimension -1 in shape [2, -1]"));
  const Tensor like = zeros_like(ones({2, 3}, kFloat64));
  CHECK(like.dtype() == kFloat64);
  CHECK(like.sizes() == Shape{2, 3});
  CHECK(ones_like(like, kInt64).dtype() == kInt64);
  CHECK(full_like(like, 4).to_vector<double>() == std::vector<double>(6, 4.0));
  CHECK(empty_like(like).sizes() == Shape{2, 3});
}

TEST_CASE("arange picks int64 for integer bounds, float32 otherwise", "[factory]") {
  CHECK(arange(4).dtype() == kInt64);
  CHECK(arange(4).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(arange(2, 8, 3).to_vector<int64_t>() == std::vector<int64_t>{2, 5});
  CHECK(arange(1.0, 2.0, 0.25).to_vector<float>() == std::vector<float>{1, 1.25f, 1.5f, 1.75f});
  CHECK(arange(5, 0, -2).to_vector<int64_t>() == std::vector<int64_t>{5, 3, 1});
  CHECK(arange(3, kFloat64).dtype() == kFloat64);
  CHECK(arange(0).numel() == 0);
  CHECK_THROWS_WITH(arange(0, 5, 0), Contains("arange: step must be nonzero"));
  CHECK_THROWS_WITH(arange(5, 0, 1), Contains("arange: upper bound and larger bound inconsistent with step sign"));
}

TEST_CASE("tensors from C++ values", "[factory]") {
  const Tensor t = tensor({{1.0, 2, 3}, {4, 5, 6}});
  CHECK(t.sizes() == Shape{2, 3});
  CHECK(t.dtype() == kFloat32);  // one number written as floating point: float32, as torch.tensor
  CHECK(t.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  // Integers only: int64, as torch.tensor([1, 2, 3]); a dtype given wins.
  const Tensor ints = tensor({{1, 2, 3}, {4, 5, -6}});
  CHECK(ints.dtype() == kInt64);
  CHECK(ints.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3, 4, 5, -6});
  CHECK(tensor({1, 2, 3}).str() == "tensor([1, 2, 3])");
  CHECK(tensor({1, 2.5f}).dtype() == kFloat32);
  CHECK(tensor({int64_t{1} << 40}).item<int64_t>() == int64_t{1} << 40);
  CHECK(tensor({1, 2}, kFloat64).dtype() == kFloat64);
  CHECK(tensor({1.0, 2.0}, kInt64).dtype() == kInt64);
  CHECK_THROWS_WITH(tensor({{1, 2}, {3}}), Contains("tensor: rows have different lengths (2 and 1)"));
  const Tensor v = from_vector(std::vector<double>{1, 2, 3, 4}, Shape{2, 2});
  CHECK(v.dtype() == kFloat64);
  CHECK(v.sizes() == Shape{2, 2});
  CHECK_THROWS_WITH(from_vector(std::vector<float>{1, 2, 3}, Shape{2, 2}),
                    Contains("from_vector: shape [2, 2] needs 4 values but 3 were given"));
}

TEST_CASE("rand and uniform_ reproduce PyTorch's streams exactly", "[random][fixture]") {
  const auto fixture = load_fixture(kFixture);
  manual_seed(0);
  check_matches(rand({10}), fixture.at("rand_f32_seed0"), 0);
  manual_seed(1);
  check_matches(rand({5}, kFloat64), fixture.at("rand_f64_seed1"), 0);
  manual_seed(6);
  const Tensor u = empty({6});
  uniform_(u, -2, 3);
  check_matches(u, fixture.at("uniform_m2_3_seed6"), 0);
}

TEST_CASE("randn reproduces PyTorch's streams", "[random][fixture]") {
  const auto fixture = load_fixture(kFixture);
  // PyTorch vectorises the batched float path; its log/sin/cos may differ in the last ulp.
  manual_seed(2);
  check_matches(randn({37}), fixture.at("randn_f32_37_seed2"), 2e-6);
  manual_seed(3);
  check_matches(randn({5}), fixture.at("randn_f32_5_seed3"), 1e-7);
  manual_seed(4);
  check_matches(randn({7}, kFloat64), fixture.at("randn_f64_7_seed4"), 1e-15);
  // A sequence of calls on one stream, including the normal cached between calls.
  manual_seed(5);
  check_matches(rand({3}), fixture.at("seq_rand3_seed5"), 0);
  check_matches(randn({3}), fixture.at("seq_randn3_seed5"), 1e-7);
  check_matches(rand({2}), fixture.at("seq_rand2_seed5"), 0);
  check_matches(randn({1}), fixture.at("seq_randn1_seed5"), 1e-7);
}

TEST_CASE("generators are independent and reproducible", "[random]") {
  Generator a(42), b(42), c(43);
  const Tensor ra = rand({100}, {}, &a);
  CHECK(equal(ra, rand({100}, {}, &b)));
  CHECK_FALSE(equal(ra, rand({100}, {}, &c)));
  CHECK(a.initial_seed() == 42);
  // Range and rough moments of large samples.
  Generator g(7);
  const Tensor u = rand({20000}, {}, &g);
  CHECK(max(u).item<float>() < 1.0f);
  CHECK(max(neg(u)).item<float>() <= 0.0f);
  CHECK(std::fabs(mean(u).item<float>() - 0.5f) < 0.01f);
  const Tensor n = randn({20000}, {}, &g);
  CHECK(std::fabs(mean(n).item<float>()) < 0.03f);
  CHECK(std::fabs(mean(mul(n, n)).item<float>() - 1.0f) < 0.05f);
  // Strided targets are filled in memory order, as PyTorch's (after the same seed,
  // torch.empty(4, 4).t().uniform_() is torch.rand(4, 4).t()).
  const Tensor target = zeros({4, 4}).t();
  manual_seed(9);
  uniform_(target);
  manual_seed(9);
  CHECK(equal(target, rand({4, 4}).t()));
  CHECK_THROWS_WITH(uniform_(zeros({2}, kInt64)),
                    Contains("uniform_: expected a floating-point tensor, got dtype int64"));
  CHECK_THROWS_WITH(normal_(zeros({2}), 0, -1), Contains("normal_: expects std >= 0.0"));
}

TEST_CASE("rand_like and randn_like take the shape, dtype and device of their argument", "[random]") {
  const Tensor like = zeros({3, 5}, kFloat64);
  Generator a(11), b(11);
  const Tensor u = rand_like(like, &a);
  CHECK(u.sizes() == Shape{3, 5});
  CHECK(u.dtype() == kFloat64);
  CHECK(u.device() == like.device());
  // The same stream as rand with those options: torch.rand_like is torch.rand(t.shape, ...).
  CHECK(equal(u, rand({3, 5}, TensorOptions(kFloat64), &b)));
  const Tensor n = randn_like(like, &a);
  CHECK(n.sizes() == Shape{3, 5});
  CHECK(n.dtype() == kFloat64);
  CHECK(equal(n, randn({3, 5}, TensorOptions(kFloat64), &b)));
  CHECK_THROWS_WITH(rand_like(zeros({2}, kInt64)), Contains("expected a floating-point tensor, got dtype int64"));
}

TEST_CASE("expand_as broadcasts to the other tensor's shape without copying", "[factory]") {
  const Tensor row = from_vector(std::vector<float>{1, 2, 3}, Shape{1, 3});
  const Tensor grid = zeros({4, 3});
  const Tensor e = row.expand_as(grid);
  CHECK(e.sizes() == Shape{4, 3});
  CHECK(e.strides() == Shape{0, 1});
  CHECK(e.shares_storage(row));
  CHECK(e.to_vector<float>() == std::vector<float>{1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3});
  CHECK_THROWS(row.expand_as(zeros({4, 2})));
}

TEST_CASE("eye and linspace match PyTorch, in float32 and float64", "[tensor][factory]") {
  const tinyddp::testing::Fixture f("tests/tensor/fixtures/math_reference.txt");
  CHECK(equal(eye(3, 4), f.value("eye34", {3, 4}, kFloat32)));
  CHECK(equal(eye(2, std::nullopt, TensorOptions(kInt64)), from_vector<int64_t>({1, 0, 0, 1}, Shape{2, 2})));
  // within two ulps of the larger end (PyTorch's vectorised loop rounds some values the other
  // way), and the ends exact
  const Tensor short32 = linspace(-1.3, 2.1, 7), short64 = linspace(-1.3, 2.1, 7, TensorOptions(kFloat64));
  const Tensor long32 = linspace(0.1, 1000.3, 1001);
  CHECK(allclose(short32, f.value("linspace_f32", {7}, kFloat32), 0.0, 2 * 1.2e-7 * 2.1));
  CHECK(allclose(short64, f.value("linspace_f64", {7}), 0.0, 2 * 2.3e-16 * 2.1));
  // two float32 ulps at 1000 (2^-14 each)
  CHECK(allclose(long32, f.value("linspace_long_f32", {1001}, kFloat32), 0.0, 2 * 6.2e-5));
  CHECK(long32[0].item<float>() == 0.1f);
  CHECK(long32[1000].item<float>() == 1000.3f);
  CHECK(short64[6].item<double>() == 2.1);
  CHECK(linspace(3.0, 5.0, 1).item<float>() == 3.0f);
  CHECK(linspace(3.0, 5.0, 0).numel() == 0);
  CHECK_THROWS_WITH(linspace(0.0, 1.0, -1), Contains("linspace: number of steps must be non-negative, got -1"));
  CHECK_THROWS_WITH(eye(-1), Contains("eye: n and m must be >= 0"));
}
