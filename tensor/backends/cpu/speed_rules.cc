// The CPU backend's speed rules, in one file: which library or kernel takes which shape on
// which instruction set and CPU, each rule with the measurement behind it (bench/README.md).
// The plain kernels they choose among live beside their families (conv.cc, matmul.cc, isa/).
// - Convolution (CpuBackend::conv2d and its two backward passes, conv2d_native): bfloat16 on
//   oneDNN where it is used (onednn_conv.cc); float32 on the direct kernels (conv.cc,
//   isa/conv_kernels.cc) where they beat im2col + GEMM; false elsewhere, and tensor/native/conv.cc
//   takes the im2col route.
// - Matrix products (gemm_engine, matmul.cc's float_mm): OpenBLAS, oneDNN's sgemm, or Eigen's
//   build for the selected instruction set (or its AVX2 build), by the product's size, its
//   number of terms, the kernels OpenBLAS picked and the CPU's maker and family.
#include <cpuid.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <optional>
#include <string>

#include "tinyddp/tensor/backends/cpu/algorithms.h"
#include "tinyddp/tensor/backends/cpu/backend.h"
#include "tinyddp/tensor/backends/cpu/isa/kernels.h"
#include "tinyddp/tensor/backends/cpu/onednn.h"
#include "tinyddp/tensor/cpu_isa.h"

// OpenBLAS's kernel selection (libopenblas-dev; see matmul.cc for why it is declared here).
extern "C" {
void openblas_set_num_threads(int threads);
char* openblas_get_corename(void);
}

