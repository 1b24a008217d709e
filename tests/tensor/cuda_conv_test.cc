// The CNN ops on a GPU against the CPU (whose numbers tests/tensor/conv_test.cc checks against
// PyTorch): conv2d over stride, padding, dilation and groups, max pooling with ties, average
// and adaptive pooling, batch norm in both modes with its running statistics, dropout (its
// mask drawn on the device, against the same Philox mask rebuilt on the host), the digits
// CNN's forward values and every gradient, cuDNN convolution in each floating dtype and TF32,
// and the GPT's ops (layer_norm, gelu, embedding, causal_softmax). Every GPU case skips,
// saying why, without a GPU (and in a build without CUDA).
#include <functional>

#include "examples/models.h"
#include "tests/test_util.h"
#include "tinyddp/autograd/autograd.h"
#include "tinyddp/nn/nn.h"
#include "tinyddp/nn/packed_sequence.h"
#include "tinyddp/nn/rnn_layer.h"
#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/internal/philox.h"

using namespace tinyddp::tensor;

namespace {

const Device kGpu = Device::cuda(0);

// f on CPU leaves and on their GPU copies: the outputs and the leaves' gradients (from the same
// upstream gradient) must agree.
void check_on_gpu(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> cpu, gpu;
  for (const Tensor& t : inputs) {
    cpu.push_back(t.detach().clone().requires_grad_());
    gpu.push_back(t.detach().to(kGpu).requires_grad_());
  }
  const Tensor cpu_out = f(cpu), gpu_out = f(gpu);
  REQUIRE(gpu_out.is_cuda());
  CHECK(allclose(gpu_out.to(kCPU), cpu_out, 1e-4, 1e-5));
  Generator gen(1);
  const Tensor upstream = randn(cpu_out.sizes(), cpu_out.dtype(), &gen);
  cpu_out.backward(upstream);
  gpu_out.backward(upstream.to(kGpu));
  for (size_t i = 0; i < inputs.size(); ++i) {
    INFO("gradient of input " << i);
    REQUIRE(gpu[i].grad().defined());
    CHECK(gpu[i].grad().is_cuda());
    CHECK(allclose(gpu[i].grad().to(kCPU), cpu[i].grad(), 1e-4, 1e-5));
  }
}

using Inputs = std::vector<Tensor>;

// Float32 convolutions through cuDNN without TF32 for its lifetime, so that they match the CPU
// within float32 tolerances (TF32, PyTorch's default for cuDNN, is checked on its own below).
struct NoCudnnTf32 {
  bool was = cuda::cudnn_allow_tf32();
  NoCudnnTf32() { cuda::set_cudnn_allow_tf32(false); }
  ~NoCudnnTf32() { cuda::set_cudnn_allow_tf32(was); }
};

}  // namespace

TEST_CASE("cuDNN may use TF32 for float32 convolutions by default, as torch.backends.cudnn.allow_tf32", "[conv]") {
  CHECK(cuda::cudnn_allow_tf32());
  CHECK_FALSE(cuda::allow_tf32());  // matrix products: off, as torch.backends.cuda.matmul.allow_tf32
  {
    const NoCudnnTf32 off;
    CHECK_FALSE(cuda::cudnn_allow_tf32());
  }
  CHECK(cuda::cudnn_allow_tf32());
}

TEST_CASE("CUDA: conv2d and its gradients equal the CPU's over stride, padding, dilation and groups", "[cuda][conv]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  const NoCudnnTf32 exact;
  Generator gen(2);
  const Tensor x = randn({2, 4, 7, 6}, {}, &gen), w = randn({6, 2, 3, 2}, {}, &gen), b = randn({6}, {}, &gen);
  check_on_gpu([](const Inputs& v) { return conv2d(v[0], v[1], v[2], {2, 1}, {1, 0}, {1, 2}, 2); }, {x, w, b});
  const Tensor w1 = randn({5, 4, 3, 3}, {}, &gen);
  check_on_gpu([](const Inputs& v) { return conv2d(v[0], v[1], Tensor(), 1, 1); }, {x, w1});
}

