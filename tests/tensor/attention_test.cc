// tensor::flash_attention: against PyTorch's attention (fixtures/make_attention_fixtures.py
// writes attention_reference.txt), against the same attention composed from matmul and
// softmax, float64 gradcheck and gradgradcheck, the same bits at any thread count, the
// composed route for the dtypes the CPU kernel declines, bad arguments, and (with a GPU) the CUDA
// kernels against the CPU in every floating dtype and head width. Attention dropout: against
// the composed attention times the mask rebuilt from tensor/internal/philox.h, gradcheck, the
// threads, and the GPU against the CPU under one key.
#include <cmath>

#include "tests/fixture_case.h"
#include "tests/test_util.h"
#include "tinyddp/autograd/autograd.h"
#include "tinyddp/autograd/engine.h"
#include "tinyddp/autograd/gradcheck.h"
#include "tinyddp/tensor/all.h"
#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/internal/philox.h"

using namespace tinyddp::tensor;
using Catch::Contains;
using tinyddp::autograd::gradcheck;
using tinyddp::autograd::gradgradcheck;

namespace {

const tinyddp::testing::Fixture& reference() {
  static const tinyddp::testing::Fixture fixture("tests/tensor/fixtures/attention_reference.txt");
  return fixture;
}

// The attention flash_attention computes, composed from the ops it replaces.
Tensor composed(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
  const Tensor scores = mul(matmul(q, k.transpose(-2, -1)), scale);
  if (!causal) return matmul(softmax(scores, -1), v);
  const int64_t m = q.size(-2), n = k.size(-2);
  const Tensor future = eq(tril(ones({m, n}, TensorOptions(q.dtype())), n - m), 0.0);
  return matmul(softmax(masked_fill(scores, future, -INFINITY), -1), v);
}

Tensor draw(const Shape& shape, DType dtype = kFloat64) { return randn(shape, TensorOptions(dtype)); }

// While it lives, a GPU call takes the flash kernel wherever the kernel applies (the composed
// route off, cuda::enable_math_sdp), so that the GPU cases test the kernel at any size.
struct FlashKernelOnly {
  explicit FlashKernelOnly(bool on = true) { cuda::enable_math_sdp(!on); }
  ~FlashKernelOnly() { cuda::enable_math_sdp(true); }
  FlashKernelOnly(const FlashKernelOnly&) = delete;
  FlashKernelOnly& operator=(const FlashKernelOnly&) = delete;
};
bool took_kernel(const Tensor& out) {
  return out.grad_fn() != nullptr && out.grad_fn()->name() == "FlashAttentionBackward";
}

// Attention dropout's mask over weights of shape `weights`, rebuilt element by element from
// the Philox generator: weight (head, i, j) kept where dropout_keep(key, (head M + i) N + j,
// 1 - p), and scaled by 1 / (1 - p).
Tensor philox_mask(const Shape& weights, uint64_t key, double p) {
  std::vector<double> mask(static_cast<size_t>(shape_numel(weights)));
  for (size_t i = 0; i < mask.size(); ++i) {
    mask[i] = philox::dropout_keep(key, i, static_cast<float>(1.0 - p)) ? 1.0 / (1.0 - p) : 0.0;
  }
  return from_vector<double>(mask, weights);
}

// The composed attention with its weights times `mask`.
Tensor composed_dropped(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
                        const Tensor& mask) {
  Tensor scores = mul(matmul(q, k.transpose(-2, -1)), scale);
  if (causal) {
    const int64_t m = q.size(-2), n = k.size(-2);
    scores = masked_fill(scores, eq(tril(ones({m, n}, TensorOptions(q.dtype())), n - m), 0.0), -INFINITY);
  }
  return matmul(mul(softmax(scores, -1), mask.to(q.dtype())), v);
}

// The key flash_attention draws from Generator(seed): its first 64-bit draw.
uint64_t key_of(uint64_t seed) { return Generator(seed).random64(); }

}  // namespace

