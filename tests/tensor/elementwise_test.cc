// Elementwise op tests: every binary and unary op against a naive per-index reference on
// contiguous, transposed, narrowed and broadcast operands; broadcasting rules and errors;
// in-place ops (including aliasing); copy_ across strides and dtypes, transposed ones in tiles;
// the dtype rules.
#include <cmath>
#include <functional>

#include "tests/test_util.h"

using namespace tinyddp::tensor;
using Catch::Contains;
using tinyddp::testing::all_indices;
using tinyddp::testing::at;
using tinyddp::testing::KeepThreads;

namespace {

// The multi-index of `shape` broadcast down to `t` (leading dims dropped, size-1 dims -> 0).
std::vector<int64_t> broadcast_index(const Tensor& t, const std::vector<int64_t>& index) {
  std::vector<int64_t> out(static_cast<size_t>(t.dim()));
  const size_t lead = index.size() - out.size();
  for (size_t d = 0; d < out.size(); ++d) out[d] = t.sizes()[d] == 1 ? 0 : index[lead + d];
  return out;
}

// Checks out[i] == f(a[i'], b[i'']) for every index, with broadcasting, within tolerance.
void check_binary(const Tensor& out, const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f,
                  double tol = 0) {
  REQUIRE(out.sizes() == broadcast_shapes(a.sizes(), b.sizes(), "test"));
  for (const auto& index : all_indices(out.sizes())) {
    const double expected = f(at(a, broadcast_index(a, index)), at(b, broadcast_index(b, index)));
    const double got = at(out, index);
    if (std::isnan(expected)) {
      REQUIRE(std::isnan(got));
    } else {
      REQUIRE(std::fabs(got - expected) <= tol * std::max(1.0, std::fabs(expected)));
    }
  }
}

void check_unary(const Tensor& out, const Tensor& x, const std::function<double(double)>& f, double tol) {
  check_binary(
      out, x, x, [&](double v, double) { return f(v); }, tol);
}

// Operands of one logical shape in several memory layouts.
std::vector<std::pair<std::string, Tensor>> layouts(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  std::vector<std::pair<std::string, Tensor>> out;
  out.emplace_back("contiguous", randn(shape, {}, &g));
  Shape reversed(shape.rbegin(), shape.rend());
  Shape perm;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) perm.push_back(d);
  out.emplace_back("transposed", randn(reversed, {}, &g).permute(perm));
  Shape wider = shape;
  wider.back() += 3;
  out.emplace_back("narrowed", randn(wider, {}, &g).narrow(-1, 2, shape.back()));
  return out;
}

}  // namespace

TEST_CASE("binary ops match a per-index reference on every layout", "[elementwise]") {
  const Shape shape{3, 5, 4};
  for (const auto& [name_a, a] : layouts(shape, 1)) {
    for (const auto& [name_b, b] : layouts(shape, 2)) {
      INFO(name_a << " op " << name_b);
      check_binary(add(a, b), a, b, [](double x, double y) { return static_cast<float>(x + y); });
      check_binary(
          add(a, b, 2.5), a, b, [](double x, double y) { return static_cast<float>(x + 2.5f * y); }, 1e-6);
      check_binary(sub(a, b), a, b, [](double x, double y) { return static_cast<float>(x - y); });
      check_binary(mul(a, b), a, b, [](double x, double y) { return static_cast<float>(x * y); });
      check_binary(div(a, b), a, b, [](double x, double y) { return static_cast<float>(x / y); });
      check_binary(maximum(a, b), a, b, [](double x, double y) { return std::max(x, y); });
      check_binary(minimum(a, b), a, b, [](double x, double y) { return std::min(x, y); });
      check_binary(lt(a, b), a, b, [](double x, double y) { return x < y ? 1.0 : 0.0; });
      check_binary(ge(a, b), a, b, [](double x, double y) { return x >= y ? 1.0 : 0.0; });
    }
  }
}