TEST_CASE("CUDA: pooling equals the CPU, ties going to the first maximum", "[cuda][conv]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  Generator gen(3);
  const Tensor ties = mul(rand({2, 3, 7, 7}, {}, &gen), 3.0).to(kInt64).to(kFloat32);  // many equal values
  check_on_gpu([](const Inputs& v) { return max_pool2d(v[0], 3, Size2d(2), 1); }, {ties});
  const Tensor x = randn({2, 3, 8, 6}, {}, &gen);
  check_on_gpu([](const Inputs& v) { return max_pool2d(v[0], 2); }, {x});
  check_on_gpu([](const Inputs& v) { return avg_pool2d(v[0], 3, Size2d(2), 1, false); }, {x});
  check_on_gpu([](const Inputs& v) { return adaptive_avg_pool2d(v[0], 1); }, {x});
}

TEST_CASE("CUDA: batch_norm in training and eval equals the CPU, running statistics included", "[cuda][conv]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  Generator gen(4);
  const Tensor x = randn({4, 3, 5, 5}, {}, &gen), w = randn({3}, {}, &gen), b = randn({3}, {}, &gen);
  const Tensor cpu_mean = zeros({3}), cpu_var = ones({3});
  const Tensor gpu_mean = cpu_mean.to(kGpu), gpu_var = cpu_var.to(kGpu);
  check_on_gpu(
      [&](const Inputs& v) {
        const bool gpu = v[0].is_cuda();
        return batch_norm(v[0], gpu ? gpu_mean : cpu_mean, gpu ? gpu_var : cpu_var, v[1], v[2], true, 0.1, 1e-5);
      },
      {x, w, b});
  CHECK(allclose(gpu_mean.to(kCPU), cpu_mean, 1e-5, 1e-6));
  CHECK(allclose(gpu_var.to(kCPU), cpu_var, 1e-5, 1e-6));
  check_on_gpu(
      [&](const Inputs& v) {
        const bool gpu = v[0].is_cuda();
        return batch_norm(v[0], gpu ? gpu_mean : cpu_mean, gpu ? gpu_var : cpu_var, v[1], v[2], false);
      },
      {x, w, b});
}

TEST_CASE("CUDA: dropout keeps about 1 - p of the elements, scaled, and its gradient is its mask", "[cuda][conv]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  const Tensor x = ones({100000}, TensorOptions().device(kGpu)).requires_grad_();
  Generator gen(5);
  const Tensor y = dropout(x, 0.25, true, &gen);
  sum(y).backward();
  const std::vector<float> v = y.to(kCPU).detach().to_vector<float>();
  int64_t kept = 0;
  for (float e : v) kept += e != 0;
  CHECK(std::abs(kept - 75000) < 6 * 137);
  CHECK(equal(x.grad().to(kCPU), y.detach().to(kCPU)));
  CHECK(dropout(x, 0.25, false).is_same(x));
}

TEST_CASE("CUDA: dropout's mask is drawn on the device, element i from Philox under one key from the generator",
          "[cuda][conv]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  for (const DType dtype : {kFloat32, kBFloat16}) {
    INFO(dtype_name(dtype));
    const Tensor x = randn({999, 37}).to(dtype);  // 36,963 elements: the last Philox block partial
    Generator gen(11), same(11);
    const uint64_t key = same.random64();  // the one draw the op makes
    const Tensor y = dropout(x.to(kGpu), 0.3, true, &gen).to(kCPU);
    CHECK(gen.random() == same.random());  // the generator moved on by that draw only
    // The mask rebuilt on the host (tensor/internal/philox.h): x times 1 / 0.7 in x's dtype, or 0.
    const Tensor scale = full({}, 1.0 / 0.7, TensorOptions(dtype));
    const std::vector<double> xs = mul(x, scale).to(kFloat64).to_vector<double>();
    const std::vector<double> ys = y.to(kFloat64).to_vector<double>();
    int64_t wrong = 0, kept = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const bool keep = tinyddp::tensor::philox::dropout_keep(key, i, 0.7f);
      kept += keep;
      wrong += ys[i] != (keep ? xs[i] : 0.0);
    }
    CHECK(wrong == 0);
    CHECK(std::abs(static_cast<double>(kept) - 0.7 * 36963) < 5 * std::sqrt(0.21 * 36963));
  }
  // Captured, dropout draws no key: each replay fills one (tests/tensor/cuda_graph_test.cc).
  cuda::CudaGraph graph;
  graph.capture_begin(0);
  const std::string before = default_generator().get_state();
  (void)dropout(ones({64}, TensorOptions().device(kGpu)), 0.5);
  CHECK(default_generator().get_state() == before);
}

