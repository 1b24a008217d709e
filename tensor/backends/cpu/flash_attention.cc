// CPU flash attention (backends/cpu/backend.h), the twin of the CUDA kernels in
// backends/cuda/attention.cu: the same blocks of 64 keys, the same running maximum, the same
// recomputation in the backward, so that the scheme's arithmetic is tested on every machine.
//
// Forward, per block of 64 query rows: for each block of 64 keys the row sees, the scores
// S = (q k^T) * scale, masked; the row maximum m grows to max(m, max S); the running sum l and
// the output accumulator are rescaled by exp(m_old - m) and gain exp(S - m) and exp(S - m) v.
// At the end out = acc / l and lse = m + log l. Only [64, 64] blocks of scores exist at a time.
// Backward (as FlashAttention-2), per head: D = rowsum(dout * out); for each key block and each
// query block that sees it, P = exp(S - lse) (the forward's probabilities, recomputed),
// dv += P^T dout, dS = P * (dout v^T - D), dq += scale dS k, dk += scale dS^T q.
// The products go to the selected instruction set's GEMM (isa/kernels.h); the rest runs on
// Eigen arrays in per-unit buffers. A unit of work (a query block in the forward, a
// head in the backward) runs whole on one thread in a fixed order, so the bits do not depend
// on the thread count. float32 and float64; 16-bit scores are declined (native/ composes them).
// Attention dropout (AttentionDropout): the probabilities that multiply v are masked and scaled
// (the row sums l are the undropped ones); in the backward dv takes the masked P and
// dS = P * (mask * (dout v^T) - D), D = rowsum(dout * out) with out already dropped.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "tinyddp/tensor/backends/cpu/backend.h"
#include "tinyddp/tensor/backends/cpu/isa/kernels.h"
#include "tinyddp/tensor/backends/cpu/loops.h"
#include "tinyddp/tensor/internal/philox.h"

