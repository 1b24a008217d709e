// GPT benchmarks (Google Benchmark): causal self-attention (nn::CausalSelfAttention: the qkv
// projection, the masked softmax over q k^T, att @ v, the output projection), forward and
// forward + backward, at the example GPT's width (n_embd 128, 4 heads) and T = 64 and 256 (1024
// tokens per call either way); layer_norm and gelu forward + backward on the block's
// activations; the causal softmax alone, float32 and bfloat16; attention alone, composed and
// flash_attention, at the example GPT's and GPT-2 small's shapes; the loss (cross_entropy) at
// both models' logits. Build with -c opt; `python3
// bench/compare.py gpt` runs this beside PyTorch (bench/torch_gpt_bench.py).
#include <cmath>

#include "bench/bench_main.h"
#include "tinyddp/autograd/autograd.h"
#include "tinyddp/nn/nn.h"
#include "tinyddp/nn/transformer.h"
#include "tinyddp/tensor/all.h"

namespace t = tinyddp::tensor;
namespace nn = tinyddp::nn;

namespace {

constexpr int64_t kEmbd = 128, kHeads = 4;

// Arguments: batch, T, which (0 forward, 1 forward + backward).
void BM_Attention(benchmark::State& state) {
  const int64_t batch = state.range(0), seq = state.range(1);
  const bool backward = state.range(2) == 1;
  nn::GPTConfig config;
  config.block_size = seq;
  config.n_embd = kEmbd;
  config.n_head = kHeads;
  t::manual_seed(0);
  nn::CausalSelfAttention attn(config);
  t::Generator g(0);
  const t::Tensor x = t::randn({batch, seq, kEmbd}, {}, &g).requires_grad_(backward);
  const t::Tensor grad = t::randn({batch, seq, kEmbd}, {}, &g);
  for (auto _ : state) {
    const t::Tensor y = attn.forward(x);
    if (backward) {
      y.backward(grad);
      attn.zero_grad();
      x.mutable_grad() = t::Tensor();
    }
    benchmark::DoNotOptimize(y.raw_data_ptr());
  }
  // Projections 2 B T (3 C^2 + C^2), scores and att @ v 2 B T T C each; backward twice that.
  const double flops = 2.0 * batch * seq * (4.0 * kEmbd * kEmbd + 2.0 * seq * kEmbd) * (backward ? 3 : 1);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Attention)
    ->ArgNames({"batch", "T", "which"})
    ->Args({16, 64, 0})
    ->Args({16, 64, 1})
    ->Args({4, 256, 0})
    ->Args({4, 256, 1})
    ->Unit(benchmark::kMillisecond);

// Attention alone, softmax(q k^T / sqrt(head), causal) v, forward + backward on [batch, heads,
// T, head] float32: composed (matmul, causal_softmax, matmul: the T x T weights kept) against
// tensor::flash_attention. Shapes: the example GPT's layer (32 windows of 256, 4 heads of 32)
// and GPT-2 small's (12 heads of 64, T = 1024), at batch 4. With attention dropout (p in
// thousandths): composed, tensor::dropout on the weights (the CPU's PyTorch stream); flash, the
// mask inside the kernels (Philox).
// Arguments: batch, heads, T, head, flash (0 composed, 1 flash_attention), dropout (p x 1000).
void BM_AttentionCore(benchmark::State& state) {
  const int64_t batch = state.range(0), heads = state.range(1), seq = state.range(2), head = state.range(3);
  const bool flash = state.range(4) == 1;
  const double p = static_cast<double>(state.range(5)) / 1000.0;
  t::Generator g(0);
  const t::Shape shape{batch, heads, seq, head};
  const t::Tensor q = t::randn(shape, {}, &g).requires_grad_(), k = t::randn(shape, {}, &g).requires_grad_();
  const t::Tensor v = t::randn(shape, {}, &g).requires_grad_(), grad = t::randn(shape, {}, &g);
  const double scale = 1.0 / std::sqrt(static_cast<double>(head));
  for (auto _ : state) {
    const t::Tensor y = flash
                            ? t::flash_attention(q, k, v, true, scale, p)
                            : t::matmul(t::dropout(t::causal_softmax(t::matmul(q, k.transpose(-2, -1)), scale), p), v);
    y.backward(grad);
    for (const t::Tensor* x : {&q, &k, &v}) x->mutable_grad() = t::Tensor();
    benchmark::DoNotOptimize(y.raw_data_ptr());
  }
}
BENCHMARK(BM_AttentionCore)
    ->ArgNames({"batch", "heads", "T", "head", "flash", "dropout"})
    ->Args({32, 4, 256, 32, 0, 0})
    ->Args({32, 4, 256, 32, 1, 0})
    ->Args({32, 4, 256, 32, 0, 100})
    ->Args({32, 4, 256, 32, 1, 100})
    ->Args({4, 12, 1024, 64, 0, 0})
    ->Args({4, 12, 1024, 64, 1, 0})
    ->Unit(benchmark::kMillisecond);

// layer_norm over the last dim of [1024, 128] (with weight and bias), forward + backward.
void BM_LayerNorm(benchmark::State& state) {
  t::Generator g(0);
  const t::Tensor x = t::randn({1024, kEmbd}, {}, &g).requires_grad_();
  const t::Tensor w = t::randn({kEmbd}, {}, &g).requires_grad_(), b = t::randn({kEmbd}, {}, &g).requires_grad_();
  const t::Tensor grad = t::randn({1024, kEmbd}, {}, &g);
  for (auto _ : state) {
    const t::Tensor y = t::layer_norm(x, {kEmbd}, w, b);
    y.backward(grad);
    x.mutable_grad() = w.mutable_grad() = b.mutable_grad() = t::Tensor();
    benchmark::DoNotOptimize(y.raw_data_ptr());
  }
}
BENCHMARK(BM_LayerNorm)->Unit(benchmark::kMicrosecond);

// Exact gelu on the MLP's hidden activations [1024, 512], forward + backward; bf16:1 on
// bfloat16 activations, as under autocast.
void BM_Gelu(benchmark::State& state) {
  const t::DType dtype = state.range(0) == 1 ? t::kBFloat16 : t::kFloat32;
  t::Generator g(0);
  const t::Tensor x = t::randn({1024, 4 * kEmbd}, {}, &g).to(dtype).requires_grad_();
  const t::Tensor grad = t::randn({1024, 4 * kEmbd}, {}, &g).to(dtype);
  for (auto _ : state) {
    const t::Tensor y = t::gelu(x);
    y.backward(grad);
    x.mutable_grad() = t::Tensor();
    benchmark::DoNotOptimize(y.raw_data_ptr());
  }
}
BENCHMARK(BM_Gelu)->ArgName("bf16")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// The attention's scale, causal mask and softmax (t::causal_softmax) on [128, 64, 64] scores,
// the example GPT's 32 windows of 4 heads, forward + backward; bf16:1 on bfloat16 scores, as
// under autocast.
void BM_CausalSoftmax(benchmark::State& state) {
  const t::DType dtype = state.range(0) == 1 ? t::kBFloat16 : t::kFloat32;
  t::Generator g(0);
  const t::Tensor x = t::randn({128, 64, 64}, {}, &g).to(dtype).requires_grad_();
  const t::Tensor grad = t::randn({128, 64, 64}, {}, &g).to(dtype);
  for (auto _ : state) {
    const t::Tensor y = t::causal_softmax(x, 0.25);
    y.backward(grad);
    x.mutable_grad() = t::Tensor();
    benchmark::DoNotOptimize(y.raw_data_ptr());
  }
}
BENCHMARK(BM_CausalSoftmax)->ArgName("bf16")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// The language model's loss, nn::cross_entropy (mean over the rows, ignore_index -1 as nanoGPT's)
// forward + backward, on the example GPT's logits (32 windows of 256 tokens, 65 characters) and on
// GPT-2 small's (1024 tokens of one window, a vocabulary of 50304).
void BM_CrossEntropy(benchmark::State& state) {
  const int64_t rows = state.range(0), classes = state.range(1);
  t::Generator g(0);
  const t::Tensor logits = t::randn({rows, classes}, {}, &g).requires_grad_();
  const t::Tensor targets = t::randint(0, classes, {rows}, &g);
  for (auto _ : state) {
    const t::Tensor loss = nn::cross_entropy(logits, targets, -1);
    loss.backward();
    logits.mutable_grad() = t::Tensor();
    benchmark::DoNotOptimize(loss.raw_data_ptr());
  }
}
BENCHMARK(BM_CrossEntropy)
    ->ArgNames({"rows", "classes"})
    ->Args({8192, 65})
    ->Args({1024, 50304})
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) { return tinyddp::bench::run_benchmarks(argc, argv, "gpt_bench"); }
