// This core's floating-point peak, measured and derived, for the matmul targets of
// bench/README.md: the clock from a chain of dependent integer adds (one cycle each), the
// float32 FMA throughput of 256-bit (AVX2) and, where the CPU has it, 512-bit (AVX-512)
// registers from independent chains, and from the two the number of FMA units:
//   peak GFLOP/s = FMA units x lanes x 2 (multiply and add) x clock.
// Prints one JSON object (bench/compare.py reads it). Build with -c opt.
#include <immintrin.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "tinyddp/tensor/cpu_isa.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Cycles per second: 64 dependent adds per iteration, each one cycle on every x86-64 core.
double clock_ghz() {
  constexpr uint64_t kIterations = 20'000'000;
  uint64_t x = 0;
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < kIterations; ++i) {
#define TDDP_ADD8 "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
    asm volatile(TDDP_ADD8 TDDP_ADD8 TDDP_ADD8 TDDP_ADD8 TDDP_ADD8 TDDP_ADD8 TDDP_ADD8 TDDP_ADD8 : "+r"(x));
#undef TDDP_ADD8
  }
  return 64.0 * kIterations / seconds_since(start) / 1e9;
}

// GFLOP/s of 12 independent FMA chains on vectors V (enough to cover latency x units on
// current cores); the asm barrier keeps each accumulator in its register.
template <typename V, typename Fma, typename Set>
double fma_gflops(Fma fma, Set set, int lanes) {
  constexpr uint64_t kIterations = 50'000'000;
  V acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = set(static_cast<float>(i));
  const V a = set(0.999999f), b = set(1e-7f);
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < kIterations; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) {
      acc[j] = fma(acc[j], a, b);
      asm volatile("" : "+x"(acc[j]));
    }
  }
  const double elapsed = seconds_since(start);
  float sink = 0;
  for (int i = 0; i < 12; ++i) sink += reinterpret_cast<const float*>(&acc[i])[0];
  if (std::isnan(sink)) std::puts("");  // keeps the result alive
  return 12.0 * kIterations * lanes * 2 / elapsed / 1e9;
}

double avx2_gflops() {
  return fma_gflops<__m256>([](__m256 x, __m256 a, __m256 b) { return _mm256_fmadd_ps(x, a, b); },
                            [](float v) { return _mm256_set1_ps(v); }, 8);
}

__attribute__((target("avx512f"))) double avx512_gflops() {
  return fma_gflops<__m512>([](__m512 x, __m512 a, __m512 b) __attribute__((target("avx512f"))) {
    return _mm512_fmadd_ps(x, a, b);
  }, [](float v) __attribute__((target("avx512f"))) { return _mm512_set1_ps(v); }, 16);
}

// The best of `rounds` runs (the machine is shared; the best is the least disturbed).
template <typename F>
double best_of(int rounds, F f) {
  double best = 0;
  for (int i = 0; i < rounds; ++i) best = std::max(best, f());
  return best;
}

}  // namespace

int main() {
  using tinyddp::tensor::CpuIsa;
  const double ghz = best_of(5, clock_ghz);
  const double avx2 = best_of(5, avx2_gflops);
  const bool has512 = tinyddp::tensor::cpu_has(CpuIsa::kAvx512);
  const double avx512 = has512 ? best_of(5, avx512_gflops) : 0.0;
  // FMA units: measured FLOP per cycle over (lanes x 2), rounded.
  const double units256 = std::round(avx2 / ghz / 16.0);
  const double units512 = has512 ? std::round(avx512 / ghz / 32.0) : 0.0;
  const bool use512 = tinyddp::tensor::cpu_isa() == CpuIsa::kAvx512;
  const double peak = use512 ? units512 * 16 * 2 * ghz : units256 * 8 * 2 * ghz;
  std::printf(
      "{\"clock_ghz\": %.3f, \"fma_avx2_gflops\": %.1f, \"fma_units_256\": %.0f, \"fma_avx512_gflops\": %.1f, "
      "\"fma_units_512\": %.0f, \"isa\": \"%s\", \"peak_gflops\": %.1f, \"peak_formula\": \"%.0f FMA units x %d lanes x "
      "2 x %.2f GHz\", \"summary\": \"%s\"}\n",
      ghz, avx2, units256, avx512, units512, use512 ? "avx512" : "avx2", peak, use512 ? units512 : units256,
      use512 ? 16 : 8, ghz, tinyddp::tensor::cpu_kernels_summary().c_str());
  return 0;
}
