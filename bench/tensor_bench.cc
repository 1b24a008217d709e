// Tensor benchmarks (Google Benchmark): float32 matmul at 256/512/1024 and an elementwise
// add of 16 M floats. Build with -c opt; bench/compare.py runs this beside PyTorch.
#include "bench/bench_main.h"

#include <iostream>

#include "tinyddp/tensor/all.h"

namespace t = tinyddp::tensor;

namespace {

// c = a @ b for n x n float32 operands; b is a transposed view when `transposed_b`.
void run_matmul(benchmark::State& state, bool transposed_b) {
  const int64_t n = state.range(0);
  t::Generator g(0);
  const t::Tensor a = t::randn({n, n}, {}, &g);
  const t::Tensor b = transposed_b ? t::randn({n, n}, {}, &g).t() : t::randn({n, n}, {}, &g);
  for (auto _ : state) {
    t::Tensor c = t::matmul(a, b);
    benchmark::DoNotOptimize(c.raw_data_ptr());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

void BM_Matmul(benchmark::State& state) { run_matmul(state, false); }
BENCHMARK(BM_Matmul)->Arg(256)->Arg(512)->Arg(1024)->Unit(benchmark::kMillisecond);

// x @ W^T, the Linear layer's product: the transposed view is used in place.
void BM_MatmulTransposedB(benchmark::State& state) { run_matmul(state, true); }
BENCHMARK(BM_MatmulTransposedB)->Arg(1024)->Unit(benchmark::kMillisecond);

void BM_Add(benchmark::State& state) {
  const int64_t n = state.range(0);
  t::Generator g(0);
  const t::Tensor a = t::randn({n}, {}, &g);
  const t::Tensor b = t::randn({n}, {}, &g);
  for (auto _ : state) {
    t::Tensor c = t::add(a, b);
    benchmark::DoNotOptimize(c.raw_data_ptr());
  }
  // Bytes moved: read a and b, write c.
  state.SetBytesProcessed(state.iterations() * 3 * n * static_cast<int64_t>(sizeof(float)));
}
BENCHMARK(BM_Add)->Arg(16 << 20)->Unit(benchmark::kMillisecond);

void BM_AddInPlace(benchmark::State& state) {
  const int64_t n = state.range(0);
  t::Generator g(0);
  const t::Tensor a = t::randn({n}, {}, &g);
  const t::Tensor b = t::randn({n}, {}, &g);
  for (auto _ : state) {
    a.add_(b);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 3 * n * static_cast<int64_t>(sizeof(float)));
}
BENCHMARK(BM_AddInPlace)->Arg(16 << 20)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) { return tinyddp::bench::run_benchmarks(argc, argv, "tensor_bench"); }
