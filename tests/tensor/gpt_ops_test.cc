// The ops a GPT adds, against PyTorch (fixtures/make_gpt_fixtures.py writes gpt_reference.txt):
// GELU exact and tanh-approximated, layer_norm (with and without weight and bias, over one or
// two dims), embedding (repeated ids), cross_entropy's ignore_index, masked_fill, tril/triu,
// cat, chunk and a whole transformer Block with nanoGPT's names, forward and gradients, in
// float64 (to ~1e-12) and float32 (the float kernels against PyTorch's float32), the 16-bit
// dtypes against float64 and bfloat16 GELU against PyTorch's, the modules, and bad arguments.
#include <functional>

#include "tests/test_util.h"
#include "tinyddp/nn/nn.h"
#include "tinyddp/nn/transformer.h"

using namespace tinyddp::tensor;
using Catch::Contains;

namespace {

const std::map<std::string, std::vector<double>>& reference() {
  static const auto values = tinyddp::testing::load_fixture("tests/tensor/fixtures/gpt_reference.txt");
  return values;
}

Tensor value(const std::string& name, const Shape& shape, DType dtype) {
  const auto it = reference().find(name);
  if (it == reference().end()) throw std::runtime_error("gpt_reference.txt has no entry " + name);
  return from_vector<double>(it->second, shape).to(dtype);
}

// PyTorch's bfloat16 GELU (fixtures/make_autocast_fixtures.py writes it beside the autocast cases).
Tensor autocast_value(const std::string& name, const Shape& shape, DType dtype = kFloat32) {
  static const auto values = tinyddp::testing::load_fixture("tests/tensor/fixtures/autocast_reference.txt");
  const auto it = values.find(name);
  if (it == values.end()) throw std::runtime_error("autocast_reference.txt has no entry " + name);
  return from_vector<double>(it->second, shape).to(dtype);
}

}  // namespace

TEST_CASE("gelu and its gradient equal torch.nn.functional.gelu, exact and tanh, float64 and float32", "[gpt]") {
  const Shape shape{5, 21};
  for (const std::string form : {"none", "tanh"}) {
    for (const DType dtype : {kFloat64, kFloat32}) {
      const std::string c = std::string(form == "tanh" ? "gelu_tanh_" : "gelu_") + (dtype == kFloat64 ? "f64" : "f32");
      INFO(c);
      // float32: a few ulp; the absolute part covers the negative tail, where 1 + erf(x / sqrt 2)
      // cancels and both sides keep only x times an ulp of 1.
      const double rtol = dtype == kFloat64 ? 1e-12 : 2e-6, atol = dtype == kFloat64 ? 1e-14 : 1e-6;
      const Tensor x = value(c + "_input", shape, dtype).requires_grad_();
      const Tensor out = gelu(x, form);
      CHECK(allclose(out, value(c + "_out", shape, dtype), rtol, atol));
      out.backward(value(c + "_grad_out", shape, dtype));
      // The tanh form's derivative has 1 - tanh(u)^2, which cancels in the tails: an ulp of
      // tanh there (either side's) moves it by up to ~8 ulp of 1 at |x| ~ 5.
      const double grad_atol = dtype == kFloat32 && form == "tanh" ? 5e-6 : atol;
      CHECK(allclose(x.grad(), value(c + "_grad_input", shape, dtype), rtol, grad_atol));
      // A strided view takes the same values (it is made contiguous for the kernel).
      const Tensor xt = x.detach().t();
      CHECK(equal(gelu(xt, form), out.detach().t()));
    }
  }
}

