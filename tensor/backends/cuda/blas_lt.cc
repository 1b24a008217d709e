// tensor/backends/cuda/libraries.h: Linear's products through cuBLASLt, whose epilogues fold
// the bias into the forward product (CUBLASLT_EPILOGUE_BIAS: no second pass over the output to
// add it) and the bias's gradient into the weight's (CUBLASLT_EPILOGUE_BGRADB: no second pass
// over the output's gradient to sum it), as PyTorch's addmm goes through cublasLt. The
// algorithm of each shape, layout and alignment is asked of cuBLASLt's heuristics once and
// kept; where it has none, the caller multiplies and adds (or sums) apart.
#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <utility>

#include "tinyddp/tensor/backends/cuda/handles.h"
#include "tinyddp/tensor/backends/cuda/libraries.h"
#include "tinyddp/tensor/backends/cuda/plan.h"
#include "tinyddp/tensor/cuda_runtime/runtime.h"
#include "tinyddp/tensor/factory.h"

namespace tinyddp::tensor::cuda::blas {

namespace {

constexpr int64_t kWorkspaceBytes = int64_t{4} << 20;

HandlePool<cublasLtHandle_t>& lt_handles() {
  static auto* pool = new HandlePool<cublasLtHandle_t>([] {
    cublasLtHandle_t handle = nullptr;
    TDDP_CUBLAS_CHECK(cublasLtCreate(&handle));
    return handle;
  });
  return *pool;
}

// The descriptors of one call, destroyed with it.
struct Descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  Descriptors() = default;
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
  ~Descriptors() {
    if (preference != nullptr) cublasLtMatmulPreferenceDestroy(preference);
    for (cublasLtMatrixLayout_t layout : {a, b, d}) {
      if (layout != nullptr) cublasLtMatrixLayoutDestroy(layout);
    }
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

// The largest power of two up to 256 that divides the address (what the heuristics must assume).
uint32_t alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 1;
  while (align < 256 && address % (2 * align) == 0) align *= 2;
  return align;
}

// One column-major GEMM D (m x n, ldd = m) = op(A) op(B) with `epilogue` reading or writing
// `bias`, in the types of gemm_types(dtype); the plan is plan_gemm's.
struct LtCall {
  DType dtype;
  Gemm g;
  const void* a;
  const void* b;
  void* d;
  cublasLtEpilogue_t epilogue;
  void* bias;
};

using AlgoKey = std::tuple<int, int, int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int, uint32_t, uint32_t,
                           uint32_t, uint32_t>;

// Builds the descriptors and returns the algorithm (kept per device, shape, layout, types,
// epilogue and alignments), or nothing where cuBLASLt has none.
std::optional<cublasLtMatmulAlgo_t> describe(const LtCall& c, cublasLtHandle_t handle, int device, Descriptors& d) {
  const auto [type, compute] = gemm_types(c.dtype);
  const Gemm& g = c.g;
  TDDP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, compute, CUDA_R_32F));
  const cublasOperation_t ta = g.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                          tb = g.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  TDDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  TDDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  TDDP_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &c.epilogue, sizeof(c.epilogue)));
  TDDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &c.bias, sizeof(c.bias)));
  // Stored shapes: op(A) is m x k, op(B) is k x n.
  TDDP_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&d.a, type, g.transpose_a ? g.k : g.m, g.transpose_a ? g.m : g.k, g.lda));
  TDDP_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&d.b, type, g.transpose_b ? g.n : g.k, g.transpose_b ? g.k : g.n, g.ldb));
  TDDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.d, type, g.m, g.n, g.ldc));
  const uint32_t align_a = alignment(c.a), align_b = alignment(c.b), align_d = alignment(c.d);
  const uint32_t align_bias = alignment(c.bias);
  const AlgoKey key{device,
                    static_cast<int>(c.dtype),
                    static_cast<int>(compute),
                    (g.transpose_a ? 2 : 0) + g.transpose_b,
                    g.m,
                    g.n,
                    g.k,
                    g.lda,
                    g.ldb,
                    static_cast<int>(c.epilogue),
                    align_a,
                    align_b,
                    align_d,
                    align_bias};
  static std::mutex mutex;
  static auto* known = new std::map<AlgoKey, std::optional<cublasLtMatmulAlgo_t>>();
  {
    std::lock_guard<std::mutex> lock(mutex);
    const auto found = known->find(key);
    if (found != known->end()) return found->second;
  }
  TDDP_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&d.preference));
  const uint64_t workspace = kWorkspaceBytes;
  TDDP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(d.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &workspace, sizeof(workspace)));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_d},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d}};
  for (const auto& [attribute, value] : alignments) {
    TDDP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(d.preference, attribute, &value, sizeof(value)));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(handle, d.op, d.a, d.b, d.d, d.d, d.preference, 1, &result, &found);
  std::optional<cublasLtMatmulAlgo_t> algo;
  // A bias pointer cuBLASLt cannot read in vectors: the separate add instead.
  if (status == CUBLAS_STATUS_SUCCESS && found > 0 && align_bias >= 16) algo = result.algo;
  std::lock_guard<std::mutex> lock(mutex);
  known->emplace(key, algo);
  return algo;
}

