// CPU matrix multiply: out [n, m] = a [n, k] x b [k, m]. A row-major or column-major operand
// (any leading dimension) is passed as it is, so transposed views and narrowed slices need no
// copy; other layouts are made contiguous first. bfloat16 goes to oneDNN under AVX-512
// (onednn.cc); float16, and bfloat16 below AVX-512, compute in float32; int64 uses a plain
// loop, its rows on the intra-op threads.
//
// float32/float64 go to one of three GEMM engines (docs/tensor.md, "Matmul"): on Intel CPUs
// under AVX-512, float32 products of at least kOpenBlasMinWork multiply-adds go to oneDNN's
// sgemm (onednn.cc: 13-23% faster than OpenBLAS's SkylakeX kernels on every shape measured,
// bench/README.md); otherwise OpenBLAS, whose kernels are picked at run time for the CPU (the
// library PyTorch's matmul calls on Debian), for products of at least kOpenBlasMinWork
// multiply-adds when the kernels it picked use the instruction set cpu_isa() selected;
// otherwise Eigen's GEMM compiled for that instruction set (isa/kernels.cc), except that on
// Zen 4 the large products use the AVX2 build whatever is selected (zen4_with_avx512, below),
// and that products of 128 terms or fewer stay with Eigen where OpenBLAS runs its Zen kernels
// (kZenKernelsMinTerms). TINYDDP_CPU_MATMUL=eigen, =openblas or =onednn (float32; float64 then
// goes to OpenBLAS) forces one engine, for benchmarks.
#include <cpuid.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tinyddp/tensor/cpu/algorithms.h"
#include "tinyddp/tensor/cpu/backend.h"
#include "tinyddp/tensor/cpu/isa/kernels.h"
#include "tinyddp/tensor/cpu/loops.h"
#include "tinyddp/tensor/cpu/onednn.h"
#include "tinyddp/tensor/cpu_isa.h"
#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/grad_mode.h"
#include "tinyddp/tensor/parallel.h"

// OpenBLAS's C interface (libopenblas-dev). Declared here rather than included: Debian puts
// the header in a directory named after the threading variant that happens to be installed.
extern "C" {
void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc);
void cblas_dgemm(int order, int trans_a, int trans_b, int m, int n, int k, double alpha, const double* a, int lda,
                 const double* b, int ldb, double beta, double* c, int ldc);
void openblas_set_num_threads(int threads);
char* openblas_get_corename(void);
}

