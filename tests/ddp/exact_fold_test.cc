// The exact sum's inner loops against their scalar definitions (ddp/exact_fold.h), under every
// instruction set the CPU has: the fold of a chunk's values onto the int64 grid (ties to even,
// the grid's edge, NaNs and infinities, the tail past the last vector, chunks folded together)
// and the unfold of the sums into means (the int64 range, the division's rounding).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "tests/test_util.h"
#include "tinyddp/ddp/exact_fold.h"
#include "tinyddp/tensor/cpu_isa.h"
#include "tinyddp/tensor/random.h"

using namespace tinyddp;
namespace t = tinyddp::tensor;

namespace {

// The fold's definition, one value at a time: x 2^scale rounded to the nearest integer, ties to
// even (std::nearbyint under the default rounding mode), for |x 2^scale| < 2^62.
struct Folded {
  std::vector<int64_t> sums;
  float largest = 0;
  bool finite = true;
};
Folded fold_by_definition(const std::vector<float>& values, std::vector<int64_t> sums, int scale) {
  Folded f{std::move(sums)};
  for (size_t i = 0; i < values.size(); ++i) {
    const float a = std::fabs(values[i]);
    f.finite = f.finite && std::isfinite(a);
    if (!std::isnan(a)) f.largest = std::max(f.largest, a);
    const double scaled = std::ldexp(static_cast<double>(values[i]), scale);
    if (std::fabs(scaled) < 0x1p62) {
      f.sums[i] = static_cast<int64_t>(static_cast<uint64_t>(f.sums[i]) +
                                       static_cast<uint64_t>(static_cast<int64_t>(std::nearbyint(scaled))));
    }
  }
  return f;
}

// The fold's checks, run under the instruction set the CPU kernels use now (cpu_isa.h).
void check_fold_against_definition();

}  // namespace

TEST_CASE("The exact sum's vector fold gives the definition's integers: ties to even, the grid's edge, the tail",
          "[ddp][exact]") {
  tinyddp::testing::for_each_cpu_isa(check_fold_against_definition);
}

namespace {

void check_fold_against_definition() {
  t::Generator g(17);
  std::vector<float> values;
  for (int i = 0; i < 1000; ++i) {  // every magnitude from 2^-40 to 2^40, both signs
    const double u = g.uniform_double(), v = g.uniform_double();
    values.push_back(static_cast<float>((v < 0.5 ? -1 : 1) * std::ldexp(0.5 + u / 2, static_cast<int>(v * 80) - 40)));
  }
  for (float tie : {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 1e-45f, -0.0f, 0.0f}) values.push_back(tie);
  values.push_back(std::ldexp(1.0f, 40));   // 2^40 2^21 = 2^61: inside the grid
  values.push_back(-std::ldexp(1.0f, 41));  // 2^62: beyond it, left out
  values.push_back(std::ldexp(1.0f, 30));
  for (int i = 0; i < 5; ++i) values.push_back(static_cast<float>(i) + 0.5f);  // 1014 + 5: a tail of 3
  std::vector<int64_t> start(values.size());
  for (size_t i = 0; i < start.size(); ++i) start[i] = static_cast<int64_t>(g.random64() >> 4) - (int64_t{1} << 58);
  // The values as they are at scales 0 (the ties) and 21 (up to 2^61, and the grid's edge), and
  // moved by 2^(0 - scale) and 2^(21 - scale) to meet other scales (the ties via subnormals).
  for (int scale : {-3, 0, 21, 127, 128, 140}) {
    for (int at : {0, 21}) {
      INFO("scale " << scale << ", values moved by 2^" << at - scale);
      std::vector<float> moved;
      for (float v : values) moved.push_back(std::ldexp(v, at - scale));
      const Folded want = fold_by_definition(moved, start, scale);
      std::vector<float> folded = moved;
      std::vector<int64_t> sums = start;
      float largest = 0;
      bool finite = true;
      ddp::exact::fold(folded.data(), static_cast<int64_t>(folded.size()), sums.data(), scale, largest, finite);
      CHECK(sums == want.sums);
      CHECK(largest == want.largest);
      CHECK(finite);
      CHECK(folded == moved);  // read only
    }
  }
  // Three chunks folded at once: the sums of three folds one after another.
  std::vector<float> second(values.size()), third(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    second[i] = values[values.size() - 1 - i];
    third[i] = -0.75f * values[i];
  }
  std::vector<int64_t> one_by_one = start, together = start;
  float largest_one = 0, largest_together = 0;
  bool finite_one = true, finite_together = true;
  for (const std::vector<float>* chunk : {&values, &second, &third}) {
    ddp::exact::fold(chunk->data(), static_cast<int64_t>(chunk->size()), one_by_one.data(), 21, largest_one,
                     finite_one);
  }
  const float* chunks[] = {values.data(), second.data(), third.data()};
  ddp::exact::fold(chunks, 3, static_cast<int64_t>(values.size()), together.data(), 21, largest_together,
                   finite_together);
  CHECK(together == one_by_one);
  CHECK(largest_together == largest_one);
  // Into::kStore: the sums' old values are not read; the chunks' integers replace them.
  std::vector<int64_t> stored = start;
  float largest_stored = 0;
  bool finite_stored = true;
  ddp::exact::fold(chunks, 3, static_cast<int64_t>(values.size()), stored.data(), 21, largest_stored, finite_stored,
                   ddp::exact::Into::kStore);
  std::vector<int64_t> from_zero(values.size());
  for (const std::vector<float>* chunk : {&values, &second, &third})
    from_zero = fold_by_definition(*chunk, from_zero, 21).sums;
  CHECK(stored == from_zero);
  CHECK(largest_stored == largest_one);
  // A NaN or an infinity: not finite, left out of the sums, not the largest.
  // (33 values: both vector widths' blocks hold the NaN and the infinity, the tail does not.)
  std::vector<float> bad(33);
  for (size_t i = 0; i < bad.size(); ++i) bad[i] = static_cast<float>(i) + 1.0f;
  bad[1] = std::nanf("");
  bad[20] = -INFINITY;
  bad[25] = 100.0f;
  const Folded want = fold_by_definition(bad, std::vector<int64_t>(bad.size()), 3);
  std::vector<int64_t> sums(bad.size());
  float largest = 0;
  bool finite = true;
  ddp::exact::fold(bad.data(), static_cast<int64_t>(bad.size()), sums.data(), 3, largest, finite);
  CHECK_FALSE(finite);
  CHECK(sums == want.sums);
  CHECK(largest == want.largest);
}

}  // namespace

