// Autocast (tensor/autocast.h) against PyTorch's CPU autocast on the same float32 inputs
// (fixtures/make_autocast_fixtures.py): output dtypes, values within bfloat16 rounding,
// float32 gradients; the weight-cast cache, nesting, errors; bfloat16 products against an
// exact reference (oneDNN under AVX-512, float32 under TINYDDP_CPU_ISA=avx2); float promotion.
#include <cmath>

#include "tests/test_util.h"
#include "tinyddp/autograd/autograd.h"
#include "tinyddp/nn/loss.h"
#include "tinyddp/tensor/autocast.h"
#include "tinyddp/tensor/cpu_isa.h"

using namespace tinyddp::tensor;
using Catch::Matchers::Contains;
using tinyddp::nn::cross_entropy;
using tinyddp::nn::mse_loss;

namespace {

const std::map<std::string, std::vector<double>>& fixture() {
  static const auto values = tinyddp::testing::load_fixture("tests/tensor/fixtures/autocast_reference.txt");
  return values;
}

Tensor value(const std::string& name, const Shape& shape, DType dtype = kFloat32) {
  const auto it = fixture().find(name);
  if (it == fixture().end()) throw std::runtime_error("autocast_reference.txt has no entry " + name);
  return from_vector<double>(it->second, shape).to(dtype);
}

// Both sides sum in float32 and round once to bfloat16, in different orders, so a result may
// land on the neighbouring bfloat16 value: relative 2^-7 (one bfloat16 step), plus one step
// of the case's largest magnitude, for a rounded term that a later sum cancels (a residual's
// gradient). `steps`: roundings that compound (layers).
bool within_bf16(const Tensor& got, const Tensor& want, double steps = 1) {
  const double scale = max(abs(want.to(kFloat64))).item<double>();
  return allclose(got.to(kFloat64), want.to(kFloat64), steps / 128, steps * scale / 128);
}

using Inputs = std::vector<std::pair<std::string, Shape>>;
using Body = std::function<Tensor(const std::map<std::string, Tensor>&)>;

// Runs `body` under autocast on the case's float32 leaves, backward outside it with PyTorch's
// grad_out, and compares with PyTorch's run.
void check_case(const std::string& name, const Inputs& inputs, const Body& body, double steps = 1) {
  INFO("case " << name);
  std::map<std::string, Tensor> leaves;
  for (const auto& [arg, shape] : inputs) leaves[arg] = value(name + "_" + arg, shape).requires_grad_();
  Tensor out;
  {
    Autocast autocast(DeviceType::kCPU);
    out = body(leaves);
  }
  const bool bf16 = value(name + "_out_bf16", {1}).item<float>() == 1.0f;
  CHECK(out.dtype() == (bf16 ? kBFloat16 : kFloat32));
  CHECK(within_bf16(out, value(name + "_out", out.sizes()), steps));
  out.backward(value(name + "_grad_out", out.sizes(), out.dtype()));
  for (const auto& [arg, t] : leaves) {
    INFO("gradient of " << arg);
    REQUIRE(t.grad().defined());
    CHECK(t.grad().dtype() == kFloat32);
    CHECK(within_bf16(t.grad(), value(name + "_grad_" + arg, t.sizes()), steps));
  }
}

}  // namespace