namespace tinyddp::tensor::cpu {

namespace {

constexpr int64_t kQueryBlock = 64, kKeyBlock = 64;

template <typename T>
using Rows = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using Column = Eigen::Array<T, Eigen::Dynamic, 1>;

// A matrix operand in memory: row-major (ld: elements between rows) or, transposed, column-major.
template <typename T>
struct Operand {
  const T* data;
  int64_t ld;
  bool row_major = true;
};
template <typename T>
Operand<T> transposed(const T* data, int64_t ld) {
  return Operand<T>{data, ld, false};
}

// c [n, m] (row-major, contiguous) = a [n, k] x b [k, m].
template <typename T>
void gemm(T* c, int64_t n, int64_t k, int64_t m, Operand<T> a, Operand<T> b) {
  GemmArgs<T> args;
  args.n = n;
  args.k = k;
  args.m = m;
  args.a = a.data;
  args.lda = a.ld;
  args.a_row_major = a.row_major;
  args.b = b.data;
  args.ldb = b.ld;
  args.b_row_major = b.row_major;
  args.c = c;
  if constexpr (std::is_same_v<T, float>) {
    isa_kernels().gemm_f32(args);
  } else {
    isa_kernels().gemm_f64(args);
  }
}

// c += a x b through `scratch`.
template <typename T>
void gemm_add(Rows<T>& c, Rows<T>& scratch, int64_t k, Operand<T> a, Operand<T> b) {
  scratch.resize(c.rows(), c.cols());
  gemm(scratch.data(), c.rows(), k, c.cols(), a, b);
  c += scratch;
}

// s[r, :] = exp(s[r, :] - shift[r]) in the selected instruction set's kernels (vector exp
// throughout: the bits do not depend on the buffer's address).
template <typename T>
void exp_shifted(Rows<T>& s, const T* shift) {
  const IsaKernels& isa = isa_kernels();
  const int64_t cols = s.cols();
  for (int64_t r = 0; r < s.rows(); ++r) {
    T* row = s.data() + r * cols;
    if constexpr (std::is_same_v<T, float>) {
      isa.binary_f32(BinaryOp::kAdd, RowPattern::kScalarB, cols, row, row, shift + r, -1.0f);
    } else {
      isa.binary_f64(BinaryOp::kAdd, RowPattern::kScalarB, cols, row, row, shift + r, -1.0);
    }
  }
  if constexpr (std::is_same_v<T, float>) {
    isa.exp_f32(s.data(), s.data(), s.size());
  } else {
    isa.exp_f64(s.data(), s.data(), s.size());
  }
}

// One call's sizes: `heads` of q [M, E], k [N, E], v [N, Ev].
struct Sizes {
  int64_t heads, m, n, e, ev;
  bool causal;
  // How many keys (a prefix) query row `row` sees.
  int64_t keys_for(int64_t row) const { return causal ? std::min(n, row + n - m + 1) : n; }
};

// Sets the entries of a scores block (rows from row0, columns from col0) beyond each row's
// keys to `value`.
template <typename T>
void mask_block(Rows<T>& s, const Sizes& z, int64_t row0, int64_t col0, T value) {
  if (!z.causal) return;
  for (int64_t r = 0; r < s.rows(); ++r) {
    for (int64_t c = std::max<int64_t>(z.keys_for(row0 + r) - col0, 0); c < s.cols(); ++c) s(r, c) = value;
  }
}

// s [rows, cols] = the scaled, masked scores of query rows qi (from row0) against keys kj
// (from col0).
template <typename T>
void scores(Rows<T>& s, int64_t rows, int64_t cols, const T* qi, const T* kj, T scale, const Sizes& z, int64_t row0,
            int64_t col0) {
  s.resize(rows, cols);
  gemm(s.data(), rows, z.e, cols, Operand<T>{qi, z.e}, transposed(kj, z.e));
  s *= scale;
  mask_block<T>(s, z, row0, col0, -std::numeric_limits<T>::infinity());
}

// s [rows, cols] (query rows from row0, keys from col0, of `head`) times dropout's mask: each
// kept entry scaled by 1 / (1 - p), the others 0.
template <typename T>
void drop_block(Rows<T>& s, const Sizes& z, const AttentionDropout& dropout, int64_t head, int64_t row0, int64_t col0) {
  philox::KeepStream keep(dropout.key.value, static_cast<float>(1.0 - dropout.p));  // a slot is a device's
  const T kept = static_cast<T>(1.0 / (1.0 - dropout.p));
  for (int64_t r = 0; r < s.rows(); ++r) {
    const uint64_t first = static_cast<uint64_t>((head * z.m + row0 + r) * z.n + col0);
    for (int64_t c = 0; c < s.cols(); ++c) s(r, c) = keep(first + static_cast<uint64_t>(c)) ? s(r, c) * kept : T(0);
  }
}

// Where the output's rows lie: the op's [B, H, M, Ev] out (any layout with a dense last dim),
// written in place.
template <typename T>
struct OutRows {
  T* first;
  int64_t per_batch, batch, head, row;
  explicit OutRows(const Tensor& out)
      : first(out.data_ptr<T>()), per_batch(out.size(1)), batch(out.stride(0)), head(out.stride(1)),
        row(out.stride(2)) {}
  T* at(int64_t h, int64_t r) const { return first + h / per_batch * batch + h % per_batch * head + r * row; }
};

template <typename T>
void forward_block(const Sizes& z, T scale, const T* q, const T* k, const T* v, const OutRows<T>& out, T* lse,
                   int64_t head, int64_t row0, const AttentionDropout& dropout) {
  const int64_t rows = std::min(kQueryBlock, z.m - row0), keys = z.keys_for(row0 + rows - 1);
  const T* qi = q + (head * z.m + row0) * z.e;
  Rows<T> acc = Rows<T>::Zero(rows, z.ev), s, scratch;
  Column<T> top = Column<T>::Constant(rows, -std::numeric_limits<T>::infinity()), total = Column<T>::Zero(rows);
  for (int64_t col0 = 0; col0 < keys; col0 += kKeyBlock) {
    const int64_t cols = std::min(kKeyBlock, keys - col0);
    scores<T>(s, rows, cols, qi, k + (head * z.n + col0) * z.e, scale, z, row0, col0);
    for (int64_t r = 0; r < rows; ++r) {
      const T grown = std::max(top(r), s.row(r).maxCoeff());  // finite: every row sees key 0
      const T shrink = std::exp(top(r) - grown);              // 0 on the first block
      top(r) = grown;
      total(r) *= shrink;
      acc.row(r) *= shrink;
    }
    exp_shifted<T>(s, top.data());
    mask_block<T>(s, z, row0, col0, T(0));  // exp(-inf) is 0 whatever the exp's range
    total += s.rowwise().sum().array();
    if (dropout.p > 0) drop_block<T>(s, z, dropout, head, row0, col0);
    gemm_add<T>(acc, scratch, cols, Operand<T>{s.data(), cols}, Operand<T>{v + (head * z.n + col0) * z.ev, z.ev});
  }
  Eigen::Map<Rows<T>, 0, Eigen::OuterStride<>>(out.at(head, row0), rows, z.ev, Eigen::OuterStride<>(out.row)) =
      total.inverse().matrix().asDiagonal() * acc;
  const Column<T> l = top + total.log();  // in this buffer: the packet/scalar split not the output's address's
  Eigen::Map<Column<T>>(lse + head * z.m + row0, rows) = l;
}

// One head's gradients (the pointers at head `head`'s first row); delta [M] = rowsum(dout * out).
template <typename T>
void backward_head(const Sizes& z, T scale, const T* q, const T* k, const T* v, const T* dout, const T* lse,
                   const T* delta, T* dq, T* dk, T* dv, int64_t head, const AttentionDropout& dropout) {
  Rows<T> dqh = Rows<T>::Zero(z.m, z.e), s, dp, dkj, dvj, scratch, dqi, dropped;
  for (int64_t col0 = 0; col0 < z.n; col0 += kKeyBlock) {
    const int64_t cols = std::min(kKeyBlock, z.n - col0);
    const T *kj = k + col0 * z.e, *vj = v + col0 * z.ev;
    dkj.setZero(cols, z.e);
    dvj.setZero(cols, z.ev);
    // The first query block holding a row that sees key col0.
    const int64_t first = z.causal ? std::max<int64_t>(col0 - (z.n - z.m), 0) / kQueryBlock * kQueryBlock : 0;
    for (int64_t row0 = first; row0 < z.m; row0 += kQueryBlock) {
      const int64_t rows = std::min(kQueryBlock, z.m - row0);
      const T *qi = q + row0 * z.e, *doi = dout + row0 * z.ev;
      scores<T>(s, rows, cols, qi, kj, scale, z, row0, col0);
      exp_shifted<T>(s, lse + row0);
      mask_block<T>(s, z, row0, col0, T(0));
      if (dropout.p > 0) {  // dv from the dropped P; dP = mask * (dout v^T)
        dropped = s;
        drop_block<T>(dropped, z, dropout, head, row0, col0);
      }
      gemm_add<T>(dvj, scratch, rows, transposed((dropout.p > 0 ? dropped : s).data(), cols), Operand<T>{doi, z.ev});
      dp.resize(rows, cols);
      gemm(dp.data(), rows, z.ev, cols, Operand<T>{doi, z.ev}, transposed(vj, z.ev));
      if (dropout.p > 0) drop_block<T>(dp, z, dropout, head, row0, col0);
      // dS = P * (dP - D), scaled once: the gradient of the scores before the scale.
      for (int64_t r = 0; r < rows; ++r) s.row(r).array() *= (dp.row(r).array() - delta[row0 + r]) * scale;
      dqi.resize(rows, z.e);
      gemm(dqi.data(), rows, cols, z.e, Operand<T>{s.data(), cols}, Operand<T>{kj, z.e});
      dqh.middleRows(row0, rows) += dqi;
      gemm_add<T>(dkj, scratch, rows, transposed(s.data(), cols), Operand<T>{qi, z.e});
    }
    Eigen::Map<Rows<T>>(dk + col0 * z.e, cols, z.e) = dkj;
    Eigen::Map<Rows<T>>(dv + col0 * z.ev, cols, z.ev) = dvj;
  }
  Eigen::Map<Rows<T>>(dq, z.m, z.e) = dqh;
}

// The op's [B, H, rows, width] operands (any layout with a dense last dim, backend.h) reach the
// kernels contiguous (Backend::contiguous), heads = B * H.
Sizes sizes_of(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  return Sizes{q.size(0) * q.size(1), q.size(2), k.size(2), q.size(3), v.size(3), causal};
}

bool float_type(DType dtype) { return dtype == kFloat32 || dtype == kFloat64; }

template <typename F>
void for_float_types(DType dtype, F&& f) {
  if (dtype == kFloat32)
    f(float{});
  else
    f(double{});
}

}  // namespace

bool CpuBackend::flash_attention(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                                 const Tensor& v, bool causal, double scale, const AttentionDropout& dropout) {
  if (!float_type(q.dtype())) return false;
  const Tensor qh = contiguous(q), kh = contiguous(k), vh = contiguous(v);
  const Sizes z = sizes_of(qh, kh, vh, causal);
  const int64_t blocks = (z.m + kQueryBlock - 1) / kQueryBlock;
  for_float_types(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const OutRows<T> written(out);
    // A unit is a block of query rows of one head: 64 x N x (E + Ev) multiply-adds at least.
    parallel_for(0, z.heads * blocks, 1, [&](int64_t from, int64_t to) {
      for (int64_t u = from; u < to; ++u) {
        forward_block<T>(z, static_cast<T>(scale), qh.data_ptr<T>(), kh.data_ptr<T>(), vh.data_ptr<T>(), written,
                         lse.data_ptr<T>(), u / blocks, u % blocks * kQueryBlock, dropout);
      }
    });
  });
  return true;
}

