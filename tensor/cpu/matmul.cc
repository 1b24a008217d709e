// CPU matrix multiply: out [n, m] = a [n, k] x b [k, m] through Eigen's GEMM. A row-major or
// column-major operand (any leading dimension) is mapped in place, so transposed views and
// narrowed slices need no copy; other layouts are made contiguous first. float16/bfloat16
// compute in float32; int64 uses a plain loop (Eigen has no fast integer GEMM).
#include <Eigen/Core>

#include "tinyddp/tensor/cpu/backend.h"
#include "tinyddp/tensor/cpu/loops.h"
#include "tinyddp/tensor/factory.h"

namespace tinyddp::tensor::cpu {

namespace {

// How a 2-D tensor sits in memory, as BLAS sees it.
struct MatrixLayout {
  bool row_major = true;
  int64_t leading_dim = 1;  // elements between consecutive rows (row-major) or columns
};

// The layout of a 2-D tensor if Eigen can map it directly. Size-1 dims may have any stride.
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

template <typename T, int Order>
using MatrixMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>, 0, Eigen::OuterStride<>>;
template <typename T>
using OutMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

template <typename T, int Order>
MatrixMap<T, Order> map_matrix(const Tensor& t, int64_t leading_dim) {
  return MatrixMap<T, Order>(t.data_ptr<T>(), t.size(0), t.size(1), Eigen::OuterStride<>(leading_dim));
}

template <typename T>
void eigen_mm(const Tensor& out, const Tensor& a_in, const Tensor& b_in) {
  std::optional<MatrixLayout> la = matrix_layout(a_in);
  std::optional<MatrixLayout> lb = matrix_layout(b_in);
  const Tensor a = la ? a_in : a_in.contiguous();
  const Tensor b = lb ? b_in : b_in.contiguous();
  if (!la) la = matrix_layout(a);
  if (!lb) lb = matrix_layout(b);
  OutMap<T> c(out.data_ptr<T>(), out.size(0), out.size(1));
  // Four layout combinations, each one GEMM call with no copies.
  if (la->row_major && lb->row_major) {
    c.noalias() =
        map_matrix<T, Eigen::RowMajor>(a, la->leading_dim) * map_matrix<T, Eigen::RowMajor>(b, lb->leading_dim);
  } else if (la->row_major) {
    c.noalias() =
        map_matrix<T, Eigen::RowMajor>(a, la->leading_dim) * map_matrix<T, Eigen::ColMajor>(b, lb->leading_dim);
  } else if (lb->row_major) {
    c.noalias() =
        map_matrix<T, Eigen::ColMajor>(a, la->leading_dim) * map_matrix<T, Eigen::RowMajor>(b, lb->leading_dim);
  } else {
    c.noalias() =
        map_matrix<T, Eigen::ColMajor>(a, la->leading_dim) * map_matrix<T, Eigen::ColMajor>(b, lb->leading_dim);
  }
}

// int64: out[i, j] = sum_p a[i, p] * b[p, j], in i-p-j order so the inner loop is contiguous.
void int64_mm(const Tensor& out, const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = a_in.contiguous();
  const Tensor b = b_in.contiguous();
  const int64_t n = a.size(0), k = a.size(1), m = b.size(1);
  const int64_t* pa = a.data_ptr<int64_t>();
  const int64_t* pb = b.data_ptr<int64_t>();
  int64_t* pc = out.data_ptr<int64_t>();
  std::fill(pc, pc + n * m, 0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t p = 0; p < k; ++p) {
      const int64_t av = pa[i * k + p];
      for (int64_t j = 0; j < m; ++j) pc[i * m + j] += av * pb[p * m + j];
    }
  }
}

}  // namespace

void mm(const Tensor& out, const Tensor& a, const Tensor& b) {
  if (out.numel() == 0) return;
  if (a.size(1) == 0) {  // empty inner dimension: the sum of nothing
    fill(out, 0.0);
    return;
  }
  switch (a.dtype()) {
    case kFloat32: eigen_mm<float>(out, a, b); return;
    case kFloat64: eigen_mm<double>(out, a, b); return;
    case kInt64: int64_mm(out, a, b); return;
    case kFloat16:
    case kBFloat16: {
      Tensor result = empty(out.sizes(), TensorOptions(kFloat32));
      eigen_mm<float>(result, a.to(kFloat32), b.to(kFloat32));
      copy(out, result);
      return;
    }
    case kBool: break;
  }
  throw Error(fmt::format("matmul: not supported for dtype {}", dtype_name(a.dtype())));
}

}  // namespace tinyddp::tensor::cpu