TEST_CASE("broadcasting follows NumPy rules", "[elementwise][broadcast]") {
  Generator g(3);
  const Tensor a = randn({4, 1, 3}, {}, &g);
  const Tensor b = randn({5, 1}, {}, &g);
  const Tensor sum_ab = add(a, b);
  CHECK(sum_ab.sizes() == Shape{4, 5, 3});
  check_binary(sum_ab, a, b, [](double x, double y) { return static_cast<float>(x + y); });
  const Tensor row = randn({3}, {}, &g);
  check_binary(mul(a, row), a, row, [](double x, double y) { return static_cast<float>(x * y); });
  const Tensor s = scalar_tensor(2.0);
  check_binary(sub(s, a), s, a, [](double x, double y) { return static_cast<float>(x - y); });
  // Expanded (stride 0) operands and empty shapes.
  const Tensor expanded = randn({1, 3}, {}, &g).expand({4, 3});
  check_binary(add(expanded, row), expanded, row, [](double x, double y) { return static_cast<float>(x + y); });
  CHECK(add(zeros({0, 3}), zeros({1, 3})).sizes() == Shape{0, 3});
  CHECK(broadcast_shapes({2, 1}, {3}, "t") == Shape{2, 3});
  CHECK_THROWS_WITH(add(zeros({2, 3}), zeros({4})),
                    Contains("add: shapes [2, 3] and [4] cannot be broadcast together (size 3 vs 4 at dimension 1"));
  CHECK_THROWS_WITH(mul(zeros({2, 3}), zeros({3, 3})), Contains("mul: shapes [2, 3] and [3, 3] cannot be broadcast"));
}

TEST_CASE("scalar operands and operators", "[elementwise]") {
  const Tensor x = tensor({1.0, -2.0, 3.0});
  CHECK((x + 1).to_vector<float>() == std::vector<float>{2, -1, 4});
  CHECK((x - 1).to_vector<float>() == std::vector<float>{0, -3, 2});
  CHECK((2.0 * x).to_vector<float>() == std::vector<float>{2, -4, 6});
  CHECK((x / 2).to_vector<float>() == std::vector<float>{0.5f, -1, 1.5f});
  CHECK((1.0 - x).to_vector<float>() == std::vector<float>{0, 3, -2});
  CHECK((6.0 / x).to_vector<float>() == std::vector<float>{6, -3, 2});
  CHECK((-x).to_vector<float>() == std::vector<float>{-1, 2, -3});
  CHECK((x * x + x).to_vector<float>() == std::vector<float>{2, 2, 12});
}

TEST_CASE("dtype rules: tensors promote as in PyTorch (integers join floats), PyTorch's scalar rules",
          "[elementwise][dtype]") {
  const Tensor f = tensor({1.0, 2.0});
  const Tensor d = tensor({1.0, 2.0}, kFloat64);
  const Tensor i = arange(1, 4);
  CHECK(i.dtype() == kInt64);
  CHECK(add(f, d).dtype() == kFloat64);  // float32 + float64 -> float64 (torch.result_type)
  CHECK(add(f, d).to_vector<double>() == std::vector<double>{2, 4});
  CHECK(add(f, tensor({1.0, 2.0}).to(kInt64)).dtype() == kFloat32);  // int64 joins float32 (torch.result_type)
  CHECK(add(f, tensor({1.0, 2.0}).to(kInt64)).to_vector<float>() == std::vector<float>{2, 4});
  CHECK((i + 2).dtype() == kInt64);
  CHECK((i * 3).to_vector<int64_t>() == std::vector<int64_t>{3, 6, 9});
  CHECK((i + 0.5).dtype() == kFloat32);  // non-integral scalar: float32, as in PyTorch
  CHECK((i + 0.5).to_vector<float>() == std::vector<float>{1.5f, 2.5f, 3.5f});
  CHECK(div(i, i).dtype() == kFloat32);  // true division
  CHECK((i / 2).to_vector<float>() == std::vector<float>{0.5f, 1, 1.5f});
  CHECK(exp(i).dtype() == kFloat32);
  CHECK(pow(i, 2).to_vector<int64_t>() == std::vector<int64_t>{1, 4, 9});
  CHECK(pow(i, 0.5).dtype() == kFloat32);
  CHECK_THROWS_WITH(pow(i, -1), Contains("pow: integers to negative integer powers are not allowed"));
  CHECK_THROWS_WITH(add(i, i, 0.5), Contains("add: for integral input tensors, alpha must be an integer"));
  const Tensor mask = gt(f, 1.5);
  CHECK(mask.dtype() == kBool);
  CHECK_THROWS_WITH(add(mask, mask), Contains("add: arithmetic on bool tensors is not supported"));
  CHECK_THROWS_WITH(neg(mask), Contains("neg: arithmetic on bool tensors is not supported"));
  CHECK_THROWS_WITH(i.div_(2), Contains("div_: true division of int64 tensors cannot be written in place"));
  CHECK_THROWS_WITH(i.add_(0.5), Contains("add_: result type float32 can't be cast to the desired output type int64"));
  CHECK_THROWS_WITH(add(f, Tensor()), Contains("add: argument 'b' is an undefined tensor"));
}

