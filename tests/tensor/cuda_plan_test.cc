// The host-side plans of the CUDA backend, checked on the CPU (they are plain C++): for an
// elementwise launch, the merged geometry and strides must reach every element of the broadcast
// shape once, every operand at the same place for each linear index; for a matrix product, the
// cuBLAS call (operand order, transposes, leading dimensions) emulated as a column-major GEMM
// over the tensors' memory must give mm's result. These run in every CI build; the kernels
// themselves are checked against the CPU on a GPU (cuda_test.cc).
#include <array>
#include <map>
#include <vector>

#include "tests/test_util.h"
#include "tinyddp/tensor/backends/cuda/index_math.h"
#include "tinyddp/tensor/backends/cuda/plan.h"

using namespace tinyddp::tensor;
using tinyddp::testing::at;

namespace {

// Distinct values, so that reading the wrong element shows.
Tensor distinct(const Shape& shape) { return arange(shape_numel(shape)).to(kFloat64).view(shape); }

// The elementwise kernel's offset arithmetic (elementwise.cu, offsets()) for linear index i.
template <size_t N>
std::array<int64_t, N> kernel_offsets(const cuda::kernels::Geometry& g,
                                      const std::array<cuda::kernels::Operand, N>& ops, int64_t i) {
  std::array<int64_t, N> off{};
  for (int d = g.ndim - 1; d >= 0; --d) {
    const int64_t coord = i % g.sizes[d];
    i /= g.sizes[d];
    for (size_t k = 0; k < N; ++k) off[k] += coord * ops[k].strides[d];
  }
  return off;
}

// The row-major multi-index of position j in `shape`.
std::vector<int64_t> multi_index(const Shape& shape, int64_t j) {
  std::vector<int64_t> index(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    index[d] = j % shape[d];
    j /= shape[d];
  }
  return index;
}

// The kernel reaches every element of `shape` once, in whatever order the plan walks them
// (memory order: iteration_order.h), and at each linear index every operand (broadcast to
// `shape`) reads its element at the same place. Operand 0, the written one, holds distinct
// values, which tell the place.
template <size_t N>
void check_geometry(const Shape& shape, const std::array<Tensor, N>& tensors, int expected_ndim) {
  std::array<const Tensor*, N> pointers;
  for (size_t k = 0; k < N; ++k) pointers[k] = &tensors[k];
  std::array<cuda::kernels::Operand, N> ops;
  const cuda::kernels::Geometry g = cuda::geometry<N>(shape, pointers, ops, "test");
  CHECK(g.numel == shape_numel(shape));
  if (expected_ndim > 0) CHECK(g.ndim == expected_ndim);
  std::map<double, int64_t> place_of;  // operand 0's value -> its row-major place in `shape`
  for (int64_t j = 0; j < g.numel; ++j) place_of[at(tensors[0], multi_index(shape, j))] = j;
  REQUIRE(static_cast<int64_t>(place_of.size()) == g.numel);
  std::vector<bool> reached(static_cast<size_t>(g.numel), false);
  // The general path's 32-bit form (index_math.h), which these small launches take: the same
  // offsets as the 64-bit arithmetic at every index.
  const cuda::kernels::Operand* operand_list[N];
  for (size_t k = 0; k < N; ++k) operand_list[k] = &ops[k];
  cuda::kernels::NarrowGeometry<static_cast<int>(N)> narrow;
  // (An empty launch runs no kernel, and has no sizes to divide by.)
  REQUIRE(cuda::kernels::narrow_geometry<static_cast<int>(N)>(g, operand_list, narrow) == (g.numel > 0));
  for (int64_t i = 0; i < g.numel; ++i) {
    const std::array<int64_t, N> off = kernel_offsets<N>(g, ops, i);
    int64_t narrow_off[N];
    cuda::kernels::narrow_offsets<static_cast<int>(N)>(narrow, static_cast<uint32_t>(i), narrow_off);
    for (size_t k = 0; k < N; ++k) {
      if (narrow_off[k] != off[k]) {
        FAIL_CHECK("operand " << k << " at linear index " << i << ": 32-bit offset " << narrow_off[k] << ", 64-bit "
                              << off[k]);
        return;
      }
    }
    const auto found = place_of.find(static_cast<const double*>(ops[0].data)[off[0]]);
    if (found == place_of.end() || reached[static_cast<size_t>(found->second)]) {
      FAIL_CHECK("linear index " << i << " writes no element, or one already written");
      return;
    }
    reached[static_cast<size_t>(found->second)] = true;
    const std::vector<int64_t> index = multi_index(shape, found->second);
    for (size_t k = 1; k < N; ++k) {
      const Tensor& t = tensors[k];
      std::vector<int64_t> own(index.end() - t.dim(), index.end());  // right-aligned
      for (int64_t d = 0; d < t.dim(); ++d) {
        if (t.size(d) == 1) own[d] = 0;
      }
      const double got = static_cast<const double*>(ops[k].data)[off[k]];
      if (got != at(t, own)) {
        FAIL_CHECK("operand " << k << " at linear index " << i << ": read " << got << ", expected " << at(t, own));
        return;
      }
    }
  }
}

}  // namespace