TEST_CASE("CUDA: the digits CNN's forward and gradients on the GPU equal the CPU's", "[cuda][conv][nn]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  const NoCudnnTf32 exact;
  manual_seed(6);
  const auto cpu_model = tinyddp::examples::digits_cnn(0.0);
  const auto gpu_model = tinyddp::examples::digits_cnn(0.0);
  gpu_model->load_state_dict(cpu_model->state_dict());
  gpu_model->to(kGpu);
  Generator gen(7);
  const Tensor x = randn({6, 1, 8, 8}, {}, &gen);
  const Tensor y = mul(rand({6}, {}, &gen), 10.0).to(kInt64);
  tinyddp::nn::cross_entropy(cpu_model->forward(x), y).backward();
  tinyddp::nn::cross_entropy(gpu_model->forward(x.to(kGpu)), y.to(kGpu)).backward();
  const auto gpu_params = gpu_model->named_parameters();
  for (const auto& [name, p] : cpu_model->named_parameters()) {
    INFO(name);
    CHECK(allclose(gpu_params.at(name).grad().to(kCPU), p.grad(), 1e-4, 1e-5));
  }
  const auto gpu_buffers = gpu_model->named_buffers();
  for (const auto& [name, b] : cpu_model->named_buffers()) {
    INFO(name);
    CHECK(allclose(gpu_buffers.at(name).to(kCPU).to(kFloat64), b.to(kFloat64), 1e-5, 1e-6));
  }
}

TEST_CASE("CUDA: conv2d through cuDNN in float64, float16, bfloat16 and TF32 against the CPU", "[cuda][conv]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  Generator gen(8);
  const Tensor x = randn({4, 8, 12, 10}, kFloat64, &gen), w = randn({16, 4, 3, 3}, kFloat64, &gen);
  const Tensor g = randn({4, 16, 6, 5}, kFloat64, &gen);
  // The float64 reference on the CPU: output and both gradients.
  const auto run = [&](DType dtype, Device device) {
    // detach(): to() of the dtype and device a tensor already has returns the tensor itself,
    // and the float64 CPU run must not make the shared inputs require gradients.
    const Tensor xd = x.to(dtype).to(device).detach().requires_grad_();
    const Tensor wd = w.to(dtype).to(device).detach().requires_grad_();
    const Tensor y = conv2d(xd, wd, Tensor(), 2, 1, 1, 2);
    y.backward(g.to(dtype).to(device));
    return std::vector<Tensor>{y.detach().to(kCPU).to(kFloat64), xd.grad().to(kCPU).to(kFloat64),
                               wd.grad().to(kCPU).to(kFloat64)};
  };
  const std::vector<Tensor> expected = run(kFloat64, kCPU);
  const auto check = [&](DType dtype, double rtol, double atol) {
    INFO(dtype_name(dtype) << (cuda::cudnn_allow_tf32() ? " (TF32 allowed)" : ""));
    const std::vector<Tensor> got = run(dtype, kGpu);
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("output " << i << " (0: y, 1: grad x, 2: grad w)");
      CHECK(allclose(got[i], expected[i], rtol, atol));
    }
  };
  check(kFloat64, 1e-12, 1e-12);
  check(kFloat16, 1e-2, 5e-2);
  check(kBFloat16, 2e-2, 2e-1);
  check(kFloat32, 1e-2, 5e-2);  // TF32 allowed: 10-bit mantissas in, float32 sums
  const NoCudnnTf32 exact;
  check(kFloat32, 1e-5, 1e-5);
}