TEST_CASE("autocast equals PyTorch's CPU autocast: dtypes, values, float32 gradients", "[autocast]") {
  using L = const std::map<std::string, Tensor>&;
  check_case("mm", {{"a", {24, 40}}, {"b", {40, 16}}}, [](L t) { return mm(t.at("a"), t.at("b")); });
  check_case("mm_t", {{"a", {40, 24}}, {"b", {40, 16}}}, [](L t) { return mm(t.at("a").t(), t.at("b")); });
  check_case("matmul3d", {{"a", {3, 8, 20}}, {"b", {3, 20, 12}}}, [](L t) { return matmul(t.at("a"), t.at("b")); });
  check_case("linear", {{"x", {16, 40}}, {"weight", {24, 40}}, {"bias", {24}}},
             [](L t) { return linear(t.at("x"), t.at("weight"), t.at("bias")); });
  check_case("conv", {{"x", {2, 3, 8, 8}}, {"weight", {8, 3, 3, 3}}, {"bias", {8}}},
             [](L t) { return conv2d(t.at("x"), t.at("weight"), t.at("bias"), 1, 1); });
  check_case("conv_bn", {{"x", {2, 3, 8, 8}}, {"weight", {8, 3, 3, 3}}, {"bn_weight", {8}}, {"bn_bias", {8}}}, [](L t) {
    const Tensor conv = conv2d(t.at("x"), t.at("weight"), Tensor(), 1, 1);
    return batch_norm(conv, zeros({8}), ones({8}), t.at("bn_weight"), t.at("bn_bias"), true);
  });
  check_case("relu_after_linear", {{"x", {8, 12}}, {"weight", {6, 12}}},
             [](L t) { return relu(linear(t.at("x"), t.at("weight"))); });
  check_case("residual", {{"x", {8, 12}}, {"weight", {12, 12}}},
             [](L t) { return add(t.at("x"), linear(t.at("x"), t.at("weight"))); });
  check_case("mse", {{"x", {8, 12}}, {"weight", {6, 12}}, {"target", {8, 6}}},
             [](L t) { return mse_loss(linear(t.at("x"), t.at("weight")), t.at("target")); });
  const Tensor targets = value("mlp_targets", {32}, kInt64);
  check_case(
      "mlp", {{"x", {32, 20}}, {"w1", {64, 20}}, {"b1", {64}}, {"w2", {10, 64}}, {"b2", {10}}},
      [&](L t) {
        return cross_entropy(linear(relu(linear(t.at("x"), t.at("w1"), t.at("b1"))), t.at("w2"), t.at("b2")), targets);
      },
      2);
}

TEST_CASE("autocast casts a parameter once per outermost scope (the cache), a plain tensor per use", "[autocast]") {
  // As in PyTorch: a float32 leaf that requires grad is cast once and the cast reused until
  // the outermost scope ends, so an in-place change inside the scope is not seen; with
  // cache_enabled = false, or for a tensor that does not require grad, every use casts anew.
  Generator gen(3);
  const Tensor x = randn({4, 8}, {}, &gen), w = randn({8, 5}, {}, &gen).requires_grad_();
  const auto twice = [&](bool cache) {
    Autocast autocast(DeviceType::kCPU, kBFloat16, true, cache);
    const Tensor first = mm(x, w);
    {
      NoGradGuard no_grad;
      w.mul_(2.0);
    }
    const Tensor second = mm(x, w);
    {
      NoGradGuard no_grad;
      w.mul_(0.5);
    }
    return std::make_pair(first, second);
  };
  const auto [cached_first, cached_second] = twice(true);
  CHECK(equal(cached_second, cached_first));
  const auto [plain_first, plain_second] = twice(false);
  CHECK(equal(plain_second, mul(plain_first, 2.0)));
  // A new scope casts again.
  {
    Autocast autocast(DeviceType::kCPU);
    CHECK(equal(mm(x, w), cached_first));
  }
  // The cached cast carries the graph: the gradient reaches w in float32.
  {
    Autocast autocast(DeviceType::kCPU);
    const Tensor y = add(sum(mm(x, w)), sum(mm(x, w)));
    y.backward();
  }
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == kFloat32);
  CHECK(allclose(w.grad(), mul(sum(x, {0}).view({8, 1}).expand({8, 5}), 2.0), 1.0 / 128, 1e-2));
}

TEST_CASE("autocast scopes nest, turn off, leave float64 alone and reject what they cannot do", "[autocast]") {
  const Tensor a = ones({2, 3}), b = ones({3, 2});
  CHECK_FALSE(is_autocast_enabled(DeviceType::kCPU));
  CHECK(mm(a, b).dtype() == kFloat32);
  {
    Autocast outer(DeviceType::kCPU);
    CHECK(is_autocast_enabled(DeviceType::kCPU));
    CHECK(get_autocast_dtype(DeviceType::kCPU) == kBFloat16);
    CHECK(mm(a, b).dtype() == kBFloat16);
    {
      Autocast off(DeviceType::kCPU, kBFloat16, false);
      CHECK_FALSE(is_autocast_enabled(DeviceType::kCPU));
      CHECK(mm(a, b).dtype() == kFloat32);
    }
    CHECK(mm(a, b).dtype() == kBFloat16);
    CHECK(mm(a.to(kFloat64), b.to(kFloat64)).dtype() == kFloat64);  // float64 is never cast
    CHECK_FALSE(is_autocast_enabled(DeviceType::kCUDA));            // per device type
  }
  CHECK_FALSE(is_autocast_enabled(DeviceType::kCPU));
  CHECK(mm(a, b).dtype() == kFloat32);
  CHECK_THROWS_WITH(Autocast(DeviceType::kCPU, kFloat16), Contains("on the CPU only bfloat16 is supported"));
  CHECK_THROWS_WITH(Autocast(DeviceType::kCUDA, kFloat64), Contains("on CUDA only bfloat16 and float16"));
  CHECK_FALSE(is_autocast_enabled(DeviceType::kCPU));  // a rejected scope leaves no trace
}

