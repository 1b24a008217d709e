// tensor/cpu_isa.h: chooses the CPU kernels' instruction set and hands out the matching table
// of isa/kernels.h. Compiled once, for the baseline (not in isa/, whose files are compiled once
// per instruction set).
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <fstream>

#include "tinyddp/base/error.h"
#include "tinyddp/tensor/backends/cpu/algorithms.h"
#include "tinyddp/tensor/backends/cpu/isa/kernels.h"
#include "tinyddp/tensor/cpu_isa.h"

namespace tinyddp::tensor {

namespace {

constexpr const char* kVariable = "TINYDDP_CPU_ISA";

// set_cpu_isa's choice, or -1 to use the one resolved from the environment.
std::atomic<int> forced_isa{-1};

// The table of the selected instruction set, once known: the kernels' hot path is one load.
std::atomic<const cpu::IsaKernels*> selected_kernels{nullptr};

const cpu::IsaKernels& kernels_of(CpuIsa isa) {
  return isa == CpuIsa::kAvx512 ? cpu::avx512_kernels() : cpu::avx2_kernels();
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    if (start != std::string::npos) return line.substr(start);
  }
  return "unknown CPU";
}

}  // namespace

std::string_view cpu_isa_name(CpuIsa isa) { return isa == CpuIsa::kAvx512 ? "avx512" : "avx2"; }

bool cpu_has(CpuIsa isa) {
  // libgcc's cpuid reading, which also checks (xgetbv) that the OS saves the vector registers.
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (isa == CpuIsa::kAvx2) return avx2;
  // x86-64-v4, what -march=x86-64-v4 lets the compiler use.
  return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}

CpuIsa resolve_cpu_isa(std::string_view request, bool cpu_has_avx512) {
  std::string value(request);
  std::transform(value.begin(), value.end(), value.begin(), [](unsigned char c) { return std::tolower(c); });
  if (value.empty() || value == "auto") return cpu_has_avx512 ? CpuIsa::kAvx512 : CpuIsa::kAvx2;
  if (value == "avx2") return CpuIsa::kAvx2;
  TDDP_CHECK(value == "avx512", "{}='{}' names no instruction set: use avx2, avx512 or auto (this CPU, {}, {})",
             kVariable, request, cpu_model(), cpu_has_avx512 ? "has AVX-512" : "has AVX2 but not AVX-512");
  TDDP_CHECK(cpu_has_avx512,
             "{}=avx512, but this CPU ({}) cannot run AVX-512 code: x86-64-v4 needs avx512f, avx512bw, avx512cd, "
             "avx512dq and avx512vl, and the OS must enable them. Use {}=avx2 or auto.",
             kVariable, cpu_model(), kVariable);
  return CpuIsa::kAvx512;
}

CpuIsa cpu_isa() {
  const int forced = forced_isa.load(std::memory_order_relaxed);
  if (forced >= 0) return static_cast<CpuIsa>(forced);
  // Resolved once; if it throws, the next call tries (and throws) again.
  static const CpuIsa from_environment = [] {
    const char* request = std::getenv(kVariable);
    return resolve_cpu_isa(request ? request : "", cpu_has(CpuIsa::kAvx512));
  }();
  return from_environment;
}

void set_cpu_isa(CpuIsa isa) {
  TDDP_CHECK(cpu_has(isa), "set_cpu_isa: this CPU ({}) cannot run {} code", cpu_model(), cpu_isa_name(isa));
  forced_isa.store(static_cast<int>(isa), std::memory_order_relaxed);
  selected_kernels.store(&kernels_of(isa), std::memory_order_release);
}

std::string cpu_kernels_summary() {
  return fmt::format("{}: {} (matmul: {})", cpu_model(), cpu_isa_name(cpu_isa()), cpu::matmul_engine());
}

std::string cpu_bf16_matmul_engine(int64_t n, int64_t k, int64_t m) { return cpu::bf16_matmul_engine(n, k, m); }

namespace cpu {

const IsaKernels& isa_kernels() {
  if (const IsaKernels* kernels = selected_kernels.load(std::memory_order_acquire)) return *kernels;
  const IsaKernels& kernels = kernels_of(cpu_isa());  // throws for a bad TINYDDP_CPU_ISA
  selected_kernels.store(&kernels, std::memory_order_release);
  return kernels;
}

}  // namespace cpu

}  // namespace tinyddp::tensor