TEST_CASE("CUDA: layer_norm, gelu and embedding, forward and gradients, equal the CPU's", "[cuda][layer_norm]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  Generator gen(9);
  const Tensor x = randn({3, 5, 40}, {}, &gen), w = randn({40}, {}, &gen), b = randn({40}, {}, &gen);
  check_on_gpu([](const Inputs& v) { return layer_norm(v[0], {40}, v[1], v[2]); }, {x, w, b});
  check_on_gpu([](const Inputs& v) { return layer_norm(v[0], {5, 40}); }, {x});
  const Tensor wide = randn({4, 1000}, {}, &gen);  // rows longer than a block's threads
  check_on_gpu([](const Inputs& v) { return layer_norm(v[0], {1000}); }, {wide});
  check_on_gpu([](const Inputs& v) { return gelu(v[0]); }, {x});
  check_on_gpu([](const Inputs& v) { return gelu(v[0], "tanh"); }, {x});
  const Tensor ids = from_vector<int64_t>({3, 0, 3, 6, 1, 1, 3, 6, 6, 0}, Shape{2, 5});
  for (const DType dtype : {kFloat32, kFloat64}) {  // repeated ids: summed in their order on the GPU
    INFO(dtype_name(dtype));
    const Tensor w = randn({8, 40}, {}, &gen).to(dtype);
    check_on_gpu([&](const Inputs& v) { return embedding(v[0].is_cuda() ? ids.to(kGpu) : ids, v[0]); }, {w});
    // padding_idx and scale_grad_by_freq: the padding row's gradient zero, each id's over its count
    check_on_gpu([&](const Inputs& v) { return embedding(v[0].is_cuda() ? ids.to(kGpu) : ids, v[0], 1, true); }, {w});
  }
  CHECK_THROWS_WITH(embedding(from_vector<int64_t>({9}, Shape{1}).to(kGpu), randn({8, 4}).to(kGpu)),
                    Catch::Contains("embedding: index 9 is out of range for 8 embeddings"));
}

TEST_CASE("CUDA: causal_softmax (the fused kernel) and its gradient equal the CPU's", "[cuda][causal_softmax]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  Generator gen(10);
  for (const Shape& shape : {Shape{2, 4, 16, 16}, Shape{3, 300, 300}, Shape{5, 9}}) {  // rows past a block, M < N
    INFO(format_shape(shape));
    check_on_gpu([](const Inputs& v) { return causal_softmax(v[0], 0.125); }, {mul(randn(shape, {}, &gen), 4.0)});
  }
}

TEST_CASE(
    "CUDA: the selection ops (stack, clamp, where, min, index_select, gather, index_add, scatter_add, cumsum, topk, "
    "one_hot) equal the CPU's",
    "[cuda][select]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  Generator gen(9);
  const Tensor x = randn({4, 5}, {}, &gen), y = randn({4, 5}, {}, &gen), row = randn({5}, {}, &gen);
  check_on_gpu([](const Inputs& v) { return stack({v[0], v[1]}, 1); }, {x, y});
  check_on_gpu([](const Inputs& v) { return clamp(v[0], -0.5, 0.5); }, {x});
  const Tensor cond = gt(y, 0.0);
  check_on_gpu([&](const Inputs& v) { return where(v[0].is_cuda() ? cond.to(kGpu) : cond, v[0], v[1]); }, {x, row});
  check_on_gpu([](const Inputs& v) { return std::get<0>(min(v[0], 1)); }, {x});
  check_on_gpu([](const Inputs& v) { return min(v[0]); }, {x});
  const Tensor idx = from_vector<int64_t>({3, 0, 3}, Shape{3});
  check_on_gpu([&](const Inputs& v) { return index_select(v[0], 1, v[0].is_cuda() ? idx.to(kGpu) : idx); }, {x});
  const Tensor gidx = from_vector<int64_t>({4, 0, 1, 1, 2, 3, 0, 0}, Shape{4, 2});
  check_on_gpu([&](const Inputs& v) { return gather(v[0], 1, v[0].is_cuda() ? gidx.to(kGpu) : gidx); }, {x});
  check_on_gpu([](const Inputs& v) { return cumsum(v[0], 1); }, {x});
  check_on_gpu([](const Inputs& v) { return std::get<0>(topk(v[0], 3, 1)); }, {x});
  const Tensor aidx = from_vector<int64_t>({2, 0, 2}, Shape{3});
  const Tensor src = randn({4, 3}, {}, &gen);
  check_on_gpu([&](const Inputs& v) { return index_add(v[0], 1, v[0].is_cuda() ? aidx.to(kGpu) : aidx, v[1]); },
               {x, src});
  const Tensor sidx = from_vector<int64_t>({4, 0, 1, 1, 2, 3, 0, 0}, Shape{4, 2});
  const Tensor ssrc = randn({4, 2}, {}, &gen);
  check_on_gpu([&](const Inputs& v) { return scatter_add(v[0], 1, v[0].is_cuda() ? sidx.to(kGpu) : sidx, v[1]); },
               {x, ssrc});
  const Tensor ids = from_vector<int64_t>({0, 3, 1, 2}, Shape{2, 2});
  CHECK(equal(one_hot(ids.to(kGpu), 4).to(kCPU), one_hot(ids, 4)));
}

