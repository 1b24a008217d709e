// The CPU kernels of one instruction set (see kernels.h). Bazel compiles this file twice,
// with -DTINYDDP_ISA=avx2 -march=x86-64-v3 and with -DTINYDDP_ISA=avx512 -march=x86-64-v4,
// and each build fills its own IsaKernels table. Everything below lives in the namespace
// isa_<name>, and Eigen, renamed to EigenIsa_<name>, too: no definition here may carry a
// name that the other build (or the rest of tinyddp) also defines.
#include "tinyddp/tensor/backends/cpu/isa/kernels.h"
#include "tinyddp/tensor/backends/cpu/isa/isa_macros.h"
#include "tinyddp/tensor/backends/cpu/isa/kernel_parts.h"
#include "tinyddp/tensor/internal/elementwise_math.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#define TINYDDP_STRING2(a) #a
#define TINYDDP_STRING(a) TINYDDP_STRING2(a)
// Eigen's templates get their own namespace per build (the header names are not macro-expanded).
#define Eigen TINYDDP_PASTE(EigenIsa_, TINYDDP_ISA)
#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>  // erf, for GELU

namespace tinyddp::tensor::cpu {
namespace TINYDDP_ISA_NAMESPACE {
namespace em = elementwise_math;

namespace {

// ---- GEMM -------------------------------------------------------------------------------------
template <typename T, int Order>
using MatrixMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>, 0, Eigen::OuterStride<>>;

template <typename T, int Order>
MatrixMap<T, Order> map_matrix(const T* data, int64_t rows, int64_t cols, int64_t ld) {
  return MatrixMap<T, Order>(data, rows, cols, Eigen::OuterStride<>(ld));
}

// Four layout combinations, each one Eigen GEMM call with no copies (float32's narrow
// products: gemm_kernels.cc).
template <typename T>
void gemm(const GemmArgs<T>& g) {
  if constexpr (std::is_same_v<T, float>) {
    if (narrow_gemm(g)) return;
  }
  Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0, Eigen::OuterStride<>> c(
      g.c, g.n, g.m, Eigen::OuterStride<>((g.ldc > 0 ? g.ldc : g.m)));
  if (g.a_row_major && g.b_row_major) {
    c.noalias() =
        map_matrix<T, Eigen::RowMajor>(g.a, g.n, g.k, g.lda) * map_matrix<T, Eigen::RowMajor>(g.b, g.k, g.m, g.ldb);
  } else if (g.a_row_major) {
    c.noalias() =
        map_matrix<T, Eigen::RowMajor>(g.a, g.n, g.k, g.lda) * map_matrix<T, Eigen::ColMajor>(g.b, g.k, g.m, g.ldb);
  } else if (g.b_row_major) {
    c.noalias() =
        map_matrix<T, Eigen::ColMajor>(g.a, g.n, g.k, g.lda) * map_matrix<T, Eigen::RowMajor>(g.b, g.k, g.m, g.ldb);
  } else {
    c.noalias() =
        map_matrix<T, Eigen::ColMajor>(g.a, g.n, g.k, g.lda) * map_matrix<T, Eigen::ColMajor>(g.b, g.k, g.m, g.ldb);
  }
}

void set_gemm_l1_blocking(int64_t bytes) {
  Eigen::setCpuCacheSizes(static_cast<std::ptrdiff_t>(bytes), Eigen::l2CacheSize(), Eigen::l3CacheSize());
}

// ---- Elementwise ------------------------------------------------------------------------------

// Outputs this large (the whole L3 cache of the machines measured) leave the cache before
// anyone reads them again, so they are written with non-temporal stores: the cache lines are
// not read from memory first only to be overwritten. A 64 MiB out-of-place add on the Zen 4
// machine: 6.1-6.4 ms against 7.7-8.5 before (bench/README.md, "AMD EPYC (Zen 4").
constexpr int64_t kStreamBytes = int64_t(32) << 20;

void stream_block(float* o, const float* block, int64_t len) {
  for (int64_t j = 0; j < len; j += 8) _mm256_stream_ps(o + j, _mm256_load_ps(block + j));
}
void stream_block(double* o, const double* block, int64_t len) {
  for (int64_t j = 0; j < len; j += 4) _mm256_stream_pd(o + j, _mm256_load_pd(block + j));
}

// o[i] = value(i) for i < n, the same values as the plain loop, stored past the cache: each
// 256-byte block is computed into an aligned buffer (vectorised) and streamed out from there.
// Larger blocks ran slower (the write-combining buffers drain in bursts).
template <typename T, typename Value>
void store_streamed(int64_t n, T* o, Value value) {
  constexpr int64_t kBlock = 256 / sizeof(T);
  int64_t i = 0;
  for (; i < n && reinterpret_cast<uintptr_t>(o + i) % 32 != 0; ++i) o[i] = value(i);
  alignas(32) T block[kBlock];
  for (; i + kBlock <= n; i += kBlock) {
#pragma GCC ivdep
    for (int64_t j = 0; j < kBlock; ++j) block[j] = value(i + j);
    stream_block(o + i, block, kBlock);
  }
  for (; i < n; ++i) o[i] = value(i);
  _mm_sfence();  // the streamed stores are visible before the kernel returns
}

template <typename T, typename Op>
void binary_row_streamed(RowPattern pattern, int64_t n, T* o, const T* a, const T* b, Op op) {
  switch (pattern) {
    case RowPattern::kBoth: store_streamed(n, o, [&](int64_t i) { return op(a[i], b[i]); }); return;
    case RowPattern::kScalarB: store_streamed(n, o, [&, bv = *b](int64_t i) { return op(a[i], bv); }); return;
    case RowPattern::kScalarA: store_streamed(n, o, [&, av = *a](int64_t i) { return op(av, b[i]); }); return;
  }
}

// One loop per pattern, each branch-free so that it vectorises. ivdep: o is either separate
// from the inputs or exactly one of them, so no iteration reads what an earlier one wrote.
template <typename T, typename Op>
void binary_row(RowPattern pattern, int64_t n, T* o, const T* a, const T* b, Op op) {
  if (n * static_cast<int64_t>(sizeof(T)) >= kStreamBytes && o != a && o != b) {
    binary_row_streamed(pattern, n, o, a, b, op);
    return;
  }
  switch (pattern) {
    case RowPattern::kBoth:
#pragma GCC ivdep
      for (int64_t i = 0; i < n; ++i) o[i] = op(a[i], b[i]);
      return;
    case RowPattern::kScalarB: {
      const T bv = *b;
#pragma GCC ivdep
      for (int64_t i = 0; i < n; ++i) o[i] = op(a[i], bv);
      return;
    }
    case RowPattern::kScalarA: {
      const T av = *a;
#pragma GCC ivdep
      for (int64_t i = 0; i < n; ++i) o[i] = op(av, b[i]);
      return;
    }
  }
}

// The formula of `op` (elementwise_math.h) as the function a row loop calls per element.
template <BinaryOp op, typename T>
auto formula(T alpha) {
  return [alpha](T x, T y) { return em::binary<op>(x, y, alpha); };
}

template <typename T>
void gelu_backward_row(BinaryOp op, RowPattern pattern, int64_t n, T* o, const T* a, const T* b);

template <typename T>
void binary(BinaryOp op, RowPattern pattern, int64_t n, T* o, const T* a, const T* b, T alpha) {
  switch (op) {
    case BinaryOp::kAdd:
      if (alpha == T(1)) {
        binary_row(pattern, n, o, a, b, [](T x, T y) { return em::binary<BinaryOp::kAdd>(x, y, T(1)); });
      } else {
        binary_row(pattern, n, o, a, b, formula<BinaryOp::kAdd, T>(alpha));
      }
      return;
    case BinaryOp::kMul: binary_row(pattern, n, o, a, b, formula<BinaryOp::kMul, T>(alpha)); return;
    case BinaryOp::kDiv: binary_row(pattern, n, o, a, b, formula<BinaryOp::kDiv, T>(alpha)); return;
    case BinaryOp::kMaximum: binary_row(pattern, n, o, a, b, formula<BinaryOp::kMaximum, T>(alpha)); return;
    case BinaryOp::kMinimum: binary_row(pattern, n, o, a, b, formula<BinaryOp::kMinimum, T>(alpha)); return;
    case BinaryOp::kReluBackward: binary_row(pattern, n, o, a, b, formula<BinaryOp::kReluBackward, T>(alpha)); return;
    case BinaryOp::kMaskedFill: binary_row(pattern, n, o, a, b, formula<BinaryOp::kMaskedFill, T>(alpha)); return;
    case BinaryOp::kPow: binary_row(pattern, n, o, a, b, formula<BinaryOp::kPow, T>(alpha)); return;
    case BinaryOp::kGeluBackward:
    case BinaryOp::kGeluTanhBackward: gelu_backward_row(op, pattern, n, o, a, b); return;
  }
}

template <typename T, typename Op>
void unary_row(int64_t n, T* o, const T* x, Op op) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) o[i] = op(x[i]);
}

// The math functions of elementwise_math.h's formulas as Eigen's vectorised array versions,
// so that sigmoid and GELU over a row are the scalar loops' expressions, evaluated in packets.
struct ArrayMath {
  template <typename X>
  static auto erf(const X& x) {
    return x.erf();
  }
  template <typename X>
  static auto exp(const X& x) {
    return x.exp();
  }
  template <typename X>
  static auto tanh(const X& x) {
    return x.tanh();
  }
  template <typename X>
  static auto eval(const X& x) {
    return x.eval();  // a plain array: the formula reads it twice
  }
};

// a * gelu'(b) along a row: gelu' of a block of b in Eigen's packets (the unary kernel's
// expression: float32 gives gelu's gradient the bits it had as its own op), then the
// products, rounded once. A broadcast operand (rare) takes the scalar formula.
template <typename T>
void gelu_backward_row(BinaryOp op, RowPattern pattern, int64_t n, T* o, const T* a, const T* b) {
  const bool exact = op == BinaryOp::kGeluBackward;
  if (pattern != RowPattern::kBoth) {
    if (exact) return binary_row(pattern, n, o, a, b, formula<BinaryOp::kGeluBackward, T>(T(1)));
    return binary_row(pattern, n, o, a, b, formula<BinaryOp::kGeluTanhBackward, T>(T(1)));
  }
  constexpr int64_t kBlock = 256;
  alignas(64) T d[kBlock];
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t m = std::min(kBlock, n - i);
    Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> grad(d, m);
    Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> in(b + i, m);
    if (exact) {
      em::gelu_grad<ArrayMath>(grad, in);
    } else {
      em::gelu_tanh_grad<ArrayMath>(grad, in);
    }
    for (int64_t k = 0; k < m; ++k) o[i + k] = a[i + k] * d[k];
  }
}

