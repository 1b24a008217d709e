// Sampling from given probabilities and parameters (bernoulli, normal, multinomial): the
// frequencies and moments of many draws against the distribution's, within 5 standard errors
// (a fixed seed, so each run draws the same numbers; 5 sigma leaves room for any seed), the
// structural promises (no repeats without replacement, zero-weight categories never drawn,
// shapes, dtypes), reproducibility from a seed, and the errors PyTorch gives.
#include <cmath>
#include <set>

#include "tests/test_util.h"

using namespace tinyddp::tensor;
using Catch::Contains;

TEST_CASE("bernoulli draws 1 with probability p, elementwise, in p's dtype", "[tensor][random]") {
  Generator g(5);
  const int64_t n = 20000;
  const Tensor p = cat({full({n}, 0.3, TensorOptions(kFloat64)), full({n}, 0.9, TensorOptions(kFloat64))});
  const Tensor draws = bernoulli(p, &g);
  CHECK(draws.dtype() == kFloat64);
  CHECK(all(logical_or(eq(draws, 0.0), eq(draws, 1.0))).item<bool>());
  for (const auto& [offset, prob] : {std::pair<int64_t, double>{0, 0.3}, {n, 0.9}}) {
    const double mean = draws.narrow(0, offset, n).mean().item<double>();
    CHECK(std::abs(mean - prob) < 5 * std::sqrt(prob * (1 - prob) / n));
  }
  Generator again(5);
  CHECK(equal(bernoulli(p, &again), draws));  // the same seed, the same draws
  const Tensor t = empty({n}, TensorOptions(kFloat32));
  t.bernoulli_(0.25, &g);
  CHECK(std::abs(t.mean().item<double>() - 0.25) < 5 * std::sqrt(0.25 * 0.75 / n));
  CHECK_THROWS_WITH(bernoulli(full({2}, 1.5)), Contains("bernoulli: all elements of p must be in [0, 1]"));
  CHECK_THROWS_WITH(t.bernoulli_(-0.1), Contains("bernoulli_: expects 0 <= p <= 1"));
}

TEST_CASE("normal draws each element from N(mean, std), broadcast, or a shape from scalars", "[tensor][random]") {
  Generator g(6);
  const int64_t n = 20000;
  const Tensor mean = from_vector<double>({-2.0, 3.0}, Shape{2, 1});
  const Tensor std = full({1, n}, 0.5, TensorOptions(kFloat64));
  const Tensor draws = normal(mean, std, &g);
  REQUIRE(draws.sizes() == Shape{2, n});
  for (int64_t r = 0; r < 2; ++r) {
    const Tensor row = draws[r];
    CHECK(std::abs(row.mean().item<double>() - mean[r][0].item<double>()) < 5 * 0.5 / std::sqrt(n));
    CHECK(std::abs(row.std().item<double>() - 0.5) < 5 * 0.5 / std::sqrt(2.0 * n));
  }
  const Tensor shaped = normal(1.0, 2.0, {n}, &g, TensorOptions(kFloat64));
  CHECK(std::abs(shaped.mean().item<double>() - 1.0) < 5 * 2.0 / std::sqrt(n));
  CHECK_THROWS_WITH(normal(mean, full({1}, -1.0, TensorOptions(kFloat64))),
                    Contains("normal: expects all elements of std >= 0.0"));
}

TEST_CASE("multinomial draws categories by weight, with and without replacement", "[tensor][random]") {
  Generator g(7);
  const int64_t n = 20000;
  const Tensor weights = from_vector<double>({1.0, 0.0, 3.0, 6.0}, Shape{4});  // unnormalised
  const Tensor draws = multinomial(weights, n, true, &g);
  REQUIRE(draws.sizes() == Shape{n});
  CHECK(draws.dtype() == kInt64);
  const Tensor counts = bincount(draws, Tensor(), 4);
  for (int64_t k = 0; k < 4; ++k) {
    const double p = weights[k].item<double>() / 10.0;
    const double freq = static_cast<double>(counts[k].item<int64_t>()) / n;
    INFO("category " << k);
    CHECK(std::abs(freq - p) <= 5 * std::sqrt(p * (1 - p) / n));
  }
  CHECK(counts[1].item<int64_t>() == 0);  // a zero weight is never drawn
  // without replacement: distinct categories, all three nonzero ones for 3 draws, per row
  const Tensor rows = from_vector<double>({0.2, 0.0, 0.5, 0.3, 5.0, 1.0, 0.0, 1.0}, Shape{2, 4});
  for (int trial = 0; trial < 20; ++trial) {
    const Tensor picked = rows.multinomial(3, false, &g);
    REQUIRE(picked.sizes() == Shape{2, 3});
    for (int64_t r = 0; r < 2; ++r) {
      const auto v = picked[r].to_vector<int64_t>();
      const std::set<int64_t> distinct(v.begin(), v.end());
      CHECK(distinct == (r == 0 ? std::set<int64_t>{0, 2, 3} : std::set<int64_t>{0, 1, 3}));
    }
  }
  CHECK_THROWS_WITH(multinomial(weights, 4), Contains("cannot sample n_sample (4) > prob_dist.size(-1) without"));
  CHECK_THROWS_WITH(multinomial(zeros({3}, TensorOptions(kFloat64)), 1), Contains("sum of probabilities <= 0"));
  CHECK_THROWS_WITH(multinomial(from_vector<double>({1.0, -1.0}, Shape{2}), 1), Contains("element < 0"));
}
