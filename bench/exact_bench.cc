// The exact sums' two passes over a step's gradients (ddp/exact_fold.h), at the size of the MLP
// 784-1024-1024-10 (1,863,690 values; bench/exact_compare.sh trains it): the fold of `chunks`
// chunks' float32 gradients (near 2^-10) into int64 sums on the grid 2^-64 (Into::kStore: the
// step's first fold), `values` the MLP's count or 16 K (the data stays in L2: the arithmetic
// alone), a chunk's weight products folded from registers, and the unfold of the sums into
// float32 means. TINYDDP_CPU_ISA=avx2 runs the AVX2 forms.
#include "bench/bench_main.h"

#include <cmath>
#include <vector>

#include "tinyddp/ddp/exact_fold.h"
#include "tinyddp/tensor/all.h"

namespace t = tinyddp::tensor;
namespace exact = tinyddp::ddp::exact;

namespace {

constexpr int64_t kValues = 784 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10;

void BM_ExactFold(benchmark::State& state) {
  const auto chunks = static_cast<int>(state.range(0));
  const int64_t n = state.range(1);
  t::Generator g(0);
  std::vector<t::Tensor> values;
  std::vector<const float*> pointers;
  for (int c = 0; c < chunks; ++c) {
    values.push_back(t::mul(t::randn({n}, {}, &g), 0x1p-10));
    pointers.push_back(values.back().data_ptr<float>());
  }
  std::vector<int64_t> sums(static_cast<size_t>(n));
  for (auto _ : state) {
    float largest = 0;
    bool finite = true;
    exact::fold(pointers.data(), chunks, n, sums.data(), 64, largest, finite, exact::Into::kStore);
    benchmark::DoNotOptimize(sums.data());
  }
  state.SetBytesProcessed(state.iterations() * n * (4 * chunks + 8));
}
void fold_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"chunks", "values"});
  for (int64_t values : {kValues, int64_t{16384}}) {  // the MLP's; a part that stays in L2
    for (int64_t chunks : {1, 4}) b->Args({chunks, values});
  }
  b->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_ExactFold)->Apply(fold_args);

// The weight gradient of the MLP's second layer (1024 x 1024) for `chunks` chunks of `rows` rows,
// each product's outputs folded from registers (exact::fold_products), on the grid 2^-scale:
// 64 takes the float32 form of the conversion, 130 the double one (the factors moved by
// 2^(64 - scale) so that the values sit on both grids alike).
void BM_ExactFoldProducts(benchmark::State& state) {
  const auto chunks = static_cast<int>(state.range(0));
  const int64_t rows = state.range(1);
  const auto scale = static_cast<int>(state.range(2));
  const bool bounds_only = state.range(3) == 0;  // no sums: the products and their bounds alone
  constexpr int64_t kOut = 1024, kIn = 1024;
  t::Generator g(2);
  std::vector<t::Tensor> factors;
  std::vector<exact::Product> products;
  for (int c = 0; c < chunks; ++c) {
    factors.push_back(t::mul(t::randn({rows, kOut}, {}, &g), std::ldexp(0x1p-6, 64 - scale)));
    factors.push_back(t::mul(t::randn({rows, kIn}, {}, &g), 0x1p-6));
    const t::Tensor& grad = factors[factors.size() - 2];
    const t::Tensor& x = factors.back();
    products.push_back({grad.data_ptr<float>(), kOut, 1, x.data_ptr<float>(), kIn, rows});
  }
  std::vector<int64_t> sums(static_cast<size_t>(kOut * kIn));
  for (auto _ : state) {
    float largest = 0;
    bool finite = true;
    exact::fold_products(products.data(), chunks, kIn, 0, kOut, bounds_only ? nullptr : sums.data(), scale, largest,
                         finite, exact::Into::kStore);
    benchmark::DoNotOptimize(sums.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * chunks * rows * kOut * kIn, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_ExactFoldProducts)
    ->ArgNames({"chunks", "rows", "scale", "sums"})
    ->Args({1, 16, 64, 1})
    ->Args({4, 16, 64, 1})
    ->Args({4, 16, 64, 0})
    ->Args({4, 16, 130, 1})
    ->Args({1, 64, 64, 1})
    ->Args({1, 64, 64, 0})
    ->Unit(benchmark::kMicrosecond);

void BM_ExactUnfold(benchmark::State& state) {
  t::Generator g(1);
  const t::Tensor sums = t::mul(t::randn({kValues}, t::TensorOptions().dtype(t::kFloat64), &g), 0x1p50).to(t::kInt64);
  std::vector<float> means(static_cast<size_t>(kValues));
  for (auto _ : state) {
    exact::unfold(sums.data_ptr<int64_t>(), kValues, 64, static_cast<double>(state.range(0)), means.data());
    benchmark::DoNotOptimize(means.data());
  }
  state.SetBytesProcessed(state.iterations() * kValues * 12);
}
// 12 chunks: a division per value; 8: a product by the exact reciprocal.
BENCHMARK(BM_ExactUnfold)->ArgName("chunks")->Arg(12)->Arg(8)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) { return tinyddp::bench::run_benchmarks(argc, argv, "exact_bench"); }