namespace tinyddp::tensor::cpu {

namespace {

// Small feature maps: a direct convolution instead of im2col + GEMM, for the forward and for
// the input's gradient. At the digits CNN's second layer (16 -> 32 channels, 4x4) writing the
// column matrix and reordering the GEMM's output cost as much as the product itself
// (bench/README.md). float32, stride 1, dilation 1, one group, at least 8 input channels, the
// channels it writes a multiple of 8, and either at most 64 output positions or a "same"
// convolution (output as large as the input) of any size, which the position-vector kernels
// do without the column matrix and its packing (the larger layer of bench/conv_bench.cc:
// forward 27.5 -> 23.6 ms).
constexpr int64_t kDirectMaxPositions = 64;

bool small_map(const Window2d& win, int64_t out_channels) {
  return win.oh * win.ow <= kDirectMaxPositions &&
         conv2d_direct_fits(win.c, out_channels, win.padded_h(), win.padded_w());
}

// The weight's gradient, directly, where the forward was direct.
bool direct_weight_grad_applies(const Window2d& win, int64_t out_channels) {
  return small_map(win, out_channels) || conv2d_same_size_fits(out_channels, win);
}

bool direct_applies(DType dtype, const Window2d& win, int64_t out_channels, int64_t groups) {
  return dtype == kFloat32 && groups == 1 && win.sh == 1 && win.sw == 1 && win.dh == 1 && win.dw == 1 && win.c >= 8 &&
         direct_weight_grad_applies(win, out_channels);
}

// The input's gradient, directly: a convolution of grad_out with padding k - 1 - p.
bool direct_input_grad_applies(const Window2d& win, int64_t out_channels) {
  return win.ph <= win.kh - 1 && win.pw <= win.kw - 1 &&
         (conv2d_direct_fits(out_channels, win.c, win.oh + 2 * (win.kh - 1 - win.ph),
                             win.ow + 2 * (win.kw - 1 - win.pw)) ||
          conv2d_same_size_fits(win.c, win));
}

}  // namespace

bool CpuBackend::conv2d(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Window2d& window, int64_t groups) {
  if (x.dtype() == kBFloat16) return onednn_conv2d(out, x, weight, bias, window, groups);
  if (!direct_applies(x.dtype(), window, out.size(1), groups)) return false;
  conv2d_direct(out, x, weight, bias, window, false);
  return true;
}

bool CpuBackend::conv2d_backward_input(const Tensor& grad_x, const Tensor& grad_out, const Tensor& weight,
                                       const Window2d& window, int64_t groups) {
  if (grad_out.dtype() == kBFloat16) return onednn_conv2d_backward_input(grad_x, grad_out, weight, window, groups);
  const int64_t out_channels = grad_out.size(1);
  if (!direct_applies(grad_out.dtype(), window, out_channels, groups) ||
      !direct_input_grad_applies(window, out_channels)) {
    return false;
  }
  conv2d_direct(grad_x, grad_out, weight, Tensor(), window, true);
  return true;
}

bool CpuBackend::conv2d_backward_weight(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& x,
                                        const Window2d& window, int64_t groups) {
  if (grad_out.dtype() == kBFloat16) return onednn_conv2d_backward_weight(grad_weight, grad_out, x, window, groups);
  if (!direct_applies(grad_out.dtype(), window, grad_out.size(1), groups)) return false;
  conv2d_direct_weight_grad(grad_weight, x, grad_out, window);
  return true;
}

bool CpuBackend::conv2d_native(const Window2d& window, int64_t out_channels, int64_t groups, bool bias, DType dtype) {
  return dtype != kBFloat16 || conv2d_bf16_served(window, out_channels, groups, bias);
}

// ---- Matrix products ----------------------------------------------------------------------

namespace {

std::string lowercase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// The OpenBLAS kernel set picked for this CPU ("Haswell", "SkylakeX", ...), lowercased, and
// the instruction set it uses, if it is one of ours. OpenBLAS runs on one thread: the
// intra-op threads cut products into blocks (gemm_split).
struct OpenBlasCore {
  std::string name;
  std::optional<CpuIsa> isa;
  bool intel_kernels_on_amd = false;  // an Intel kernel set OpenBLAS picked for an AMD CPU
  bool zen = false;                   // its Zen kernel set (kZenKernelsMinTerms)
};

const OpenBlasCore& openblas_core() {
  static const OpenBlasCore core = [] {
    openblas_set_num_threads(1);
    OpenBlasCore c{openblas_get_corename(), std::nullopt};
    const std::string name = lowercase(c.name);
    // OpenBLAS 0.3.21 predates Zen 4 and gives it the Intel kernels its features match
    // (Cooperlake); there Eigen's GEMM was as fast or faster on every shape measured (up to
    // 12% on the MLP's 128 x 1024 x 1024 products; bench/README.md, "AMD EPYC (Zen 4 ...").
    // So OpenBLAS's Intel AVX-512 kernels count only on Intel CPUs.
    const bool intel_avx512 = name == "skylakex" || name == "cooperlake" || name == "sapphirerapids";
    c.intel_kernels_on_amd = intel_avx512 && __builtin_cpu_is("amd");
    if (intel_avx512 && !c.intel_kernels_on_amd) c.isa = CpuIsa::kAvx512;
    c.zen = name == "zen";
    if (name == "haswell" || c.zen) c.isa = CpuIsa::kAvx2;
    return c;
  }();
  return core;
}

// TINYDDP_CPU_MATMUL: "eigen", "openblas" or "onednn" force an engine; unset or "auto" choose.
std::optional<GemmEngine> forced_engine() {
  static const std::optional<GemmEngine> forced = []() -> std::optional<GemmEngine> {
    const char* value = std::getenv("TINYDDP_CPU_MATMUL");
    const std::string v = lowercase(value ? value : "");
    if (v.empty() || v == "auto") return std::nullopt;
    if (v == "eigen") return GemmEngine::kEigen;
    if (v == "onednn") return GemmEngine::kOneDnn;
    TDDP_CHECK(v == "openblas", "TINYDDP_CPU_MATMUL='{}' names no matmul engine: use auto, eigen, openblas or onednn",
               value);
    return GemmEngine::kOpenBlas;
  }();
  return forced;
}

// Below this many multiply-adds Eigen's GEMM is the faster one (it has less to set up): on
// the development machine (Zen 3, AVX2) Eigen took 49 us for 128^3 against OpenBLAS's 61,
// 106 against 114 for 160^3, and 67 against 109 for 128 x 10 x 1024; from 192^3 (7.1 M)
// OpenBLAS led, 167 us against 331 (bench/README.md, "Choosing the GEMM").
constexpr int64_t kOpenBlasMinWork = 5'000'000;

// An AMD CPU of family 0x19 with AVX-512: Zen 4, which runs each 512-bit FMA as two 256-bit
// halves (//bench:cpu_peak: one 512-bit unit against two 256-bit ones, the same peak). There
// Eigen's AVX2 build ran the large products 4-11% faster than its AVX-512 build (1024^3:
// 19.9-20.6 ms against 21.0-21.4; the MLP's h @ W2^T: 2.74-2.87 against 3.08-3.10), while the
// AVX-512 build kept the narrow ones (128 x 1024 x 10: 0.045 ms against 0.050); bench/README.md.
bool zen4_with_avx512() {
  static const bool zen4 = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__builtin_cpu_is("amd") || !cpu_has(CpuIsa::kAvx512) || !__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
    const unsigned family = ((eax >> 8) & 0xf) + ((eax >> 20) & 0xff);
    return family == 0x19;
  }();
  return zen4;
}

// An Intel CPU with AVX-512 selected now (read at each product, as the selection may change
// at run time: set_cpu_isa, as large_products_on_avx2 below): there oneDNN's sgemm ran every
// float32 product shape measured 13-23% faster than OpenBLAS's SkylakeX kernels (1024^3: 188.7
// GFLOP/s against 167.4; the MLP's x @ W1^T: 172.9 against 145.1; bench/README.md, "Intel
// AVX-512: oneDNN's sgemm"), and where OpenBLAS 0.3.21 does not know the CPU it falls back to
// older kernels while oneDNN dispatches by its own table. AMD CPUs keep OpenBLAS or Eigen (Zen
// 4 not measured with it).
bool intel_avx512_selected() { return cpu_isa() == CpuIsa::kAvx512 && __builtin_cpu_is("intel"); }

// Whether the large products go to Eigen's AVX2 build although AVX-512 is selected.
bool large_products_on_avx2() { return cpu_isa() == CpuIsa::kAvx512 && zen4_with_avx512(); }

// On Zen 4 the AVX2 build blocks its products for a 64 KiB level-1 cache rather than the 32
// KiB it has: deeper panels, 1-2% faster on every MLP product and 1024^3 (the MLP's h @ W2^T:
// 100.4-101.4 GFLOP/s -> 102.6-102.8; bench/README.md, "AMD EPYC (Zen 4").
constexpr int64_t kZen4L1Blocking = 64 << 10;

// What decides the engine, worked out once: a forced engine, or the kernel table whose
// instruction set OpenBLAS's kernels use (null if neither).
struct EnginePolicy {
  std::optional<GemmEngine> forced;
  const IsaKernels* openblas_table = nullptr;
};

const EnginePolicy& engine_policy() {
  static const EnginePolicy policy = [] {
    EnginePolicy p{forced_engine(), nullptr};
    if (zen4_with_avx512()) avx2_kernels().set_gemm_l1_blocking(kZen4L1Blocking);
    const std::optional<CpuIsa> isa = openblas_core().isa;
    if (isa == CpuIsa::kAvx2) p.openblas_table = &avx2_kernels();
    if (isa == CpuIsa::kAvx512 && cpu_has(CpuIsa::kAvx512)) p.openblas_table = &avx512_kernels();
    return p;
  }();
  return policy;
}

// OpenBLAS's Zen kernel set (Zen 2 and 3, and Zen 4 if made to load it) slows down on
// products of few terms: with it, on the Zen 4 machine under the AVX2 selection, 1024 x k x
// 1024 ran at 97-98 GFLOP/s for k = 128 (the MLP's weight gradients g^T @ h, whichever
// operand is transposed) and 87 for k = 64, where Eigen's AVX2 build ran 103-105 and 99-101;
// from k = 256 on they were even (103). The Zen 3 machine had shown the same lead, less
// clearly (g^T @ h: Eigen 73-80, OpenBLAS 67-79). bench/README.md, "Few terms on Zen kernels".
constexpr int64_t kZenKernelsMinTerms = 129;

}  // namespace