TEST_CASE("16-bit float arithmetic computes in float and rounds once", "[elementwise][dtype]") {
  const Tensor a = tensor({1.0, 1000.0, 0.1}).to(kFloat16);
  const Tensor b = tensor({1.0 / 1024, 0.3, 0.2}).to(kFloat16);
  const Tensor s = add(a, b);
  CHECK(s.dtype() == kFloat16);
  const std::vector<Half> got = s.to_vector<Half>();
  const std::vector<Half> ha = a.to_vector<Half>(), hb = b.to_vector<Half>();
  for (size_t k = 0; k < got.size(); ++k) CHECK(got[k].bits == Half(float(ha[k]) + float(hb[k])).bits);
  // A scalar is not rounded to 16 bits first. s = 2^-11 + 2^-23 rounds to 2^-11 in float16,
  // and 1 + 2^-11 is a tie that rounds down to 1; in float, 1 + s is just above the tie and
  // rounds up to 1 + 2^-10 (0x3C01). PyTorch 2.x computes with the original scalar like this;
  // Debian's PyTorch 1.13 still rounded the scalar first and gives 0x3C00.
  const Tensor one = ones({1}, kFloat16);
  CHECK(add(one, std::ldexp(1.0, -11) + std::ldexp(1.0, -23)).to_vector<Half>()[0].bits == 0x3C01);
  CHECK(mul(one, 0.1).to_vector<Half>()[0].bits == Half(0.1f).bits);
  const Tensor h = full({2}, 3, kFloat16);
  h.mul_(1.0 / 3.0);
  CHECK(h.to_vector<Half>()[0].bits == Half(3.0f * static_cast<float>(1.0 / 3.0)).bits);
  CHECK(h.dtype() == kFloat16);
  CHECK((1.0 - one).dtype() == kFloat16);
  const Tensor e = exp(tensor({0.5, -1.0}).to(kBFloat16));
  CHECK(e.dtype() == kBFloat16);
  CHECK(std::fabs(e.to(kFloat32).to_vector<float>()[0] - std::exp(0.5f)) < 0.01f);
}

TEST_CASE("unary ops match the C library", "[elementwise][unary]") {
  for (DType dtype : {kFloat32, kFloat64}) {
    for (const auto& [name, base] : layouts({4, 7}, 11)) {
      INFO(name << " " << dtype_name(dtype));
      const Tensor x = base.to(dtype);
      const Tensor positive = add(abs(x), 0.01);
      const double tol = dtype == kFloat32 ? 4e-7 : 1e-15;
      check_unary(
          neg(x), x, [](double v) { return -v; }, 0);
      check_unary(
          abs(x), x, [](double v) { return std::fabs(v); }, 0);
      check_unary(
          relu(x), x, [](double v) { return v < 0 ? 0 : v; }, 0);
      check_unary(
          exp(x), x, [](double v) { return std::exp(v); }, tol);
      check_unary(
          log(positive), positive, [](double v) { return std::log(v); }, tol);
      check_unary(
          sqrt(positive), positive, [](double v) { return std::sqrt(v); }, tol);
      check_unary(
          tanh(x), x, [](double v) { return std::tanh(v); }, tol);
      check_unary(
          sigmoid(x), x, [](double v) { return 1 / (1 + std::exp(-v)); }, tol);
      check_unary(
          pow(x, 2), x, [](double v) { return v * v; }, tol);
      check_unary(
          pow(positive, 1.7), positive, [](double v) { return std::pow(v, 1.7); }, tol * 4);
      check_unary(
          pow(positive, 0.5), positive, [](double v) { return std::sqrt(v); }, tol);
    }
  }
}