TEST_CASE("CUDA: prod, cumprod, scatter, index and index_put_ equal the CPU's", "[cuda][select][indexing]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  using namespace indexing;
  Generator gen(12);
  const Tensor x = randn({4, 5}, {}, &gen), src = randn({4, 2}, {}, &gen), v = randn({4}, {}, &gen);
  check_on_gpu([](const Inputs& in) { return prod(in[0], 1); }, {x});
  check_on_gpu([](const Inputs& in) { return cumprod(in[0], 0); }, {x});
  const Tensor sidx = from_vector<int64_t>({4, 0, 1, 3, 2, 1, 0, 4}, Shape{4, 2});
  check_on_gpu([&](const Inputs& in) { return scatter(in[0], 1, in[0].is_cuda() ? sidx.to(kGpu) : sidx, in[1]); },
               {x, src});
  check_on_gpu([](const Inputs& in) { return in[0].index({Slice(1, None), Slice(None, None, 2)}); }, {x});
  check_on_gpu(
      [](const Inputs& in) {
        const Tensor y = mul(in[0], 1.0);
        y.index_put_({Slice(), 2}, in[1]);
        return y;
      },
      {x, v});
  // Several tensor indices at once (negatives among them) and an assignment through them.
  const Tensor rows = from_vector<int64_t>({3, 0, -1}, Shape{3}), cols = from_vector<int64_t>({1, 4, -5}, Shape{3});
  const auto on = [&](const Tensor& like, const Tensor& t) { return like.is_cuda() ? t.to(kGpu) : t; };
  check_on_gpu([&](const Inputs& in) { return in[0].index({on(in[0], rows), on(in[0], cols)}); }, {x});
  check_on_gpu(
      [&](const Inputs& in) {
        const Tensor y = mul(in[0], 1.0);
        y.index_put_({on(in[0], rows), on(in[0], cols)}, in[1].slice(0, 0, 3), true);
        return y;
      },
      {x, v});
}

TEST_CASE("CUDA: conv1d and group_norm and their gradients equal the CPU's", "[cuda][conv]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  Generator gen(10);
  const Tensor x = randn({2, 4, 9}, {}, &gen), w = randn({6, 2, 3}, {}, &gen), b = randn({6}, {}, &gen);
  check_on_gpu([](const Inputs& v) { return conv1d(v[0], v[1], v[2], 2, 1, 2, 2); }, {x, w, b});
  const Tensor y = randn({2, 6, 5}, {}, &gen), gw = randn({6}, {}, &gen), gb = randn({6}, {}, &gen);
  check_on_gpu([](const Inputs& v) { return group_norm(v[0], 3, v[1], v[2]); }, {y, gw, gb});
}

