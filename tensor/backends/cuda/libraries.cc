// tensor/backends/cuda/libraries.h: cuBLAS GEMMs and cuDNN softmax. Every library call is checked; a
// failure names the call and the library's own description of the status.
#include "tinyddp/tensor/backends/cuda/libraries.h"

#include <climits>
#include <memory>
#include <optional>
#include <utility>

#include "tinyddp/tensor/backends/cuda/backend.h"
#include "tinyddp/tensor/backends/cuda/handles.h"
#include "tinyddp/tensor/backends/cuda/plan.h"
#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/cuda_runtime/runtime.h"

namespace tinyddp::tensor::cuda {

namespace {

// A cuBLAS handle with a workspace of its own, as PyTorch gives each of its handles. Without
// one, cuBLAS takes its default workspace pool, and under stream capture another workspace of
// its own making; it may then choose other kernels in a CUDA graph than in the eager step, whose
// sums differ in the last bits. With its own workspace set before every call (cublasSetStream
// resets it), a handle runs the same kernels eager and captured.
struct BlasHandle {
  cublasHandle_t handle = nullptr;
  void* workspace = nullptr;
};
constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;  // PyTorch's size on Hopper

HandlePool<BlasHandle>& blas_handles() {
  static auto* pool = new HandlePool<BlasHandle>([] {
    BlasHandle h;
    TDDP_CUBLAS_CHECK(cublasCreate(&h.handle));
    // Made outside any capture in progress on this thread (relaxed mode allows cudaMalloc there):
    // the workspace lives as long as the handle, past every graph.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    TDDP_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    const cudaError_t status = cudaMalloc(&h.workspace, kBlasWorkspaceBytes);
    TDDP_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    TDDP_CUDA_CHECK(status);
    return h;
  });
  return *pool;
}

}  // namespace

HandlePool<cudnnHandle_t>& dnn_handles() {
  static auto* pool = new HandlePool<cudnnHandle_t>([] {
    cudnnHandle_t handle = nullptr;
    TDDP_CUDNN_CHECK(cudnnCreate(&handle));
    return handle;
  });
  return *pool;
}

namespace blas {

std::pair<cudaDataType, cublasComputeType_t> gemm_types(DType dtype) {
  switch (dtype) {
    case kFloat32: return {CUDA_R_32F, allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F};
    case kFloat64: return {CUDA_R_64F, CUBLAS_COMPUTE_64F};
    case kFloat16: return {CUDA_R_16F, CUBLAS_COMPUTE_32F};
    case kBFloat16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F};
    default:
      throw Error(
          fmt::format("matmul: not supported for dtype {} on CUDA (cuBLAS multiplies floating-point matrices; "
                      "convert with .to(float32) or multiply on the CPU)",
                      dtype_name(dtype)));
  }
}

namespace {

// One cuBLAS call for the `count` products out_i = a_i b_i over the first `batch_dims` dims of
// a and b (batch_gemm_ready layouts: one batch stride each; count 1: one GEMM). out is
// contiguous. Row-major out = a b is column-major out^T = b^T a^T: cuBLAS's A is b, its B is a
// (plan.h).
void gemm(const Tensor& out, const Tensor& a, const Tensor& b, int64_t batch_dims, int64_t count) {
  const auto [type, compute] = gemm_types(a.dtype());
  const Gemm g = plan_gemm(first_matrix(a), first_matrix(b));
  const auto op = [](bool transpose) { return transpose ? CUBLAS_OP_T : CUBLAS_OP_N; };
  const int device = out.device().index;
  DeviceGuard guard(device);
  const auto lease = blas_handles().lease(device);
  const cublasHandle_t handle = lease.get().handle;
  TDDP_CUBLAS_CHECK(cublasSetStream(handle, compute_stream(device)));
  TDDP_CUBLAS_CHECK(cublasSetWorkspace(handle, lease.get().workspace, kBlasWorkspaceBytes));
  const float alpha_f = 1.0f, beta_f = 0.0f;
  const double alpha_d = 1.0, beta_d = 0.0;
  const bool dbl = compute == CUBLAS_COMPUTE_64F;
  const void* alpha = dbl ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = dbl ? static_cast<const void*>(&beta_d) : &beta_f;
  if (count == 1) {
    TDDP_CUBLAS_CHECK(cublasGemmEx_64(handle, op(g.transpose_a), op(g.transpose_b), g.m, g.n, g.k, alpha,
                                      b.raw_data_ptr(), type, g.lda, a.raw_data_ptr(), type, g.ldb, beta,
                                      out.raw_data_ptr(), type, g.ldc, compute, CUBLAS_GEMM_DEFAULT));
    return;
  }
  TDDP_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
      handle, op(g.transpose_a), op(g.transpose_b), g.m, g.n, g.k, alpha, b.raw_data_ptr(), type, g.lda,
      *batch_stride(b, batch_dims), a.raw_data_ptr(), type, g.ldb, *batch_stride(a, batch_dims), beta,
      out.raw_data_ptr(), type, g.ldc, g.m * g.n, count, compute, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

// A matrix product is a batch of one with no batch dims.
void mm(const Tensor& out, const Tensor& a, const Tensor& b) { bmm(out, a, b); }

void bmm(const Tensor& out, const Tensor& a, const Tensor& b) {
  const int64_t batch_dims = out.dim() - 2;
  const int64_t n = a.size(-2), k = a.size(-1), m = b.size(-1);
  int64_t count = 1;
  for (int64_t d = 0; d < batch_dims; ++d) count *= out.size(d);
  if (count == 0 || n == 0 || m == 0) return;
  if (k == 0) {
    backend().fill(out, 0.0);
    return;
  }
  gemm_types(a.dtype());  // an unsupported dtype is refused before any copy
  gemm(out, batch_gemm_ready(a, batch_dims), batch_gemm_ready(b, batch_dims), batch_dims, count);
}

}  // namespace blas

namespace dnn {

bool softmax(const Tensor& out, const Tensor& x, int64_t dim, bool log) {
  cudnnDataType_t type;
  switch (x.dtype()) {
    case kFloat32: type = CUDNN_DATA_FLOAT; break;
    case kFloat64: type = CUDNN_DATA_DOUBLE; break;
    case kFloat16: type = CUDNN_DATA_HALF; break;
    default: return false;
  }
  // x as NCHW: N = the dims before `dim`, C = dim, H = the dims after it; CHANNEL mode
  // normalises over C for every (n, h).
  int64_t before = 1, after = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < dim) before *= x.size(d);
    if (d > dim) after *= x.size(d);
  }
  const int64_t channels = x.dim() == 0 ? 1 : x.size(dim);
  if (x.numel() > INT_MAX || !out.is_contiguous()) return false;
  const Tensor dense = backend().contiguous(x);
  const int device = x.device().index;
  const auto handle = dnn_handles().lease(device);
  TDDP_CUDNN_CHECK(cudnnSetStream(handle.get(), compute_stream(device)));
  cudnnTensorDescriptor_t desc = nullptr;
  TDDP_CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc));
  const std::unique_ptr<cudnnTensorStruct, cudnnStatus_t (*)(cudnnTensorDescriptor_t)> owned(
      desc, cudnnDestroyTensorDescriptor);
  TDDP_CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc, CUDNN_TENSOR_NCHW, type, static_cast<int>(before),
                                              static_cast<int>(channels), static_cast<int>(after), 1));
  const float one_f = 1.0f, zero_f = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  const bool dbl = type == CUDNN_DATA_DOUBLE;
  TDDP_CUDNN_CHECK(cudnnSoftmaxForward(handle.get(), log ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE,
                                       CUDNN_SOFTMAX_MODE_CHANNEL, dbl ? static_cast<const void*>(&one_d) : &one_f,
                                       desc, dense.raw_data_ptr(), dbl ? static_cast<const void*>(&zero_d) : &zero_f,
                                       desc, out.raw_data_ptr()));
  return true;
}

}  // namespace dnn

}  // namespace tinyddp::tensor::cuda