TEST_CASE("bfloat16 matmul is the exact product rounded once, under each instruction set", "[autocast][matmul]") {
  // Inputs with bfloat16 values; the reference is their float64 product. Rounding to bfloat16
  // is within 2^-8 relative; float32 accumulation adds k * 2^-24 of the sum of |a||b|.
  // AVX-512: oneDNN's kernels; AVX2: float32 kernels, the result rounded.
  struct Dims {
    int64_t n, k, m;
    bool transpose_a, transpose_b;
  };
  // On a machine of 2 CPUs or more (matmul.cc's gemm_split: at least 8 M multiply-adds) the
  // 6th and 7th are cut into column blocks, the next five into row blocks with b packed (a
  // shorter last block; a transposed a copied per block, with k in and out of the packing's
  // blocks of 32 and b in one piece or in column pieces; where the kernel reads AMX's
  // pair-interleaved blocks, the last three of these packed by tinyddp's own copy, from a
  // row-major b and from a column-major one), the last into row blocks of a transposed a read
  // in place (k > m).
  const Dims d =
      GENERATE(Dims{64, 64, 64, false, false}, Dims{37, 53, 29, false, true}, Dims{5, 300, 7, true, false},
               Dims{128, 1, 96, true, true}, Dims{1, 200, 1, false, false}, Dims{96, 256, 1000, false, false},
               Dims{100, 300, 700, false, true}, Dims{333, 256, 100, false, true}, Dims{600, 100, 200, true, false},
               Dims{512, 256, 320, true, false}, Dims{520, 64, 448, false, false}, Dims{600, 128, 384, false, true},
               Dims{256, 512, 128, true, false});
  Generator gen(9);
  const Tensor a64 = randn(d.transpose_a ? Shape{d.k, d.n} : Shape{d.n, d.k}, {}, &gen).to(kBFloat16).to(kFloat64);
  const Tensor b64 = randn(d.transpose_b ? Shape{d.m, d.k} : Shape{d.k, d.m}, {}, &gen).to(kBFloat16).to(kFloat64);
  const Tensor a = d.transpose_a ? a64.to(kBFloat16).t() : a64.to(kBFloat16);
  const Tensor b = d.transpose_b ? b64.to(kBFloat16).t() : b64.to(kBFloat16);
  const Tensor a_exact = d.transpose_a ? a64.t() : a64, b_exact = d.transpose_b ? b64.t() : b64;
  const Tensor exact = mm(a_exact, b_exact), magnitude = mm(abs(a_exact), abs(b_exact));
  const Tensor bound = add(mul(abs(exact), std::ldexp(1.0, -8)), mul(magnitude, (d.k + 2) * std::ldexp(1.0, -24)));
  const CpuIsa selected = cpu_isa();
  for (const CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!cpu_has(isa)) continue;
    set_cpu_isa(isa);
    INFO("n " << d.n << " k " << d.k << " m " << d.m << " transposed " << d.transpose_a << d.transpose_b << ", "
              << cpu_isa_name(isa) << ": " << cpu_bf16_matmul_engine());
    const Tensor out = mm(a, b);
    REQUIRE(out.dtype() == kBFloat16);
    CHECK(equal(le(abs(sub(out.to(kFloat64), exact)), bound), ones(exact.sizes(), kBool)));
  }
  set_cpu_isa(selected);
}