// exp, log, tanh, sigmoid and GELU use Eigen's vectorised versions; the rest are plain loops
// (sin, cos, erf, log1p and expm1 of the standard library, correctly rounded or nearly, as PyTorch's).
// sqrt is a loop too, which gcc turns into the exact sqrt instruction (-fno-math-errno):
// Eigen's packet sqrt is an approximation under its default EIGEN_FAST_MATH (a reciprocal
// square-root estimate and one Newton step) that differs between its AVX and AVX-512 code
// and from PyTorch's correctly rounded sqrt.
template <typename T>
void unary(UnaryOp op, int64_t n, T* o, const T* x) {
  Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> out(o, n);
  Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> in(x, n);
  switch (op) {
    case UnaryOp::kNeg: unary_row(n, o, x, em::unary<UnaryOp::kNeg, T>); return;
    case UnaryOp::kAbs: unary_row(n, o, x, em::unary<UnaryOp::kAbs, T>); return;
    case UnaryOp::kRelu: unary_row(n, o, x, em::unary<UnaryOp::kRelu, T>); return;
    case UnaryOp::kExp: out = in.exp(); return;
    case UnaryOp::kLog: out = in.log(); return;
    case UnaryOp::kSqrt: unary_row(n, o, x, em::unary<UnaryOp::kSqrt, T>); return;
    case UnaryOp::kTanh: out = in.tanh(); return;
    case UnaryOp::kSigmoid: em::sigmoid<ArrayMath>(out, in); return;
    case UnaryOp::kGelu: em::gelu<ArrayMath>(out, in); return;
    case UnaryOp::kGeluTanh: em::gelu_tanh<ArrayMath>(out, in); return;
    case UnaryOp::kGeluGrad: em::gelu_grad<ArrayMath>(out, in); return;
    case UnaryOp::kGeluTanhGrad: em::gelu_tanh_grad<ArrayMath>(out, in); return;
    case UnaryOp::kSin: unary_row(n, o, x, em::unary<UnaryOp::kSin, T>); return;
    case UnaryOp::kCos: unary_row(n, o, x, em::unary<UnaryOp::kCos, T>); return;
    case UnaryOp::kErf: unary_row(n, o, x, em::unary<UnaryOp::kErf, T>); return;
    case UnaryOp::kLog1p: unary_row(n, o, x, em::unary<UnaryOp::kLog1p, T>); return;
    case UnaryOp::kExpm1: unary_row(n, o, x, em::unary<UnaryOp::kExpm1, T>); return;
    case UnaryOp::kRsqrt: unary_row(n, o, x, em::unary<UnaryOp::kRsqrt, T>); return;
    case UnaryOp::kReciprocal: unary_row(n, o, x, em::unary<UnaryOp::kReciprocal, T>); return;
    case UnaryOp::kFloor: unary_row(n, o, x, em::unary<UnaryOp::kFloor, T>); return;
    case UnaryOp::kCeil: unary_row(n, o, x, em::unary<UnaryOp::kCeil, T>); return;
    case UnaryOp::kTrunc: unary_row(n, o, x, em::unary<UnaryOp::kTrunc, T>); return;
    case UnaryOp::kRound: unary_row(n, o, x, em::unary<UnaryOp::kRound, T>); return;
    case UnaryOp::kSign: unary_row(n, o, x, em::unary<UnaryOp::kSign, T>); return;
  }
}