TEST_CASE("flash_attention equals PyTorch's attention and its gradients, float64, across blocks", "[attention]") {
  struct Case {
    const char* name;
    bool causal;
    double scale;
    Shape q, k, v;
  };
  for (const Case& c : {Case{"causal_square_f64", true, 0.5, {1, 70, 4}, {1, 70, 4}, {1, 70, 3}},
                        Case{"causal_wide_f64", true, 0.35, {2, 3, 4}, {2, 130, 4}, {2, 130, 3}},
                        Case{"full_f64", false, 0.8, {2, 5, 4}, {2, 70, 4}, {2, 70, 2}}}) {
    INFO(c.name);
    Shape out = c.q;
    out.back() = c.v.back();
    reference().check_case(
        c.name, {{"query", c.q}, {"key", c.k}, {"value", c.v}}, out,
        [&](const std::vector<Tensor>& x) { return flash_attention(x[0], x[1], x[2], c.causal, c.scale); });
  }
}

TEST_CASE("flash_attention in float32 is within float32 rounding of PyTorch's float32 attention", "[attention]") {
  const std::string c = "causal_square_f32";
  const Shape shape{1, 1, 100, 4};
  const Tensor q = reference().value(c + "_query", shape, kFloat32).requires_grad_();
  const Tensor k = reference().value(c + "_key", shape, kFloat32).requires_grad_();
  const Tensor v = reference().value(c + "_value", shape, kFloat32).requires_grad_();
  const Tensor out = flash_attention(q, k, v, true, 0.5);
  // Scores |q k| * 0.5 up to ~20 and sums over 100 keys: each side rounds exp(s - max) and
  // sums of 100 terms, a few hundred float32 epsilons of the largest terms at most.
  CHECK(allclose(out, reference().value(c + "_out", shape, kFloat32), 1e-4, 1e-5));
  out.backward(reference().value(c + "_grad_out", shape, kFloat32));
  for (const auto& [name, t] : {std::pair<std::string, Tensor>{"query", q}, {"key", k}, {"value", v}}) {
    INFO(name);
    CHECK(allclose(t.grad(), reference().value(c + "_grad_" + name, shape, kFloat32), 1e-4, 1e-4));
  }
}

TEST_CASE("flash_attention equals the composed attention in float64 at GPT shapes, forward and gradients",
          "[attention]") {
  manual_seed(3);
  // [batch, heads, T, head]: several blocks of queries and keys, a last block of 5 and of 1.
  for (const int64_t t : {64, 129, 197}) {
    for (const bool causal : {true, false}) {
      INFO("T " << t << (causal ? " causal" : " full"));
      const Tensor q = draw({2, 3, t, 16}).requires_grad_(), k = draw({2, 3, t, 16}).requires_grad_();
      const Tensor v = draw({2, 3, t, 8}).requires_grad_();
      const Tensor g = draw({2, 3, t, 8});
      const Tensor out = flash_attention(q, k, v, causal, 0.25);
      const auto grads = tinyddp::autograd::grad({out}, {q, k, v}, {g});
      const Tensor q2 = q.detach().requires_grad_(), k2 = k.detach().requires_grad_(), v2 = v.detach().requires_grad_();
      const Tensor ref = composed(q2, k2, v2, causal, 0.25);
      const auto ref_grads = tinyddp::autograd::grad({ref}, {q2, k2, v2}, {g});
      CHECK(allclose(out, ref, 1e-12, 1e-13));
      for (size_t i = 0; i < 3; ++i) CHECK(allclose(grads[i], ref_grads[i], 1e-11, 1e-12));
    }
  }
}

TEST_CASE("flash_attention passes gradcheck and gradgradcheck in float64", "[attention][gradcheck]") {
  manual_seed(4);
  for (const bool causal : {true, false}) {
    INFO(causal);
    // 3 queries of 5 keys: the wide causal mask; 67 keys cross a key block.
    for (const int64_t n : {5, 67}) {
      const Tensor q = draw({2, 3, 4}).requires_grad_(), k = draw({2, n, 4}).requires_grad_();
      const Tensor v = draw({2, n, 3}).requires_grad_();
      const auto f = [&](const std::vector<Tensor>& x) { return flash_attention(x[0], x[1], x[2], causal, 0.7); };
      CHECK(gradcheck(f, {q, k, v}) == "");
      if (n == 5) CHECK(gradgradcheck(f, {q, k, v}) == "");
    }
  }
}