TEST_CASE("CUDA launch plan: merged dims address the right elements", "[cuda][plan]") {
  const Tensor m = distinct({4, 6});
  const Tensor cube = distinct({3, 4, 5});
  SECTION("contiguous operands merge into one dim") {
    check_geometry<2>({4, 6}, {m, distinct({4, 6})}, 1);
    check_geometry<3>({3, 4, 5}, {cube, cube, distinct({3, 4, 5})}, 1);
  }
  SECTION("a transposed operand keeps two dims") { check_geometry<2>({6, 4}, {distinct({6, 4}), m.t()}, 2); }
  SECTION("broadcasting: a row, a column, a scalar") {
    check_geometry<3>({4, 6}, {m, distinct({6}), distinct({4, 1})}, 2);
    check_geometry<2>({3, 4, 5}, {cube, distinct({})}, 1);
    check_geometry<2>({3, 4, 5}, {cube, distinct({4, 1})}, 3);
  }
  SECTION("narrowed, permuted and expanded views; size-1 dims with odd strides") {
    check_geometry<2>({2, 4}, {distinct({2, 4}), m.narrow(1, 1, 4).narrow(0, 1, 2)}, 2);
    check_geometry<2>({5, 3, 4}, {distinct({5, 3, 4}), cube.permute({2, 0, 1})}, 0);
    check_geometry<2>({3, 4, 5}, {cube, cube.narrow(0, 1, 1).expand({3, 4, 5})}, 0);
    check_geometry<2>({1, 6}, {distinct({1, 6}), m.narrow(0, 2, 1)}, 1);
    check_geometry<2>({3, 1, 5}, {distinct({3, 1, 5}), cube.narrow(1, 3, 1)}, 2);
  }
  SECTION("a 0-d tensor and an empty one") {
    check_geometry<2>({}, {distinct({}), distinct({})}, 1);
    check_geometry<2>({0, 3}, {distinct({0, 3}), distinct({0, 3})}, 0);
  }
  SECTION("dims in memory order: a channels-last pair and a reversed 9-D tensor are one dim each") {
    const Tensor cl = distinct({2, 3, 4, 5}).contiguous(MemoryFormat::kChannelsLast);
    check_geometry<2>({2, 3, 4, 5}, {cl, cl.clone()}, 1);
    const Tensor reversed = distinct({2, 2, 2, 2, 2, 2, 2, 2, 2}).permute({8, 7, 6, 5, 4, 3, 2, 1, 0});
    check_geometry<1>(reversed.sizes(), {reversed}, 1);
    // A row-major output and a channels-last input: the output's order, the input strided.
    check_geometry<2>({2, 3, 4, 5}, {distinct({2, 3, 4, 5}), cl}, 0);
  }
  SECTION("more non-mergeable dims than the kernels take is an error") {
    // Every other element along each of 9 dims: no two dims merge in any order.
    const Tensor base = distinct(Shape(9, 3));
    Shape gapped;
    for (const int64_t stride : base.strides()) gapped.push_back(2 * stride);
    const Tensor wide = base.as_strided(Shape(9, 2), gapped);
    std::array<const Tensor*, 1> one{&wide};
    std::array<cuda::kernels::Operand, 1> ops;
    CHECK_THROWS_WITH(cuda::geometry<1>(wide.sizes(), one, ops, "add"),
                      Catch::Contains("at most 8 non-mergeable dims"));
  }
}

