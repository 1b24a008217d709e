// CPU matrix multiply: out [n, m] = a [n, k] x b [k, m]. A row-major or column-major operand
// (any leading dimension) is passed as it is, so transposed views and narrowed slices need no
// copy; other layouts are made contiguous first. bfloat16 goes to oneDNN under AVX-512
// (onednn.cc); float16, and bfloat16 below AVX-512, compute in float32; int64 uses a plain
// loop, its rows on the intra-op threads.
//
// float32/float64 go to one of three GEMM engines (docs/tensor.md, "Matmul"): on Intel CPUs
// under AVX-512, float32 products of at least kOpenBlasMinWork multiply-adds go to oneDNN's
// sgemm (onednn.cc: 13-23% faster than OpenBLAS's SkylakeX kernels on every shape measured,
// bench/README.md), except x @ W^T on 2-32 rows, which the dots loop reads in place
// (speed_rules.cc); otherwise OpenBLAS, whose kernels are picked at run time for the CPU (the
// library PyTorch's matmul calls on Debian), for products of at least kOpenBlasMinWork
// multiply-adds when the kernels it picked use the instruction set cpu_isa() selected;
// otherwise Eigen's GEMM compiled for that instruction set (isa/kernels.cc), except that on
// Zen 4 the large products use the AVX2 build whatever is selected (zen4_with_avx512, below),
// and that products of 128 terms or fewer stay with Eigen where OpenBLAS runs its Zen kernels
// (kZenKernelsMinTerms). TINYDDP_CPU_MATMUL=eigen, =openblas or =onednn (float32; float64 then
// goes to OpenBLAS) forces one engine, for benchmarks.
#include <cpuid.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tinyddp/tensor/backends/cpu/algorithms.h"
#include "tinyddp/tensor/backends/cpu/backend.h"
#include "tinyddp/tensor/backends/cpu/isa/kernels.h"
#include "tinyddp/tensor/backends/cpu/loops.h"
#include "tinyddp/tensor/backends/cpu/onednn.h"
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
}

namespace tinyddp::tensor::cpu {

int64_t machine_cpus() {
  static const int64_t cpus = std::max(1u, std::thread::hardware_concurrency());
  return cpus;
}

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
  const GemmEngine e = gemm_engine(g.n, g.k, g.m, g.a_row_major && !g.b_row_major, std::is_same_v<T, float>);
  const IsaKernels& table = e == GemmEngine::kEigenAvx2 ? avx2_kernels() : isa_kernels();
  const auto run = [&](const GemmArgs<T>& piece) {
    if (int_sized && e == GemmEngine::kOpenBlas) {
      openblas_gemm(piece);
    } else if constexpr (std::is_same_v<T, float>) {
      if (e == GemmEngine::kOneDnn) return onednn_sgemm(piece);
      // Zen 4 (large products on Eigen's AVX2 build): the narrow ones stay on the selected
      // build's loops, whose 32 registers hold larger blocks (bench/README.md, "A chunk's 16 rows").
      if (e == GemmEngine::kEigenAvx2 && isa_kernels().narrow_gemm_f32(piece)) return;
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

// bfloat16 through oneDNN (false where it has no kernel), cut into blocks as float_mm's products
// are: row blocks of out and a, or column blocks of out, b and the bias, each block one call on
// a pool thread with that thread's oneDNN stream and primitives (onednn.cc).
bool bf16_mm_blocks(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias = Tensor()) {
  const GemmSplit split = gemm_split(a.size(0), a.size(1), b.size(1));
  if (split.blocks == 1) return bf16_mm_onednn(out, a, b, bias);
  return split.by_rows ? bf16_mm_row_blocks_onednn(out, a, b, bias, split.size)
                       : bf16_mm_column_blocks_onednn(out, a, b, bias, split.size);
}

// Once per process: bfloat16 products without oneDNN compute in float32 (exact products of
// the bfloat16 inputs, float32 sums, one rounding): right, but at float32's speed.
void warn_bf16_in_float32() {
  static std::once_flag once;
  std::call_once(
      once, [] { std::fprintf(stderr, "tinyddp: warning: bfloat16 matmul on %s\n", bf16_matmul_engine().c_str()); });
}

// a @ b of 16-bit matrices in float32 (their exact products, float32 sums), for the caller
// to round once.
Tensor float32_product(const Tensor& a, const Tensor& b) {
  Tensor result = empty({a.size(0), b.size(1)}, TensorOptions(kFloat32));
  if (a.size(1) == 0) {  // the sum of nothing
    backend().fill(result, 0.0);
    return result;
  }
  float_mm<float>(result, backend().converted(a, kFloat32), backend().converted(b, kFloat32));
  return result;
}

}  // namespace

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
    case kFloat16: copy(out, float32_product(a, b), false); return;
    case kInt32:
    case kUInt8: {  // in int64, wrapped back to the narrow type (the same bits: modular arithmetic)
      Tensor result = empty(out.sizes(), TensorOptions(kInt64));
      int64_mm(result, converted(a, kInt64), converted(b, kInt64));
      copy(out, result, false);
      return;
    }
    case kBool: break;
  }
  throw Error(fmt::format("matmul: not supported for dtype {}", dtype_name(a.dtype())));
}

