// The measurement behind docs/tensor.md's choice of GEMM: float32 GFLOP/s of one library on
// the shapes of the targets (square 256-1024 and the MLP 784-1024-1024-10 step's products),
// one thread, best of 5 runs of at least 0.2 s each. bench/gemm_libraries.sh builds this file
// once per library (they cannot share a process: OpenBLAS and BLIS both define cblas_sgemm)
// with -DGEMM_EIGEN, -DGEMM_OPENBLAS, -DGEMM_DNNL or -DGEMM_BLIS, and prints the table.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#if defined(GEMM_EIGEN)
#include <Eigen/Core>
#elif defined(GEMM_DNNL)
#include <oneapi/dnnl/dnnl.h>
#elif defined(GEMM_BLIS)
#include <blis.h>
#elif defined(GEMM_OPENBLAS)
extern "C" void cblas_sgemm(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*,
                            int);
extern "C" void openblas_set_num_threads(int);
#else
#error "define one of GEMM_EIGEN, GEMM_OPENBLAS, GEMM_DNNL, GEMM_BLIS"
#endif

namespace {

// c [n, m] row-major = op(a) [n, k] x op(b) [k, m]; a is stored [n, k] row-major, or [k, n]
// when trans_a; b is stored [k, m], or [m, k] when trans_b.
struct Shape {
  int n, k, m;
  bool trans_a, trans_b;
  const char* name;
};

void gemm(const Shape& s, const float* a, const float* b, float* c) {
  const int lda = s.trans_a ? s.n : s.k, ldb = s.trans_b ? s.k : s.m;
#if defined(GEMM_EIGEN)
  using M = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using C = Eigen::Map<const M>;
  Eigen::Map<M> out(c, s.n, s.m);
  if (!s.trans_a && !s.trans_b) out.noalias() = C(a, s.n, s.k) * C(b, s.k, s.m);
  if (!s.trans_a && s.trans_b) out.noalias() = C(a, s.n, s.k) * C(b, s.m, s.k).transpose();
  if (s.trans_a && !s.trans_b) out.noalias() = C(a, s.k, s.n).transpose() * C(b, s.k, s.m);
  if (s.trans_a && s.trans_b) out.noalias() = C(a, s.k, s.n).transpose() * C(b, s.m, s.k).transpose();
#elif defined(GEMM_OPENBLAS)
  cblas_sgemm(101, s.trans_a ? 112 : 111, s.trans_b ? 112 : 111, s.n, s.m, s.k, 1.f, a, lda, b, ldb, 0.f, c, s.m);
#elif defined(GEMM_DNNL)
  dnnl_sgemm(s.trans_a ? 'T' : 'N', s.trans_b ? 'T' : 'N', s.n, s.m, s.k, 1.f, a, lda, b, ldb, 0.f, c, s.m);
#elif defined(GEMM_BLIS)
  float one = 1, zero = 0;
  bli_sgemm(s.trans_a ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, s.trans_b ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, s.n, s.m,
            s.k, &one, const_cast<float*>(a), lda, 1, const_cast<float*>(b), ldb, 1, &zero, c, s.m, 1);
#endif
}

}  // namespace

int main() {
#if defined(GEMM_OPENBLAS)
  openblas_set_num_threads(1);
#endif
  const Shape shapes[] = {
      {256, 256, 256, false, false, "256 x 256 x 256"},
      {512, 512, 512, false, false, "512 x 512 x 512"},
      {1024, 1024, 1024, false, false, "1024 x 1024 x 1024"},
      {128, 784, 1024, false, true, "128 x 784 x 1024 (x @ W1^T)"},
      {128, 1024, 1024, false, true, "128 x 1024 x 1024 (h @ W2^T)"},
      {1024, 128, 1024, true, false, "1024 x 128 x 1024 (g^T @ h)"},
      {128, 1024, 1024, false, false, "128 x 1024 x 1024 (g @ W2)"},
      {128, 1024, 10, false, true, "128 x 1024 x 10 (h @ W3^T)"},
  };
  for (const Shape& s : shapes) {
    std::vector<float> a(size_t(s.n) * s.k), b(size_t(s.k) * s.m), c(size_t(s.n) * s.m);
    for (size_t i = 0; i < a.size(); ++i) a[i] = float(i % 7) * 0.1f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = float(i % 5) * 0.1f;
    gemm(s, a.data(), b.data(), c.data());  // warm-up (and the library's one-time set-up)
    double best = 1e30;
    for (int round = 0; round < 5; ++round) {
      int calls = 0;
      double elapsed = 0;
      const auto start = std::chrono::steady_clock::now();
      while (elapsed < 0.2) {
        gemm(s, a.data(), b.data(), c.data());
        ++calls;
        elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
      best = std::min(best, elapsed / calls);
    }
    std::printf("%s\t%.1f\n", s.name, 2.0 * s.n * s.k * s.m / best / 1e9);
  }
  return 0;
}