TEST_CASE("CUDA launch plan: 32-bit division by multiply-high and shift is exact", "[cuda][plan]") {
  using cuda::kernels::Divider32;
  const auto check_all = [](uint32_t d, const std::vector<uint32_t>& numerators) {
    const Divider32 divider = Divider32::of(d);
    for (const uint32_t n : numerators) {
      if (divider.divide(n) != n / d) {
        FAIL_CHECK(n << " / " << d << " gave " << divider.divide(n));
        return false;
      }
    }
    return true;
  };
  constexpr uint32_t kTop = (uint32_t{1} << 31) - 1;  // the largest index a narrow launch has
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 4096; ++d) divisors.push_back(d);
  for (uint32_t s = 12; s < 31; ++s) {
    for (const int64_t delta : {-1, 0, 1}) divisors.push_back(static_cast<uint32_t>((int64_t{1} << s) + delta));
  }
  for (const uint32_t d : {50304u, 768u * 1024u, 1000003u, 123456789u, kTop - 1, kTop}) divisors.push_back(d);
  uint64_t state = 88172645463325252ull;  // xorshift: numerators spread over [0, 2^31)
  const auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return static_cast<uint32_t>(state % (uint64_t{kTop} + 1));
  };
  for (const uint32_t d : divisors) {
    // Around each multiple of d near 0, near the top, and random ones.
    std::vector<uint32_t> n = {0, 1, kTop, kTop - 1};
    for (const uint64_t base : {uint64_t{d}, uint64_t{d} * 2, uint64_t{d} * 3, (uint64_t{kTop} / d) * d}) {
      for (const int64_t delta : {-1, 0, 1}) {
        const int64_t value = static_cast<int64_t>(base) + delta;
        if (value >= 0 && value <= kTop) n.push_back(static_cast<uint32_t>(value));
      }
    }
    for (int k = 0; k < 64; ++k) n.push_back(next());
    if (!check_all(d, n)) break;
  }
  // Every numerator up to 2^20 for a few divisors.
  std::vector<uint32_t> dense(uint32_t{1} << 20);
  for (uint32_t n = 0; n < dense.size(); ++n) dense[n] = n;
  for (const uint32_t d : {3u, 7u, 12u, 64u, 641u, 1024u, 50304u}) CHECK(check_all(d, dense));
}

TEST_CASE("CUDA launch plan: launches beyond 32-bit offsets keep the 64-bit arithmetic", "[cuda][plan]") {
  cuda::kernels::Geometry g;
  g.ndim = 2;
  g.sizes[0] = 3;
  g.sizes[1] = 5;
  g.numel = 15;
  cuda::kernels::Operand out, in;
  out.strides[0] = 5;
  out.strides[1] = 1;
  in.strides[0] = 1;
  in.strides[1] = int64_t{1} << 29;  // the last element 4 * 2^29 + 2 elements from the first
  const cuda::kernels::Operand* operands[2] = {&out, &in};
  cuda::kernels::NarrowGeometry<2> narrow;
  CHECK_FALSE(cuda::kernels::narrow_geometry<2>(g, operands, narrow));
  in.strides[1] = (int64_t{1} << 29) - 1;  // 4 * (2^29 - 1) + 2 < 2^31: fits
  CHECK(cuda::kernels::narrow_geometry<2>(g, operands, narrow));
  g.sizes[0] = int64_t{1} << 31;  // 2^31 elements or more
  g.numel = g.sizes[0] * 5;
  in.strides[1] = 1;
  out.strides[0] = 0;
  in.strides[0] = 0;
  CHECK_FALSE(cuda::kernels::narrow_geometry<2>(g, operands, narrow));
}

namespace {

// The width elementwise.cu's vector path takes for out = f(inputs...) (kernels.h's
// vector_width over the merged geometry); tensors[0] is the output.
template <size_t N>
int width_of(const std::array<Tensor, N>& tensors) {
  std::array<const Tensor*, N> pointers;
  for (size_t k = 0; k < N; ++k) pointers[k] = &tensors[k];
  std::array<cuda::kernels::Operand, N> ops;
  const cuda::kernels::Geometry g = cuda::geometry<N>(tensors[0].sizes(), pointers, ops, "test");
  const cuda::kernels::Operand* list[N];
  for (size_t k = 0; k < N; ++k) list[k] = &ops[k];
  return cuda::kernels::vector_width<static_cast<int>(N)>(g, list);
}
int width_of(const Tensor& out, const Tensor& a) { return width_of<2>({out, a}); }
int width_of(const Tensor& out, const Tensor& a, const Tensor& b) { return width_of<3>({out, a, b}); }

}  // namespace