TEST_CASE("special values propagate like PyTorch", "[elementwise][unary]") {
  const double nan = std::nan("");
  const Tensor x = tensor({nan, -INFINITY, INFINITY, 0.0, -0.0});
  const std::vector<float> r = relu(x).to_vector<float>();
  CHECK(std::isnan(r[0]));
  CHECK(r[1] == 0);
  CHECK(std::isinf(r[2]));
  const std::vector<float> m = maximum(x, zeros({5})).to_vector<float>();
  CHECK(std::isnan(m[0]));  // NaN wins in maximum, as torch.maximum
  CHECK(std::isnan(minimum(zeros({5}), x).to_vector<float>()[0]));
  const std::vector<float> s = sigmoid(x).to_vector<float>();
  CHECK(s[1] == 0);
  CHECK(s[2] == 1);
  CHECK(std::isinf(log(zeros({1})).item<float>()));
  CHECK(std::isnan(sqrt(tensor({-1.0})).item<float>()));
  const std::vector<float> t = tanh(tensor({-50.0, 50.0})).to_vector<float>();
  CHECK(t[0] == -1);
  CHECK(t[1] == 1);
  const std::vector<bool> eqs = {false, true, true, true, true};
  const Tensor same = eq(x, x);
  for (size_t k = 0; k < eqs.size(); ++k) CHECK(same.to_vector<bool>()[k] == eqs[k]);
}

TEST_CASE("comparisons produce bool masks", "[elementwise][compare]") {
  const Tensor a = tensor({1.0, 2.0, 3.0, 4.0});
  const Tensor b = tensor({4.0, 2.0, 2.0, 5.0});
  CHECK(eq(a, b).to_vector<bool>() == std::vector<bool>{false, true, false, false});
  CHECK(ne(a, b).to_vector<bool>() == std::vector<bool>{true, false, true, true});
  CHECK(le(a, b).to_vector<bool>() == std::vector<bool>{true, true, false, true});
  CHECK(gt(a, 2.5).to_vector<bool>() == std::vector<bool>{false, false, true, true});
  CHECK(lt(arange(4), 1.5).to_vector<bool>() == std::vector<bool>{true, true, false, false});
  CHECK(eq(gt(a, 2.5), 1).to_vector<bool>() == std::vector<bool>{false, false, true, true});
  CHECK(gt(a, 2.5).to(kFloat32).to_vector<float>() == std::vector<float>{0, 0, 1, 1});
}

TEST_CASE("in-place ops write into the tensor and its views", "[elementwise][inplace]") {
  const Tensor x = arange(6, kFloat32).view({2, 3});
  const Tensor y = ones({3});
  x.add_(y, 2);  // broadcast other
  CHECK(x.to_vector<float>() == std::vector<float>{2, 3, 4, 5, 6, 7});
  x.narrow(1, 0, 1).mul_(10);  // strided in-place through a view
  CHECK(x.to_vector<float>() == std::vector<float>{20, 3, 4, 50, 6, 7});
  x.sub_(x);  // exact alias of the output
  CHECK(sum(abs(x)).item<float>() == 0);
  const Tensor z = arange(4, kFloat32).view({2, 2});
  z.add_(z.t());  // partial overlap: computed from a copy, so the result is z + z^T
  CHECK(z.to_vector<float>() == std::vector<float>{0, 3, 3, 6});
  const Tensor w = tensor({2.0, 4.0});
  w.div_(2).add_(1).mul_(3);
  CHECK(w.to_vector<float>() == std::vector<float>{6, 9});
  CHECK_THROWS_WITH(ones({3}).add_(ones({2, 3})),
                    Contains("add_: output with shape [3] doesn't match the broadcast shape [2, 3]"));
  CHECK_THROWS_WITH(ones({1, 3}).expand({2, 3}).add_(ones({2, 3})),
                    Contains("more than one element of the written-to tensor refers to a single memory location"));
}

