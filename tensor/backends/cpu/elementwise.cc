// CPU elementwise kernels: binary arithmetic and comparisons with broadcasting, unary math,
// pow, dtype-converting copies and fill. Strided operands go through for_each_strided(), on
// the intra-op threads (parallel_for_each_strided, loops.h);
// rows that turn out contiguous run as plain loops the compiler vectorises. For float32 and
// float64 those rows (and contiguous unary ops, whose transcendental functions use Eigen's
// vectorised versions) run in the kernels of the selected instruction set (isa/kernels.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "tinyddp/tensor/backends/cpu/backend.h"
#include "tinyddp/tensor/backends/cpu/isa/kernels.h"
#include "tinyddp/tensor/backends/cpu/loops.h"
#include "tinyddp/tensor/internal/elementwise_math.h"

namespace tinyddp::tensor::cpu {

namespace em = elementwise_math;

CpuBackend& backend() {
  static CpuBackend instance;
  return instance;
}

Shape broadcast_strides(const Tensor& t, const Shape& shape) {
  Shape strides(shape.size(), 0);
  const size_t lead = shape.size() - t.sizes().size();
  for (size_t d = 0; d < t.sizes().size(); ++d) {
    strides[lead + d] = t.sizes()[d] == 1 ? 0 : t.strides()[d];
  }
  return strides;
}

namespace {

// Converts one value between element types the way PyTorch's casts do (16-bit floats go
// through float; anything -> bool is "!= 0").
template <typename D, typename S>
D convert(S value) {
  if constexpr (std::is_same_v<D, S>) {
    return value;
  } else if constexpr (std::is_same_v<D, bool>) {
    return static_cast<compute_t<S>>(value) != static_cast<compute_t<S>>(0);
  } else if constexpr (is_16bit_float_v<D>) {
    return D(static_cast<float>(static_cast<compute_t<S>>(value)));
  } else if constexpr (std::is_unsigned_v<D> && std::is_floating_point_v<compute_t<S>>) {
    // A negative float to an unsigned type is undefined in C++; through int64 it wraps as in
    // PyTorch (-1.0 -> 255).
    return static_cast<D>(static_cast<int64_t>(static_cast<compute_t<S>>(value)));
  } else {
    return static_cast<D>(static_cast<compute_t<S>>(value));
  }
}

// The selected instruction set's kernel for rows of float/double binary ops, and for
// float16/bfloat16 ones the float kernel a block at a time (widened_binary_row); null for other
// dtypes, and for comparisons, whose output is bool.
template <typename T>
using IsaBinaryRow = void (*)(BinaryOp, RowPattern, int64_t, T*, const T*, const T*, T);

// 16-bit values through a float32 kernel, kWideBlock at a time: compute(first, count, out)
// writes the float32 results of elements [first, first + count) to out, and each is rounded
// into o once, as the scalar loops round. Inputs are widened (exactly) by widen_block before
// anything is written, so o may be an input.
constexpr int64_t kWideBlock = 1024;
template <typename T, typename Compute>
void in_float_blocks(int64_t n, T* o, Compute&& compute) {
  float wide[kWideBlock];
  for (int64_t first = 0; first < n; first += kWideBlock) {
    const int64_t count = std::min(kWideBlock, n - first);
    compute(first, count, wide);
    for (int64_t i = 0; i < count; ++i) o[first + i] = T(wide[i]);
  }
}
template <typename T>
void widen_block(int64_t count, const T* v, float* w) {
  for (int64_t i = 0; i < count; ++i) w[i] = static_cast<float>(v[i]);
}

// A 16-bit row through the float kernel (a single value stays one value).
template <typename T>
void widened_binary_row(BinaryOp op, RowPattern pattern, int64_t n, T* o, const T* a, const T* b, T alpha) {
  float wa[kWideBlock], wb[kWideBlock];
  const bool single_a = pattern == RowPattern::kScalarA, single_b = pattern == RowPattern::kScalarB;
  in_float_blocks(n, o, [&](int64_t first, int64_t count, float* wo) {
    widen_block(single_a ? 1 : count, single_a ? a : a + first, wa);
    widen_block(single_b ? 1 : count, single_b ? b : b + first, wb);
    isa_kernels().binary_f32(op, pattern, count, wo, wa, wb, static_cast<float>(alpha));
  });
}

template <typename T>
IsaBinaryRow<T> isa_binary_row() {
  if constexpr (std::is_same_v<T, float>) return isa_kernels().binary_f32;
  if constexpr (std::is_same_v<T, double>) return isa_kernels().binary_f64;
  if constexpr (is_16bit_float_v<T>) return widened_binary_row<T>;
  return nullptr;
}

// Rows shorter than this stay in the inline loops below: for a few dozen elements the call
// through the table costs more than the wider vectors save (the ToyModel step's broadcast
// bias rows are 10 wide). Both give the same bits.
constexpr int64_t kIsaMinRow = 64;

// The row pattern of a contiguous output row, if the inputs step by 1 or 0 along it.
inline std::optional<RowPattern> row_pattern(const std::array<int64_t, 3>& st) {
  if (st[0] != 1) return std::nullopt;
  if (st[1] == 1 && st[2] == 1) return RowPattern::kBoth;
  if (st[1] == 1 && st[2] == 0) return RowPattern::kScalarB;
  if (st[1] == 0 && st[2] == 1) return RowPattern::kScalarA;
  return std::nullopt;
}

// out = op(a, b) elementwise over out's shape; a and b broadcast. Out may alias a or b
// exactly (in-place ops), which is safe because every element reads and writes one index.
// `isa` (with its op code and alpha) runs the contiguous rows when given.
template <typename Out, typename In, typename Op>
void binary_loop(const Tensor& out, const Tensor& a, const Tensor& b, Op op, IsaBinaryRow<In> isa = nullptr,
                 BinaryOp isa_op = BinaryOp::kAdd, In isa_alpha = In(1)) {
  using C = compute_t<In>;
  Out* po = out.data_ptr<Out>();
  const In* pa = a.data_ptr<In>();
  const In* pb = b.data_ptr<In>();
  const Shape& shape = out.sizes();
  parallel_for_each_strided<3>(shape, {out.strides(), broadcast_strides(a, shape), broadcast_strides(b, shape)},
                               [&](int64_t n, const std::array<int64_t, 3>& off, const std::array<int64_t, 3>& st) {
                                 Out* o = po + off[0];
                                 const In* x = pa + off[1];
                                 const In* y = pb + off[2];
                                 if constexpr (std::is_same_v<Out, In>) {
                                   if (isa != nullptr && n >= kIsaMinRow) {
                                     if (const std::optional<RowPattern> pattern = row_pattern(st)) {
                                       isa(isa_op, *pattern, n, o, x, y, isa_alpha);
                                       return;
                                     }
                                   }
                                 }
                                 // ivdep: the output is either separate from the inputs or exactly
                                 // one of them (tensor/native/ copies partially overlapping inputs first: checks.cc),
                                 // so no iteration reads what an earlier one wrote.
                                 if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
#pragma GCC ivdep
                                   for (int64_t i = 0; i < n; ++i) o[i] = static_cast<Out>(op(C(x[i]), C(y[i])));
                                 } else if (st[0] == 1 && st[1] == 1 && st[2] == 0) {
                                   const C yv = C(*y);
#pragma GCC ivdep
                                   for (int64_t i = 0; i < n; ++i) o[i] = static_cast<Out>(op(C(x[i]), yv));
                                 } else if (st[0] == 1 && st[1] == 0 && st[2] == 1) {
                                   const C xv = C(*x);
#pragma GCC ivdep
                                   for (int64_t i = 0; i < n; ++i) o[i] = static_cast<Out>(op(xv, C(y[i])));
                                 } else {
                                   for (int64_t i = 0; i < n; ++i) {
                                     o[i * st[0]] = static_cast<Out>(op(C(x[i * st[1]]), C(y[i * st[2]])));
                                   }
                                 }
                               });
}

// out = op(x) elementwise; x broadcast to out's shape.
template <typename Out, typename In, typename Op>
void unary_loop(const Tensor& out, const Tensor& x, Op op) {
  Out* po = out.data_ptr<Out>();
  const In* px = x.data_ptr<In>();
  const Shape& shape = out.sizes();
  parallel_for_each_strided<2>(shape, {out.strides(), broadcast_strides(x, shape)},
                               [&](int64_t n, const std::array<int64_t, 2>& off, const std::array<int64_t, 2>& st) {
                                 Out* o = po + off[0];
                                 const In* in = px + off[1];
                                 if (st[0] == 1 && st[1] == 1) {
#pragma GCC ivdep
                                   for (int64_t i = 0; i < n; ++i) o[i] = op(in[i]);
                                 } else {
                                   for (int64_t i = 0; i < n; ++i) o[i * st[0]] = op(in[i * st[1]]);
                                 }
                               });
}

// What an element of `op` costs in adds (loops.h): the transcendental functions more.
int64_t unary_cost(UnaryOp op) {
  switch (op) {
    case UnaryOp::kExp:
    case UnaryOp::kLog:
    case UnaryOp::kTanh:
    case UnaryOp::kSigmoid:
    case UnaryOp::kGelu:
    case UnaryOp::kGeluTanh:
    case UnaryOp::kGeluGrad:
    case UnaryOp::kGeluTanhGrad:
    case UnaryOp::kSin:
    case UnaryOp::kCos:
    case UnaryOp::kErf:
    case UnaryOp::kLog1p:
    case UnaryOp::kExpm1: return kCostTranscendental;
    default: return 1;
  }
}

// Dense (row-major or channels-last) float/double unary ops run in the selected instruction set's kernels; float16
// and bfloat16 ones too, a block at a time widened to float32 and rounded back (each value
// computed in float32 and rounded once, as the scalar loop does; autocast's GELU).
template <typename T>
bool try_isa_unary(UnaryOp op, const Tensor& out, const Tensor& x) {
  // Both dense in one layout (row-major, or channels last): one flat row of elements.
  const MemoryFormat layout = out.is_contiguous() ? MemoryFormat::kContiguous : MemoryFormat::kChannelsLast;
  if (x.sizes() != out.sizes() || !out.is_contiguous(layout) || !x.is_contiguous(layout)) return false;
  T* po = out.data_ptr<T>();
  const T* px = x.data_ptr<T>();
  parallel_for(0, out.numel(), kElementwiseGrain / unary_cost(op), [&](int64_t from, int64_t to) {
    if constexpr (std::is_same_v<T, float>) isa_kernels().unary_f32(op, to - from, po + from, px + from);
    if constexpr (std::is_same_v<T, double>) isa_kernels().unary_f64(op, to - from, po + from, px + from);
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      float wide[kWideBlock];
      in_float_blocks(to - from, po + from, [&](int64_t first, int64_t count, float* result) {
        widen_block(count, px + from + first, wide);
        isa_kernels().unary_f32(op, count, result, wide);
      });
    }
  });
  return true;
}

}  // namespace

