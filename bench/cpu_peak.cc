// This core's floating-point peak (tensor/cpu_peak.h: the clock, the FMA throughput of each
// register width, the FMA units, the peak of the instruction set the kernels use), for the
// matmul targets of bench/README.md. Prints one JSON object (bench/compare.py reads it).
// Build with -c opt.
#include <cstdio>

#include "tinyddp/tensor/cpu_isa.h"
#include "tinyddp/tensor/cpu_peak.h"

int main() {
  const tinyddp::tensor::CpuPeak p = tinyddp::tensor::measure_cpu_peak();
  std::printf(
      "{\"clock_ghz\": %.3f, \"fma_avx2_gflops\": %.1f, \"fma_units_256\": %.0f, \"fma_avx512_gflops\": %.1f, "
      "\"fma_units_512\": %.0f, \"isa\": \"%s\", \"peak_gflops\": %.1f, \"peak_formula\": \"%s\", \"summary\": "
      "\"%s\"}\n",
      p.clock_ghz, p.fma_avx2_gflops, p.fma_units_256, p.fma_avx512_gflops, p.fma_units_512,
      p.avx512 ? "avx512" : "avx2", p.peak_gflops, p.formula.c_str(), tinyddp::tensor::cpu_kernels_summary().c_str());
  return 0;
}