TEST_CASE("copy_ handles any strides, broadcasting and dtype conversion", "[elementwise][copy]") {
  const Tensor src = arange(12, kFloat64).view({3, 4});
  const Tensor dst = zeros({4, 3}, kFloat32);
  dst.copy_(src.t());
  for (const auto& index : all_indices({4, 3})) CHECK(at(dst, index) == at(src, {index[1], index[0]}));
  // Into a strided destination.
  const Tensor big = zeros({3, 8}, kInt64);
  big.narrow(1, 2, 4).copy_(src);
  CHECK(at(big, {2, 5}) == 11);
  CHECK(at(big, {2, 6}) == 0);
  // Broadcast source.
  const Tensor rows = zeros({2, 3});
  rows.copy_(tensor({1.0, 2.0, 3.0}));
  CHECK(rows.to_vector<float>() == std::vector<float>{1, 2, 3, 1, 2, 3});
  // Overlapping source and destination (shifting within one buffer).
  const Tensor buf = arange(6, kFloat32);
  buf.narrow(0, 1, 5).copy_(buf.narrow(0, 0, 5));
  CHECK(buf.to_vector<float>() == std::vector<float>{0, 0, 1, 2, 3, 4});
  CHECK_THROWS_WITH(zeros({2, 3}).copy_(zeros({3, 2})),
                    Contains("copy_: source of shape [3, 2] cannot be broadcast to the destination shape [2, 3]"));
  CHECK_THROWS_WITH(zeros({2}).copy_(zeros({3})),
                    Contains("copy_: source of shape [3] cannot be broadcast to the destination shape [2]"));
  // fill_ and zero_ on a strided view.
  const Tensor m = ones({3, 3});
  m.t().narrow(0, 1, 1).zero_();
  CHECK(m.to_vector<float>() == std::vector<float>{1, 0, 1, 1, 0, 1, 1, 0, 1});
  CHECK(full({2}, 3, kBool).to_vector<bool>() == std::vector<bool>{true, true});
}

// Loops whose operands are transposed against each other go in tiles where rows would miss
// the cache (tensor/backends/cpu/loops.h's tiles_pay): a stride that is a multiple of 512 with
// rows of over 256 elements (300 columns: a last tile of 12), or rows spanning 3 M elements
// (1000 rows: a last band of 8). Elsewhere a float32 copy goes row by row, two rows at a time
// and 8 columns to a register (NCHW to channels-last: 64 columns of stride 100; an odd last
// row and 3 or 5 columns past the last 8). Every element lands where a per-index loop puts
// it, at any thread count.
TEST_CASE("Transposed copies and ops in tiles put every element in place, at any thread count", "[elementwise][copy]") {
  KeepThreads keep;
  struct Case {
    int64_t batch, rows, cols;
  };
  // (1030 rows: a last band of 6, under the 8 x 8 blocks of a float32 copy's tiles.)
  for (const Case c : {Case{1, 1024, 300}, Case{3, 1024, 300}, Case{1, 1000, 3200}, Case{2, 512, 512},
                       Case{1, 1030, 3100}, Case{2, 100, 64}, Case{3, 99, 67}, Case{1, 999, 37}, Case{5, 1025, 5}}) {
    const int64_t numel = c.batch * c.rows * c.cols;
    // Integers below 2^8 (exact in bfloat16) in a [batch, cols, rows] source.
    std::vector<float> flat(static_cast<size_t>(numel));
    for (size_t i = 0; i < flat.size(); ++i) flat[i] = static_cast<float>(i % 251);
    const Tensor src = from_vector(flat, Shape{c.batch, c.cols, c.rows});
    const Tensor seen = src.transpose(1, 2);  // [batch, rows, cols], the inner dim strided by `rows`
    std::vector<float> expected(static_cast<size_t>(numel));
    for (int64_t b = 0; b < c.batch; ++b) {
      for (int64_t i = 0; i < c.cols; ++i) {
        for (int64_t j = 0; j < c.rows; ++j) {
          expected[static_cast<size_t>((b * c.rows + j) * c.cols + i)] =
              flat[static_cast<size_t>((b * c.cols + i) * c.rows + j)];
        }
      }
    }
    std::vector<float> negated(expected.size()), plus_one(expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      negated[i] = -expected[i];
      plus_one[i] = expected[i] + 1.0f;
    }
    for (int threads : {1, 2, 3}) {
      INFO("batch " << c.batch << ", rows " << c.rows << ", cols " << c.cols << ", " << threads << " threads");
      set_num_threads(threads);
      CHECK(seen.contiguous().to_vector<float>() == expected);
      CHECK(neg(seen).to_vector<float>() == negated);
      CHECK(add(seen, ones({c.batch, c.rows, c.cols})).to_vector<float>() == plus_one);
      const Tensor converted = empty({c.batch, c.rows, c.cols}, kFloat32);
      converted.copy_(src.to(kBFloat16).transpose(1, 2));
      CHECK(converted.to_vector<float>() == expected);
      CHECK(src.to(kInt32).transpose(1, 2).contiguous().to(kFloat32).to_vector<float>() == expected);
    }
  }
}