bool lt_matmul(const LtCall& c, int device) {
  DeviceGuard guard(device);
  const auto handle = lt_handles().lease(device);
  Descriptors d;
  const std::optional<cublasLtMatmulAlgo_t> algo = describe(c, handle.get(), device, d);
  if (!algo) return false;
  const Tensor workspace = tensor::empty({kWorkspaceBytes}, TensorOptions().dtype(kUInt8).device(Device::cuda(device)));
  const float one = 1.0f, zero = 0.0f;
  TDDP_CUBLAS_CHECK(cublasLtMatmul(handle.get(), d.op, &one, c.a, d.a, c.b, d.b, &zero, c.d, d.d, c.d, d.d, &*algo,
                                   workspace.raw_data_ptr(), static_cast<size_t>(kWorkspaceBytes),
                                   compute_stream(device)));
  return true;
}

bool lt_dtype(DType dtype) { return dtype == kFloat32 || dtype == kFloat16 || dtype == kBFloat16; }

// a's and b's layouts as cuBLAS reads them in place, or nothing (the caller's general route).
std::optional<Gemm> plan_in_place(const Tensor& a, const Tensor& b) {
  if (!gemm_operand(a) || !gemm_operand(b)) return std::nullopt;
  return plan_gemm(a, b);
}

}  // namespace

bool mm_bias(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias) {
  if (!lt_dtype(out.dtype()) || out.numel() == 0 || a.size(1) == 0 || !bias.is_contiguous()) return false;
  const std::optional<Gemm> g = plan_in_place(a, b);
  if (!g) return false;
  // Row-major out = a b is column-major out^T = b^T a^T: cuBLAS's A is b, its B is a; the
  // bias runs along out^T's rows (out's columns).
  return lt_matmul({out.dtype(), *g, b.raw_data_ptr(), a.raw_data_ptr(), out.raw_data_ptr(), CUBLASLT_EPILOGUE_BIAS,
                    bias.raw_data_ptr()},
                   out.device().index);
}

bool mm_bias_grad(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& g, const Tensor& x) {
  if (!lt_dtype(g.dtype()) || grad_weight.numel() == 0 || g.size(0) == 0) return false;
  // grad_weight [m, k] = g^T [m, n] x [n, k]: column-major grad_weight^T = x^T g, cuBLAS's A is
  // x, its B is g^T's memory, and the bias gradient sums op(B) over the product's k (g's rows).
  const std::optional<Gemm> plan = plan_in_place(g.t(), x);
  if (!plan) return false;
  return lt_matmul({g.dtype(), *plan, x.raw_data_ptr(), g.raw_data_ptr(), grad_weight.raw_data_ptr(),
                    CUBLASLT_EPILOGUE_BGRADB, grad_bias.raw_data_ptr()},
                   g.device().index);
}

}  // namespace tinyddp::tensor::cuda::blas