namespace tinyddp::tensor::cpu {

// The layout of a 2-D tensor if a GEMM can read it in place. Size-1 dims may have any stride.
std::optional<MatrixLayout> matrix_layout(const Tensor& t) {
  const int64_t rows = t.size(0);
  const int64_t cols = t.size(1);
  const int64_t rs = rows == 1 ? std::max<int64_t>(cols, 1) : t.stride(0);
  const int64_t cs = cols == 1 ? 1 : t.stride(1);
  if (cs == 1 && rs >= std::max<int64_t>(cols, 1)) return MatrixLayout{true, rs};
  const int64_t rs_col = rows == 1 ? 1 : t.stride(0);
  const int64_t cs_col = cols == 1 ? std::max<int64_t>(rows, 1) : t.stride(1);
  if (rs_col == 1 && cs_col >= std::max<int64_t>(rows, 1)) return MatrixLayout{false, cs_col};
  return std::nullopt;
}

namespace {

constexpr int kCblasRowMajor = 101, kCblasNoTrans = 111, kCblasTrans = 112;

// kEigen: the chosen instruction set's Eigen build; kEigenAvx2: the AVX2 build whatever is
// chosen (large products on Zen 4, below).
enum class Engine { kOpenBlas, kOneDnn, kEigen, kEigenAvx2 };

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
std::optional<Engine> forced_engine() {
  static const std::optional<Engine> forced = []() -> std::optional<Engine> {
    const char* value = std::getenv("TINYDDP_CPU_MATMUL");
    const std::string v = lowercase(value ? value : "");
    if (v.empty() || v == "auto") return std::nullopt;
    if (v == "eigen") return Engine::kEigen;
    if (v == "onednn") return Engine::kOneDnn;
    TDDP_CHECK(v == "openblas", "TINYDDP_CPU_MATMUL='{}' names no matmul engine: use auto, eigen, openblas or onednn",
               value);
    return Engine::kOpenBlas;
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
  std::optional<Engine> forced;
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

// The engine of a product of `work` multiply-adds summing `terms` each, in float32 or float64.
Engine engine(int64_t work, int64_t terms, bool f32) {
  const EnginePolicy& policy = engine_policy();
  if (policy.forced) return *policy.forced == Engine::kOneDnn && !f32 ? Engine::kOpenBlas : *policy.forced;
  if (work < kOpenBlasMinWork) return Engine::kEigen;
  if (f32 && intel_avx512_selected()) return Engine::kOneDnn;
  if (&isa_kernels() == policy.openblas_table && (terms >= kZenKernelsMinTerms || !openblas_core().zen))
    return Engine::kOpenBlas;
  return large_products_on_avx2() ? Engine::kEigenAvx2 : Engine::kEigen;
}

bool fits_int(int64_t v) { return v <= INT_MAX; }

template <typename T>
void openblas_gemm(const GemmArgs<T>& g) {
  const auto call = [](auto gemm_fn, const GemmArgs<T>& x) {
    gemm_fn(kCblasRowMajor, x.a_row_major ? kCblasNoTrans : kCblasTrans, x.b_row_major ? kCblasNoTrans : kCblasTrans,
            static_cast<int>(x.n), static_cast<int>(x.m), static_cast<int>(x.k), T(1), x.a, static_cast<int>(x.lda),
            x.b, static_cast<int>(x.ldb), T(0), x.c, static_cast<int>((x.ldc > 0 ? x.ldc : x.m)));
  };
  if constexpr (std::is_same_v<T, float>) {
    call(cblas_sgemm, g);
  } else {
    call(cblas_dgemm, g);
  }
}

// How a product is cut for the intra-op threads: along its longer output side into blocks of
// at least kBlockMinWork multiply-adds and kBlockMinSide rows (or columns, in multiples of 16),
// at most one per CPU of the machine. The cut depends on the product's shape and the machine,
// never on the thread count, and every output element is one block's dot product over all of
// k by the kernel that block's shape picks: any number of threads gives the same bits. Each
// block repacks the operand it does not cut (about 1% of a 1024-wide product's time per
// block at one thread, bench/README.md), so there are no more blocks than CPUs to run them.
constexpr int64_t kBlockMinWork = int64_t(1) << 22, kBlockMinSide = 64;

// The machine's CPUs (not this process's share of them: a worker pinned to some cores cuts
// its products as an unpinned one does).
int64_t machine_cpus() {
  static const int64_t cpus = std::max(1u, std::thread::hardware_concurrency());
  return cpus;
}

struct GemmSplit {
  bool by_rows = true;
  int64_t side = 0;  // the output side that is cut
  int64_t size = 0;  // rows or columns per block (the last may have fewer)
  int64_t blocks = 1;
};

GemmSplit gemm_split(int64_t n, int64_t k, int64_t m) {
  GemmSplit s;
  s.by_rows = n >= m;
  s.side = s.by_rows ? n : m;
  const int64_t wanted = std::min({machine_cpus(), n * k * m / kBlockMinWork, s.side / kBlockMinSide});
  if (wanted <= 1) {
    s.size = s.side;
    return s;
  }
  s.size = (s.side + wanted - 1) / wanted;
  if (!s.by_rows) s.size = (s.size + 15) / 16 * 16;  // each block's first column 64-byte aligned
  s.blocks = (s.side + s.size - 1) / s.size;
  return s;
}

// Rows or columns [from, to) of g's product.
template <typename T>
GemmArgs<T> gemm_block(const GemmArgs<T>& g, bool by_rows, int64_t from, int64_t to) {
  GemmArgs<T> piece = g;
  piece.ldc = g.ldc > 0 ? g.ldc : g.m;
  if (by_rows) {
    piece.n = to - from;
    piece.a = g.a + (g.a_row_major ? from * g.lda : from);
    piece.c = g.c + from * piece.ldc;
  } else {
    piece.m = to - from;
    piece.b = g.b + (g.b_row_major ? from : from * g.ldb);
    piece.c = g.c + from;
  }
  return piece;
}

template <typename T>
void float_mm(const Tensor& out, const Tensor& a_in, const Tensor& b_in) {
  std::optional<MatrixLayout> la = matrix_layout(a_in);
  std::optional<MatrixLayout> lb = matrix_layout(b_in);
  const Tensor a = la ? a_in : backend().contiguous(a_in);
  const Tensor b = lb ? b_in : backend().contiguous(b_in);
  if (!la) la = matrix_layout(a);
  if (!lb) lb = matrix_layout(b);
  GemmArgs<T> g;
  g.n = a.size(0), g.k = a.size(1), g.m = b.size(1);
  g.a = a.data_ptr<T>(), g.lda = la->leading_dim, g.a_row_major = la->row_major;
  g.b = b.data_ptr<T>(), g.ldb = lb->leading_dim, g.b_row_major = lb->row_major;
  g.c = out.data_ptr<T>();
  const bool int_sized = fits_int(g.n) && fits_int(g.k) && fits_int(g.m) && fits_int(g.lda) && fits_int(g.ldb);
  const Engine e = engine(g.n * g.k * g.m, g.k, std::is_same_v<T, float>);
  const IsaKernels& table = e == Engine::kEigenAvx2 ? avx2_kernels() : isa_kernels();
  const auto run = [&](const GemmArgs<T>& piece) {
    if (int_sized && e == Engine::kOpenBlas) {
      openblas_gemm(piece);
    } else if constexpr (std::is_same_v<T, float>) {
      if (e == Engine::kOneDnn) return onednn_sgemm(piece);
      table.gemm_f32(piece);
    } else {
      table.gemm_f64(piece);
    }
  };
  const GemmSplit split = gemm_split(g.n, g.k, g.m);
  if (split.blocks == 1) return run(g);
  parallel_chunks(split.blocks, [&](int64_t block) {
    const int64_t from = block * split.size;
    run(gemm_block(g, split.by_rows, from, std::min(split.side, from + split.size)));
  });
}

// int64: out[i, j] = sum_p a[i, p] * b[p, j], in i-p-j order so the inner loop is contiguous.
void int64_mm(const Tensor& out, const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = backend().contiguous(a_in);
  const Tensor b = backend().contiguous(b_in);
  const int64_t n = a.size(0), k = a.size(1), m = b.size(1);
  const int64_t* pa = a.data_ptr<int64_t>();
  const int64_t* pb = b.data_ptr<int64_t>();
  int64_t* pc = out.data_ptr<int64_t>();
  parallel_rows(n, k * m, [&](int64_t first, int64_t last) {  // k * m multiply-adds a row
    std::fill(pc + first * m, pc + last * m, 0);
    for (int64_t i = first; i < last; ++i) {
      for (int64_t p = 0; p < k; ++p) {
        const int64_t av = pa[i * k + p];
        for (int64_t j = 0; j < m; ++j) pc[i * m + j] += av * pb[p * m + j];
      }
    }
  });
}

// bfloat16 through oneDNN (false where it has no kernel), cut into row blocks as float_mm's
// products are, each block on a pool thread with that thread's oneDNN stream and primitives
// (onednn.cc). A product gemm_split would cut by columns runs whole: oneDNN writes dense rows.
bool bf16_mm_blocks(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias = Tensor()) {
  const GemmSplit split = gemm_split(a.size(0), a.size(1), b.size(1));
  if (split.blocks == 1 || !split.by_rows) return bf16_mm_onednn(out, a, b, bias);
  std::vector<std::pair<Tensor, Tensor>> blocks;  // (out's rows, a's rows), made on this thread
  {
    const NoGradGuard no_grad;
    for (int64_t from = 0; from < split.side; from += split.size) {
      const int64_t rows = std::min(split.size, split.side - from);
      blocks.emplace_back(out.narrow(0, from, rows), a.narrow(0, from, rows));
    }
  }
  std::atomic<bool> all_ran{true};
  parallel_chunks(split.blocks, [&](int64_t block) {
    if (!bf16_mm_onednn(blocks[block].first, blocks[block].second, b, bias)) all_ran = false;
  });
  return all_ran;  // false: the caller computes the whole product in float32
}

// Once per process: bfloat16 products without oneDNN compute in float32 (exact products of
// the bfloat16 inputs, float32 sums, one rounding): right, but at float32's speed.
void warn_bf16_in_float32() {
  static std::once_flag once;
  std::call_once(
      once, [] { std::fprintf(stderr, "tinyddp: warning: bfloat16 matmul on %s\n", bf16_matmul_engine().c_str()); });
}

}  // namespace

std::string matmul_engine() {
  const OpenBlasCore& core = openblas_core();
  if (const std::optional<Engine> forced = forced_engine()) {
    if (*forced == Engine::kOneDnn)
      return fmt::format("oneDNN (float32), OpenBLAS, {} kernels (float64) (forced)", core.name);
    return *forced == Engine::kOpenBlas ? fmt::format("OpenBLAS, {} kernels (forced)", core.name)
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

void CpuBackend::mm(const Tensor& out, const Tensor& a, const Tensor& b) {
  if (out.numel() == 0) return;
  if (a.size(1) == 0) {  // empty inner dimension: the sum of nothing
    fill(out, 0.0);
    return;
  }
  switch (a.dtype()) {
    case kFloat32: float_mm<float>(out, a, b); return;
    case kFloat64: float_mm<double>(out, a, b); return;
    case kInt64: int64_mm(out, a, b); return;
    case kBFloat16:
      if (bf16_mm_blocks(out, a, b)) return;
      warn_bf16_in_float32();
      [[fallthrough]];
    case kFloat16: {
      Tensor result = empty(out.sizes(), TensorOptions(kFloat32));
      float_mm<float>(result, converted(a, kFloat32), converted(b, kFloat32));
      copy(out, result, false);
      return;
    }
    case kBool: break;
  }
  throw Error(fmt::format("matmul: not supported for dtype {}", dtype_name(a.dtype())));
}

bool CpuBackend::bmm(const Tensor& out, const Tensor& a, const Tensor& b) {
  return out.numel() > 0 && a.size(-1) > 0 && a.dtype() == kBFloat16 && bf16_bmm_onednn(out, a, b);
}

void CpuBackend::addmm(const Tensor& out, const Tensor& bias, const Tensor& a, const Tensor& b) {
  if (out.numel() == 0) return;
  if (out.dtype() == kBFloat16 && a.size(1) > 0 && bf16_mm_blocks(out, a, b, contiguous(bias))) return;
  mm(out, a, b);
  binary(BinaryOp::kAdd, out, out, bias, 1.0);
}

}  // namespace tinyddp::tensor::cpu
