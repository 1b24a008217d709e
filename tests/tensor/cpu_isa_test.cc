// The CPU kernels compiled per instruction set (tensor/backends/cpu/isa/kernels.h): TINYDDP_CPU_ISA's
// parsing and errors; each table's GEMM against a naive double loop for every layout; and
// every dispatched kernel run under AVX2 and under AVX-512 with the results compared (bit for
// bit where the arithmetic is the same, within rounding where the summation order or the
// vectorised math library differs). On a CPU without AVX-512 that half skips, saying so.
#include <cstdlib>
#include <cstring>
#include <tuple>

#include "tests/test_util.h"
#include "tinyddp/autograd/autograd.h"
#include "tinyddp/tensor/backends/cpu/isa/kernels.h"
#include "tinyddp/tensor/cpu_isa.h"

using namespace tinyddp::tensor;
using Catch::Contains;

namespace {

// Restores the instruction set a test case found.
struct IsaRestore {
  CpuIsa saved = cpu_isa();
  ~IsaRestore() { set_cpu_isa(saved); }
};

// c[i, j] = sum_p a[i, p] * b[p, j] in double over row-major arrays.
template <typename T>
std::vector<double> naive_gemm(const std::vector<T>& a, const std::vector<T>& b, int64_t n, int64_t k, int64_t m) {
  std::vector<double> c(static_cast<size_t>(n * m), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t p = 0; p < k; ++p) {
      for (int64_t j = 0; j < m; ++j) c[i * m + j] += double(a[i * k + p]) * double(b[p * m + j]);
    }
  }
  return c;
}

// The largest |c[i] - ref[i]| over ref's elements.
template <typename T>
double worst_error(const T* c, const std::vector<double>& ref) {
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::abs(double(c[i]) - ref[i]));
  return worst;
}

// One table's GEMM for every operand layout (row- or column-major, padded leading dimensions).
template <typename T>
void check_table_gemm(const tinyddp::tensor::cpu::IsaKernels& kernels, double tol) {
  using tinyddp::tensor::cpu::GemmArgs;
  Generator gen(7);
  for (const auto& [n, k, m] : std::vector<std::array<int64_t, 3>>{{1, 1, 1},
                                                                   {67, 45, 91},
                                                                   {128, 300, 10},
                                                                   {5, 257, 33},
                                                                   // Narrow products (gemm_kernels.cc), with every
                                                                   // tail: k, m or n of 16 or less, vectors cut short.
                                                                   {128, 1024, 10},
                                                                   {37, 70, 16},
                                                                   {9, 3, 5},
                                                                   {128, 10, 1024},
                                                                   {61, 16, 75},
                                                                   {10, 128, 1030},
                                                                   {16, 53, 40},
                                                                   {13, 31, 17},
                                                                   {1, 200, 9},
                                                                   // A chunk's x @ W^T (dots over W's rows) and
                                                                   // g @ W (row strips, prefetched), and
                                                                   // few terms with a result over 256 K.
                                                                   {16, 300, 203},
                                                                   {600, 14, 500},
                                                                   {2, 130, 77},
                                                                   {11, 200, 70},
                                                                   // A chunk of 17-32 rows: dots,
                                                                   // and row strips under AVX-512.
                                                                   {29, 150, 203},
                                                                   {30, 60, 77}}) {
    const Tensor a = randn({n, k}, {}, &gen), b = randn({k, m}, {}, &gen);
    std::vector<T> av(n * k), bv(k * m);
    for (int64_t i = 0; i < n * k; ++i) av[i] = static_cast<T>(a.data_ptr<float>()[i]);
    for (int64_t i = 0; i < k * m; ++i) bv[i] = static_cast<T>(b.data_ptr<float>()[i]);
    const std::vector<double> ref = naive_gemm(av, bv, n, k, m);
    for (int layout = 0; layout < 4; ++layout) {
      const bool a_rows = layout & 1, b_rows = layout & 2;
      const int64_t pad = 3;
      // Store each operand in the layout, with `pad` unused elements after each row/column.
      const int64_t lda = (a_rows ? k : n) + pad, ldb = (b_rows ? m : k) + pad;
      std::vector<T> as((a_rows ? n : k) * lda, T(1e30)), bs((b_rows ? k : m) * ldb, T(1e30));
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t p = 0; p < k; ++p) as[a_rows ? i * lda + p : p * lda + i] = av[i * k + p];
      }
      for (int64_t p = 0; p < k; ++p) {
        for (int64_t j = 0; j < m; ++j) bs[b_rows ? p * ldb + j : j * ldb + p] = bv[p * m + j];
      }
      std::vector<T> c(n * m, T(-7));
      GemmArgs<T> g;
      g.n = n, g.k = k, g.m = m, g.a = as.data(), g.lda = lda, g.a_row_major = a_rows;
      g.b = bs.data(), g.ldb = ldb, g.b_row_major = b_rows, g.c = c.data();
      if constexpr (std::is_same_v<T, float>) {
        // The narrow loops alone: the bits gemm_f32 gives where they take the product (it tries
        // them first), c untouched where they do not.
        std::vector<float> narrow(c.size(), -7.0f);
        GemmArgs<float> gn = g;
        gn.c = narrow.data();
        const bool taken = kernels.narrow_gemm_f32(gn);
        kernels.gemm_f32(g);
        INFO(kernels.isa << " narrow gemm " << n << "x" << k << "x" << m << " layout " << layout << " taken " << taken);
        CHECK(std::memcmp(narrow.data(), taken ? c.data() : std::vector<float>(c.size(), -7.0f).data(),
                          c.size() * sizeof(float)) == 0);
      }
      if constexpr (std::is_same_v<T, double>) kernels.gemm_f64(g);
      const double worst = worst_error(c.data(), ref);
      INFO(kernels.isa << " gemm " << n << "x" << k << "x" << m << " layout " << layout << ": worst error " << worst);
      CHECK(worst <= tol * static_cast<double>(k));
    }
  }
}

