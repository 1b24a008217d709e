// matmul tests: random sizes against a naive triple loop, with transposed, narrowed and
// expanded operands (which the GEMM maps in place), batched and broadcast forms, vectors,
// int64 and 16-bit dtypes, PyTorch's numbers, and the shape/dtype errors.
#include <cmath>

#include "tests/fixture_case.h"
#include "tests/test_util.h"
#include "tinyddp/autograd/gradcheck.h"
#include "tinyddp/tensor/cpu_isa.h"

using namespace tinyddp::tensor;
using Catch::Contains;
using tinyddp::testing::at;
using tinyddp::testing::load_fixture;

namespace {

// c[i, j] = sum_p a[i, p] * b[p, j] in double, the operands read through their strides
// (copied to contiguous doubles first).
std::vector<double> naive_mm(const Tensor& a, const Tensor& b) {
  const int64_t n = a.size(0), k = a.size(1), m = b.size(1);
  const std::vector<double> x = a.to(kFloat64).contiguous().to_vector<double>();
  const std::vector<double> y = b.to(kFloat64).contiguous().to_vector<double>();
  std::vector<double> c(static_cast<size_t>(n * m), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += x[static_cast<size_t>(i * k + p)] * y[static_cast<size_t>(p * m + j)];
      c[static_cast<size_t>(i * m + j)] = acc;
    }
  }
  return c;
}

void check_mm(const Tensor& a, const Tensor& b, double tol) {
  const Tensor c = matmul(a, b);
  REQUIRE(c.sizes() == Shape{a.size(0), b.size(1)});
  const std::vector<double> expected = naive_mm(a, b);
  const std::vector<double> got = c.to(kFloat64).to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) {
    // Error grows with k; scale the tolerance by sqrt(k) and the magnitude of the terms.
    REQUIRE(std::fabs(got[i] - expected[i]) <=
            tol * std::sqrt(static_cast<double>(a.size(1)) + 1) * (1 + std::fabs(expected[i])));
  }
}

// A [rows, cols] operand in the requested layout.
Tensor operand(int64_t rows, int64_t cols, int layout, Generator& g, DType dtype) {
  switch (layout) {
    case 0: return randn({rows, cols}, dtype, &g);                                              // row-major
    case 1: return randn({cols, rows}, dtype, &g).t();                                          // column-major
    case 2: return randn({rows, cols + 5}, dtype, &g).narrow(1, 3, cols);                       // leading dim > cols
    case 3: return randn({cols + 2, rows}, dtype, &g).narrow(0, 1, cols).t();                   // column-major slice
    case 4: return randn({rows, 2 * cols}, dtype, &g).as_strided({rows, cols}, {2 * cols, 2});  // strided: copied
    default: return randn({1, cols}, dtype, &g).expand({rows, cols});                           // broadcast rows
  }
}

}  // namespace

TEST_CASE("matmul matches a naive triple loop for random sizes and layouts", "[matmul]") {
  Generator g(31);
  const std::vector<std::array<int64_t, 3>> sizes = {{1, 1, 1},    {2, 3, 4},  {7, 1, 5}, {17, 33, 9},
                                                     {64, 65, 63}, {1, 40, 3}, {40, 3, 1}};
  for (DType dtype : {kFloat32, kFloat64}) {
    for (const auto& [n, k, m] : sizes) {
      for (int la = 0; la < 6; ++la) {
        for (int lb = 0; lb < 6; ++lb) {
          INFO(dtype_name(dtype) << " n=" << n << " k=" << k << " m=" << m << " layouts " << la << "," << lb);
          check_mm(operand(n, k, la, g, dtype), operand(k, m, lb, g, dtype), dtype == kFloat32 ? 2e-6 : 1e-14);
        }
      }
    }
  }
}

TEST_CASE("large products (the GEMM libraries' engines) match a naive loop in each layout", "[matmul]") {
  // 160 x 200 x 160 = 5.12 M multiply-adds: past the 5 M from which matmul.cc hands products to
  // OpenBLAS, or on an Intel CPU under AVX-512 float32 to oneDNN (cpu_kernels_summary says
  // which), each transposition case, a narrowed leading dimension too.
  INFO(cpu_kernels_summary());
  Generator g(37);
  const std::vector<std::pair<int, int>> layouts = {{0, 0}, {1, 0}, {0, 1}, {1, 1}, {2, 3}};
  for (DType dtype : {kFloat32, kFloat64}) {
    for (const auto& [la, lb] : layouts) {
      INFO(dtype_name(dtype) << " layouts " << la << "," << lb);
      check_mm(operand(160, 200, la, g, dtype), operand(200, 160, lb, g, dtype), dtype == kFloat32 ? 2e-6 : 1e-14);
    }
  }
}