TEST_CASE("CUDA: MultiheadAttention's output and gradients on the GPU equal the CPU's", "[cuda][attention]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  manual_seed(5);
  auto cpu = std::make_shared<tinyddp::nn::MultiheadAttention>(8, 2);
  auto gpu = std::make_shared<tinyddp::nn::MultiheadAttention>(8, 2);
  gpu->load_state_dict(cpu->state_dict());
  gpu->to(kGpu);
  const Tensor mask = triu(ones({5, 5}), 1).to(kBool);
  check_on_gpu(
      [&](const Inputs& v) {
        const bool on_gpu = v[0].is_cuda();
        auto& m = on_gpu ? *gpu : *cpu;
        return m.forward(v[0], v[0], v[0], Tensor(), false, on_gpu ? mask.to(kGpu) : mask).first;
      },
      {randn({5, 3, 8})});
}

TEST_CASE("CUDA: the LSTM, GRU and RNN recurrences and their backward on the GPU equal the CPU's", "[cuda][rnn]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  using tinyddp::nn::gru_layer, tinyddp::nn::lstm_layer, tinyddp::nn::rnn_layer;
  Generator gen(6);
  const auto r = [&](const Shape& s) { return mul(randn(s, {}, &gen), 0.5); };
  const Tensor x = r({6, 3, 5}), h0 = r({3, 4}), c0 = r({3, 4});
  for (const bool reverse : {false, true}) {
    INFO("reverse " << reverse);
    check_on_gpu([&](const Inputs& v) { return lstm_layer(v[0], v[1], v[2], v[3], v[4], v[5], v[6], reverse); },
                 {x, h0, c0, r({16, 5}), r({16, 4}), r({16}), r({16})});
    check_on_gpu([&](const Inputs& v) { return gru_layer(v[0], v[1], v[2], v[3], v[4], v[5], reverse); },
                 {x, h0, r({12, 5}), r({12, 4}), r({12}), r({12})});
    check_on_gpu([&](const Inputs& v) { return rnn_layer(v[0], v[1], v[2], v[3], v[4], v[5], reverse, "tanh"); },
                 {x, h0, r({4, 5}), r({4, 4}), r({4}), r({4})});
    // with a projection (proj_size 2): h [N, 2], c [N, 4]
    check_on_gpu(
        [&](const Inputs& v) {
          const auto [hs, c] =
              tinyddp::nn::lstm_projected_layer(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], reverse);
          return cat({hs.reshape({-1}), c.reshape({-1})}, 0);
        },
        {x, r({3, 2}), c0, r({16, 5}), r({16, 2}), r({16}), r({16}), r({2, 4})});
  }
}

TEST_CASE("CUDA: packing, the masked recurrences a packed batch runs and unpacking equal the CPU's",
          "[cuda][rnn][packed]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  using tinyddp::nn::gru_layer, tinyddp::nn::lstm_layer, tinyddp::nn::rnn_layer;
  Generator gen(7);
  const auto r = [&](const Shape& s) { return mul(randn(s, {}, &gen), 0.5); };
  const std::vector<int64_t> lengths{2, 5, 3};
  // steps 0..4 against the lengths: [5, 3, 1] bool
  const Tensor mask = lt(arange(5, kInt64).reshape({-1, 1, 1}), from_vector(lengths).reshape({1, -1, 1}));
  const Tensor x = r({5, 3, 5}), h0 = r({3, 4}), c0 = r({3, 4});
  for (const bool reverse : {false, true}) {
    INFO("reverse " << reverse);
    check_on_gpu(
        [&](const Inputs& v) {
          const Tensor m = mask.to(v[0].device());
          return lstm_layer(v[0], v[1], v[2], v[3], v[4], v[5], v[6], reverse, m);
        },
        {x, h0, c0, r({16, 5}), r({16, 4}), r({16}), r({16})});
    check_on_gpu(
        [&](const Inputs& v) { return gru_layer(v[0], v[1], v[2], v[3], v[4], v[5], reverse, mask.to(v[0].device())); },
        {x, h0, r({12, 5}), r({12, 4}), r({12}), r({12})});
    check_on_gpu(
        [&](const Inputs& v) {
          return rnn_layer(v[0], v[1], v[2], v[3], v[4], v[5], reverse, "relu", mask.to(v[0].device()));
        },
        {x, h0, r({4, 5}), r({4, 4}), r({4}), r({4})});
  }
  check_on_gpu(
      [&](const Inputs& v) {
        const auto packed = tinyddp::nn::pack_padded_sequence(v[0], lengths, false, /*enforce_sorted=*/false);
        return std::get<0>(tinyddp::nn::pad_packed_sequence(packed, true, -1.0, 6));
      },
      {x});
}