TEST_CASE("flash_attention gives the same bits at 1, 2 and 3 threads", "[attention][threads]") {
  tinyddp::testing::KeepThreads keep;
  manual_seed(6);
  const Tensor q = draw({2, 4, 150, 32}, kFloat32), k = draw({2, 4, 150, 32}, kFloat32);
  const Tensor v = draw({2, 4, 150, 32}, kFloat32), g = draw({2, 4, 150, 32}, kFloat32);
  std::vector<std::vector<Tensor>> runs;
  for (const int threads : {1, 2, 3}) {
    set_num_threads(threads);
    const Tensor ql = q.clone().requires_grad_(), kl = k.clone().requires_grad_(), vl = v.clone().requires_grad_();
    const Tensor out = flash_attention(ql, kl, vl, true, 0.125);
    out.backward(g);
    runs.push_back({out.detach(), ql.grad(), kl.grad(), vl.grad()});
  }
  for (size_t r = 1; r < runs.size(); ++r) {
    for (size_t i = 0; i < 4; ++i) CHECK(equal(runs[r][i], runs[0][i]));
  }
}

TEST_CASE("flash_attention takes transposed views, composes what the kernel declines, and empty shapes",
          "[attention]") {
  manual_seed(7);
  // Heads as a transposed view of [B, T, heads, head], as a GPT makes them.
  const Tensor x = draw({2, 70, 3, 8});
  const Tensor q = x.transpose(1, 2);
  CHECK(allclose(flash_attention(q, q, q, true, 0.3), composed(q, q, q, true, 0.3), 1e-12, 1e-13));
  // bfloat16 on the CPU: composed (causal_softmax's rounding), as the ops it replaces.
  const Tensor b = draw({2, 9, 8}, kBFloat16);
  const Tensor scores = matmul(b, b.transpose(-2, -1));
  CHECK(equal(flash_attention(b, b, b, true, 0.5), matmul(causal_softmax(scores, 0.5), b)));
  // No queries, no head width.
  CHECK(flash_attention(draw({2, 0, 8}), draw({2, 5, 8}), draw({2, 5, 3}), false, 1.0).sizes() == Shape{2, 0, 3});
  CHECK(flash_attention(draw({2, 4, 8}), draw({2, 5, 8}), draw({2, 5, 0}), true, 1.0).sizes() == Shape{2, 4, 0});
}

TEST_CASE("flash_attention refuses mismatched shapes, dtypes and causal masks with more queries than keys",
          "[attention]") {
  const Tensor q = draw({2, 4, 8});
  CHECK_THROWS_WITH(flash_attention(q, draw({2, 5, 6}), draw({2, 5, 3}), false, 1.0),
                    Contains("expected query [..., M, E], key [..., N, E] and value [..., N, Ev]"));
  CHECK_THROWS_WITH(flash_attention(q, draw({3, 5, 8}), draw({3, 5, 3}), false, 1.0), Contains("[2, 4, 8]"));
  CHECK_THROWS_WITH(flash_attention(q, draw({2, 5, 8}), draw({2, 6, 3}), false, 1.0), Contains("[2, 6, 3]"));
  CHECK_THROWS_WITH(flash_attention(q, draw({2, 5, 8}, kFloat32), draw({2, 5, 3}), false, 1.0), Contains("key"));
  CHECK_THROWS_WITH(flash_attention(q, draw({2, 3, 8}), draw({2, 3, 3}), true, 1.0),
                    Contains("got 4 queries and 3 keys"));
  CHECK_THROWS_WITH(flash_attention(ones({2, 4, 8}, TensorOptions(kInt64)), q, q, false, 1.0),
                    Contains("floating-point query"));
}

