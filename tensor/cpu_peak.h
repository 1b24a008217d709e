// This core's floating-point peak, measured: the clock from a chain of dependent integer adds
// (one cycle each), the float32 FMA throughput of 256-bit (AVX2) and, where the CPU has it,
// 512-bit (AVX-512) registers from independent chains, and from the two the number of FMA
// units:  peak GFLOP/s = FMA units x lanes x 2 (multiply and add) x clock,  for the
// instruction set the kernels use (cpu_isa.h). bench/cpu_peak prints it for the benchmark
// tables; train_gpt --dataset divides its achieved FLOP/s by it (times its intra-op threads)
// for nanoGPT's MFU line.
#pragma once

#include <cstdint>
#include <string>

namespace tinyddp::tensor {

struct CpuPeak {
  double clock_ghz = 0, fma_avx2_gflops = 0, fma_avx512_gflops = 0;
  double fma_units_256 = 0, fma_units_512 = 0;
  bool avx512 = false;     // whether the kernels use AVX-512 (the peak below is for it)
  double peak_gflops = 0;  // one core
  std::string formula;     // "2 FMA units x 8 lanes x 2 x 3.10 GHz"
};

// The best of `rounds` measurements of each (the best is the least disturbed on a shared
// machine). `scale` sets their length: 1 is the benchmark's (about 2 s in all); 0.05 takes
// about 0.1 s, for a program's start.
CpuPeak measure_cpu_peak(int rounds = 5, double scale = 1.0);

}  // namespace tinyddp::tensor