TEST_CASE("matmul of a transposed view uses the data in place", "[matmul]") {
  Generator g(1);
  const Tensor w = randn({5, 3}, {}, &g);
  const Tensor x = randn({4, 3}, {}, &g);
  check_mm(x, w.t(), 2e-6);  // the nn.Linear pattern: x @ W^T
  check_mm(w.t(), w, 2e-6);
}

TEST_CASE("matmul on int64, float16 and bfloat16", "[matmul][dtype]") {
  const Tensor a = arange(6).view({2, 3});
  const Tensor b = arange(12).view({3, 4}) - 5;
  const Tensor c = matmul(a, b);
  CHECK(c.dtype() == kInt64);
  const std::vector<double> expected = naive_mm(a, b);
  const std::vector<int64_t> got = c.to_vector<int64_t>();
  for (size_t i = 0; i < got.size(); ++i) CHECK(static_cast<double>(got[i]) == expected[i]);
  Generator g(2);
  for (DType dtype : {kFloat16, kBFloat16}) {
    const Tensor x = randn({6, 8}, {}, &g).to(dtype);
    const Tensor y = randn({8, 5}, {}, &g).to(dtype);
    const Tensor z = matmul(x, y);
    CHECK(z.dtype() == dtype);
    // Computed in float32 and rounded once: within half an ulp of the 16-bit format.
    const std::vector<double> ref = naive_mm(x, y);
    const std::vector<double> zd = z.to(kFloat64).to_vector<double>();
    const double ulp = dtype == kFloat16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
    for (size_t i = 0; i < zd.size(); ++i) CHECK(std::fabs(zd[i] - ref[i]) <= ulp * (std::fabs(ref[i]) + 1e-3));
  }
}

TEST_CASE("batched and vector forms follow torch.matmul", "[matmul][batched]") {
  Generator g(4);
  const Tensor a = randn({3, 4, 5}, {}, &g);
  const Tensor b = randn({3, 5, 2}, {}, &g);
  const Tensor c = matmul(a, b);
  CHECK(c.sizes() == Shape{3, 4, 2});
  for (int64_t i = 0; i < 3; ++i) CHECK(allclose(c[i], matmul(a[i], b[i]), 1e-6, 1e-6));
  // [B, n, k] x [k, m] folds into one GEMM; [k..] broadcasting on either side.
  const Tensor w = randn({5, 6}, {}, &g);
  const Tensor aw = matmul(a, w);
  CHECK(aw.sizes() == Shape{3, 4, 6});
  for (int64_t i = 0; i < 3; ++i) CHECK(allclose(aw[i], matmul(a[i], w), 1e-6, 1e-6));
  const Tensor ta = matmul(a.transpose(1, 2), randn({4, 3}, {}, &g));  // non-contiguous batch
  CHECK(ta.sizes() == Shape{3, 5, 3});
  const Tensor left = randn({4, 5}, {}, &g);
  const Tensor lb = matmul(left, b);  // [4, 5] x [3, 5, 2] -> [3, 4, 2]
  CHECK(lb.sizes() == Shape{3, 4, 2});
  for (int64_t i = 0; i < 3; ++i) CHECK(allclose(lb[i], matmul(left, b[i]), 1e-6, 1e-6));
  const Tensor bb = matmul(randn({2, 1, 4, 5}, {}, &g), randn({3, 5, 2}, {}, &g));
  CHECK(bb.sizes() == Shape{2, 3, 4, 2});
  // Vectors.
  const Tensor v = tensor({1.0, 2.0, 3.0});
  CHECK(matmul(v, v).dim() == 0);
  CHECK(matmul(v, v).item<float>() == 14);
  const Tensor m = arange(6, kFloat32).view({2, 3});
  CHECK(matmul(m, v).to_vector<float>() == std::vector<float>{8, 26});
  CHECK(matmul(tensor({1.0, 1.0}), m).to_vector<float>() == std::vector<float>{3, 5, 7});
  CHECK(matmul(a, randn({5}, {}, &g)).sizes() == Shape{3, 4});
  // Empty inner dimension: zeros.
  CHECK(equal(matmul(zeros({2, 0}), zeros({0, 3})), zeros({2, 3})));
}

TEST_CASE("matmul matches PyTorch", "[matmul][fixture]") {
  const auto fixture = load_fixture("tests/tensor/fixtures/torch_reference.txt");
  const auto& av = fixture.at("op_input_3x5");
  const auto& bv = fixture.at("op_input_5x4");
  const auto& cv = fixture.at("op_matmul");
  const Tensor a = from_vector(std::vector<float>(av.begin(), av.end()), Shape{3, 5});
  const Tensor b = from_vector(std::vector<float>(bv.begin(), bv.end()), Shape{5, 4});
  const Tensor expected = from_vector(std::vector<float>(cv.begin(), cv.end()), Shape{3, 4});
  CHECK(allclose(matmul(a, b), expected, 1e-6, 1e-6));
}