TEST_CASE("CUDA launch plan: the vector path takes dense, aligned operands in 16-byte packs", "[cuda][plan]") {
  const auto make = [](const Shape& shape, DType dtype) { return zeros(shape, dtype); };
  const Tensor x = make({1000}, kFloat32);
  // CPU storage is 64-byte aligned, as the GPU allocator's blocks are (256): views decide.
  REQUIRE(reinterpret_cast<uintptr_t>(x.raw_data_ptr()) % 64 == 0);
  SECTION("16 bytes of the widest operand's elements per thread") {
    CHECK(width_of(x, make({1000}, kFloat32), make({1000}, kFloat32)) == 4);
    CHECK(width_of(make({999}, kFloat64), make({999}, kFloat64)) == 2);
    CHECK(width_of(make({7}, kBFloat16), make({7}, kBFloat16), make({7}, kBFloat16)) == 8);
    CHECK(width_of(make({33}, kUInt8), make({33}, kUInt8)) == 16);
    CHECK(width_of(make({1000}, kBool), x, x) == 4);                       // a comparison: the inputs are wider
    CHECK(width_of(make({1000}, kBFloat16), x) == 4);                      // a conversion: float32's 4
    CHECK(width_of(make({1000}, kFloat64), x) == 2);                       // float64's 2
    CHECK(width_of(make({5, 7}, kFloat32), make({5, 7}, kFloat32)) == 4);  // merged into one dim
    const Tensor cl = make({2, 3, 4, 5}, kFloat32).contiguous(MemoryFormat::kChannelsLast);
    CHECK(width_of(cl, cl.clone()) == 4);  // dense in memory order
  }
  SECTION("a broadcast scalar input rides along") {
    CHECK(width_of(x, x, make({}, kFloat32)) == 4);
    CHECK(width_of(x, make({1}, kFloat32)) == 4);
  }
  SECTION("element by element where a view starts mid-vector") {
    CHECK(width_of(make({999}, kFloat32), x.narrow(0, 1, 999)) == 1);
    CHECK(width_of(x.narrow(0, 1, 999), make({999}, kFloat32)) == 1);  // the output
    CHECK(width_of(make({998}, kFloat32), x.narrow(0, 2, 998)) == 1);  // 8 bytes in
    CHECK(width_of(make({996}, kFloat32), x.narrow(0, 4, 996)) == 4);  // 16 bytes in
    const Tensor d = make({100}, kFloat64);
    CHECK(width_of(make({98}, kFloat64), d.narrow(0, 2, 98)) == 2);
    CHECK(width_of(make({99}, kFloat64), d.narrow(0, 1, 99)) == 1);
  }
  SECTION("element by element where the launch is not one dense dim") {
    const Tensor m = make({40, 25}, kFloat32);
    CHECK(width_of(make({25, 40}, kFloat32), m.t()) == 1);                       // transposed: two dims
    CHECK(width_of(make({500}, kFloat32), x.view({500, 2}).select(1, 0)) == 1);  // one dim, stride 2
    CHECK(width_of(m, m, make({25}, kFloat32)) == 1);                            // a broadcast row
  }
}