TEST_CASE("flash_attention's attention dropout drops the weights its Philox mask names, forward and gradients",
          "[attention][dropout]") {
  manual_seed(9);
  for (const int64_t t : {64, 129}) {
    for (const bool causal : {true, false}) {
      INFO("T " << t << (causal ? " causal" : " full"));
      const Tensor q = draw({2, 3, t, 16}).requires_grad_(), k = draw({2, 3, t, 16}).requires_grad_();
      const Tensor v = draw({2, 3, t, 8}).requires_grad_(), g = draw({2, 3, t, 8});
      Generator gen(21);
      const Tensor out = flash_attention(q, k, v, causal, 0.25, 0.2, &gen);
      CHECK(gen.random() == [] {  // the op drew one 64-bit key and nothing else
        Generator after(21);
        after.random64();
        return after.random();
      }());
      const auto grads = tinyddp::autograd::grad({out}, {q, k, v}, {g});
      const Tensor q2 = q.detach().requires_grad_(), k2 = k.detach().requires_grad_(), v2 = v.detach().requires_grad_();
      const Tensor ref = composed_dropped(q2, k2, v2, causal, 0.25, philox_mask({2, 3, t, t}, key_of(21), 0.2));
      const auto ref_grads = tinyddp::autograd::grad({ref}, {q2, k2, v2}, {g});
      CHECK(allclose(out, ref, 1e-12, 1e-13));
      for (size_t i = 0; i < 3; ++i) CHECK(allclose(grads[i], ref_grads[i], 1e-11, 1e-12));
      // About 1 - p of the weights kept: the output is not the undropped attention's.
      CHECK_FALSE(allclose(out, composed(q2, k2, v2, causal, 0.25), 1e-3, 1e-3));
    }
  }
  // The composed route (bfloat16 on the CPU) drops the same weights: the composed ops times the mask.
  const Tensor b = draw({2, 9, 8}, kBFloat16);
  Generator gen(5);
  const Tensor mask = philox_mask({2, 9, 9}, key_of(5), 0.5).to(kBFloat16);  // 0 or 2: exact in bfloat16
  CHECK(equal(flash_attention(b, b, b, true, 0.5, 0.5, &gen),
              matmul(mul(causal_softmax(matmul(b, b.transpose(-2, -1)), 0.5), mask), b)));
}

TEST_CASE(
    "flash_attention with attention dropout passes gradcheck and gradgradcheck, the same bits at any thread "
    "count",
    "[attention][dropout][gradcheck][threads]") {
  manual_seed(10);
  for (const bool causal : {true, false}) {
    for (const int64_t n : {5, 67}) {
      INFO((causal ? "causal, " : "full, ") << n << " keys");
      const Tensor q = draw({2, 3, 4}).requires_grad_(), k = draw({2, n, 4}).requires_grad_();
      const Tensor v = draw({2, n, 3}).requires_grad_();
      const auto f = [&](const std::vector<Tensor>& x) {
        Generator gen(13);  // the same key at every evaluation: one mask
        return flash_attention(x[0], x[1], x[2], causal, 0.7, 0.3, &gen);
      };
      CHECK(gradcheck(f, {q, k, v}) == "");
      if (n == 5) CHECK(gradgradcheck(f, {q, k, v}) == "");
    }
  }
  tinyddp::testing::KeepThreads keep;
  const Tensor q = draw({2, 2, 130, 16}, kFloat32), g = draw({2, 2, 130, 16}, kFloat32);
  std::vector<std::vector<Tensor>> runs;
  for (const int threads : {1, 2, 3}) {
    set_num_threads(threads);
    const Tensor ql = q.clone().requires_grad_();
    Generator gen(17);
    const Tensor out = flash_attention(ql, ql, ql, true, 0.25, 0.1, &gen);
    out.backward(g);
    runs.push_back({out.detach(), ql.grad()});
  }
  for (size_t r = 1; r < runs.size(); ++r) {
    CHECK(equal(runs[r][0], runs[0][0]));
    CHECK(equal(runs[r][1], runs[0][1]));
  }
  CHECK_THROWS_WITH(flash_attention(q, q, q, true, 0.25, 1.0), Contains("dropout_p must be in [0, 1), got 1"));
  CHECK_THROWS_WITH(flash_attention(q, q, q, true, 0.25, -0.5), Contains("got -0.5"));
}