// x @ W^T on few rows where oneDNN would take it: oneDNN's sgemm packs all of W for every call,
// which the dots loop (isa/gemm_kernels.cc) reads once in place. On the model-167 AMX Xeon at
// one thread (`bazel-bin/bench/tensor_bench --benchmark_filter=BM_FewRowsGemm`, each engine
// forced, bench/README.md): 8-16 rows of 512-4096 terms 0.42-0.79x oneDNN's time (16 x 1024 x
// 1024, a chunk of train --deterministic: 0.27 ms against 0.42), 32 rows 0.87-0.94x, 2 rows
// even; 256 terms lost at 2 and 32 rows, 128 at every count, and 48 rows lost (1.03-1.36x).
// Within the dots loop's own bounds (gemm_kernels.cc: narrow_gemm takes these shapes there).
constexpr int64_t kDotsBeforeOneDnnMostRows = 32, kDotsBeforeOneDnnMinTerms = 512;
bool dots_before_onednn(int64_t n, int64_t k, bool transposed_b) {
  return transposed_b && n >= 2 && n <= kDotsBeforeOneDnnMostRows && k >= kDotsBeforeOneDnnMinTerms;
}

// The engine of a float32 or float64 product of n x k x m (transposed_b: a row-major and b
// column-major, as Linear's x @ W^T).
GemmEngine gemm_engine(int64_t n, int64_t k, int64_t m, bool transposed_b, bool f32) {
  const EnginePolicy& policy = engine_policy();
  if (policy.forced) return *policy.forced == GemmEngine::kOneDnn && !f32 ? GemmEngine::kOpenBlas : *policy.forced;
  const int64_t work = n * k * m;
  if (work < kOpenBlasMinWork) return GemmEngine::kEigen;
  if (f32 && intel_avx512_selected()) {
    return dots_before_onednn(n, k, transposed_b) ? GemmEngine::kEigen : GemmEngine::kOneDnn;
  }
  if (&isa_kernels() == policy.openblas_table && (k >= kZenKernelsMinTerms || !openblas_core().zen))
    return GemmEngine::kOpenBlas;
  return large_products_on_avx2() ? GemmEngine::kEigenAvx2 : GemmEngine::kEigen;
}