void CpuBackend::binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  dispatch_numeric(a.dtype(), "binary op", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    // The generic loops below take the strided rows (and every row of the other dtypes, and
    // 16-bit ones whose alpha their dtype cannot hold: the scalar loop keeps it in float).
    const T isa_alpha = static_cast<T>(static_cast<C>(alpha));
    const bool alpha_held =
        !is_16bit_float_v<T> || static_cast<double>(static_cast<C>(isa_alpha)) == alpha || alpha != alpha;
    const IsaBinaryRow<T> isa = alpha_held ? isa_binary_row<T>() : nullptr;
    const auto run = [&](auto f) { binary_loop<T, T>(out, a, b, f, isa, op, isa_alpha); };
    // One loop per op, its formula from elementwise_math.h (the switch is outside the loop, so
    // each loop vectorises).
    const C c_alpha = static_cast<C>(alpha);
    const auto formula = [&](auto kind) {
      run([c_alpha](C x, C y) { return em::binary<decltype(kind)::value>(x, y, c_alpha); });
    };
    switch (op) {
      case BinaryOp::kAdd:
        if (alpha == 1.0) {
          run([](C x, C y) { return em::binary<BinaryOp::kAdd>(x, y, C(1)); });
        } else {
          formula(std::integral_constant<BinaryOp, BinaryOp::kAdd>{});
        }
        return;
      case BinaryOp::kMul: formula(std::integral_constant<BinaryOp, BinaryOp::kMul>{}); return;
      case BinaryOp::kDiv: formula(std::integral_constant<BinaryOp, BinaryOp::kDiv>{}); return;
      case BinaryOp::kMaximum: formula(std::integral_constant<BinaryOp, BinaryOp::kMaximum>{}); return;
      case BinaryOp::kMinimum: formula(std::integral_constant<BinaryOp, BinaryOp::kMinimum>{}); return;
      case BinaryOp::kReluBackward: formula(std::integral_constant<BinaryOp, BinaryOp::kReluBackward>{}); return;
      case BinaryOp::kMaskedFill: formula(std::integral_constant<BinaryOp, BinaryOp::kMaskedFill>{}); return;
      case BinaryOp::kPow: formula(std::integral_constant<BinaryOp, BinaryOp::kPow>{}); return;
      case BinaryOp::kGeluBackward: formula(std::integral_constant<BinaryOp, BinaryOp::kGeluBackward>{}); return;
      case BinaryOp::kGeluTanhBackward:
        formula(std::integral_constant<BinaryOp, BinaryOp::kGeluTanhBackward>{});
        return;
    }
  });
}