TEST_CASE("CUDA launch plan: the cuBLAS call reproduces mm for every operand layout", "[cuda][plan]") {
  // Column-major GEMM exactly as cuBLAS defines it, over the tensors' memory.
  const auto emulate = [](const Tensor& a, const Tensor& b) {
    const Tensor ac = cuda::batch_gemm_ready(a, 0), bc = cuda::batch_gemm_ready(b, 0);
    const cuda::Gemm g = cuda::plan_gemm(ac, bc);
    const double* A = static_cast<const double*>(bc.raw_data_ptr());
    const double* B = static_cast<const double*>(ac.raw_data_ptr());
    std::vector<double> C(static_cast<size_t>(g.ldc * g.n));
    for (int64_t i = 0; i < g.m; ++i) {
      for (int64_t j = 0; j < g.n; ++j) {
        double s = 0;
        for (int64_t l = 0; l < g.k; ++l) {
          const double op_a = g.transpose_a ? A[l + i * g.lda] : A[i + l * g.lda];  // op(A) is m x k
          const double op_b = g.transpose_b ? B[j + l * g.ldb] : B[l + j * g.ldb];  // op(B) is k x n
          s += op_a * op_b;
        }
        C[i + j * g.ldc] = s;
      }
    }
    // C is out^T column-major, i.e. out row-major [n, m] with row stride ldc.
    return from_vector(C, Shape{g.n, g.ldc}).narrow(1, 0, g.m);
  };
  const Tensor a = sub(distinct({5, 7}), 10.0), b = div(distinct({7, 3}), 4.0);
  const Tensor big = distinct({9, 11});
  const std::vector<std::pair<Tensor, Tensor>> cases = {
      {a, b},                                                                // both contiguous
      {a.t().contiguous().t(), b},                                           // a transposed in memory
      {a, b.t().contiguous().t()},                                           // b transposed in memory
      {a.t().contiguous().t(), b.t().contiguous().t()},                      // both
      {big.narrow(0, 1, 5).narrow(1, 2, 7), b},                              // a row stride above its width
      {a, big.narrow(0, 0, 7).narrow(1, 4, 3)},                              // b likewise
      {big.t().narrow(0, 0, 5).narrow(1, 1, 7), b},                          // a transposed and narrowed
      {a.narrow(0, 2, 1), b},                                                // one row
      {a, b.narrow(1, 1, 1)},                                                // one column
      {distinct({5, 1}), distinct({1, 3})},                                  // k = 1
      {distinct({2, 4, 7}).select(1, 2).t().t(), b},                         // a view with an odd offset
      {distinct({5, 14}).narrow(1, 0, 14).view({5, 2, 7}).select(1, 1), b},  // strided rows
      {distinct({7, 5}).t(), distinct({2, 7, 3}).select(0, 1)},
      {distinct({5, 7, 2}).select(2, 0), b},  // column stride 2: copied first
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    INFO("case " << c);
    const auto& [x, y] = cases[c];
    CHECK(allclose(emulate(x, y), mm(x, y), 1e-12, 1e-12));
  }
  // Layout detection itself.
  CHECK_FALSE(cuda::gemm_operand(distinct({5, 7, 2}).select(2, 0)).has_value());
  CHECK(cuda::gemm_operand(a)->transpose == false);
  CHECK(cuda::gemm_operand(a.t())->transpose == true);
  CHECK(cuda::gemm_operand(a.t())->ld == 7);
}

TEST_CASE("CUDA launch plan: one batch stride steps through a batched product's matrices", "[cuda][plan]") {
  // For each layout: whether the strided-batched GEMM reads it in place, and that matrix i of
  // what it reads (the first matrix's geometry, i batch strides further) is the tensor's i-th.
  const Tensor x = distinct({2, 3, 4, 5});
  struct Case {
    Tensor t;
    bool in_place;
  };
  const std::vector<Case> cases = {
      {x, true},                                             // contiguous
      {x.transpose(2, 3), true},                             // each matrix transposed
      {distinct({4, 5}).expand({2, 3, 4, 5}), true},         // the whole batch broadcast: stride 0
      {distinct({2, 1, 4, 5}), true},                        // a size-1 batch dim
      {distinct({2, 3, 8, 5}).narrow(2, 2, 4), true},        // matrices apart by more than their size
      {x.transpose(0, 1), false},                            // batch dims out of order: copied
      {distinct({2, 1, 4, 5}).expand({2, 3, 4, 5}), false},  // partly broadcast: copied
      {distinct({2, 3, 4, 10}).narrow(3, 0, 5).select(3, 0).unsqueeze(3).expand({2, 3, 4, 5}), false},
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    INFO("case " << c);
    const Tensor& t = cases[c].t;
    const Tensor ready = cuda::batch_gemm_ready(t, 2);
    CHECK((ready.raw_data_ptr() == t.raw_data_ptr()) == cases[c].in_place);
    REQUIRE(cuda::batch_stride(ready, 2).has_value());
    REQUIRE(cuda::gemm_operand(cuda::first_matrix(ready)).has_value());
    const int64_t stride = *cuda::batch_stride(ready, 2);
    const Tensor first = cuda::first_matrix(ready);
    for (int64_t i = 0; i < t.size(0) * t.size(1); ++i) {
      const Tensor read = ready.as_strided(first.sizes(), first.strides(), ready.storage_offset() + i * stride);
      CHECK(equal(read, t.select(0, i / t.size(1)).select(0, i % t.size(1))));
    }
  }
  CHECK(cuda::batch_stride(distinct({1, 1, 4, 5}), 2) == 0);  // a batch of one
}