TEST_CASE("bfloat16 Linear in column blocks: each block adds its own columns of the bias, rounded once",
          "[autocast][matmul]") {
  // x [96, 256] @ W^T [256, 1000] + bias: at least 8 M multiply-adds and more columns than
  // rows, so a machine of 2 CPUs or more cuts it into column blocks of W^T, the output and the
  // bias. The bound as above, the bias's magnitude added to the sum's.
  Generator gen(11);
  const Tensor x64 = randn({96, 256}, {}, &gen).to(kBFloat16).to(kFloat64);
  const Tensor w64 = randn({1000, 256}, {}, &gen).to(kBFloat16).to(kFloat64);
  const Tensor bias64 = randn({1000}, {}, &gen).to(kBFloat16).to(kFloat64);
  const Tensor exact = linear(x64, w64, bias64);
  const Tensor magnitude = add(mm(abs(x64), abs(w64).t()), abs(bias64));
  const Tensor bound = add(mul(abs(exact), std::ldexp(1.0, -8)), mul(magnitude, 259 * std::ldexp(1.0, -24)));
  const Tensor out = linear(x64.to(kBFloat16), w64.to(kBFloat16), bias64.to(kBFloat16));
  INFO(cpu_isa_name(cpu_isa()) << ": " << cpu_bf16_matmul_engine(96, 256, 1000));
  REQUIRE(out.dtype() == kBFloat16);
  CHECK(equal(le(abs(sub(out.to(kFloat64), exact)), bound), ones(exact.sizes(), kBool)));
}

TEST_CASE("batched bfloat16 matmul: attention's strided views in one call, broadcast batches matrix by matrix",
          "[autocast][matmul]") {
  // q [B, H, T, D] and k^T are views into a [B, T, 3, H, D] projection, as attention's split
  // and transposes leave them (batch strides that do not fold into one); the scores times v,
  // and a batch broadcast against one matrix. Reference and bound as above.
  Generator gen(10);
  const int64_t b = 3, h = 2, t = 9, d = 5;
  const Tensor qkv64 = randn({b, t, 3, h, d}, {}, &gen).to(kBFloat16).to(kFloat64);
  const auto view = [](const Tensor& x, int64_t i) { return x.select(2, i).transpose(1, 2); };  // [B, H, T, D]
  const Tensor scores64 = randn({b, h, t, t}, {}, &gen).to(kBFloat16).to(kFloat64);
  const Tensor single64 = randn({d, t}, {}, &gen).to(kBFloat16).to(kFloat64);
  const Tensor qkv = qkv64.to(kBFloat16), scores = scores64.to(kBFloat16), single = single64.to(kBFloat16);
  struct Case {
    const char* name;
    Tensor a, b, a64, b64;
  };
  const std::vector<Case> cases = {
      {"q @ k^T", view(qkv, 0), view(qkv, 1).transpose(-2, -1), view(qkv64, 0), view(qkv64, 1).transpose(-2, -1)},
      {"scores @ v", scores, view(qkv, 2), scores64, view(qkv64, 2)},
      {"v^T @ scores (a transposed view on the left)", view(qkv, 2).transpose(-2, -1), scores,
       view(qkv64, 2).transpose(-2, -1), scores64},
      {"q @ one matrix, broadcast", view(qkv, 0), single, view(qkv64, 0), single64},
      {"a batch of one against a batch", scores.narrow(0, 0, 1), view(qkv, 2), scores64.narrow(0, 0, 1),
       view(qkv64, 2)}};
  const CpuIsa selected = cpu_isa();
  for (const Case& c : cases) {
    const Tensor exact = matmul(c.a64, c.b64), magnitude = matmul(abs(c.a64), abs(c.b64));
    const Tensor bound =
        add(mul(abs(exact), std::ldexp(1.0, -8)), mul(magnitude, (c.a.size(-1) + 2) * std::ldexp(1.0, -24)));
    for (const CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
      if (!cpu_has(isa)) continue;
      set_cpu_isa(isa);
      INFO(c.name << ", " << cpu_isa_name(isa));
      const Tensor out = matmul(c.a, c.b);
      REQUIRE(out.dtype() == kBFloat16);
      REQUIRE(out.sizes() == exact.sizes());
      CHECK(equal(le(abs(sub(out.to(kFloat64), exact)), bound), ones(exact.sizes(), kBool)));
    }
  }
  set_cpu_isa(selected);
}