template <typename T>
void accumulate(int64_t n, T* __restrict dst, const T* __restrict src) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

// ---- Reductions and softmax -------------------------------------------------------------------

template <typename T>
void column_sums(const T* x, int64_t rows, int64_t cols, double* __restrict acc) {
  for (int64_t i = 0; i < rows; ++i) {
    const T* __restrict row = x + i * cols;
    for (int64_t j = 0; j < cols; ++j) acc[j] += static_cast<double>(row[j]);
  }
}

// The sum of n values in double, from eight partial sums (so that the adds vectorise and do
// not wait on each other): backends/cpu/loops.h's partial_sums, which this file cannot include (its
// inline code, compiled here for AVX-512, could be the copy the linker keeps for all).
// The sum over i < n of term(i) (a double).
template <typename F>
double sum_in_double(int64_t n, F&& term) {
  double part[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) part[k] += term(i + k);
  }
  double tail = 0;
  for (; i < n; ++i) tail += term(i);
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7])) + tail;
}
template <typename T>
double sum_in_double(const T* v, int64_t n) {
  return sum_in_double(n, [v](int64_t i) { return static_cast<double>(v[i]); });
}

// o[k] = exp(s[k]), all in Eigen's packets (the tail padded): the bits do not depend on the row's
// address, as in an Eigen expression, whose scalar head runs up to the first aligned element.
// (Eigen's packet types carry vector attributes that a template argument drops: harmless here.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"
template <typename T>
void exp_packets(const T* s, T* o, int64_t n) {
  namespace ei = Eigen::internal;
  using Packet = typename ei::packet_traits<T>::type;
  constexpr int64_t kSize = ei::unpacket_traits<Packet>::size;
  int64_t i = 0;
  for (; i + kSize <= n; i += kSize) ei::pstoreu(o + i, ei::pexp(ei::ploadu<Packet>(s + i)));
  if (i < n) {
    T tail[kSize] = {};
    std::copy(s + i, s + n, tail);
    ei::pstoreu(tail, ei::pexp(ei::ploadu<Packet>(tail)));
    std::copy(tail, tail + (n - i), o + i);
  }
}
#pragma GCC diagnostic pop