// A batched bfloat16 product cut along its first batch dim for the intra-op threads, by the
// rule of gemm_split (blocks of at least kBlockMinWork multiply-adds, at most one per CPU of the
// machine: the cut depends on the shapes and the machine, never on the thread count). Each
// block is one oneDNN call on a pool thread; a batch broadcast in dim 0 stays whole.
bool CpuBackend::bmm(const Tensor& out, const Tensor& a, const Tensor& b) {
  if (out.numel() == 0 || a.size(-1) == 0 || a.dtype() != kBFloat16) return false;
  const int64_t batch = out.size(0), n = a.size(-2), k = a.size(-1), m = b.size(-1);
  const int64_t work = out.numel() / (n * m) * n * k * m;
  const int64_t blocks =
      a.size(0) == batch && b.size(0) == batch ? std::min({machine_cpus(), work / kBlockMinWork, batch}) : int64_t{1};
  if (blocks <= 1) return bf16_bmm_onednn(out, a, b);
  const int64_t size = (batch + blocks - 1) / blocks;
  std::vector<std::array<Tensor, 3>> pieces;  // views made on this thread
  {
    const NoGradGuard no_grad;
    for (int64_t from = 0; from < batch; from += size) {
      const int64_t count = std::min(size, batch - from);
      pieces.push_back({out.narrow(0, from, count), a.narrow(0, from, count), b.narrow(0, from, count)});
    }
  }
  return all_blocks_ran(static_cast<int64_t>(pieces.size()), [&](int64_t i) {  // false: matrix by matrix
    const auto& [o, x, y] = pieces[static_cast<size_t>(i)];
    return bf16_bmm_onednn(o, x, y);
  });
}

void CpuBackend::addmm(const Tensor& out, const Tensor& bias, const Tensor& a, const Tensor& b) {
  if (out.numel() == 0) return;
  if (out.dtype() == kBFloat16 && a.size(1) > 0 && bf16_mm_blocks(out, a, b, contiguous(bias))) return;
  if (is_16bit_float(out.dtype())) {  // the product and the bias in float32, rounded once, as oneDNN's
    if (out.dtype() == kBFloat16) warn_bf16_in_float32();
    const Tensor result = float32_product(a, b);
    binary(BinaryOp::kAdd, result, result, converted(bias, kFloat32), 1.0);
    copy(out, result, false);
    return;
  }
  mm(out, a, b);
  binary(BinaryOp::kAdd, out, out, bias, 1.0);
}

}  // namespace tinyddp::tensor::cpu
