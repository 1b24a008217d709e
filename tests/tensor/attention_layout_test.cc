// flash_attention over heads where a GPT keeps them: q, k and v the heads of one [B, T, 3C]
// projection (split, viewed as [B, T, H, E], transposed), as nanoGPT's CausalSelfAttention makes
// them. The backends take such heads as they lie (tensor/internal/backend.h) and the output
// comes in PyTorch's flash layout (its transpose(1, 2) contiguous: the model's [B, T, C] needs no
// copy); values and the projection's gradient equal the composed attention's. With a GPU: the
// tensor-core kernels on such heads (16-bit), and heads whose rows are not 16 bytes apart on the
// CUDA-core kernels (contiguous stand-ins).
#include <cmath>

#include "tests/test_util.h"
#include "tinyddp/autograd/autograd.h"
#include "tinyddp/tensor/all.h"
#include "tinyddp/tensor/cuda.h"

using namespace tinyddp::tensor;

namespace {

// The attention flash_attention computes, composed from the ops it replaces (causal).
Tensor composed(const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
  const Tensor scores = mul(matmul(q, k.transpose(-2, -1)), scale);
  const int64_t m = q.size(-2), n = k.size(-2);
  const Tensor future = eq(tril(ones({m, n}, TensorOptions(q.dtype()).device(q.device())), n - m), 0.0);
  return matmul(softmax(masked_fill(scores, future, -INFINITY), -1), v);
}

// q, k, v: the heads of qkv [B, T, 3 H W] (W >= e: the first e of each head's W columns), each
// [B, H, T, e].
std::vector<Tensor> heads_of(const Tensor& qkv, int64_t h, int64_t w, int64_t e) {
  const int64_t b = qkv.size(0), t = qkv.size(1);
  std::vector<Tensor> out;
  for (const Tensor& part : split(qkv, h * w, 2))
    out.push_back(part.view({b, t, h, w}).narrow(3, 0, e).transpose(1, 2));
  return out;
}

// While it lives, every GPU call takes the flash kernels (the composed route off).
struct FlashKernelOnly {
  FlashKernelOnly() { cuda::enable_math_sdp(false); }
  ~FlashKernelOnly() { cuda::enable_math_sdp(true); }
  FlashKernelOnly(const FlashKernelOnly&) = delete;
  FlashKernelOnly& operator=(const FlashKernelOnly&) = delete;
};

struct Run {
  Tensor out, grad;  // the attention and qkv's gradient (float64, on the CPU)
};

// Attention over the heads of qkv (flash_attention, or composed), backward under g.
Run attend(const Tensor& qkv_values, const Tensor& g, int64_t h, int64_t w, int64_t e, bool flash) {
  const Tensor qkv = qkv_values.detach().requires_grad_();
  const std::vector<Tensor> x = heads_of(qkv, h, w, e);
  const double scale = 1.0 / std::sqrt(static_cast<double>(e));
  const Tensor out = flash ? flash_attention(x[0], x[1], x[2], true, scale) : composed(x[0], x[1], x[2], scale);
  out.backward(g);
  return Run{out.detach().to(kCPU).to(kFloat64), qkv.grad().to(kCPU).to(kFloat64)};
}

}  // namespace

TEST_CASE("flash_attention takes the heads of a [B, T, 3C] projection as they lie, output in PyTorch's layout",
          "[attention]") {
  manual_seed(51);
  const int64_t b = 2, t = 70, h = 3, e = 8;
  const Tensor qkv = randn({b, t, 3 * h * e}, TensorOptions(kFloat64)),
               g = randn({b, h, t, e}, TensorOptions(kFloat64));
  const std::vector<Tensor> x = heads_of(qkv, h, e, e);
  const Tensor out = flash_attention(x[0], x[1], x[2], true, 0.3);
  CHECK(out.sizes() == Shape{b, h, t, e});
  CHECK(out.transpose(1, 2).is_contiguous());  // [B, T, H, E] in memory, as PyTorch's flash kernels
  const Run flash = attend(qkv, g, h, e, e, true), ref = attend(qkv, g, h, e, e, false);
  CHECK(allclose(flash.out, ref.out, 1e-12, 1e-13));
  CHECK(allclose(flash.grad, ref.grad, 1e-11, 1e-12));
  // Contiguous heads give a contiguous output, as before.
  const Tensor q = x[0].contiguous();
  CHECK(flash_attention(q, q, q, true, 0.3).is_contiguous());
}

TEST_CASE("CUDA: flash_attention on the heads of a [B, T, 3C] projection, on tensor cores and off 16 bytes",
          "[attention][cuda]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  const Device gpu = Device::cuda(0);
  manual_seed(52);
  const FlashKernelOnly kernel;  // every call on the flash kernels, whatever its size
  const int64_t b = 2, t = 100, h = 2, e = 64;
  for (const DType dtype : {kBFloat16, kFloat16}) {
    // w = 64: rows 3 h w elements apart, whole 16 bytes (tensor cores); 66: not (CUDA-core
    // kernels, on contiguous stand-ins copied back).
    for (const int64_t w : {64, 66}) {
      INFO(dtype_name(dtype) << " head columns " << w);
      const double tol = dtype == kBFloat16 ? 3e-2 : 5e-3;  // the inputs', probabilities' and outputs' rounding
      const Tensor qkv = randn({b, t, 3 * h * w}).to(dtype), g = randn({b, h, t, e}).to(dtype);
      const Run ref = attend(qkv.to(kFloat64), g.to(kFloat64), h, w, e, true);
      const Run dev = attend(qkv.to(gpu), g.to(gpu), h, w, e, true);
      CHECK(allclose(dev.out, ref.out, tol, tol));
      CHECK(allclose(dev.grad, ref.grad, 4 * tol, 4 * tol));
      const std::vector<Tensor> x = heads_of(qkv.to(gpu), h, w, e);
      CHECK(flash_attention(x[0], x[1], x[2], true, 0.125).transpose(1, 2).is_contiguous());
    }
  }
}