// Subtracts the row's maximum, takes the exponentials (exp_packets), sums them in double, and
// divides (float: multiplies by the sum's reciprocal; log: subtracts the log of the sum).
template <typename T>
void softmax_rows(const T* x, T* out, int64_t rows, int64_t n, bool log, T* shifted) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = x + r * n;
    T* out_row = out + r * n;
    // The maximum from eight partial maxima (std::max(m, row[i]) each: NaN never wins here;
    // it turns the row into NaN through exp below).
    T part[8];
    std::fill(part, part + 8, -std::numeric_limits<T>::infinity());
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      for (int k = 0; k < 8; ++k) part[k] = part[k] < row[i + k] ? row[i + k] : part[k];
    }
    for (; i < n; ++i) part[0] = part[0] < row[i] ? row[i] : part[0];
    T m = part[0];
    for (int k = 1; k < 8; ++k) m = m < part[k] ? part[k] : m;
    for (int64_t k = 0; k < n; ++k) shifted[k] = row[k] - m;
    exp_packets(shifted, out_row, n);
    // Eigen's exp(-inf) is a tiny denormal, not 0: a masked (-inf) entry must weigh nothing.
    constexpr T kMinusInf = -std::numeric_limits<T>::infinity();
    for (int64_t k = 0; k < n; ++k) out_row[k] = shifted[k] == kMinusInf ? T(0) : out_row[k];
    const double total = sum_in_double(out_row, n);
    if (log) {
      const T log_total = static_cast<T>(std::log(total));
      for (int64_t k = 0; k < n; ++k) out_row[k] = shifted[k] - log_total;
    } else if constexpr (std::is_same_v<T, float>) {  // as PyTorch's kernel (a division: 3x slower)
      const float inverse = static_cast<float>(1.0 / total);
      for (int64_t k = 0; k < n; ++k) out_row[k] *= inverse;
    } else {
      for (int64_t k = 0; k < n; ++k) out_row[k] = static_cast<T>(static_cast<double>(out_row[k]) / total);
    }
  }
}

