// Which instruction set the CPU kernels use. tinyddp is compiled for x86-64-v3 (AVX2 + FMA),
// so one binary runs on any such host; its hot kernels (matmul, the elementwise and reduction
// loops, softmax rows, the SGD step) are compiled a second time for x86-64-v4 (AVX-512), and
// cpu_isa() picks one set once, at the first kernel call, from what the CPU reports (cpuid):
// AVX-512 where the CPU and OS support it, AVX2 otherwise.
//
// The environment variable TINYDDP_CPU_ISA overrides the choice: "avx2" forces the baseline
// (so both paths can be tested and timed on one AVX-512 machine), "avx512" insists on
// AVX-512, "auto" (or unset) picks. A value the CPU cannot run, or one that names nothing, is
// an Error at that first call that says what the CPU has; never an illegal instruction.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tinyddp::tensor {

enum class CpuIsa { kAvx2, kAvx512 };

std::string_view cpu_isa_name(CpuIsa isa);  // "avx2", "avx512"

// Whether this CPU (and its OS, which must save the wider registers) can run `isa`'s kernels.
bool cpu_has(CpuIsa isa);

// The instruction set the CPU kernels use (resolved from TINYDDP_CPU_ISA on the first call).
CpuIsa cpu_isa();

// Switches the CPU kernels to `isa` for the rest of the process (tests and benchmarks that
// compare both paths). Throws if the CPU lacks it. Not for use while kernels run on other threads.
void set_cpu_isa(CpuIsa isa);

// What TINYDDP_CPU_ISA=`request` selects on a CPU that has AVX-512 or not: "auto" and "" pick,
// "avx2" and "avx512" force (case-insensitive). Throws an Error naming the variable, the value
// and what the CPU has when the value is unknown or needs what the CPU lacks.
CpuIsa resolve_cpu_isa(std::string_view request, bool cpu_has_avx512);

// One line for logs and benchmark tables: the CPU model, the instruction set chosen and the
// matmul engines, e.g. "AMD EPYC: avx2 (matmul: OpenBLAS, Zen kernels, from 5000000
// multiply-adds; Eigen, avx2 build, below)".
std::string cpu_kernels_summary();

// What bfloat16 matmuls run on now, in words: oneDNN's kernel (e.g. "oneDNN
// brg:avx512_core_bf16", or brg:avx512_core_amx with AMX) under AVX-512, else the float32
// kernels with the result rounded. The kernel is the one oneDNN picks for a row-major n x k by
// k x m product (it may differ by shape).
std::string cpu_bf16_matmul_engine(int64_t n = 64, int64_t k = 64, int64_t m = 64);

}  // namespace tinyddp::tensor