TEST_CASE("CUDA: the weighted losses on the GPU equal the CPU's", "[cuda][loss]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  Generator gen(7);
  const Tensor targets = from_vector(std::vector<int64_t>{2, 0, -100, 1, 3}, Shape{5});
  const Tensor weight = add(rand({4}, {}, &gen), 0.5), soft = rand({5, 4}, {}, &gen);
  const auto on = [](const Tensor& t, const Tensor& like) { return like.is_cuda() ? t.to(kGpu) : t; };
  check_on_gpu(
      [&](const Inputs& v) {
        return tinyddp::nn::cross_entropy(v[0], on(targets, v[0]), -100, "mean", 0.2, on(weight, v[0]));
      },
      {randn({5, 4}, {}, &gen)});
  check_on_gpu(
      [&](const Inputs& v) {
        return tinyddp::nn::binary_cross_entropy_with_logits(v[0], on(soft, v[0]), "sum", Tensor(), on(weight, v[0]));
      },
      {randn({5, 4}, {}, &gen)});
}

TEST_CASE("CUDA: celu on the GPU equals the CPU", "[cuda][hooks]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  Generator gen(8);
  check_on_gpu([](const Inputs& v) { return celu(v[0], 1.5); }, {randn({4, 5}, {}, &gen)});
}

TEST_CASE("CUDA: leaky_relu and norm on the GPU equal the CPU", "[cuda][double_backward]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  Generator gen(9);
  check_on_gpu([](const Inputs& v) { return leaky_relu(v[0], 0.2); }, {randn({4, 5}, {}, &gen)});
  check_on_gpu([](const Inputs& v) { return norm(v[0], 2.0, {1}); }, {randn({4, 5}, {}, &gen)});
  check_on_gpu([](const Inputs& v) { return norm(v[0], 1.0); }, {randn({4, 5}, {}, &gen)});
}

TEST_CASE("CUDA: double backward on the GPU equals the CPU", "[cuda][double_backward]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  // f's first derivatives (create_graph) as one vector: check_on_gpu's backward through them
  // is a double backward through every op of f, the recorded formulas of the fused kernels.
  const auto first = [](std::function<Tensor(const Inputs&)> f) {
    return [f](const Inputs& v) {
      const Tensor out = f(v);
      const std::vector<Tensor> grads =
          tinyddp::autograd::grad({sum(mul(out, out))}, v, {}, std::nullopt, /*create_graph=*/true);
      std::vector<Tensor> flat;
      for (const Tensor& g : grads) flat.push_back(g.reshape({-1}));
      return cat(flat, 0);
    };
  };
  Generator gen(10);
  check_on_gpu(first([](const Inputs& v) { return conv2d(v[0], v[1], v[2], 1, 1); }),
               {randn({2, 3, 5, 5}, {}, &gen), randn({4, 3, 3, 3}, {}, &gen), randn({4}, {}, &gen)});
  check_on_gpu(first([](const Inputs& v) { return gelu(layer_norm(v[0], {6}, v[1], v[2]), "tanh"); }),
               {randn({4, 6}, {}, &gen), randn({6}, {}, &gen), randn({6}, {}, &gen)});
  check_on_gpu(first([](const Inputs& v) { return batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], true); }),
               {randn({4, 3, 2}, {}, &gen), randn({3}, {}, &gen), randn({3}, {}, &gen)});
  check_on_gpu(first([](const Inputs& v) { return max_pool2d(relu(v[0]), 2); }), {randn({2, 2, 4, 4}, {}, &gen)});
  check_on_gpu(first([](const Inputs& v) { return causal_softmax(v[0], 0.5); }), {randn({2, 4, 4}, {}, &gen)});
}