bool CpuBackend::flash_attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                          const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                          const Tensor& lse, bool causal, double scale,
                                          const AttentionDropout& dropout) {
  if (!float_type(q.dtype())) return false;
  // out only meets dout in delta, row by row: read where it lies.
  const Tensor qh = contiguous(q), kh = contiguous(k), vh = contiguous(v), gh = contiguous(dout);
  const Tensor dqw = stand_in(dq), dkw = stand_in(dk), dvw = stand_in(dv);
  const Sizes z = sizes_of(qh, kh, vh, causal);
  for_float_types(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const OutRows<T> outputs(out);
    parallel_for(0, z.heads, 1, [&](int64_t from, int64_t to) {
      std::vector<T> delta(static_cast<size_t>(z.m));
      for (int64_t h = from; h < to; ++h) {
        const T* g = gh.data_ptr<T>() + h * z.m * z.ev;
        for (int64_t r = 0; r < z.m; ++r) {  // in order, whatever the addresses
          const T* o = outputs.at(h, r);
          T dot = 0;
          for (int64_t d = 0; d < z.ev; ++d) dot += o[d] * g[r * z.ev + d];
          delta[static_cast<size_t>(r)] = dot;
        }
        backward_head<T>(z, static_cast<T>(scale), qh.data_ptr<T>() + h * z.m * z.e, kh.data_ptr<T>() + h * z.n * z.e,
                         vh.data_ptr<T>() + h * z.n * z.ev, g, lse.data_ptr<T>() + h * z.m, delta.data(),
                         dqw.data_ptr<T>() + h * z.m * z.e, dkw.data_ptr<T>() + h * z.n * z.e,
                         dvw.data_ptr<T>() + h * z.n * z.ev, h, dropout);
      }
    });
  });
  settle(dq, dqw);
  settle(dk, dkw);
  settle(dv, dvw);
  return true;
}

}  // namespace tinyddp::tensor::cpu