TEST_CASE(
    "gelu in float16 and bfloat16 is float64's result within the 16-bit type's rounding; its gradient rounds once",
    "[gpt]") {
  Generator gen(3);
  const Tensor x = mul(randn({64}, {}, &gen), 3.0);
  for (const DType dtype : {kFloat16, kBFloat16}) {
    INFO(dtype_name(dtype));
    const Tensor x16 = x.to(dtype);
    const double ulp = dtype == kFloat16 ? 0x1p-10 : 0x1p-7;  // of 1.0
    for (const std::string form : {"none", "tanh"}) {
      INFO(form);
      const Tensor leaf = x16.detach().requires_grad_();
      const Tensor got = gelu(leaf, form);
      CHECK(got.dtype() == dtype);
      CHECK(allclose(got.to(kFloat64), gelu(x16.to(kFloat64), form), ulp, ulp * 1e-3));
      // The gradient as PyTorch's 16-bit kernel makes it: grad_out * gelu'(x) in float32, rounded
      // once (not gelu'(x) rounded, then the product rounded again). gelu'(x) in float32 is the
      // float32 op's gradient for a grad_out of ones (checked against PyTorch above).
      const Tensor g16 = mul(randn({64}, {}, &gen), 0.7).to(dtype);
      got.backward(g16);
      const Tensor x32 = x16.to(kFloat32).requires_grad_();
      gelu(x32, form).backward(ones({64}));
      CHECK(leaf.grad().dtype() == dtype);
      CHECK(equal(leaf.grad(), mul(g16.to(kFloat32), x32.grad()).to(dtype)));
    }
  }
}

TEST_CASE("GELU on bfloat16 equals PyTorch's, forward and backward (the gradient rounded once)",
          "[autocast][elementwise]") {
  // PyTorch's bfloat16 GELU computes in float32 and rounds once, its backward grad_out *
  // gelu'(x) too (fixtures/make_autocast_fixtures.py). Both sides use a float32 erf, which may
  // differ by an ulp: for x >= -4 at least 99% of the elements equal, and every element within
  // one bfloat16 step plus 1e-6: below -4, 1 + erf(x / sqrt 2) cancels in float32 on both
  // sides, which leaves each side's erf error (tiny values, most of them unequal). Rounding
  // gelu'(x) before the product changes about a quarter of the gradients.
  const Shape shape{3000};
  const Tensor x = autocast_value("gelu_bf16_x", shape, kBFloat16).requires_grad_();
  const Tensor out = gelu(x);
  REQUIRE(out.dtype() == kBFloat16);
  out.backward(autocast_value("gelu_bf16_grad_out", shape, kBFloat16));
  REQUIRE(x.grad().dtype() == kBFloat16);
  for (const auto& [name, got] : {std::pair<std::string, Tensor>{"out", out}, {"grad_x", x.grad()}}) {
    INFO(name);
    const Tensor want = autocast_value("gelu_bf16_" + name, shape).to(kFloat64), have = got.to(kFloat64);
    const Tensor body = ge(x.detach(), -4.0);
    const double equal_in_body = sum(logical_and(eq(have, want), body).to(kFloat64)).item<double>();
    CHECK(equal_in_body >= 0.99 * sum(body.to(kFloat64)).item<double>());
    CHECK(allclose(have, want, 1.0 / 128, 1e-6));
  }
}

TEST_CASE("gelu and nn::GELU refuse what torch refuses, and GELU prints as torch.nn.GELU", "[gpt][errors]") {
  CHECK_THROWS_WITH(gelu(ones({2}), "fast"), Contains("gelu: approximate must be 'none' or 'tanh', got 'fast'"));
  CHECK_THROWS_WITH(gelu(ones({2}, kInt64)), Contains("gelu: expected a floating-point input, got dtype int64"));
  CHECK_THROWS_WITH(tinyddp::nn::GELU("erf"), Contains("GELU: approximate must be 'none' or 'tanh', got 'erf'"));
  CHECK(tinyddp::nn::GELU().repr() == "GELU(approximate='none')");
  CHECK(tinyddp::nn::GELU("tanh").repr() == "GELU(approximate='tanh')");
  const Tensor x = randn({3, 4});
  CHECK(equal(tinyddp::nn::GELU("tanh").forward(x), gelu(x, "tanh")));
}