TEST_CASE("CUDA: flash_attention's attention dropout equals the CPU's under the same key",
          "[attention][dropout][cuda]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  manual_seed(11);
  const FlashKernelOnly kernel;
  for (const DType dtype : {kFloat64, kFloat32}) {
    const double tol = dtype == kFloat64 ? 1e-12 : 1e-4;
    for (const bool causal : {true, false}) {
      INFO(dtype_name(dtype) << (causal ? " causal" : " full"));
      const Tensor q = draw({2, 3, 150, 32}, dtype), k = draw({2, 3, 150, 32}, dtype), v = draw({2, 3, 150, 16}, dtype);
      const Tensor g = draw({2, 3, 150, 16}, dtype);
      std::vector<Tensor> cpu{q.to(kFloat64).detach().requires_grad_(), k.to(kFloat64).detach().requires_grad_(),
                              v.to(kFloat64).detach().requires_grad_()};
      std::vector<Tensor> dev{q.to(Device::cuda(0)).requires_grad_(), k.to(Device::cuda(0)).requires_grad_(),
                              v.to(Device::cuda(0)).requires_grad_()};
      Generator a(23), b(23);
      const Tensor ref = flash_attention(cpu[0], cpu[1], cpu[2], causal, 0.2, 0.25, &a);
      const Tensor out = flash_attention(dev[0], dev[1], dev[2], causal, 0.2, 0.25, &b);
      CHECK(allclose(out.to(kCPU).to(kFloat64), ref, tol, tol));
      ref.backward(g.to(kFloat64));
      out.backward(g.to(Device::cuda(0)));
      for (size_t i = 0; i < 3; ++i) {
        INFO("gradient of input " << i);
        CHECK(allclose(dev[i].grad().to(kCPU).to(kFloat64), cpu[i].grad(), 4 * tol, 4 * tol));
      }
      // The GPU's composed route (dropout on the weights) drops the same ones.
      Generator c(23);
      const Tensor w = causal ? causal_softmax(matmul(dev[0], dev[1].transpose(-2, -1)), 0.2)
                              : softmax(mul(matmul(dev[0], dev[1].transpose(-2, -1)), 0.2), -1);
      CHECK(allclose(matmul(dropout(w, 0.25, true, &c), dev[2]).to(kCPU).to(kFloat64), ref, tol, tol));
    }
  }
}

TEST_CASE("CUDA: flash_attention and its gradients equal the CPU's in every floating dtype and head width",
          "[attention][cuda]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  const Device gpu = Device::cuda(0);
  manual_seed(8);
  struct Case {
    DType dtype;
    Shape q, k, v;
    double tol;  // float32: sums of a few hundred terms; 16-bit: the inputs' and outputs' rounding
  };
  // Widths 8, 40 and 64 (the kernels' bound of 64), 100 and 128 (128's), 200 (declined: composed on the GPU).
  for (const Case& c : {Case{kFloat32, {2, 3, 150, 64}, {2, 3, 150, 64}, {2, 3, 150, 64}, 1e-4},
                        Case{kFloat32, {3, 70, 40}, {3, 200, 40}, {3, 200, 8}, 1e-4},
                        Case{kFloat32, {1, 2, 130, 128}, {1, 2, 130, 128}, {1, 2, 130, 100}, 1e-4},
                        Case{kFloat32, {1, 65, 200}, {1, 65, 200}, {1, 65, 200}, 1e-4},
                        Case{kFloat64, {2, 129, 64}, {2, 129, 64}, {2, 129, 32}, 1e-12},
                        Case{kBFloat16, {2, 2, 100, 64}, {2, 2, 100, 64}, {2, 2, 100, 64}, 3e-2},
                        Case{kFloat16, {2, 2, 100, 64}, {2, 2, 100, 64}, {2, 2, 100, 64}, 5e-3}}) {
    for (const bool causal : {true, false}) {
      if (causal && c.q[c.q.size() - 2] > c.k[c.k.size() - 2]) continue;
      INFO(dtype_name(c.dtype) << " q " << format_shape(c.q) << (causal ? " causal" : " full"));
      // The CPU reference in float64 from the same (rounded) inputs.
      const Tensor q = draw(c.q, c.dtype), k = draw(c.k, c.dtype), v = draw(c.v, c.dtype);
      Shape out_shape = c.q;
      out_shape.back() = c.v.back();
      const Tensor g = draw(out_shape, c.dtype);
      const double scale = 1.0 / std::sqrt(static_cast<double>(c.q.back()));
      std::vector<Tensor> cpu{q.to(kFloat64).detach().requires_grad_(), k.to(kFloat64).detach().requires_grad_(),
                              v.to(kFloat64).detach().requires_grad_()};
      std::vector<Tensor> dev{q.to(gpu).requires_grad_(), k.to(gpu).requires_grad_(), v.to(gpu).requires_grad_()};
      const Tensor ref = flash_attention(cpu[0], cpu[1], cpu[2], causal, scale);
      const FlashKernelOnly kernel(c.q.back() <= 128);  // 200: composed, the kernel's bound passed
      const Tensor out = flash_attention(dev[0], dev[1], dev[2], causal, scale);
      REQUIRE(out.is_cuda());
      CHECK(took_kernel(out) == (c.q.back() <= 128));
      CHECK(allclose(out.to(kCPU).to(kFloat64), ref, c.tol, c.tol));
      ref.backward(g.to(kFloat64));
      out.backward(g.to(gpu));
      for (size_t i = 0; i < 3; ++i) {
        INFO("gradient of input " << i);
        CHECK(allclose(dev[i].grad().to(kCPU).to(kFloat64), cpu[i].grad(), 4 * c.tol, 4 * c.tol));
      }
      // No atomics: a second run gives the same bits.
      CHECK(equal(flash_attention(dev[0], dev[1], dev[2], causal, scale), out));
    }
  }
}