void CpuBackend::compare(CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch_all(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    // One loop per op, each with its formula known at compile time.
    const auto loop = [&](auto op_tag) {
      binary_loop<bool, T>(out, a, b, [](C x, C y) { return em::compare<decltype(op_tag)::value>(x, y); });
    };
    switch (op) {
      case CompareOp::kEq: loop(std::integral_constant<CompareOp, CompareOp::kEq>{}); return;
      case CompareOp::kNe: loop(std::integral_constant<CompareOp, CompareOp::kNe>{}); return;
      case CompareOp::kLt: loop(std::integral_constant<CompareOp, CompareOp::kLt>{}); return;
      case CompareOp::kLe: loop(std::integral_constant<CompareOp, CompareOp::kLe>{}); return;
      case CompareOp::kGt: loop(std::integral_constant<CompareOp, CompareOp::kGt>{}); return;
      case CompareOp::kGe: loop(std::integral_constant<CompareOp, CompareOp::kGe>{}); return;
      case CompareOp::kLogicalAnd: loop(std::integral_constant<CompareOp, CompareOp::kLogicalAnd>{}); return;
      case CompareOp::kLogicalOr: loop(std::integral_constant<CompareOp, CompareOp::kLogicalOr>{}); return;
      case CompareOp::kLogicalXor: loop(std::integral_constant<CompareOp, CompareOp::kLogicalXor>{}); return;
    }
  });
}

