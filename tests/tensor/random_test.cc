// Sampling from given probabilities and parameters (bernoulli, normal, multinomial): the
// frequencies and moments of many draws against the distribution's, within 5 standard errors
// (a fixed seed, so each run draws the same numbers; 5 sigma leaves room for any seed), the
// structural promises (no repeats without replacement, zero-weight categories never drawn,
// shapes, dtypes), reproducibility from a seed, and the errors PyTorch gives. Then the
// counter-based generator of dropout's masks on a GPU: Random123's known answers.
#include <cmath>
#include <set>
#include <vector>

#include "tests/test_util.h"
#include "tinyddp/tensor/internal/philox.h"

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

// ---- the counter-based generator of the device-side dropout masks (internal/philox.h) ----------

TEST_CASE("Philox4x32-10 gives Random123's known answers", "[tensor][random][philox]") {
  using tinyddp::tensor::philox::Block;
  using tinyddp::tensor::philox::philox4x32_10;
  // Random123's kat_vectors for philox4x32 with 10 rounds: counter, key, output.
  const auto words = [](const Block& b) { return std::vector<uint32_t>(b.w, b.w + 4); };
  CHECK(words(philox4x32_10({{0, 0, 0, 0}}, 0, 0)) ==
        std::vector<uint32_t>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(words(philox4x32_10({{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff)) ==
        std::vector<uint32_t>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(words(philox4x32_10({{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0)) ==
        std::vector<uint32_t>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("Dropout's counter-based mask keeps about 1 - p, independently of the neighbours",
          "[tensor][random][philox]") {
  using tinyddp::tensor::philox::dropout_keep;
  using tinyddp::tensor::philox::uniform;
  CHECK(uniform(0) == 0.0f);
  CHECK(uniform(0xffffffffu) == 1.0f - std::ldexp(1.0f, -24));  // below 1
  const int64_t n = 200000;
  for (const float keep : {0.9f, 0.5f, 0.2f}) {
    int64_t kept = 0, both = 0;
    bool last = false;
    for (int64_t i = 0; i < n; ++i) {
      const bool k = dropout_keep(0x1234abcd5678ef90ULL, static_cast<uint64_t>(i), keep);
      kept += k;
      both += k && last;  // pairs of neighbours (within a block and across blocks) kept together
      last = k;
    }
    INFO("keep " << keep);
    CHECK(std::abs(static_cast<double>(kept) / n - keep) < 5 * std::sqrt(keep * (1 - keep) / n));
    const double pair = static_cast<double>(keep) * keep;
    CHECK(std::abs(static_cast<double>(both) / (n - 1) - pair) < 5 * std::sqrt(pair * (1 - pair) / n));
  }
  // Another key, another mask: about half the elements differ at keep 0.5.
  int64_t differ = 0;
  for (uint64_t i = 0; i < 10000; ++i) differ += dropout_keep(1, i, 0.5f) != dropout_keep(2, i, 0.5f);
  CHECK(std::abs(differ - 5000) < 5 * 50);
}