TEST_CASE("a batched bfloat16 matmul cut for the threads: within the bound, the same bits at any thread count",
          "[autocast][matmul][threads]") {
  // The example GPT's attention products (16 windows, 4 heads, T = 64, head size 32): enough
  // work that the batch is cut into blocks for the pool (one per CPU of the machine, at most),
  // each its own oneDNN call. Reference and bound as above; 1, 2 and 3 threads give one result.
  Generator gen(12);
  const int64_t b = 16, h = 4, t = 64, d = 32;
  const Tensor qkv64 = randn({b, t, 3, h, d}, {}, &gen).to(kBFloat16).to(kFloat64);
  const Tensor att64 = softmax(randn({b, h, t, t}, {}, &gen), -1).to(kBFloat16).to(kFloat64);
  const auto view = [](const Tensor& x, int64_t i) { return x.select(2, i).transpose(1, 2); };  // [B, H, T, D]
  const Tensor qkv = qkv64.to(kBFloat16), att = att64.to(kBFloat16);
  const int threads = get_num_threads();
  for (const auto& [name, x, y, x64, y64] : {std::tuple{"q @ k^T", view(qkv, 0), view(qkv, 1).transpose(-2, -1),
                                                        view(qkv64, 0), view(qkv64, 1).transpose(-2, -1)},
                                             std::tuple{"att @ v", att, view(qkv, 2), att64, view(qkv64, 2)}}) {
    INFO(name);
    const Tensor exact = matmul(x64, y64), magnitude = matmul(abs(x64), abs(y64));
    const Tensor bound =
        add(mul(abs(exact), std::ldexp(1.0, -8)), mul(magnitude, (x.size(-1) + 2) * std::ldexp(1.0, -24)));
    Tensor first;
    for (const int n : {1, 2, 3}) {
      INFO(n << " threads");
      set_num_threads(n);
      const Tensor out = matmul(x, y);
      CHECK(equal(le(abs(sub(out.to(kFloat64), exact)), bound), ones(exact.sizes(), kBool)));
      if (!first.defined()) first = out;
      CHECK(equal(out, first));
    }
  }
  set_num_threads(threads);
}

TEST_CASE("floating dtypes promote in arithmetic, each gradient in its input's dtype", "[autocast][dtype]") {
  const Tensor h = full({2, 3}, 1.5, kBFloat16).requires_grad_(), x = full({2, 3}, 0.25).requires_grad_();
  const Tensor y = add(x, h);
  CHECK(y.dtype() == kFloat32);
  CHECK(allclose(y, full({2, 3}, 1.75)));
  sum(mul(y, x)).backward();
  CHECK(h.grad().dtype() == kBFloat16);
  CHECK(x.grad().dtype() == kFloat32);
  CHECK(allclose(x.grad(), full({2, 3}, 2.0)));  // y + x
  CHECK(mul(ones({2}, kFloat64), ones({2})).dtype() == kFloat64);
  CHECK(div(ones({2}, kFloat16), ones({2}, kBFloat16)).dtype() == kFloat32);
  CHECK(maximum(ones({2}, kBFloat16), ones({2})).dtype() == kFloat32);
  CHECK(add(ones({2}, kBFloat16), ones({2}, kInt64)).dtype() == kBFloat16);  // an integer joins the float
}

TEST_CASE("unary ops on bfloat16 compute in float32 and round once", "[autocast][elementwise]") {
  // Against the float64 op on the same values rounded to bfloat16: within one bfloat16 step
  // (the float32 result may sit on the other side of a rounding boundary), plus 1e-6 absolute
  // for GELU's far negative tail, where float32's 1 + erf(x / sqrt 2) cancels (as PyTorch's
  // float32 GELU does). 3000 values: the vectorised blocks of 1024 and a tail.
  Generator gen(4);
  const Tensor x = mul(randn({3000}, {}, &gen), 3.0).to(kBFloat16);
  const Tensor x64 = x.to(kFloat64);
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> ops = {
      {"exp", [](const Tensor& t) { return exp(t); }},         {"tanh", [](const Tensor& t) { return tanh(t); }},
      {"sigmoid", [](const Tensor& t) { return sigmoid(t); }}, {"gelu", [](const Tensor& t) { return gelu(t); }},
      {"relu", [](const Tensor& t) { return relu(t); }},       {"neg", [](const Tensor& t) { return neg(t); }}};
  for (const auto& [name, op] : ops) {
    INFO(name);
    const Tensor got = op(x);
    REQUIRE(got.dtype() == kBFloat16);
    CHECK(allclose(got.to(kFloat64), op(x64).to(kBFloat16).to(kFloat64), 1.0 / 128, 1e-6));
  }
}