void CpuBackend::unary(UnaryOp op, const Tensor& out, const Tensor& x) {
  dispatch_numeric(x.dtype(), "unary op", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    if constexpr (std::is_floating_point_v<C>) {  // float16 and bfloat16 compute in float
      if (try_isa_unary<T>(op, out, x)) return;
    }
    // One loop per op (the switch is outside the loop, so each loop vectorises).
    const auto run = [&](auto kind) {
      unary_loop<T, T>(out, x, [](T v) { return static_cast<T>(em::unary<decltype(kind)::value>(C(v))); });
    };
    switch (op) {
#define TINYDDP_UNARY_CASE(name)                           \
  case UnaryOp::name:                                      \
    run(std::integral_constant<UnaryOp, UnaryOp::name>{}); \
    return;
      TINYDDP_UNARY_OPS(TINYDDP_UNARY_CASE)
#undef TINYDDP_UNARY_CASE
    }
  });
}

void CpuBackend::pow_scalar(const Tensor& out, const Tensor& x, double exponent) {
  dispatch_numeric(x.dtype(), "pow", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const auto loop = [&](auto kind) {
      unary_loop<T, T>(
          out, x, [exponent](T v) { return static_cast<T>(em::pow_scalar<decltype(kind)::value>(C(v), exponent)); });
    };
    switch (em::pow_kind(exponent)) {
      case em::PowKind::kSquare: loop(std::integral_constant<em::PowKind, em::PowKind::kSquare>{}); return;
      case em::PowKind::kSqrt: loop(std::integral_constant<em::PowKind, em::PowKind::kSqrt>{}); return;
      case em::PowKind::kGeneral: loop(std::integral_constant<em::PowKind, em::PowKind::kGeneral>{}); return;
    }
  });
}

