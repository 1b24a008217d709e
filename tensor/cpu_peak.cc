// The measurements of cpu_peak.h: dependent adds for the clock, 12 independent FMA chains per
// register width for the throughput.
#include "tinyddp/tensor/cpu_peak.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "tinyddp/tensor/cpu_isa.h"

namespace tinyddp::tensor {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Cycles per second: 64 dependent adds per iteration, each one cycle on every x86-64 core. A
// register is added, not an immediate: Intel's Golden Cove cores (Sapphire Rapids Xeons) fold
// chains of immediate adds at register renaming, which measured 20-23 GHz on such a Xeon (and
// so 0 FMA units and an MFU of -100%); register adds measured its 3.7-4.0 GHz.
double clock_ghz(uint64_t iterations) {
  uint64_t x = 0;
  const uint64_t one = 1;
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < iterations; ++i) {
#define TDDP_ADD8 \
  "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
    asm volatile(TDDP_ADD8 TDDP_ADD8 TDDP_ADD8 TDDP_ADD8 TDDP_ADD8 TDDP_ADD8 TDDP_ADD8 TDDP_ADD8 : "+r"(x) : "r"(one));
#undef TDDP_ADD8
  }
  return 64.0 * static_cast<double>(iterations) / seconds_since(start) / 1e9;
}

// 12 independent FMA chains on vectors in named variables (enough to cover latency x units
// on current cores); the asm barrier keeps each accumulator in its register. One function
// per register width, as the 512-bit one must be compiled for AVX-512 and the 256-bit one
// must not.
#define TDDP_FMA_STEP(x, FMA) x = FMA(x, a, b), ({ asm volatile("" : "+v"(x)); })
#define TDDP_FMA_CHAINS(V, SET, FMA, LANES)                                                                 \
  V c0 = SET(0), c1 = SET(1), c2 = SET(2), c3 = SET(3), c4 = SET(4), c5 = SET(5), c6 = SET(6), c7 = SET(7), \
    c8 = SET(8), c9 = SET(9), c10 = SET(10), c11 = SET(11);                                                 \
  const V a = SET(0.999999f), b = SET(1e-7f);                                                               \
  const auto start = std::chrono::steady_clock::now();                                                      \
  for (uint64_t i = 0; i < iterations; ++i) {                                                               \
    TDDP_FMA_STEP(c0, FMA), TDDP_FMA_STEP(c1, FMA), TDDP_FMA_STEP(c2, FMA), TDDP_FMA_STEP(c3, FMA);         \
    TDDP_FMA_STEP(c4, FMA), TDDP_FMA_STEP(c5, FMA), TDDP_FMA_STEP(c6, FMA), TDDP_FMA_STEP(c7, FMA);         \
    TDDP_FMA_STEP(c8, FMA), TDDP_FMA_STEP(c9, FMA), TDDP_FMA_STEP(c10, FMA), TDDP_FMA_STEP(c11, FMA);       \
  }                                                                                                         \
  const double elapsed = seconds_since(start);                                                              \
  const V total = c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9 + c10 + c11;                              \
  if (std::isnan(total[0])) std::puts(""); /* keeps the results alive */                                    \
  return 12.0 * static_cast<double>(iterations) * LANES * 2 / elapsed / 1e9

double avx2_gflops(uint64_t iterations) { TDDP_FMA_CHAINS(__m256, _mm256_set1_ps, _mm256_fmadd_ps, 8); }

__attribute__((target("avx512f"))) double avx512_gflops(uint64_t iterations) {
  TDDP_FMA_CHAINS(__m512, _mm512_set1_ps, _mm512_fmadd_ps, 16);
}
#undef TDDP_FMA_CHAINS
#undef TDDP_FMA_STEP

template <typename F>
double best_of(int rounds, F f) {
  double best = 0;
  for (int i = 0; i < rounds; ++i) best = std::max(best, f());
  return best;
}

}  // namespace

CpuPeak measure_cpu_peak(int rounds, double scale) {
  const auto clock_iterations = static_cast<uint64_t>(20'000'000 * scale) + 1;
  const auto fma_iterations = static_cast<uint64_t>(50'000'000 * scale) + 1;
  CpuPeak p;
  p.clock_ghz = best_of(rounds, [&] { return clock_ghz(clock_iterations); });
  p.fma_avx2_gflops = best_of(rounds, [&] { return avx2_gflops(fma_iterations); });
  const bool has512 = cpu_has(CpuIsa::kAvx512);
  p.fma_avx512_gflops = has512 ? best_of(rounds, [&] { return avx512_gflops(fma_iterations); }) : 0.0;
  // FMA units: measured FLOP per cycle over (lanes x 2), rounded.
  p.fma_units_256 = std::round(p.fma_avx2_gflops / p.clock_ghz / 16.0);
  p.fma_units_512 = has512 ? std::round(p.fma_avx512_gflops / p.clock_ghz / 32.0) : 0.0;
  p.avx512 = cpu_isa() == CpuIsa::kAvx512;
  const double units = p.avx512 ? p.fma_units_512 : p.fma_units_256;
  const int lanes = p.avx512 ? 16 : 8;
  p.peak_gflops = units * lanes * 2 * p.clock_ghz;
  p.formula = fmt::format("{:.0f} FMA units x {} lanes x 2 x {:.2f} GHz", units, lanes, p.clock_ghz);
  return p;
}

}  // namespace tinyddp::tensor