TEST_CASE("matmul errors name the shapes", "[matmul][errors]") {
  CHECK_THROWS_WITH(matmul(zeros({2, 3}), zeros({4, 5})),
                    Contains("matmul: shapes [2, 3] and [4, 5] cannot be multiplied (3 != 4)"));
  CHECK_THROWS_WITH(matmul(zeros({3}), zeros({4})), Contains("matmul: shapes [3] and [4] cannot be multiplied"));
  CHECK_THROWS_WITH(matmul(scalar_tensor(1), zeros({4})), Contains("matmul: both arguments need at least 1 dimension"));
  CHECK_THROWS_WITH(matmul(zeros({2, 3}), zeros({3, 2}, kFloat64)),
                    Contains("matmul: expected tensors of the same dtype, but 'a' is float32 and 'b' is float64"));
  CHECK_THROWS_WITH(matmul(zeros({2, 2, 3}), zeros({3, 3, 2})),
                    Contains("matmul: shapes [2] and [3] cannot be broadcast"));
  CHECK_THROWS_WITH(mm(zeros({3}), zeros({3, 2})), Contains("mm: 'a' must be a matrix (2-D), got shape [3]"));
  CHECK_THROWS_WITH(matmul(gt(zeros({2, 2}), 0), gt(zeros({2, 2}), 0)),
                    Contains("mm: arithmetic on bool tensors is not supported"));
}

TEST_CASE("bmm, baddbmm, addmm, mv, dot and outer match PyTorch, gradients too; shapes are checked",
          "[tensor][matmul]") {
  const tinyddp::testing::Fixture f("tests/tensor/fixtures/math_reference.txt");
  using V = std::vector<Tensor>;
  f.check_case("bmm", {{"a", {2, 3, 4}}, {"b", {2, 4, 5}}}, {2, 3, 5}, [](const V& v) { return bmm(v[0], v[1]); });
  f.check_case("baddbmm", {{"i", {3, 5}}, {"a", {2, 3, 4}}, {"b", {2, 4, 5}}}, {2, 3, 5},
               [](const V& v) { return baddbmm(v[0], v[1], v[2], 0.5, 2.0); });
  f.check_case("addmm", {{"i", {5}}, {"a", {3, 4}}, {"b", {4, 5}}}, {3, 5},
               [](const V& v) { return v[0].addmm(v[1], v[2], -1.5, 0.25); });
  f.check_case("mv", {{"a", {3, 4}}, {"v", {4}}}, {3}, [](const V& v) { return mv(v[0], v[1]); });
  f.check_case("dot", {{"a", {6}}, {"b", {6}}}, {}, [](const V& v) { return v[0].dot(v[1]); });
  f.check_case("outer", {{"a", {3}}, {"b", {4}}}, {3, 4}, [](const V& v) { return outer(v[0], v[1]); });
  Generator g(3);
  const Tensor a = randn({2, 3, 4}, TensorOptions(kFloat64), &g).requires_grad_();
  const Tensor b = randn({2, 4, 2}, TensorOptions(kFloat64), &g).requires_grad_();
  const Tensor i = randn({3, 2}, TensorOptions(kFloat64), &g).requires_grad_();
  CHECK(tinyddp::autograd::gradcheck([](const V& v) { return baddbmm(v[0], v[1], v[2], 0.5, 2.0); }, {i, a, b}) == "");
  // beta 0 ignores the input's values (NaN does not propagate), as PyTorch's
  const Tensor nan = full({3, 2}, NAN, TensorOptions(kFloat64));
  CHECK(equal(baddbmm(nan, a, b, 0.0), bmm(a, b)));
  CHECK_THROWS_WITH(bmm(zeros({2, 3, 4}), zeros({3, 4, 5})), Contains("bmm: shapes [2, 3, 4] and [3, 4, 5] cannot"));
  CHECK_THROWS_WITH(bmm(zeros({3, 4}), zeros({4, 5})), Contains("bmm: expected two 3-D tensors"));
  CHECK_THROWS_WITH(dot(zeros({3}), zeros({4})), Contains("dot: expected two 1-D tensors of the same size"));
  CHECK_THROWS_WITH(addmm(zeros({4}), zeros({2, 3}), zeros({3, 5})), Contains("addmm: input of shape [4] cannot"));
}