TEST_CASE("cuda::enable_flash_sdp and enable_math_sdp choose the GPU's route, not the CPU's", "[attention]") {
  CHECK(cuda::flash_sdp_enabled());  // PyTorch's defaults: both on
  CHECK(cuda::math_sdp_enabled());
  const Tensor q = draw({2, 40, 16}).requires_grad_();
  cuda::enable_flash_sdp(false);
  cuda::enable_math_sdp(false);
  CHECK(took_kernel(flash_attention(q, q, q, true, 0.25)));  // the CPU keeps its kernel
  cuda::enable_flash_sdp(true);
  cuda::enable_math_sdp(true);
}

TEST_CASE(
    "CUDA: attention is composed where its weights fit in kComposedAttentionBytes, else the flash kernel; "
    "16-bit heads of 64 take the tensor-core kernel",
    "[attention][cuda]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  const Device gpu = Device::cuda(0);
  manual_seed(12);
  const Tensor q = draw({2, 3, 70, 32}, kFloat32).to(gpu).requires_grad_();
  const Tensor composed_out = flash_attention(q, q, q, true, 0.2);  // 117 KiB of weights
  CHECK_FALSE(took_kernel(composed_out));
  {
    const FlashKernelOnly kernel;
    const Tensor kernel_out = flash_attention(q, q, q, true, 0.2);
    CHECK(took_kernel(kernel_out));
    CHECK(allclose(kernel_out.to(kCPU), composed_out.to(kCPU), 1e-5, 1e-5));
  }
  // Past the bound (65,537 heads of 64 queries and 64 keys: 1 GiB + 16 KiB of float32 weights),
  // the kernel without a switch.
  const int64_t heads = cuda::kComposedAttentionBytes / (4 * 64 * 64) + 1;
  const Tensor long_q = zeros({heads, 64, 4}, TensorOptions(kFloat32).device(gpu)).requires_grad_();
  CHECK(took_kernel(flash_attention(long_q, long_q, long_q, true, 0.5)));
  // 16-bit heads 64 wide: the tensor-core kernel at any length; 32 wide: composed.
  const Tensor half64 = draw({2, 3, 70, 64}, kBFloat16).to(gpu).requires_grad_();
  CHECK(took_kernel(flash_attention(half64, half64, half64, true, 0.125)));
  const Tensor half32 = draw({2, 3, 70, 32}, kBFloat16).to(gpu).requires_grad_();
  CHECK_FALSE(took_kernel(flash_attention(half32, half32, half32, true, 0.125)));
  cuda::enable_flash_sdp(false);
  CHECK_FALSE(took_kernel(flash_attention(q, q, q, true, 0.2)));
  CHECK_FALSE(took_kernel(flash_attention(half64, half64, half64, true, 0.125)));
  cuda::enable_math_sdp(false);
  CHECK_THROWS_WITH(flash_attention(q, q, q, true, 0.2),
                    Contains("no route left: the composed one is off (cuda::enable_math_sdp(false)) and the flash "
                             "kernel is off (cuda::enable_flash_sdp(false))"));
  cuda::enable_flash_sdp(true);
  const Tensor wide = draw({1, 8, 200}, kFloat32).to(gpu);
  CHECK_THROWS_WITH(flash_attention(wide, wide, wide, true, 0.1), Contains("takes head widths up to 128, not 200"));
  cuda::enable_math_sdp(true);
}