// A result that may differ between instruction sets by rounding: within rtol/atol.
struct CloseResult {
  std::string name;
  Tensor value;
  double rtol = 0, atol = 0;
};

// The results of every dispatched kernel under the current instruction set. `exact` ones
// must agree bit for bit between instruction sets; `close` ones within rounding.
struct KernelResults {
  std::vector<std::pair<std::string, Tensor>> exact;
  std::vector<CloseResult> close;
};

// conv2d of small maps: float32 takes the direct kernels (forward, the input's and the
// weight's gradients), float64 im2col + GEMM. Sums of k products, as a GEMM's (below).
void conv_results(KernelResults& r, const std::string& d, const TensorOptions& opt, Generator& gen, double eps) {
  const Tensor x = randn({3, 16, 4, 4}, opt, &gen).requires_grad_(true);
  const Tensor w = randn({32, 16, 3, 3}, opt, &gen).requires_grad_(true);
  const Tensor y = conv2d(x, w, randn({32}, opt, &gen), 1, 1);
  y.backward(randn(y.sizes(), opt, &gen));
  r.close.push_back({d + "conv2d small maps", y.detach(), 4 * eps * 144, 4 * eps * 144});
  r.close.push_back({d + "conv2d small maps, input gradient", x.grad(), 4 * eps * 288, 4 * eps * 288});
  r.close.push_back({d + "conv2d small maps, weight gradient", w.grad(), 4 * eps * 48, 4 * eps * 48});
}

// The fused optimizer steps: SGD with weight decay and momentum (its first step, then a later
// one), nesterov; AdamW's, two steps (the bias corrections change).
void optimizer_results(KernelResults& r, const std::string& d, const Tensor& a, const Tensor& b) {
  for (const bool nesterov : {false, true}) {
    Tensor p = a.clone(), buf;
    const SgdStep step{0.1, 0.9, 0.0, 0.01, nesterov};
    REQUIRE(fused_sgd_step_(p, b, &buf, step));  // the first step allocates the buffer
    REQUIRE(fused_sgd_step_(p, a, &buf, step));
    r.exact.push_back({d + "sgd param" + (nesterov ? " nesterov" : ""), p});
    r.exact.push_back({d + "sgd momentum buffer" + (nesterov ? " nesterov" : ""), buf});
  }
  const Tensor p = a.clone(), m = zeros_like(a), v = zeros_like(a);
  for (const int64_t k : {1, 2}) {
    REQUIRE(fused_adam_step_(p, k == 1 ? b : a, m, v, AdamStep{1e-3, 0.9, 0.999, 1e-8, 0.01, k, true, false}));
  }
  r.exact.push_back({d + "adam param", p});
  r.exact.push_back({d + "adam exp_avg", m});
  r.exact.push_back({d + "adam exp_avg_sq", v});
}