TEST_CASE("layer_norm and its gradients equal torch.nn.functional.layer_norm", "[gpt][layer_norm]") {
  // Over the last dim with weight and bias (one row offset by 100, one constant row), over the
  // last two dims without them, and in float32.
  const Shape s1{2, 3, 8}, s2{4, 3, 5}, s3{6, 16};
  const Tensor x1 = value("layer_norm_affine_input", s1, kFloat64).requires_grad_();
  const Tensor w1 = value("layer_norm_affine_weight", {8}, kFloat64).requires_grad_();
  const Tensor b1 = value("layer_norm_affine_bias", {8}, kFloat64).requires_grad_();
  const Tensor y1 = layer_norm(x1, {8}, w1, b1, 1e-5);
  CHECK(allclose(y1, value("layer_norm_affine_out", s1, kFloat64), 1e-10, 1e-12));
  y1.backward(value("layer_norm_affine_grad_out", s1, kFloat64));
  CHECK(allclose(x1.grad(), value("layer_norm_affine_grad_input", s1, kFloat64), 1e-9, 1e-11));
  CHECK(allclose(w1.grad(), value("layer_norm_affine_grad_weight", {8}, kFloat64), 1e-10, 1e-12));
  CHECK(allclose(b1.grad(), value("layer_norm_affine_grad_bias", {8}, kFloat64), 1e-10, 1e-12));

  const Tensor x2 = value("layer_norm_plain_input", s2, kFloat64).requires_grad_();
  const Tensor y2 = layer_norm(x2, {3, 5}, Tensor(), Tensor(), 1e-3);
  CHECK(allclose(y2, value("layer_norm_plain_out", s2, kFloat64), 1e-10, 1e-12));
  y2.backward(value("layer_norm_plain_grad_out", s2, kFloat64));
  CHECK(allclose(x2.grad(), value("layer_norm_plain_grad_input", s2, kFloat64), 1e-9, 1e-11));

  const Tensor x3 = value("layer_norm_f32_input", s3, kFloat32).requires_grad_();
  const Tensor w3 = value("layer_norm_f32_weight", {16}, kFloat32).requires_grad_();
  const Tensor b3 = value("layer_norm_f32_bias", {16}, kFloat32).requires_grad_();
  const Tensor y3 = layer_norm(x3, {16}, w3, b3);
  CHECK(allclose(y3, value("layer_norm_f32_out", s3, kFloat32), 1e-5, 1e-6));
  y3.backward(value("layer_norm_f32_grad_out", s3, kFloat32));
  CHECK(allclose(x3.grad(), value("layer_norm_f32_grad_input", s3, kFloat32), 1e-5, 1e-5));
  CHECK(allclose(w3.grad(), value("layer_norm_f32_grad_weight", {16}, kFloat32), 1e-5, 1e-5));
  CHECK(allclose(b3.grad(), value("layer_norm_f32_grad_bias", {16}, kFloat32), 1e-5, 1e-5));

  // float16 and bfloat16: statistics in float, output within the 16-bit type's rounding.
  for (const DType dtype : {kFloat16, kBFloat16}) {
    INFO(dtype_name(dtype));
    const Tensor x16 = x3.detach().to(dtype);
    const double ulp = dtype == kFloat16 ? 0x1p-10 : 0x1p-7;
    CHECK(allclose(layer_norm(x16, {16}).to(kFloat64), layer_norm(x16.to(kFloat64), {16}), 2 * ulp, 2 * ulp));
  }
}

