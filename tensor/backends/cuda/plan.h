// How CUDA launches see tensors, as plain C++ that the CPU build compiles and tests too
// (tests/tensor/cuda_plan_test.cc): the descriptors of an elementwise launch, and the cuBLAS
// call that multiplies two row-major matrix views.
#pragma once

#include <algorithm>
#include <array>
#include <optional>
#include <vector>

#include "tinyddp/base/error.h"
#include "tinyddp/tensor/backends/cuda/kernels.h"
#include "tinyddp/tensor/internal/backend.h"
#include "tinyddp/tensor/internal/iteration_order.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::tensor::cuda {

// The iteration shape `sizes` with each operand's strides broadcast to it, size-1 dims
// dropped, the dims in the operands' memory order and every pair of dims merged that all
// operands traverse as one (so contiguous or channels-last operands become one dim).
template <size_t N>
kernels::Geometry geometry(const Shape& sizes, const std::array<const Tensor*, N>& tensors,
                           std::array<kernels::Operand, N>& ops, const char* op) {
  std::array<Shape, N> strides;
  for (size_t i = 0; i < N; ++i) {
    const Tensor& t = *tensors[i];
    ops[i].data = t.raw_data_ptr();
    ops[i].dtype = static_cast<int>(t.dtype());
    // Right-aligned broadcasting: missing or size-1 dims of the operand get stride 0.
    const int64_t offset = static_cast<int64_t>(sizes.size()) - t.dim();
    for (int64_t d = 0; d < static_cast<int64_t>(sizes.size()); ++d) {
      const int64_t td = d - offset;
      strides[i].push_back(td < 0 || t.size(td) == 1 ? 0 : t.stride(td));
    }
  }
  // Merge from the innermost dim outwards, in the operands' memory order (iteration_order.h).
  std::vector<int64_t> merged_sizes;
  std::array<std::vector<int64_t>, N> merged_strides;
  for (const int64_t d : iteration_order<N>(sizes, strides)) {
    if (sizes[d] == 1) continue;
    bool joins = !merged_sizes.empty();
    for (size_t i = 0; i < N && joins; ++i) {
      joins = strides[i][d] == merged_strides[i].back() * merged_sizes.back();
    }
    if (joins) {
      merged_sizes.back() *= sizes[d];
    } else {
      merged_sizes.push_back(sizes[d]);
      for (size_t i = 0; i < N; ++i) merged_strides[i].push_back(strides[i][d]);
    }
  }
  kernels::Geometry g;
  g.numel = 1;
  for (int64_t s : sizes) g.numel *= s;
  const int ndim = static_cast<int>(merged_sizes.size());
  TDDP_CHECK(ndim <= kernels::kMaxDims,
             "{}: CUDA kernels take at most {} non-mergeable dims, got {} (make the tensors contiguous)", op,
             kernels::kMaxDims, ndim);
  g.ndim = std::max(ndim, 1);
  g.sizes[0] = 1;
  for (int d = 0; d < ndim; ++d) {
    g.sizes[d] = merged_sizes[ndim - 1 - d];  // back to outermost first
    for (size_t i = 0; i < N; ++i) ops[i].strides[d] = merged_strides[i][ndim - 1 - d];
  }
  return g;
}

// How cuBLAS (column-major) reads a row-major matrix view [rows, cols] with strides (s0, s1):
// its memory is the column-major transpose with leading dimension s0 (not transposed), or,
// for a transposed view, the column-major matrix itself with leading dimension s1
// (transposed). Size-1 dims may carry any stride. Other layouts need a contiguous copy.
struct GemmOperand {
  bool transpose = false;
  int64_t ld = 0;
};

inline std::optional<GemmOperand> gemm_operand(int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
  if ((s1 == 1 || cols <= 1) && (s0 >= std::max<int64_t>(1, cols) || rows <= 1)) {
    return GemmOperand{false, rows <= 1 ? std::max<int64_t>(1, cols) : s0};
  }
  if ((s0 == 1 || rows <= 1) && (s1 >= std::max<int64_t>(1, rows) || cols <= 1)) {
    return GemmOperand{true, cols <= 1 ? std::max<int64_t>(1, rows) : s1};
  }
  return std::nullopt;
}

inline std::optional<GemmOperand> gemm_operand(const Tensor& t) {
  return gemm_operand(t.size(0), t.size(1), t.stride(0), t.stride(1));
}

// Row-major out [n, m] (contiguous) = a [n, k] b [k, m] is column-major out^T = b^T a^T: one
// cuBLAS GEMM C (m x n, ldc = m) = op(A) op(B) with A = b's memory and B = a's memory. a and b
// must have gemm_operand layouts (pass them through batch_gemm_ready).
struct Gemm {
  bool transpose_a = false, transpose_b = false;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
};

inline Gemm plan_gemm(const Tensor& a, const Tensor& b) {
  const GemmOperand la = *gemm_operand(a), lb = *gemm_operand(b);
  const int64_t n = a.size(0), k = a.size(1), m = b.size(1);
  return Gemm{lb.transpose, la.transpose, m, n, k, lb.ld, la.ld, std::max<int64_t>(1, m)};
}

// The one stride that steps through t's first `batch_dims` dims in row-major order of the
// batch index, when there is one (a strided-batched GEMM's batch stride): each batch dim's
// stride is the next one's times that one's size (size-1 dims skipped), or they are all 0 (a
// broadcast batch). A batch of none or of ones has stride 0.
inline std::optional<int64_t> batch_stride(const Tensor& t, int64_t batch_dims) {
  int64_t stride = 0, span = 0;  // the innermost non-size-1 batch dim's stride; the sizes inwards
  for (int64_t d = batch_dims - 1; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (span == 0) {
      stride = t.stride(d);
      span = t.size(d);
      continue;
    }
    if (t.stride(d) != stride * span) return std::nullopt;
    span *= t.size(d);
  }
  return stride;
}

// `t` [..., rows, cols] itself when one batch stride steps through its matrices and cuBLAS reads
// each as it is laid out, else a contiguous copy (a broadcast batch copied out once). With no
// batch dims: a matrix cuBLAS reads in place, or its contiguous copy.
inline Tensor batch_gemm_ready(const Tensor& t, int64_t batch_dims) {
  const bool in_place = batch_stride(t, batch_dims) && gemm_operand(t.size(-2), t.size(-1), t.stride(-2), t.stride(-1));
  return in_place ? t : backend_for(t.device(), "matmul").contiguous(t);
}

// The first matrix of a batch [..., rows, cols] (batch index 0 in every batch dim).
inline Tensor first_matrix(const Tensor& t) {
  Tensor m = t;
  while (m.dim() > 2) m = m.select(0, 0);
  return m;
}

}  // namespace tinyddp::tensor::cuda