// ---- Causal softmax ---------------------------------------------------------------------------

// Each row scaled and masked (-inf beyond the kept columns) in place, then softmax_rows on
// it: the same code as scale, masked_fill and softmax one after the other, so the same bits
// (a separate implementation, with its own exp or sum order, would differ in the last bit).
template <typename T>
void causal_softmax_rows(const T* x, T* out, int64_t rows, int64_t m, int64_t n, double scale, T* scratch) {
  using Row = Eigen::Array<T, Eigen::Dynamic, 1>;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t kept = r % m + n - m + 1;
    Eigen::Map<Row> row(out + r * n, n);
    row.head(kept) = Eigen::Map<const Row>(x + r * n, kept) * static_cast<T>(scale);
    row.tail(n - kept).setConstant(-std::numeric_limits<T>::infinity());
    softmax_rows<T>(out + r * n, out + r * n, 1, n, false, scratch);
  }
}

// v rounded to the nearest bfloat16 (ties to even), as a float: dtype.h's conversion, which
// this file cannot include for the reason given at sum_in_double. Finite values only (a
// softmax backward's row sum).
float round_to_bfloat16(float v) {
  uint32_t x;
  std::memcpy(&x, &v, sizeof(x));
  x = (x + 0x7FFF + ((x >> 16) & 1)) & 0xFFFF0000u;
  std::memcpy(&v, &x, sizeof(v));
  return v;
}

// dx = y * (g - sum(g * y)) * scale over the kept columns, 0 beyond; the sum in double over
// the whole row's products (the masked ones are 0), as sum() adds them.
template <typename T>
void causal_softmax_backward_rows(const T* g, const T* y, T* dx, int64_t rows, int64_t m, int64_t n, double scale,
                                  bool bf16_dot) {
  const T s = static_cast<T>(scale);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t kept = r % m + n - m + 1, at = r * n;
    // The products rounded to T, then summed in double: as sum(mul(g, y)) computes the dot.
    T dot = static_cast<T>(
        sum_in_double(n, [&](int64_t i) { return static_cast<double>(static_cast<T>(g[at + i] * y[at + i])); }));
    if (bf16_dot) dot = static_cast<T>(round_to_bfloat16(static_cast<float>(dot)));
    for (int64_t k = 0; k < kept; ++k) dx[at + k] = y[at + k] * (g[at + k] - dot) * s;
    for (int64_t k = kept; k < n; ++k) dx[at + k] = T(0);
  }
}

}  // namespace

// The kernels defined beside this file are declared in kernel_parts.h.
namespace {

constexpr IsaKernels kKernels = {
    TINYDDP_STRING(TINYDDP_ISA),
    gemm<float>,
    gemm<double>,
    narrow_gemm,
    set_gemm_l1_blocking,
    binary<float>,
    binary<double>,
    unary<float>,
    unary<double>,
    exp_packets<float>,
    exp_packets<double>,
    transpose_32,
    transpose_rows_32,
    pack_pairs_16,
    accumulate<float>,
    accumulate<double>,
    column_sums<float>,
    column_sums<double>,
    softmax_rows<float>,
    softmax_rows<double>,
    causal_softmax_rows<float>,
    causal_softmax_rows<double>,
    causal_softmax_backward_rows<float>,
    causal_softmax_backward_rows<double>,
    sgd<float>,
    sgd<double>,
    adam<float>,
    adam<double>,
    conv2d_direct,
    conv2d_direct_weight_grad,
    conv2d_direct_weight_grad_scratch,
};

}  // namespace
}  // namespace TINYDDP_ISA_NAMESPACE

const IsaKernels& TINYDDP_PASTE(TINYDDP_ISA, _kernels)() { return TINYDDP_ISA_NAMESPACE::kKernels; }

}  // namespace tinyddp::tensor::cpu
