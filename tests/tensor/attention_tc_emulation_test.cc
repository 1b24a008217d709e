// The tensor-core flash attention kernels (tensor/backends/cuda/attention_tc.cuh) on the CPU:
// cuda_emulation.h runs the very kernels the GPU runs (the tiles, the staging, the online
// softmax, the masks, dropout's indices, the three kernels' bookkeeping), and their outputs and
// gradients are checked against the float64 CPU attention from the same 16-bit inputs. The
// GPU's own fragment layout is the GPU cases' business (attention_test.cc, "[cuda]").
#define TINYDDP_CUDA_EMULATION 1

#include "tests/tensor/cuda_emulation.h"

// The kernels' shared memory: one buffer, as the emulation runs one block at a time.
namespace tinyddp::tensor::cuda::kernels::attention::tc {
alignas(128) unsigned char shared[256 * 1024];
}

#include <cmath>
#include <vector>

#include "tests/test_util.h"
#include "tinyddp/autograd/autograd.h"
#include "tinyddp/tensor/all.h"
#include "tinyddp/tensor/backends/cuda/attention_tc.cuh"

using namespace tinyddp::tensor;
namespace tc = tinyddp::tensor::cuda::kernels::attention::tc;
namespace attention = tinyddp::tensor::cuda::kernels::attention;

namespace {

struct Case {
  int64_t heads, m, n;
  bool causal;
  double p;  // attention dropout
};

// The 16-bit tensor's elements as the kernels' type (the same bits).
template <typename W>
std::vector<W> elements(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<W> out(static_cast<size_t>(c.numel()));
  std::memcpy(out.data(), c.raw_data_ptr(), out.size() * sizeof(W));
  return out;
}
template <typename W>
Tensor tensor_of(const std::vector<W>& values, const Shape& shape, DType dtype) {
  Tensor t = empty(shape, TensorOptions(dtype));
  std::memcpy(t.raw_data_ptr(), values.data(), values.size() * sizeof(W));
  return t;
}

// Runs the forward, then the backward kernels under dout, on the emulation; checks them
// against flash_attention in float64 from the same rounded inputs.
template <typename W, int E>
void check(const Case& c, DType dtype, double tol) {
  INFO(dtype_name(dtype) << " width " << E << " heads " << c.heads << " m " << c.m << " n " << c.n
                         << (c.causal ? " causal" : " full") << " dropout " << c.p);
  const Tensor q = randn({c.heads, c.m, E}).to(dtype), k = randn({c.heads, c.n, E}).to(dtype);
  const Tensor v = randn({c.heads, c.n, E}).to(dtype), dout = randn({c.heads, c.m, E}).to(dtype);
  const double scale = 1.0 / std::sqrt(static_cast<double>(E));
  const uint64_t key = Generator(31).random64();  // the key flash_attention draws from Generator(31)
  const attention::Sizes z{c.heads, c.m, c.n, E, E, c.causal};
  const attention::Drop<float> drop = attention::drop_of<float>(c.p, key, nullptr);
  const std::vector<W> qw = elements<W>(q), kw = elements<W>(k), vw = elements<W>(v), dw = elements<W>(dout);
  std::vector<W> out(qw.size()), dq(qw.size()), dk(kw.size()), dv(vw.size());
  std::vector<float> lse(static_cast<size_t>(c.heads * c.m));
  const dim3 rows{static_cast<unsigned>((c.m + tc::kTile - 1) / tc::kTile), static_cast<unsigned>(c.heads), 1};
  const dim3 keys{static_cast<unsigned>((c.n + tc::kTile - 1) / tc::kTile), static_cast<unsigned>(c.heads), 1};
  cuda_emulation::launch(tc::forward_kernel<W, E>, rows, qw.data(), kw.data(), vw.data(), out.data(), lse.data(), z,
                         static_cast<float>(scale), drop);
  const Tensor got = tensor_of(out, q.sizes(), dtype);
  // delta = rowsum(dout * out) in float, as attention.cu's delta kernel.
  const std::vector<float> delta = sum(mul(dout.to(kFloat32), got.to(kFloat32)), -1).contiguous().to_vector<float>();
  cuda_emulation::launch(tc::dq_kernel<W, E>, rows, qw.data(), kw.data(), vw.data(), dw.data(), lse.data(),
                         delta.data(), dq.data(), z, static_cast<float>(scale), drop);
  cuda_emulation::launch(tc::dkdv_kernel<W, E>, keys, qw.data(), kw.data(), vw.data(), dw.data(), lse.data(),
                         delta.data(), dk.data(), dv.data(), z, static_cast<float>(scale), drop);

  std::vector<Tensor> ref_in{q.to(kFloat64).requires_grad_(), k.to(kFloat64).requires_grad_(),
                             v.to(kFloat64).requires_grad_()};
  Generator gen(31);
  const Tensor ref = flash_attention(ref_in[0], ref_in[1], ref_in[2], c.causal, scale, c.p, &gen);
  ref.backward(dout.to(kFloat64));
  CHECK(allclose(got.to(kFloat64), ref.detach(), tol, tol));
  const std::vector<Tensor> grads{tensor_of(dq, q.sizes(), dtype), tensor_of(dk, k.sizes(), dtype),
                                  tensor_of(dv, v.sizes(), dtype)};
  for (size_t i = 0; i < 3; ++i) {
    INFO("gradient of input " << i);
    CHECK(allclose(grads[i].to(kFloat64), ref_in[i].grad(), 4 * tol, 4 * tol));
  }
}

}  // namespace

// Tolerances: the inputs are the same rounded values on both sides; the kernels round the
// probabilities (and dS) to the 16-bit type before their products and the results once more
// (bfloat16: 2^-8 relative, float16: 2^-11), over sums of up to 200 terms of order 1.
TEST_CASE("The tensor-core attention kernels, emulated on the CPU, equal the float64 attention", "[attention]") {
  manual_seed(41);
  // Partial tiles on both sides, several key tiles, fewer queries than keys, two heads.
  for (const Case& c : {Case{2, 70, 200, true, 0.0}, Case{2, 70, 200, false, 0.0}, Case{1, 130, 130, true, 0.0},
                        Case{2, 70, 200, true, 0.2}, Case{1, 64, 100, false, 0.3}}) {
    check<__nv_bfloat16, 64>(c, kBFloat16, 3e-2);
    check<__half, 64>(c, kFloat16, 5e-3);
  }
  check<__nv_bfloat16, 128>(Case{1, 70, 150, true, 0.1}, kBFloat16, 3e-2);
  check<__half, 128>(Case{1, 100, 100, false, 0.0}, kFloat16, 5e-3);
}