TEST_CASE("layer_norm refuses shapes and arguments that torch refuses, naming them", "[gpt][layer_norm][errors]") {
  const Tensor x = randn({2, 3, 4});
  CHECK_THROWS_WITH(layer_norm(x, {3}), Contains("layer_norm: normalized_shape [3] must be the input's last dims (and "
                                                 "not empty), but the input has shape [2, 3, 4]"));
  CHECK_THROWS_WITH(layer_norm(x, {}), Contains("normalized_shape [] must be the input's last dims"));
  CHECK_THROWS_WITH(layer_norm(x, {4}, ones({3})),
                    Contains("layer_norm: expected 'weight' of shape [4] (normalized_shape), got [3]"));
  CHECK_THROWS_WITH(layer_norm(x, {4}, ones({4}), ones({4}, kFloat64)), Contains("layer_norm") && Contains("bias"));
  CHECK_THROWS_WITH(layer_norm(ones({2, 4}, kInt64), {4}),
                    Contains("layer_norm: expected a floating-point input, got dtype int64"));
}

TEST_CASE("nn::LayerNorm: parameters, state-dict names and repr as torch.nn.LayerNorm", "[gpt][layer_norm][nn]") {
  tinyddp::nn::LayerNorm ln({8});
  CHECK(ln.state_dict().keys() == std::vector<std::string>{"weight", "bias"});
  CHECK(equal(ln.weight, ones({8})));
  CHECK(equal(ln.bias, zeros({8})));
  CHECK(ln.repr() == "LayerNorm((8,), eps=1e-05, elementwise_affine=True)");
  const Tensor x = randn({2, 5, 8});
  CHECK(equal(ln.forward(x), layer_norm(x, {8}, ln.weight, ln.bias)));
  tinyddp::nn::LayerNorm no_bias({8}, 1e-5, true, /*bias=*/false);  // nanoGPT's bias=False
  CHECK(no_bias.state_dict().keys() == std::vector<std::string>{"weight"});
  tinyddp::nn::LayerNorm plain({3, 4}, 1e-6, false);
  CHECK(plain.parameters().empty());
  CHECK(plain.repr() == "LayerNorm((3, 4), eps=1e-06, elementwise_affine=False)");
  CHECK_THROWS_WITH(ln.forward(randn({2, 7})), Contains("layer_norm: normalized_shape [8] must be the input's last"));
}

TEST_CASE("embedding and its gradient equal torch.nn.functional.embedding, repeated ids summed", "[gpt][embedding]") {
  const Tensor ids = value("embedding_ids", {2, 5}, kInt64);
  const Tensor w = value("embedding_weight", {8, 4}, kFloat64).requires_grad_();
  const Tensor out = embedding(ids, w);
  CHECK(out.sizes() == Shape{2, 5, 4});
  CHECK(equal(out, value("embedding_out", {2, 5, 4}, kFloat64)));  // a copy: exact
  out.backward(value("embedding_grad_out", {2, 5, 4}, kFloat64));
  CHECK(allclose(w.grad(), value("embedding_grad_weight", {8, 4}, kFloat64), 1e-14, 1e-15));
  CHECK(equal(w.grad().narrow(0, 7, 1), zeros({1, 4}, kFloat64)));  // id 7 is never used
  // Strided ids, a 0-d id and float32 take the same path.
  CHECK(equal(embedding(ids.t(), w.detach()), out.detach().transpose(0, 1)));
  CHECK(embedding(scalar_tensor(2, TensorOptions(kInt64)), w.detach()).sizes() == Shape{4});
  CHECK(equal(embedding(ids, w.detach().to(kFloat32)), out.detach().to(kFloat32)));
}

TEST_CASE("embedding refuses ids out of range and wrong dtypes, naming them", "[gpt][embedding][errors]") {
  const Tensor w = randn({5, 3});
  CHECK_THROWS_WITH(embedding(from_vector<int64_t>({1, 5, 2}, Shape{3}), w),
                    Contains("embedding: index 5 is out of range for 5 embeddings (weight shape [5, 3], indices of "
                             "shape [3])"));
  CHECK_THROWS_WITH(embedding(from_vector<int64_t>({-1}, Shape{1}), w),
                    Contains("embedding: index -1 is out of range"));
  CHECK_THROWS_WITH(embedding(ones({2}), w), Contains("embedding: expected int64 or int32 indices, got dtype float32"));
  CHECK_THROWS_WITH(embedding(zeros({2}, kInt64), randn({5})),
                    Contains("embedding: expected a 2-D weight [num_embeddings, embedding_dim], got shape [5]"));
}