KernelResults run_every_kernel() {
  KernelResults r;
  Generator gen(11);
  for (DType dtype : {kFloat32, kFloat64}) {
    const std::string d = dtype == kFloat32 ? "f32 " : "f64 ";
    const TensorOptions opt(dtype);
    const double eps = dtype == kFloat32 ? 1.2e-7 : 2.3e-16;
    // Vectorised exp/log/tanh differ by a few ulp between Eigen's AVX and AVX-512 code.
    const auto math = [&](std::string name, Tensor value) { r.close.push_back({d + name, value, 16 * eps, 16 * eps}); };
    // A GEMM's summation order differs between engines and vector widths: each output, a
    // sum of k products of values of order 1, may move by about sqrt(k) * |sum| * eps; k * eps
    // bounds it.
    const auto gemm = [&](std::string name, Tensor value, int64_t k) {
      r.close.push_back({d + name, value, 4 * eps * k, 4 * eps * k});
    };
    const Tensor a = randn({37, 1031}, opt, &gen), b = randn({37, 1031}, opt, &gen);
    const Tensor row = randn({1031}, opt, &gen), col = randn({37, 1}, opt, &gen);
    r.exact.push_back({d + "add", add(a, b)});
    r.exact.push_back({d + "add alpha", add(a, b, 0.37)});
    r.exact.push_back({d + "add scalar", add(a, 2.5)});
    r.exact.push_back({d + "sub row", sub(a, row)});
    r.exact.push_back({d + "mul column", mul(a, col)});
    r.exact.push_back({d + "div", div(a, b)});
    r.exact.push_back({d + "scalar / x", 3.0 / b});
    r.exact.push_back({d + "maximum", maximum(a, b)});
    r.exact.push_back({d + "minimum", minimum(a, b)});
    r.exact.push_back({d + "add_ in place", a.clone().add_(b, -0.5)});
    r.exact.push_back({d + "strided add", add(a.t(), b.t())});
    r.exact.push_back({d + "neg", neg(a)});
    r.exact.push_back({d + "abs", abs(a)});
    r.exact.push_back({d + "relu", relu(a)});
    r.exact.push_back({d + "masked_fill", masked_fill(a, lt(b, 0.0), 3.5)});
    r.exact.push_back({d + "sqrt", sqrt(abs(a))});
    math("exp", exp(a));
    math("log", log(abs(a)));
    math("tanh", tanh(a));
    math("sigmoid", sigmoid(a));
    math("gelu", gelu(a));
    math("gelu tanh", gelu(a, "tanh"));
    for (const std::string form : {"none", "tanh"}) {  // the derivative kernels, through backward
      const Tensor xg = a.clone().requires_grad_(true);
      gelu(xg, form).backward(b);
      // 1 - tanh(u)^2 in the tanh form's derivative cancels: a few ulp of tanh move it by more.
      r.close.push_back({d + "gelu backward " + form, xg.grad(), 64 * eps, 64 * eps});
    }
    Tensor acc = a.clone();
    accumulate_into(acc, b);
    r.exact.push_back({d + "accumulate_into", acc});
    r.exact.push_back({d + "sum dim 0", sum(a, {0})});
    r.exact.push_back({d + "mean dim 0", mean(a, {0})});
    r.exact.push_back({d + "sum", sum(a)});
    math("softmax -1", softmax(a, -1));  // Eigen's vectorised exp
    math("softmax 0", softmax(a, 0));
    math("log_softmax -1", log_softmax(a, -1));
    // relu's backward (BinaryOp::kReluBackward).
    const Tensor x = a.clone().requires_grad_(true);
    relu(x).backward(b);
    r.exact.push_back({d + "relu backward", x.grad()});
    optimizer_results(r, d, a, b);
    // Matmul in every transposition case, and batched.
    const Tensor w = randn({1031, 77}, opt, &gen);
    gemm("matmul NN", matmul(a, w), 1031);
    gemm("matmul NT", matmul(a, w.t().contiguous().t()), 1031);
    gemm("matmul TN", matmul(a.t().contiguous().t(), w), 1031);
    gemm("matmul TT", matmul(a.t().contiguous().t(), w.t().contiguous().t()), 1031);
    gemm("matmul batched", matmul(randn({3, 17, 19}, opt, &gen), randn({3, 19, 23}, opt, &gen)), 19);
    conv_results(r, d, opt, gen, eps);
  }
  r.exact.push_back({"f16 softmax", softmax(randn({9, 130}, {}, &gen).to(kFloat16), -1)});
  r.exact.push_back({"bf16 log_softmax", log_softmax(randn({9, 130}, {}, &gen).to(kBFloat16), 0)});
  return r;
}

