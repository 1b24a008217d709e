// ddp::exact::fold_products, the deterministic option's weight products folded from registers
// into the int64 sums: against its definition (each product's element a float32 chain of fused
// multiply-adds over its terms, from zero, then rounded onto the grid and added) computed
// here one element at a time, under AVX2 and (where the CPU has it) AVX-512; every block shape
// and tail, strided and broadcast factors, a part of the rows, the sums stored or added, the
// bounds alone, one product's float32 values (product_values), and a NaN.
#include <cmath>
#include <cstring>
#include <vector>

#include "tests/test_util.h"
#include "tinyddp/ddp/exact_fold.h"
#include "tinyddp/tensor/cpu_isa.h"
#include "tinyddp/tensor/random.h"

using namespace tinyddp;
namespace t = tinyddp::tensor;
using ddp::exact::Into;
using ddp::exact::Product;

namespace {

// A product's factors, laid out as given: g [k, n] at g_row, g_col; x [k, m] at x_row.
struct Factors {
  std::vector<float> g, x;
  Product product;
};

Factors make_factors(t::Generator& gen, int64_t k, int64_t n, int64_t m, bool g_transposed, bool g_broadcast,
                     int64_t x_pad) {
  Factors f;
  const int64_t x_row = m + x_pad;
  f.g.resize(static_cast<size_t>(k * n));
  f.x.resize(static_cast<size_t>(k * x_row));
  // Magnitudes over several decades, both signs, some exact zeros.
  const auto draw = [&] {
    const double u = gen.uniform_double(), v = gen.uniform_double();
    if (v < 0.05) return 0.0f;
    return static_cast<float>((v < 0.5 ? -1 : 1) * std::ldexp(0.5 + u / 2, static_cast<int>(v * 12) - 6));
  };
  for (float& v : f.g) v = draw();
  for (float& v : f.x) v = draw();
  int64_t g_row = n, g_col = 1;
  if (g_transposed) g_row = 1, g_col = k;
  if (g_broadcast) g_row = 0, g_col = 0;  // an expanded gradient: one value everywhere
  f.product = {f.g.data(), g_row, g_col, f.x.data(), x_row, k};
  return f;
}

// The definition, one element at a time.
void fold_by_definition(const std::vector<Product>& products, int64_t m, int64_t row_begin, int64_t row_end,
                        std::vector<int64_t>* sums, int scale, Into into, float& largest, bool& finite) {
  for (int64_t i = row_begin; i < row_end; ++i) {
    for (int64_t j = 0; j < m; ++j) {
      for (size_t c = 0; c < products.size(); ++c) {
        const Product& pr = products[c];
        float d = 0;
        for (int64_t p = 0; p < pr.k; ++p) d = std::fma(pr.g[p * pr.g_row + i * pr.g_col], pr.x[p * pr.x_row + j], d);
        finite = finite && std::isfinite(d);
        if (!std::isnan(d)) largest = std::max(largest, std::fabs(d));
        if (sums == nullptr) continue;
        auto& sum = reinterpret_cast<uint64_t&>((*sums)[static_cast<size_t>(i * m + j)]);
        if (c == 0 && into == Into::kStore) sum = 0;
        const double scaled = std::ldexp(static_cast<double>(d), scale);
        if (std::fabs(scaled) < 0x1p62) sum += static_cast<uint64_t>(static_cast<int64_t>(std::nearbyint(scaled)));
      }
    }
  }
}

// One product's values themselves (at one chunk per rank they leave as float32): its chains bit
// for bit in rows [begin, end), and the other rows untouched.
void check_values_against_definition(const Product& product, int64_t n, int64_t m, int64_t begin, int64_t end) {
  std::vector<float> values(static_cast<size_t>(n * m), -7.0f);
  float values_largest = 0, first_largest = 0;
  bool values_finite = true, first_finite = true;
  ddp::exact::product_values(product, m, begin, end, values.data(), values_largest, values_finite);
  fold_by_definition({product}, m, begin, end, nullptr, 0, Into::kAdd, first_largest, first_finite);
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m; ++j) {
      float d = -7.0f;
      if (i >= begin && i < end) {
        const Product& pr = product;
        d = 0;
        for (int64_t p = 0; p < pr.k; ++p) d = std::fma(pr.g[p * pr.g_row + i * pr.g_col], pr.x[p * pr.x_row + j], d);
      }
      wrong += std::memcmp(&d, &values[static_cast<size_t>(i * m + j)], sizeof d) != 0 ? 1 : 0;
    }
  }
  CHECK(wrong == 0);
  CHECK(values_largest == first_largest);
  CHECK(values_finite);
}

