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
#define TDDP_ADD8 \
  "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
    asm volatile(TDDP_ADD8 TDDP_ADD8 TDDP_ADD8 TDDP_ADD8 TDDP_ADD8 TDDP_ADD8 TDDP_ADD8 TDDP_ADD8 : "+r"(x));
#undef TDDP_ADD8
  }
  return 64.0 * kIterations / seconds_since(start) / 1e9;
}

constexpr uint64_t kFmaIterations = 50'000'000;

// 12 independent FMA chains on vectors in named variables (enough to cover latency x units
// on current cores); the asm barrier keeps each accumulator in its register. One function per register width,
// as the 512-bit one must be compiled for AVX-512 and the 256-bit one must not.
#define TDDP_FMA_STEP(x, FMA) x = FMA(x, a, b), ({ asm volatile("" : "+v"(x)); })
#define TDDP_FMA_CHAINS(V, SET, FMA, LANES)                                                                 \
  V c0 = SET(0), c1 = SET(1), c2 = SET(2), c3 = SET(3), c4 = SET(4), c5 = SET(5), c6 = SET(6), c7 = SET(7), \
    c8 = SET(8), c9 = SET(9), c10 = SET(10), c11 = SET(11);                                                 \
  const V a = SET(0.999999f), b = SET(1e-7f);                                                               \
  const auto start = std::chrono::steady_clock::now();                                                      \
  for (uint64_t i = 0; i < kFmaIterations; ++i) {                                                           \
    TDDP_FMA_STEP(c0, FMA), TDDP_FMA_STEP(c1, FMA), TDDP_FMA_STEP(c2, FMA), TDDP_FMA_STEP(c3, FMA);         \
    TDDP_FMA_STEP(c4, FMA), TDDP_FMA_STEP(c5, FMA), TDDP_FMA_STEP(c6, FMA), TDDP_FMA_STEP(c7, FMA);         \
    TDDP_FMA_STEP(c8, FMA), TDDP_FMA_STEP(c9, FMA), TDDP_FMA_STEP(c10, FMA), TDDP_FMA_STEP(c11, FMA);       \
  }                                                                                                         \
  const double elapsed = seconds_since(start);                                                              \
  const V total = c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9 + c10 + c11;                              \
  if (std::isnan(total[0])) std::puts(""); /* keeps the results alive */                                    \
  return 12.0 * kFmaIterations * LANES * 2 / elapsed / 1e9

double avx2_gflops() { TDDP_FMA_CHAINS(__m256, _mm256_set1_ps, _mm256_fmadd_ps, 8); }

__attribute__((target("avx512f"))) double avx512_gflops() {
  TDDP_FMA_CHAINS(__m512, _mm512_set1_ps, _mm512_fmadd_ps, 16);
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
      "\"fma_units_512\": %.0f, \"isa\": \"%s\", \"peak_gflops\": %.1f, \"peak_formula\": \"%.0f FMA units x %d lanes "
      "x "
      "2 x %.2f GHz\", \"summary\": \"%s\"}\n",
      ghz, avx2, units256, avx512, units512, use512 ? "avx512" : "avx2", peak, use512 ? units512 : units256,
      use512 ? 16 : 8, ghz, tinyddp::tensor::cpu_kernels_summary().c_str());
  return 0;
}