TEST_CASE(
    "CUDA: the tensor-core kernels (16-bit, widths 64 and 128) equal the float64 attention, with fewer "
    "queries than keys, attention dropout, and views off 16 bytes",
    "[attention][dropout][cuda]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  const Device gpu = Device::cuda(0);
  manual_seed(13);
  const FlashKernelOnly kernel;
  for (const DType dtype : {kBFloat16, kFloat16}) {
    const double tol = dtype == kBFloat16 ? 3e-2 : 5e-3;  // the inputs', probabilities' and outputs' rounding
    for (const int64_t e : {64, 128}) {
      for (const double p : {0.0, 0.2}) {
        for (const bool causal : {true, false}) {
          INFO(dtype_name(dtype) << " width " << e << " dropout " << p << (causal ? " causal" : " full"));
          // 70 queries against 200 keys: partial tiles on both sides, several key tiles per row.
          const Tensor q = draw({2, 3, 70, e}, dtype), k = draw({2, 3, 200, e}, dtype);
          const Tensor v = draw({2, 3, 200, e}, dtype), g = draw({2, 3, 70, e}, dtype);
          std::vector<Tensor> cpu{q.to(kFloat64).detach().requires_grad_(), k.to(kFloat64).detach().requires_grad_(),
                                  v.to(kFloat64).detach().requires_grad_()};
          std::vector<Tensor> dev{q.to(gpu).requires_grad_(), k.to(gpu).requires_grad_(), v.to(gpu).requires_grad_()};
          const double scale = 1.0 / std::sqrt(static_cast<double>(e));
          Generator a(29), b(29), c(29);
          const Tensor ref = flash_attention(cpu[0], cpu[1], cpu[2], causal, scale, p, &a);
          const Tensor out = flash_attention(dev[0], dev[1], dev[2], causal, scale, p, &b);
          CHECK(took_kernel(out));
          CHECK(allclose(out.to(kCPU).to(kFloat64), ref, tol, tol));
          ref.backward(g.to(kFloat64));
          out.backward(g.to(gpu));
          for (size_t i = 0; i < 3; ++i) {
            INFO("gradient of input " << i);
            CHECK(allclose(dev[i].grad().to(kCPU).to(kFloat64), cpu[i].grad(), 4 * tol, 4 * tol));
          }
          CHECK(equal(flash_attention(dev[0], dev[1], dev[2], causal, scale, p, &c), out));  // no atomics
        }
      }
    }
  }
  // A view 2 bytes past a 16-byte boundary goes to the CUDA-core kernels: the same attention.
  const Tensor flat = draw({1 + 2 * 64 * 64}, kBFloat16).to(gpu);
  const Tensor off = flat.narrow(0, 1, 2 * 64 * 64).view({2, 64, 64});
  const Tensor aligned = off.clone();
  CHECK(allclose(flash_attention(off, off, off, true, 0.125).to(kCPU).to(kFloat64),
                 flash_attention(aligned, aligned, aligned, true, 0.125).to(kCPU).to(kFloat64), 3e-2, 3e-2));
}