TEST_CASE("The exact sum's vector unfold gives the scalar expression's bits: ties, the int64 range, the tail",
          "[ddp][exact]") {
  t::Generator g(23);
  std::vector<int64_t> sums;
  for (int i = 0; i < 997; ++i) {  // magnitudes from 1 to 2^62, both signs; 997: a tail of 1
    const auto magnitude = static_cast<int64_t>(g.random64() >> (2 + g.random64() % 61));
    sums.push_back(g.random64() % 2 == 0 ? magnitude : -magnitude);
  }
  // int64s a double cannot hold: halfway between two doubles (ties to even) and beside them.
  for (int64_t v : {(int64_t{1} << 53) + 1, (int64_t{1} << 53) + 3, (int64_t{1} << 54) + 2, (int64_t{1} << 62) - 1,
                    -(int64_t{1} << 62) + 1, -(int64_t{1} << 53) - 1, int64_t{0}, int64_t{-1}, int64_t{1} << 32}) {
    sums.push_back(v);
  }
  tinyddp::testing::for_each_cpu_isa([&] {  // 1 and 8 chunks: by the reciprocal; 3 and 12 divided
    for (double chunks : {1.0, 3.0, 8.0, 12.0}) {
      for (int scale : {0, 30, 58, 1040}) {
        INFO(chunks << " chunks, scale " << scale);
        const double factor = std::ldexp(1.0, -scale);
        std::vector<float> floats(sums.size());
        std::vector<double> doubles(sums.size());
        ddp::exact::unfold(sums.data(), static_cast<int64_t>(sums.size()), scale, chunks, floats.data());
        ddp::exact::unfold(sums.data(), static_cast<int64_t>(sums.size()), scale, chunks, doubles.data());
        size_t differ = 0;
        for (size_t i = 0; i < sums.size(); ++i) {
          const double want = static_cast<double>(sums[i]) * factor / chunks;
          differ += std::memcmp(&doubles[i], &want, sizeof want) != 0;
          const float want_float = static_cast<float>(want);
          differ += std::memcmp(&floats[i], &want_float, sizeof want_float) != 0;
        }
        CHECK(differ == 0);
      }
    }
  });
}