TEST_CASE("causal_softmax on bfloat16 scores rounds where PyTorch's scale, masked_fill and softmax do",
          "[autocast][attention]") {
  // nanoGPT's (scores * (1 / sqrt(8))).masked_fill(future, -inf).softmax(-1) on bfloat16
  // scores rounds the scaled scores to bfloat16 (with the scale itself rounded to bfloat16,
  // as PyTorch 1.13 multiplies by a Python number) and, backward, the softmax's gradient before
  // multiplying it by the scale. Each step computes in float32 on both sides, so the results
  // are PyTorch's bits but where a float32 exp lands on the other side of a rounding boundary:
  // at least 99% of the elements equal, every one within one bfloat16 step. Leaving out either
  // rounding changes several per cent of them.
  const Shape shape{2, 4, 16, 16};
  const Tensor scores = value("causal_softmax_scores", shape, kBFloat16).requires_grad_();
  const Tensor out = causal_softmax(scores, 1.0 / std::sqrt(8.0));
  REQUIRE(out.dtype() == kBFloat16);
  out.backward(value("causal_softmax_grad_out", shape, kBFloat16));
  REQUIRE(scores.grad().dtype() == kBFloat16);
  for (const auto& [name, got] : {std::pair<std::string, Tensor>{"out", out}, {"grad_scores", scores.grad()}}) {
    INFO(name);
    const Tensor want = value("causal_softmax_" + name, shape).to(kFloat64), have = got.to(kFloat64);
    const double equal = mean(eq(have, want).to(kFloat64)).item<double>();
    CHECK(equal >= 0.99);
    CHECK(allclose(have, want, 1.0 / 128, 1e-30));
  }
}

TEST_CASE("binary ops on bfloat16 compute in float32 and round once, in every row pattern", "[autocast][elementwise]") {
  // The reference: the same op on the values widened to float32, rounded to bfloat16 (float32
  // arithmetic is exact to the bit on both sides). Rows of 1500: the vectorised blocks of 1024
  // and a tail; a row broadcast, a scalar on either side, and an in-place update.
  Generator gen(11);
  const Tensor a = randn({3, 1500}, {}, &gen).to(kBFloat16), b = randn({3, 1500}, {}, &gen).to(kBFloat16);
  const Tensor row = randn({1500}, {}, &gen).to(kBFloat16), one = scalar_tensor(0.75, TensorOptions(kBFloat16));
  const auto wide = [](const Tensor& t) { return t.to(kFloat32); };
  using Op = std::function<Tensor(const Tensor&, const Tensor&)>;
  const std::vector<std::pair<std::string, Op>> ops = {
      {"add", [](const Tensor& x, const Tensor& y) { return add(x, y); }},
      {"add, alpha 0.5", [](const Tensor& x, const Tensor& y) { return add(x, y, 0.5); }},
      {"sub", [](const Tensor& x, const Tensor& y) { return sub(x, y); }},
      {"mul", [](const Tensor& x, const Tensor& y) { return mul(x, y); }},
      {"div", [](const Tensor& x, const Tensor& y) { return div(x, y); }},
      {"maximum", [](const Tensor& x, const Tensor& y) { return maximum(x, y); }}};
  const std::vector<std::pair<std::string, std::pair<Tensor, Tensor>>> operands = {
      {"both rows", {a, b}}, {"a row broadcast", {a, row}}, {"scalar b", {a, one}}, {"scalar a", {one, b}}};
  for (const auto& [name, op] : ops) {
    for (const auto& [pattern, xy] : operands) {
      INFO(name << ", " << pattern);
      const Tensor got = op(xy.first, xy.second);
      REQUIRE(got.dtype() == kBFloat16);
      CHECK(equal(got, op(wide(xy.first), wide(xy.second)).to(kBFloat16)));
    }
  }
  const Tensor inplace = a.clone();
  inplace.add_(b, 0.5);
  CHECK(equal(inplace, add(wide(a), wide(b), 0.5).to(kBFloat16)));
  // Sums over the leading dim (a bias's gradient) add the rows in float64 in row order, a block
  // of rows at a time: as float32's.
  const Tensor tall = randn({5000, 3}, {}, &gen).to(kBFloat16);
  for (const Tensor& t : {a, tall}) CHECK(equal(sum(t, {0}), sum(wide(t), {0}).to(kBFloat16)));
  // An alpha that bfloat16 cannot hold stays float32 in the scalar loop: within one step.
  CHECK(allclose(add(a, b, 0.1).to(kFloat64), add(wide(a), wide(b), 0.1).to(kBFloat16).to(kFloat64), 1.0 / 128, 1e-30));
}