std::string matmul_engine() {
  const OpenBlasCore& core = openblas_core();
  if (const std::optional<GemmEngine> forced = forced_engine()) {
    if (*forced == GemmEngine::kOneDnn)
      return fmt::format("oneDNN (float32), OpenBLAS, {} kernels (float64) (forced)", core.name);
    return *forced == GemmEngine::kOpenBlas ? fmt::format("OpenBLAS, {} kernels (forced)", core.name)
                                            : fmt::format("Eigen, {} build (forced)", cpu_isa_name(cpu_isa()));
  }
  // float32's engine for the large products when oneDNN takes them: "oneDNN for float32, ".
  const std::string onednn = intel_avx512_selected() ? "oneDNN for float32, " : "";
  if (core.isa == cpu_isa()) {
    return fmt::format("{}OpenBLAS, {} kernels, from {} multiply-adds{}; Eigen, {} build, below", onednn, core.name,
                       kOpenBlasMinWork, core.zen ? fmt::format(" and {} terms", kZenKernelsMinTerms) : "",
                       cpu_isa_name(cpu_isa()));
  }
  const std::string openblas = fmt::format("OpenBLAS picked its {} kernels{}", core.name,
                                           core.intel_kernels_on_amd ? ", made for Intel CPUs" : "");
  if (large_products_on_avx2()) {
    return fmt::format("Eigen, avx2 build, from {} multiply-adds (Zen 4); Eigen, avx512 build, below ({})",
                       kOpenBlasMinWork, openblas);
  }
  if (!onednn.empty()) {
    return fmt::format("oneDNN for float32 from {} multiply-adds; Eigen, {} build, below and for float64 ({})",
                       kOpenBlasMinWork, cpu_isa_name(cpu_isa()), openblas);
  }
  return fmt::format("Eigen, {} build ({})", cpu_isa_name(cpu_isa()), openblas);
}

}  // namespace tinyddp::tensor::cpu