TEST_CASE("einsum matches PyTorch: batched products, contractions, implicit output, gradients too",
          "[tensor][matmul]") {
  const tinyddp::testing::Fixture f("tests/tensor/fixtures/math_reference.txt");
  using V = std::vector<Tensor>;
  f.check_case("einsum_bmm", {{"a", {2, 3, 4}}, {"b", {2, 4, 5}}}, {2, 3, 5},
               [](const V& v) { return einsum("bij,bjk->bik", v); });
  f.check_case("einsum_attention", {{"q", {2, 2, 3, 4}}, {"k", {2, 2, 5, 4}}}, {2, 2, 3, 5},
               [](const V& v) { return einsum("bhqd,bhkd->bhqk", v); });
  f.check_case("einsum_three", {{"a", {2, 3}}, {"b", {3, 4}}, {"c", {4, 2}}}, {2, 2},
               [](const V& v) { return einsum("ij,jk,kl->il", v); });
  f.check_case("einsum_implicit", {{"a", {3, 4}}, {"b", {2, 4}}}, {3, 2},
               [](const V& v) { return einsum("ik,jk", v); });
  f.check_case("einsum_sum_out", {{"a", {2, 3, 2}}, {"b", {3, 4, 3}}}, {4, 2},
               [](const V& v) { return einsum("ijx,jky->ki", v); });
  f.check_case("einsum_transpose", {{"a", {2, 3, 4}}}, {4, 2, 3}, [](const V& v) { return einsum("abc->cab", v); });
  f.check_case("einsum_outer", {{"a", {3}}, {"b", {2}}}, {3, 2}, [](const V& v) { return einsum("i , j -> i j", v); });
  CHECK_THROWS_WITH(einsum("ij,jk->ik", {zeros({2, 3})}),
                    Contains("einsum: the equation 'ij,jk->ik' names 2 operands"));
  CHECK_THROWS_WITH(einsum("ij,jk->ik", {zeros({2, 3}), zeros({4, 5})}),
                    Contains("einsum: subscript j has size 3 for one operand and 4 for another"));
  CHECK_THROWS_WITH(einsum("ij->iz", {zeros({2, 2})}), Contains("output subscript z does not appear"));
}

TEST_CASE("einsum matches PyTorch: ellipses, repeated labels (diagonals, traces), size-1 dims broadcast",
          "[tensor][matmul]") {
  const tinyddp::testing::Fixture f("tests/tensor/fixtures/math_reference.txt");
  using V = std::vector<Tensor>;
  f.check_case("einsum_ellipsis_bmm", {{"a", {2, 1, 3, 4}}, {"b", {5, 4, 2}}}, {2, 5, 3, 2},
               [](const V& v) { return einsum("...ij,...jk->...ik", v); });
  f.check_case("einsum_ellipsis_implicit", {{"a", {3, 2, 4}}, {"b", {3}}}, {2, 4},
               [](const V& v) { return einsum("b...,b", v); });
  f.check_case("einsum_ellipsis_summed", {{"a", {2, 3, 4, 5}}}, {5, 4},
               [](const V& v) { return einsum("...ij->ji", v); });
  f.check_case("einsum_diagonal", {{"a", {4, 4}}}, {4}, [](const V& v) { return einsum("ii->i", v); });
  f.check_case("einsum_trace", {{"a", {3, 3}}}, {}, [](const V& v) { return einsum("ii", v); });
  f.check_case("einsum_batch_diagonal", {{"a", {2, 3, 3}}, {"b", {2, 4}}}, {2, 3, 4},
               [](const V& v) { return einsum("bii,bj->bij", v); });
  f.check_case("einsum_broadcast_one", {{"a", {1, 3}}, {"b", {2, 3}}}, {2, 3},
               [](const V& v) { return einsum("ij,ij->ij", v); });
  Generator g(4);
  const Tensor a = randn({2, 3, 3}, TensorOptions(kFloat64), &g).requires_grad_();
  const Tensor b = randn({1, 3, 2}, TensorOptions(kFloat64), &g).requires_grad_();
  CHECK(tinyddp::autograd::gradcheck([](const V& v) { return einsum("...ii,...ij->...ij", v); }, {a, b}) == "");
  CHECK_THROWS_WITH(einsum("ii->i", {zeros({2, 3})}),
                    Contains("einsum: subscript i is repeated for operand 0 but the sizes don't match, 2 != 3"));
  CHECK_THROWS_WITH(einsum("...i...->i", {zeros({2, 3})}), Contains("more than one ellipsis (...) in operand 0"));
  CHECK_THROWS_WITH(einsum("...ijk->i", {zeros({2, 3})}),
                    Contains("operand 0 has 2 dims, fewer than the 3 subscripts besides its ellipsis"));
  CHECK_THROWS_WITH(einsum("...i,...i->...i", {zeros({2, 3}), zeros({4, 3})}),
                    Contains("subscript ... (dim 0) has size 2 for one operand and 4 for another"));
}