bool same_bits(const Tensor& x, const Tensor& y) {
  const Tensor a = x.contiguous(), b = y.contiguous();
  return a.sizes() == b.sizes() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data_ptr(), b.raw_data_ptr(), a.nbytes()) == 0;
}

// Two runs of run_every_kernel(): bit for bit where exact, within rounding where close.
void check_same(const KernelResults& x, const KernelResults& y) {
  REQUIRE(x.exact.size() == y.exact.size());
  for (size_t i = 0; i < x.exact.size(); ++i) {
    INFO(x.exact[i].first);
    CHECK(same_bits(x.exact[i].second, y.exact[i].second));
  }
  REQUIRE(x.close.size() == y.close.size());
  for (size_t i = 0; i < x.close.size(); ++i) {
    INFO(x.close[i].name << " within rtol " << x.close[i].rtol << ", atol " << x.close[i].atol);
    CHECK(allclose(x.close[i].value, y.close[i].value, x.close[i].rtol, x.close[i].atol));
  }
}

}  // namespace

TEST_CASE("TINYDDP_CPU_ISA selects, forces, or names what is wrong") {
  CHECK(resolve_cpu_isa("", true) == CpuIsa::kAvx512);
  CHECK(resolve_cpu_isa("", false) == CpuIsa::kAvx2);
  CHECK(resolve_cpu_isa("auto", true) == CpuIsa::kAvx512);
  CHECK(resolve_cpu_isa("auto", false) == CpuIsa::kAvx2);
  CHECK(resolve_cpu_isa("avx2", true) == CpuIsa::kAvx2);
  CHECK(resolve_cpu_isa("AVX2", false) == CpuIsa::kAvx2);
  CHECK(resolve_cpu_isa("avx512", true) == CpuIsa::kAvx512);
  CHECK_THROWS_WITH(resolve_cpu_isa("avx512", false),
                    Contains("TINYDDP_CPU_ISA=avx512") && Contains("cannot run AVX-512") && Contains("avx512f"));
  CHECK_THROWS_WITH(resolve_cpu_isa("sse4", true), Contains("TINYDDP_CPU_ISA='sse4' names no instruction set") &&
                                                       Contains("avx2, avx512 or auto") && Contains("has AVX-512"));
  CHECK(cpu_has(CpuIsa::kAvx2));  // the whole build needs it
  // What TINYDDP_CPU_ISA asks for (auto when unset), on this CPU.
  const char* asked = std::getenv("TINYDDP_CPU_ISA");
  CHECK(cpu_isa() == resolve_cpu_isa(asked != nullptr ? asked : "", cpu_has(CpuIsa::kAvx512)));
  CHECK_THAT(cpu_kernels_summary(), Contains(std::string(cpu_isa_name(cpu_isa()))) && Contains("matmul: "));
  if (!cpu_has(CpuIsa::kAvx512)) {
    CHECK_THROWS_WITH(set_cpu_isa(CpuIsa::kAvx512), Contains("cannot run avx512 code"));
  }
}

TEST_CASE("the AVX2 GEMM equals a naive loop in every layout") {
  check_table_gemm<float>(tinyddp::tensor::cpu::avx2_kernels(), 1e-6);
  check_table_gemm<double>(tinyddp::tensor::cpu::avx2_kernels(), 1e-14);
}

TEST_CASE("the AVX-512 GEMM equals a naive loop in every layout") {
  if (!cpu_has(CpuIsa::kAvx512)) TINYDDP_SKIP("this CPU has no AVX-512: its GEMM cannot run here");
  check_table_gemm<float>(tinyddp::tensor::cpu::avx512_kernels(), 1e-6);
  check_table_gemm<double>(tinyddp::tensor::cpu::avx512_kernels(), 1e-14);
}

TEST_CASE("the AVX-512 kernels give the AVX2 kernels' results") {
  if (!cpu_has(CpuIsa::kAvx512)) TINYDDP_SKIP("this CPU has no AVX-512: nothing to compare the AVX2 kernels with");
  IsaRestore restore;
  set_cpu_isa(CpuIsa::kAvx2);
  const KernelResults base = run_every_kernel();
  set_cpu_isa(CpuIsa::kAvx512);
  const KernelResults wide = run_every_kernel();
  check_same(base, wide);
}

TEST_CASE("forcing AVX2 gives the same results as the default selection where the arithmetic is the same") {
  // On an AVX2-only host both runs use the same kernels; on an AVX-512 host this repeats the
  // comparison above through the public switch. Either way the forced path runs every kernel.
  IsaRestore restore;
  const KernelResults chosen = run_every_kernel();
  set_cpu_isa(CpuIsa::kAvx2);
  const KernelResults forced = run_every_kernel();
  check_same(chosen, forced);
}