void CpuBackend::pow_scalar_base(const Tensor& out, const Tensor& exponent, double base) {
  dispatch_numeric(exponent.dtype(), "pow", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    if constexpr (std::is_floating_point_v<C>) {
      const C b = static_cast<C>(base);  // the scalar in the tensor's dtype, as PyTorch's promotion
      unary_loop<T, T>(out, exponent, [b](T v) { return static_cast<T>(em::pow_scalar_base(b, C(v))); });
    } else {
      TDDP_CHECK(false, "pow: the exponent must be floating here, got {}", dtype_name(exponent.dtype()));
    }
  });
}

namespace {
// The bytes a tensor's elements span, from its first to its last.
std::pair<const char*, const char*> byte_span(const Tensor& t) {
  const char* first = static_cast<const char*>(t.raw_data_ptr());
  const char* last = first;
  for (size_t d = 0; d < t.sizes().size(); ++d) {
    const int64_t reach = (t.sizes()[d] - 1) * t.strides()[d] * static_cast<int64_t>(t.element_size());
    (reach < 0 ? first : last) += reach;
  }
  return {first, last + t.element_size()};
}

// A copy of 4-byte elements whose two inner dims are transposed between dst (its rows
// contiguous) and src (its columns contiguous), as x.t().contiguous() or NCHW to channels-last,
// moved in registers: where tiles pay (tiles_pay), each tile transposed 8 x 8 (transpose_32);
// elsewhere whole rows, two at a time, each 8 elements gathered into one vector store
// (transpose_rows_32) instead of one store per element. The bits moved, never computed on.
// False when the copy is not such.
bool copy_transposed_32(const Tensor& dst, const Tensor& src) {
  if (dst.element_size() != 4 || dst.sizes() != src.sizes() || dst.numel() < kTransposeTile * kTransposeTile)
    return false;
  const auto [out_first, out_end] = byte_span(dst);
  const auto [in_first, in_end] = byte_span(src);
  if (out_first < in_end && in_first < out_end) return false;  // overlapping: the rows' order, as before
  const StridedPlan<2> plan = plan_strided<2>(dst.sizes(), {dst.strides(), src.strides()});
  const size_t dims = plan.sizes.size();
  if (dims < 2 || plan.strides[dims - 1][0] != 1 || plan.strides[dims - 2][1] != 1) return false;
  auto* out = static_cast<float*>(dst.raw_data_ptr());
  const auto* in = static_cast<const float*>(src.raw_data_ptr());
  const int64_t ld_out = plan.strides[dims - 2][0], ld_in = plan.strides[dims - 1][1];
  const bool tiles = tiles_pay(plan), serial = elementwise_serial(dst.numel());
  // Whole rows go in bands of kTransposeTile rows; a copy of a few long rows (an HWC image's
  // [3, H * W] to CHW) has too few bands for the threads, and goes to the strided loop, which
  // cuts them.
  if (!tiles && !serial && tile_bands(plan) < 4 * get_num_threads()) return false;
  const auto kernel = tiles ? isa_kernels().transpose_32 : isa_kernels().transpose_rows_32;
  parallel_tiles<2>(
      plan, serial,
      [&](const std::array<int64_t, 2>& first, int64_t rows, int64_t cols) {
        kernel(rows, cols, out + first[0], ld_out, in + first[1], ld_in);
      },
      tiles ? kTransposeTile : plan.sizes[dims - 1]);
  return true;
}
}  // namespace