TEST_CASE("nn::Embedding: its weight after manual_seed equals torch.nn.Embedding's", "[gpt][embedding][nn]") {
  manual_seed(5);
  tinyddp::nn::Embedding emb(7, 3);
  CHECK(allclose(emb.weight, value("embedding_module_weight_seed5", {7, 3}, kFloat32), 1e-6, 1e-7));
  CHECK(emb.state_dict().keys() == std::vector<std::string>{"weight"});
  CHECK(emb.repr() == "Embedding(7, 3)");
  CHECK(emb.forward(zeros({2, 6}, kInt64)).sizes() == Shape{2, 6, 3});
  CHECK_THROWS_WITH(tinyddp::nn::Embedding(0, 3), Contains("Embedding: num_embeddings (0) and embedding_dim (3)"));
}

TEST_CASE("cross_entropy with ignore_index equals torch's: ignored rows leave the mean and the gradient",
          "[gpt][cross_entropy]") {
  for (const auto& [c, ignore] : {std::pair<std::string, int64_t>{"ce_ignore_minus1", -1}, {"ce_ignore_0", 0}}) {
    INFO(c);
    const Tensor logits = value(c + "_logits", {6, 5}, kFloat64).requires_grad_();
    const Tensor targets = value(c + "_targets", {6}, kInt64);
    const Tensor loss = tinyddp::nn::cross_entropy(logits, targets, ignore);
    CHECK(allclose(loss.view({1}), value(c + "_out", {1}, kFloat64), 1e-12, 1e-14));
    loss.backward(scalar_tensor(1.5, TensorOptions(kFloat64)));
    CHECK(allclose(logits.grad(), value(c + "_grad_logits", {6, 5}, kFloat64), 1e-12, 1e-14));
  }
  // Every row ignored: 0 / 0, NaN, as PyTorch; an ignored row may hold any value, the others
  // must be classes.
  const Tensor logits = randn({2, 3});
  CHECK(std::isnan(tinyddp::nn::cross_entropy(logits, full({2}, -1, TensorOptions(kInt64)), -1).item<float>()));
  CHECK_NOTHROW(tinyddp::nn::cross_entropy(logits, from_vector<int64_t>({-100, 2}, Shape{2})));
  CHECK_THROWS_WITH(tinyddp::nn::cross_entropy(logits, from_vector<int64_t>({-1, 2}, Shape{2})),
                    Contains("cross_entropy: target -1 is out of bounds for 3 classes"));
}