TEST_CASE("sqrt of contiguous float32 is correctly rounded, as PyTorch's, under each instruction set") {
  // The reference: the double square root rounded once to float, which is the correctly
  // rounded float square root. (Eigen's packet sqrt, used before, was off by an ulp or two.)
  IsaRestore restore;
  Generator gen(5);
  const Tensor x = rand({4099}, {}, &gen).mul_(1000.0);
  for (const CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!cpu_has(isa)) continue;  // counted by the comparison case above
    set_cpu_isa(isa);
    const Tensor y = sqrt(x);
    int wrong = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      wrong += y.data_ptr<float>()[i] != static_cast<float>(std::sqrt(static_cast<double>(x.data_ptr<float>()[i])));
    }
    INFO(cpu_isa_name(isa));
    CHECK(wrong == 0);
  }
}

TEST_CASE("a chunk's narrow products of 5 M multiply-adds or more equal a naive loop under each instruction set") {
  // Large products may go to another GEMM engine (on Zen 4, Eigen's AVX2 build) while their
  // narrow ones stay on the selected build's loops (matmul.cc): x @ W^T and g @ W of 16 rows
  // (and of 32: dots, and under AVX-512 row strips).
  IsaRestore restore;
  Generator gen(11);
  const Tensor x = randn({16, 784}, {}, &gen), w1 = randn({1024, 784}, {}, &gen);
  const Tensor g = randn({16, 1024}, {}, &gen), w2 = randn({1024, 1024}, {}, &gen);
  for (const CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!cpu_has(isa)) continue;
    set_cpu_isa(isa);
    for (const auto& [a, b, transposed] : {std::tuple{x, w1, true}, std::tuple{g, w2, false},
                                           std::tuple{cat({x, x}), w1, true}, std::tuple{cat({g, g}), w2, false}}) {
      const Tensor c = matmul(a, transposed ? b.t() : b);
      const Tensor bt = transposed ? b.t().contiguous() : b;
      const int64_t n = a.size(0), k = a.size(1), m = bt.size(1);
      const std::vector<double> ref =
          naive_gemm(std::vector<float>(a.data_ptr<float>(), a.data_ptr<float>() + n * k),
                     std::vector<float>(bt.data_ptr<float>(), bt.data_ptr<float>() + k * m), n, k, m);
      const double worst = worst_error(c.data_ptr<float>(), ref);
      INFO(cpu_isa_name(isa) << " " << n << "x" << k << "x" << m << ": worst error " << worst);
      CHECK(worst <= 1e-6 * static_cast<double>(k));
    }
  }
}

TEST_CASE("outputs of 32 MiB or more, written past the cache, hold the same values under each instruction set") {
  // Out-of-place binary ops on rows this long store with non-temporal stores from a staging
  // block (kernels.cc, store_streamed). The rows start one element past an aligned address
  // and end mid-block, so the scalar head, the streamed blocks and the tail all run.
  IsaRestore restore;
  Generator gen(9);
  const int64_t n = (int64_t(32) << 20) / 4 + 37;
  const Tensor x = randn({n + 1}, {}, &gen).narrow(0, 1, n);
  const Tensor y = randn({n + 1}, {}, &gen).narrow(0, 1, n);
  const Tensor xd = x.to(kFloat64).narrow(0, 0, n / 2 + 5);
  const Tensor yd = y.to(kFloat64).narrow(0, 0, n / 2 + 5);
  const float* px = x.data_ptr<float>();
  const float* py = y.data_ptr<float>();
  for (const CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!cpu_has(isa)) continue;  // the AVX-512 half is reported skipped by the cases above
    set_cpu_isa(isa);
    INFO(cpu_isa_name(isa));
    const Tensor sum = add(x, y);
    const Tensor scaled = mul(x, 3.0);
    const Tensor sum_d = add(xd, yd);
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) {
      wrong += sum.data_ptr<float>()[i] != px[i] + py[i];
      wrong += scaled.data_ptr<float>()[i] != px[i] * 3.0f;
    }
    for (int64_t i = 0; i < xd.numel(); ++i) {
      wrong += sum_d.data_ptr<double>()[i] != xd.data_ptr<double>()[i] + yd.data_ptr<double>()[i];
    }
    CHECK(wrong == 0);
  }
}