TEST_CASE("bfloat16 conv2d is the exact convolution rounded once, both ways, under each instruction set",
          "[autocast][conv]") {
  // bfloat16 inputs, the float64 convolution of the same values as the reference, and the
  // bound of the products above: relative 2^-8 for the rounding, plus (taps + 2) 2^-24 of the
  // sum of |x||w| for float32 sums. AVX-512: oneDNN's bfloat16 convolution (forward with
  // the bias, backward data, backward weights; 35 images: blocks of images on a machine of 2
  // or more CPUs, the last block shorter); AVX2: float32 kernels, rounded once.
  struct Geometry {
    int64_t n, c, h, w, o, k, stride, padding, dilation, groups;
  };
  const Geometry g = GENERATE(Geometry{2, 3, 8, 8, 8, 3, 1, 1, 1, 1}, Geometry{2, 4, 11, 9, 6, 3, 2, 1, 1, 2},
                              Geometry{1, 8, 12, 12, 16, 3, 1, 2, 2, 1}, Geometry{3, 16, 5, 7, 8, 1, 1, 0, 1, 1},
                              Geometry{35, 3, 6, 6, 8, 3, 1, 1, 1, 1});
  Generator gen(12);
  const auto bf16_values = [&](const Shape& s) { return randn(s, {}, &gen).to(kBFloat16).to(kFloat64); };
  const Tensor x64 = bf16_values({g.n, g.c, g.h, g.w}), w64 = bf16_values({g.o, g.c / g.groups, g.k, g.k});
  const Tensor b64 = bf16_values({g.o});
  const auto conv = [&](const Tensor& x, const Tensor& w, const Tensor& b) {
    return conv2d(x, w, b, g.stride, g.padding, g.dilation, g.groups);
  };
  const Tensor out64 = conv(x64, w64, b64);
  const Tensor grad_out64 = bf16_values(out64.sizes());
  const int64_t taps = g.c / g.groups * g.k * g.k;
  const auto bound = [](const Tensor& exact, const Tensor& magnitude, int64_t terms) {
    return add(mul(abs(exact), std::ldexp(1.0, -8)), mul(magnitude, (terms + 2) * std::ldexp(1.0, -24)));
  };
  // The exact gradients and their magnitudes (the same sums over |values|).
  const Tensor xr = x64.clone().requires_grad_(), wr = w64.clone().requires_grad_();
  conv(xr, wr, Tensor()).backward(grad_out64);
  const Tensor xa = abs(x64).requires_grad_(), wa = abs(w64).requires_grad_();
  conv(xa, wa, Tensor()).backward(abs(grad_out64));
  const int64_t positions = out64.numel() / g.o;
  const CpuIsa selected = cpu_isa();
  for (const CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!cpu_has(isa)) continue;
    set_cpu_isa(isa);
    INFO("n c h w o k " << g.n << " " << g.c << " " << g.h << " " << g.w << " " << g.o << " " << g.k << ", stride "
                        << g.stride << ", padding " << g.padding << ", dilation " << g.dilation << ", groups "
                        << g.groups << ", " << cpu_isa_name(isa));
    const Tensor x = x64.to(kBFloat16).requires_grad_(), w = w64.to(kBFloat16).requires_grad_();
    const Tensor out = conv(x, w, b64.to(kBFloat16));
    REQUIRE(out.dtype() == kBFloat16);
    const Tensor magnitude = add(conv(abs(x64), abs(w64), Tensor()), abs(b64).view({1, g.o, 1, 1}));
    CHECK(equal(le(abs(sub(out.to(kFloat64), out64)), bound(out64, magnitude, taps + 1)), ones(out64.sizes(), kBool)));
    out.backward(grad_out64.to(kBFloat16));
    REQUIRE(x.grad().dtype() == kBFloat16);
    CHECK(equal(le(abs(sub(x.grad().to(kFloat64), xr.grad())), bound(xr.grad(), xa.grad(), g.o * g.k * g.k)),
                ones(x64.sizes(), kBool)));
    CHECK(equal(le(abs(sub(w.grad().to(kFloat64), wr.grad())), bound(wr.grad(), wa.grad(), positions * g.n)),
                ones(w64.sizes(), kBool)));
  }
  set_cpu_isa(selected);
}