namespace {
// Host memory that claims to be cuda:0, so device checks can be tested without a GPU.
class FakeCudaAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override { return cpu_allocator()->allocate(nbytes); }
  void deallocate(void* p, size_t nbytes) override { cpu_allocator()->deallocate(p, nbytes); }
  Device device() const override { return Device::cuda(0); }
};
}  // namespace

TEST_CASE("ops refuse operands on different devices and name them", "[elementwise][device][errors]") {
  static FakeCudaAllocator fake;
  const Tensor gpu = Tensor::make(Storage(12, &fake), {3}, {1}, 0, kFloat32);
  CHECK(gpu.device() == Device::cuda(0));
  const Tensor cpu = zeros({3});
  CHECK_THROWS_WITH(add(cpu, gpu),
                    Contains("add: expected all tensors on the same device, but 'a' is on cpu and 'b' is on cuda:0"));
  CHECK_THROWS_WITH(matmul(gpu.view({1, 3}), cpu.view({3, 1})),
                    Contains("matmul: expected all tensors on the same device"));
  CHECK_THROWS_WITH(add(gpu, gpu), Contains("cannot allocate a tensor on cuda:0"));
  CHECK_THROWS_WITH(gpu.add_(gpu), Contains("add_: no kernel for tensors on cuda:0 in this build"));
  CHECK_THROWS_WITH(sum(gpu), Contains("sum: no kernel for tensors on cuda:0"));
  CHECK_THROWS_WITH(cpu.copy_(gpu), Contains("copy_: no kernel for tensors on cuda:0"));
}

TEST_CASE("pow(base, exponent): every layout and dtype against std::pow; what it refuses", "[elementwise][pow]") {
  for (DType dtype : {kFloat32, kFloat64}) {
    for (const auto& [name, base] : layouts({4, 7}, 12)) {
      INFO(name << " " << dtype_name(dtype));
      const Tensor x = mul(base.to(dtype), 3.0);
      const Tensor out = pow(0.9, x);
      CHECK(out.dtype() == dtype);
      check_unary(
          out, x, [](double v) { return std::pow(0.9, v); }, dtype == kFloat32 ? 2e-6 : 1e-15);
    }
  }
  const Tensor steps = tensor({1, 2, 3}, kInt64);
  CHECK(pow(0.5, steps).dtype() == kFloat32);  // an int64 exponent computes in float32
  CHECK(pow(0.5, steps).to_vector<float>() == std::vector<float>{0.5f, 0.25f, 0.125f});
  CHECK_THROWS_WITH(pow(2.0, steps), Contains("pow: an integral base (2) with an integer exponent gives integers"));
  CHECK_THROWS_WITH(pow(2.0, tensor({1, 0}, kBool)), Contains("pow"));
  CHECK_THROWS_WITH(pow(2.0, Tensor()), Contains("pow"));
}