void CpuBackend::copy(const Tensor& dst, const Tensor& src, bool /*non_blocking*/) {
  dispatch_all(dst.dtype(), [&](auto dst_tag) {
    using D = typename decltype(dst_tag)::type;
    dispatch_all(src.dtype(), [&](auto src_tag) {
      using S = typename decltype(src_tag)::type;
      if constexpr (std::is_same_v<D, S>) {
        if (dst.is_contiguous() && src.is_contiguous() && dst.sizes() == src.sizes()) {
          if (dst.numel() > 0) std::memcpy(dst.raw_data_ptr(), src.raw_data_ptr(), dst.nbytes());
          return;
        }
        if (copy_transposed_32(dst, src)) return;
      }
      unary_loop<D, S>(dst, src, [](S v) { return convert<D, S>(v); });
    });
  });
}

void CpuBackend::accumulate(const Tensor& dst, const Tensor& src) {
  dispatch_numeric(dst.dtype(), "accumulate_into", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    T* pd = dst.data_ptr<T>();
    const T* ps = src.data_ptr<T>();
    parallel_for_each_strided<2>(dst.sizes(), {dst.strides(), src.strides()},
                                 [&](int64_t n, const std::array<int64_t, 2>& off, const std::array<int64_t, 2>& st) {
                                   T* o = pd + off[0];
                                   const T* in = ps + off[1];
                                   if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
                                     if (st[0] == 1 && st[1] == 1 && (o + n <= in || in + n <= o)) {
                                       if constexpr (std::is_same_v<T, float>) isa_kernels().accumulate_f32(n, o, in);
                                       if constexpr (std::is_same_v<T, double>) isa_kernels().accumulate_f64(n, o, in);
                                       return;
                                     }
                                   }
                                   // No ivdep here: with a stride-0 destination, iterations must add in turn.
                                   for (int64_t i = 0; i < n; ++i)
                                     o[i * st[0]] = static_cast<T>(C(o[i * st[0]]) + C(in[i * st[1]]));
                                 });
  });
}

void CpuBackend::fill(const Tensor& dst, double value) {
  dispatch_all(dst.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = convert<T, double>(value);
    T* base = dst.data_ptr<T>();
    parallel_for_each_strided<1>(dst.sizes(), {dst.strides()},
                                 [&](int64_t n, const std::array<int64_t, 1>& off, const std::array<int64_t, 1>& st) {
                                   T* o = base + off[0];
                                   if (st[0] == 1 && sizeof(T) == 2) {  // float16/bfloat16: their bits, vectorised
                                     uint16_t bits;
                                     std::memcpy(&bits, &v, 2);
                                     std::fill_n(reinterpret_cast<uint16_t*>(o), n, bits);
                                   } else {
                                     for (int64_t i = 0; i < n; ++i) o[i * st[0]] = v;
                                   }
                                 });
  });
}

}  // namespace tinyddp::tensor::cpu