void check_products_against_definition() {
  t::Generator gen(23);
  int cases = 0;
  // The rows folded (n - 2 from 3 on): 1-5, 7, 11-13 and 25: every block height, alone and after
  // full blocks, under both instruction sets (AVX-512 blocks of 6 rows, AVX2 of 4).
  for (int64_t n : {1, 3, 4, 5, 6, 7, 9, 13, 14, 15, 27}) {
    for (int64_t m : {1, 7, 8, 15, 16, 17, 40, 64, 65, 100}) {
      const int64_t k = 1 + (n * 7 + m) % 19;  // 1 to 19 terms
      const int count = 1 + static_cast<int>((n + m) % 3);
      const bool transposed = (n + m) % 2 == 1, broadcast = m == 40;
      INFO("n " << n << ", m " << m << ", k " << k << ", " << count << " products"
                << (transposed ? ", g transposed" : "") << (broadcast ? ", g broadcast" : ""));
      std::vector<Factors> factors;
      std::vector<Product> products;
      for (int c = 0; c < count; ++c) factors.push_back(make_factors(gen, k, n, m, transposed, broadcast, c));
      for (const Factors& f : factors) products.push_back(f.product);
      std::vector<int64_t> start(static_cast<size_t>(n * m));
      for (int64_t& s : start) s = static_cast<int64_t>(gen.random64() >> 4) - (int64_t{1} << 58);
      // Rows [1, n - 1) where there are three or more: the others are not touched.
      const int64_t begin = n >= 3 ? 1 : 0, end = n >= 3 ? n - 1 : n;
      // Grids on both sides of the float32 one (1 <= 2^scale <= 2^127) and past it, the products
      // moved by 2^(30 - scale) to meet each (through float32's subnormals at 128 and 140), and
      // further, so that the largest land past the grid's edge (in [2^62, 2^63): 2^(30 + lift)
      // |x| with 2^(top - 1) <= |x| < 2^top) and the next binade just inside it.
      float unlifted = 0;
      bool unlifted_finite = true;
      fold_by_definition(products, m, begin, end, nullptr, 0, Into::kAdd, unlifted, unlifted_finite);
      int top = 0;
      std::frexp(unlifted, &top);
      for (int scale : {-3, 0, 30, 127, 128, 140}) {
        for (int lift : {0, 33 - top}) {
          std::vector<std::vector<float>> moved;
          std::vector<Product> at_scale = products;
          for (Product& pr : at_scale) {
            const int64_t size = pr.g_row == 0 ? 1 : pr.k * n;
            moved.emplace_back(pr.g, pr.g + size);
            for (float& v : moved.back()) v = std::ldexp(v, 30 - scale + lift);
            pr.g = moved.back().data();
          }
          for (Into into : {Into::kAdd, Into::kStore}) {
            INFO("scale " << scale << ", lifted by 2^" << lift << (into == Into::kStore ? ", stored" : ", added"));
            std::vector<int64_t> want = start, got = start;
            float want_largest = 0, got_largest = 0;
            bool want_finite = true, got_finite = true;
            fold_by_definition(at_scale, m, begin, end, &want, scale, into, want_largest, want_finite);
            ddp::exact::fold_products(at_scale.data(), count, m, begin, end, got.data(), scale, got_largest, got_finite,
                                      into);
            CHECK(got == want);
            CHECK(got_largest == want_largest);
            CHECK(got_finite);
            ++cases;
          }
        }
      }
      // The bounds alone (no sums: the grid is not agreed yet).
      float largest = 0, want_largest = 0;
      bool finite = true, want_finite = true;
      fold_by_definition(products, m, 0, n, nullptr, 0, Into::kAdd, want_largest, want_finite);
      ddp::exact::fold_products(products.data(), count, m, 0, n, nullptr, 0, largest, finite);
      CHECK(largest == want_largest);
      CHECK(finite);
      check_values_against_definition(products[0], n, m, begin, end);
    }
  }
  CHECK(cases == 11 * 10 * 6 * 2 * 2);
  // A NaN in one factor: the elements it reaches are not finite, and not the largest.
  Factors f = make_factors(gen, 5, 6, 33, false, false, 0);
  f.g[2 * 6 + 3] = std::nanf("");
  std::vector<int64_t> want(6 * 33), got(6 * 33);
  float want_largest = 0, got_largest = 0;
  bool want_finite = true, got_finite = true;
  fold_by_definition({f.product}, 33, 0, 6, &want, 10, Into::kStore, want_largest, want_finite);
  ddp::exact::fold_products(&f.product, 1, 33, 0, 6, got.data(), 10, got_largest, got_finite, Into::kStore);
  CHECK_FALSE(want_finite);
  CHECK_FALSE(got_finite);
  CHECK(got_largest == want_largest);
  CHECK(got == want);  // the NaNs (row 3) left out
}

}  // namespace

TEST_CASE("fold_products gives its definition's integers: every block and tail, strides, part of the rows",
          "[ddp][exact]") {
  tinyddp::testing::for_each_cpu_isa(check_products_against_definition);
}
