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
  double p;              // attention dropout
  bool strided = false;  // the operands as [2, rows, heads / 2, E + 8] buffers (else contiguous)
};

// Where the kernels find an operand of `rows` rows per head: contiguous [heads, rows, E], or
// (strided) the heads of a [2, rows, heads / 2, E + 8] buffer seen as [2, heads / 2, rows, E],
// as a [B, T, H, E] tensor's heads are (plus 8 elements of padding that no kernel may touch).
struct Placement {
  int64_t heads, rows, e;
  bool strided;
  int64_t per_batch() const { return strided ? heads / 2 : heads; }
  int64_t width() const { return strided ? e + 8 : e; }
  tinyddp::tensor::cuda::kernels::HeadStrides strides() const {
    return {rows * per_batch() * width(), strided ? width() : rows * e, strided ? per_batch() * width() : e};
  }
  size_t size() const { return static_cast<size_t>(heads * rows * width()); }
  // Element (head, row, c)'s place.
  size_t at(int64_t head, int64_t row, int64_t c) const {
    const auto s = strides();
    return static_cast<size_t>(head / per_batch() * s.batch + head % per_batch() * s.head + row * s.row + c);
  }
};

// The contiguous [heads, rows, E] values placed in a buffer whose other elements are `filler`.
template <typename W>
std::vector<W> placed(const std::vector<W>& values, const Placement& at, W filler) {
  std::vector<W> out(at.size(), filler);
  for (int64_t h = 0; h < at.heads; ++h)
    for (int64_t r = 0; r < at.rows; ++r)
      for (int64_t c = 0; c < at.e; ++c)
        out[at.at(h, r, c)] = values[static_cast<size_t>((h * at.rows + r) * at.e + c)];
  return out;
}
// The [heads, rows, E] values back out of their places; `untouched` counts the other elements
// still equal to `filler`.
template <typename W>
std::vector<W> gathered(const std::vector<W>& buffer, const Placement& at, W filler, size_t* untouched) {
  std::vector<W> out(static_cast<size_t>(at.heads * at.rows * at.e));
  std::vector<bool> used(buffer.size(), false);
  for (int64_t h = 0; h < at.heads; ++h)
    for (int64_t r = 0; r < at.rows; ++r)
      for (int64_t c = 0; c < at.e; ++c) {
        out[static_cast<size_t>((h * at.rows + r) * at.e + c)] = buffer[at.at(h, r, c)];
        used[at.at(h, r, c)] = true;
      }
  *untouched = 0;
  for (size_t i = 0; i < buffer.size(); ++i) {
    if (!used[i] && std::memcmp(&buffer[i], &filler, sizeof(W)) == 0) ++*untouched;
  }
  return out;
}

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
                         << (c.causal ? " causal" : " full") << " dropout " << c.p
                         << (c.strided ? " strided" : " contiguous"));
  const Tensor q = randn({c.heads, c.m, E}).to(dtype), k = randn({c.heads, c.n, E}).to(dtype);
  const Tensor v = randn({c.heads, c.n, E}).to(dtype), dout = randn({c.heads, c.m, E}).to(dtype);
  const double scale = 1.0 / std::sqrt(static_cast<double>(E));
  const uint64_t key = Generator(31).random64();  // the key flash_attention draws from Generator(31)
  const attention::Sizes z{c.heads, c.m, c.n, E, E, c.causal};
  const attention::Drop<float> drop = attention::drop_of<float>(c.p, key, nullptr);
  const Placement queries{c.heads, c.m, E, c.strided}, keys_at{c.heads, c.n, E, c.strided};
  // Padding: NaN as inputs (read, it would spoil the results), a marker as outputs (must stay).
  W nan, marker;
  std::memset(&nan, 0xff, sizeof(W));
  std::memset(&marker, 0x5a, sizeof(W));
  const std::vector<W> qw = placed(elements<W>(q), queries, nan), kw = placed(elements<W>(k), keys_at, nan);
  const std::vector<W> vw = placed(elements<W>(v), keys_at, nan), dw = placed(elements<W>(dout), queries, nan);
  std::vector<W> out(queries.size(), marker), dq(queries.size(), marker), dk(keys_at.size(), marker),
      dv(keys_at.size(), marker);
  tinyddp::tensor::cuda::kernels::AttentionLayouts layouts;
  layouts.per_batch = queries.per_batch();
  layouts.q = layouts.out = layouts.dout = layouts.dq = queries.strides();
  layouts.k = layouts.v = layouts.dk = layouts.dv = keys_at.strides();
  std::vector<float> lse(static_cast<size_t>(c.heads * c.m));
  const auto unplaced = [&](const std::vector<W>& buffer, const Placement& at) {
    size_t untouched = 0;
    std::vector<W> values = gathered(buffer, at, marker, &untouched);
    CHECK(untouched == at.size() - values.size());  // every padding element as it was
    return values;
  };
  const dim3 rows{static_cast<unsigned>((c.m + tc::kTile - 1) / tc::kTile), static_cast<unsigned>(c.heads), 1};
  const dim3 keys{static_cast<unsigned>((c.n + tc::kTile - 1) / tc::kTile), static_cast<unsigned>(c.heads), 1};
  cuda_emulation::launch(tc::forward_kernel<W, E>, rows, qw.data(), kw.data(), vw.data(), out.data(), lse.data(), z,
                         layouts, static_cast<float>(scale), drop);
  const Tensor got = tensor_of(unplaced(out, queries), q.sizes(), dtype);
  // delta = rowsum(dout * out) in float, as attention.cu's delta kernel.
  const std::vector<float> delta = sum(mul(dout.to(kFloat32), got.to(kFloat32)), -1).contiguous().to_vector<float>();
  cuda_emulation::launch(tc::dq_kernel<W, E>, rows, qw.data(), kw.data(), vw.data(), dw.data(), lse.data(),
                         delta.data(), dq.data(), z, layouts, static_cast<float>(scale), drop);
  cuda_emulation::launch(tc::dkdv_kernel<W, E>, keys, qw.data(), kw.data(), vw.data(), dw.data(), lse.data(),
                         delta.data(), dk.data(), dv.data(), z, layouts, static_cast<float>(scale), drop);

  std::vector<Tensor> ref_in{q.to(kFloat64).requires_grad_(), k.to(kFloat64).requires_grad_(),
                             v.to(kFloat64).requires_grad_()};
  Generator gen(31);
  const Tensor ref = flash_attention(ref_in[0], ref_in[1], ref_in[2], c.causal, scale, c.p, &gen);
  ref.backward(dout.to(kFloat64));
  CHECK(allclose(got.to(kFloat64), ref.detach(), tol, tol));
  const std::vector<Tensor> grads{tensor_of(unplaced(dq, queries), q.sizes(), dtype),
                                  tensor_of(unplaced(dk, keys_at), k.sizes(), dtype),
                                  tensor_of(unplaced(dv, keys_at), v.sizes(), dtype)};
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

// The same kernels over heads that lie where a [B, T, H, E] tensor keeps them (rows H (E + 8)
// apart, heads E + 8 apart, two batches), as the GPT's q, k, v and their gradients do: the
// same values, and no element outside the heads read or written.
TEST_CASE("The tensor-core attention kernels read and write heads in any 16-byte layout", "[attention]") {
  manual_seed(43);
  for (const Case& c :
       {Case{4, 70, 200, true, 0.0, true}, Case{2, 130, 130, true, 0.2, true}, Case{4, 64, 100, false, 0.0, true}}) {
    check<__nv_bfloat16, 64>(c, kBFloat16, 3e-2);
    check<__half, 64>(c, kFloat16, 5e-3);
  }
  check<__nv_bfloat16, 128>(Case{2, 70, 150, true, 0.1, true}, kBFloat16, 3e-2);
}