TEST_CASE("a transformer Block (nanoGPT's names) equals the PyTorch block: output and every gradient",
          "[gpt][nn][block]") {
  tinyddp::nn::GPTConfig config;
  config.block_size = 8;
  config.n_embd = 16;
  config.n_head = 4;
  tinyddp::nn::Block block(config);
  block.to(kFloat64);
  // nanoGPT's parameter names, in its order; values from the fixture.
  const std::vector<std::string> names = {
      "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
      "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};
  CHECK(block.state_dict().keys() == names);
  tinyddp::nn::OrderedDict<Tensor> state;
  for (const auto& [name, p] : block.named_parameters())
    state.insert(name, value("block_param_" + name, p.sizes(), kFloat64));
  block.load_state_dict(state);
  const Shape shape{2, 6, 16};
  const Tensor x = value("block_input", shape, kFloat64).requires_grad_();
  const Tensor out = block.forward(x);
  CHECK(allclose(out, value("block_out", shape, kFloat64), 1e-10, 1e-12));
  out.backward(value("block_grad_out", shape, kFloat64));
  CHECK(allclose(x.grad(), value("block_grad_input", shape, kFloat64), 1e-10, 1e-12));
  for (const auto& [name, p] : block.named_parameters()) {
    INFO(name);
    CHECK(allclose(p.grad(), value("block_grad_" + name, p.sizes(), kFloat64), 1e-10, 1e-12));
  }
  // A sequence longer than the context, and widths the heads do not divide, are refused.
  CHECK_THROWS_WITH(block.forward(randn({1, 9, 16}, kFloat64)),
                    Contains("CausalSelfAttention: sequence length 9 is longer than block_size 8"));
  config.n_embd = 18;
  CHECK_THROWS_WITH(tinyddp::nn::CausalSelfAttention(config),
                    Contains("CausalSelfAttention: n_embd 18 must be a positive multiple of n_head 4"));
}

TEST_CASE("masked_fill, tril, triu, cat and chunk equal torch's, forward and gradients", "[gpt][join]") {
  const Shape s{2, 3, 4};
  const Tensor mask = value("masked_fill_mask", {3, 4}, kBool);
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> cases = {
      {"masked_fill", [&](const Tensor& x) { return masked_fill(x, mask, 2.5); }},
      {"tril", [](const Tensor& x) { return tril(x, -1); }},
      {"triu", [](const Tensor& x) { return triu(x, 1); }},
  };
  for (const auto& [c, f] : cases) {
    INFO(c);
    const Tensor x = value(c + "_input", s, kFloat64).requires_grad_();
    const Tensor out = f(x);
    CHECK(equal(out, value(c + "_out", s, kFloat64)));
    out.backward(value(c + "_grad_out", s, kFloat64));
    CHECK(equal(x.grad(), value(c + "_grad_input", s, kFloat64)));
  }
  const Tensor a = value("cat_input", {2, 3}, kFloat64).requires_grad_();
  const Tensor b = value("cat_other", {2, 1}, kFloat64).requires_grad_();
  const Tensor joined = cat({a, b}, 1);
  CHECK(equal(joined, value("cat_out", {2, 4}, kFloat64)));
  joined.backward(value("cat_grad_out", {2, 4}, kFloat64));
  CHECK(equal(a.grad(), value("cat_grad_input", {2, 3}, kFloat64)));
  CHECK(equal(b.grad(), value("cat_grad_other", {2, 1}, kFloat64)));
  const Tensor x = value("chunk_input", {4, 6}, kFloat64).requires_grad_();
  const std::vector<Tensor> p = chunk(x, 4, 1);
  REQUIRE(p.size() == 3);
  const Tensor out = add(mul(p[0], p[2]), p[1]);
  CHECK(allclose(out, value("chunk_out", {4, 2}, kFloat64), 1e-15, 0));
  out.backward(value("chunk_grad_out", {4, 2}, kFloat64));
  CHECK(allclose(x.grad(), value("chunk_grad_input", {4, 6}, kFloat64), 1e-15, 0));
}

TEST_CASE("causal_softmax equals nanoGPT's scale, mask and softmax: PyTorch's numbers, gradcheck, errors",
          "[gpt][causal_softmax]") {
  for (const auto& [suffix, dtype, tol] : {std::tuple{"f64", kFloat64, 1e-13}, std::tuple{"f32", kFloat32, 2e-6}}) {
    for (const auto& [c, shape] : {std::pair{"square", Shape{2, 3, 5, 5}}, std::pair{"wide", Shape{4, 6}}}) {
      const std::string name = std::string("causal_softmax_") + c + "_" + suffix;
      INFO(name);
      const Tensor x = value(name + "_input", shape, dtype).requires_grad_();
      const Tensor y = causal_softmax(x, 0.375);
      CHECK(allclose(y, value(name + "_out", shape, dtype), tol, tol));
      y.backward(value(name + "_grad_out", shape, dtype));
      CHECK(allclose(x.grad(), value(name + "_grad_input", shape, dtype), tol, tol));
    }
  }
  // Finite differences in float64, with scores large enough that the maximum matters.
  manual_seed(3);
  const Tensor x = mul(randn({2, 4, 6}, kFloat64), 4.0).requires_grad_();
  CHECK(tinyddp::autograd::gradcheck([](const std::vector<Tensor>& in) { return causal_softmax(in[0], 0.7); }, {x}) ==
        "");
  // A -inf score weighs exactly nothing (Eigen's exp(-inf) alone is a tiny denormal).
  const Tensor w = softmax(tensor({0.5, -INFINITY, 1.0, -INFINITY}), 0);
  CHECK(w[1].item<float>() == 0.0f);
  CHECK(w[3].item<float>() == 0.0f);
  CHECK_THROWS_WITH(causal_softmax(randn({5, 4})), Contains("expected scores [..., M, N] with M <= N"));
  CHECK_THROWS_WITH(causal_softmax(ones({3}, kInt64)), Contains("expected floating-point scores, got dtype int64"));
}

TEST_CASE("causal_softmax gives the bits of mul, masked_fill and softmax, forward and backward",
          "[gpt][causal_softmax]") {
  manual_seed(9);
  for (int64_t n : {5, 8, 13, 64}) {
    INFO("T = " << n);
    const Tensor s = mul(randn({4, n, n}), 3.0);
    const Tensor fused = s.detach().clone().requires_grad_(), parts = s.detach().clone().requires_grad_();
    const Tensor y = causal_softmax(fused, 0.25);
    const Tensor want = softmax(masked_fill(mul(parts, 0.25), eq(tril(ones({n, n})), 0.0), -INFINITY), -1);
    CHECK(equal(y, want));
    CHECK(equal(masked_fill(y, eq(tril(ones({n, n})), 0.0), 0.0), y));  // masked: exactly 0, as PyTorch
    const Tensor g = randn({4, n, n});
    y.backward(g);
    want.backward(g);
    CHECK(equal(fused.grad(), parts.grad()));
  }
}

TEST_CASE("causal_softmax on bfloat16 gives the bits of its float32 steps, rounded where PyTorch rounds",
          "[gpt][causal_softmax][autocast]") {
  // Forward: the bits of mul (by the scale rounded to bfloat16, as PyTorch 1.13 multiplies by
  // a Python number), masked_fill and softmax on bfloat16 (which computes in float32), for
  // rows of every length and so every alignment of the matrices. Backward, as PyTorch's bfloat16 softmax backward and
  // the scale's mul: the row's sum(grad * y) rounded to bfloat16, y * (grad - sum) in float32 rounded once, then times
  // the bfloat16 scale, rounded (bfloat16 products are exact in float32 and their sums in double).
  manual_seed(9);
  const Tensor scale = scalar_tensor(0.3, TensorOptions(kBFloat16));
  for (int64_t n : {5, 8, 13, 64, 100}) {
    for (int64_t m : {n, std::min<int64_t>(n, 3)}) {
      INFO("M = " << m << ", N = " << n);
      const Tensor s = mul(randn({3, m, n}), 3.0).to(kBFloat16).requires_grad_();
      const Tensor y = causal_softmax(s, 0.3);
      const Tensor future = gt(sub(arange(n).unsqueeze(0), arange(m).unsqueeze(1)), static_cast<double>(n - m));
      REQUIRE(y.dtype() == kBFloat16);
      CHECK(equal(y, softmax(masked_fill(mul(s.detach(), scale), future, -INFINITY), -1)));
      const Tensor g = randn({3, m, n}).to(kBFloat16);
      y.backward(g);
      const Tensor y32 = y.detach().to(kFloat32), g32 = g.to(kFloat32);
      const Tensor dot = sum(mul(g.to(kFloat64), y.detach().to(kFloat64)), {-1}, true).to(kFloat32).to(kBFloat16);
      const Tensor want = mul(mul(y32, sub(g32, dot.to(kFloat32))).to(kBFloat16), scale);
      REQUIRE(s.grad().dtype() == kBFloat16);
      CHECK(equal(s.grad(), want));
    }
  }
}
