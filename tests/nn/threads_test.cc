// The same bits at any thread count (tensor/parallel.h): the ops the intra-op threads split
// (matmul in every layout and dtype, bfloat16 in row and column blocks, elementwise and unary
// loops, sums over rows and over many rows, softmax rows, convolutions in float32 and bfloat16)
// and a few training steps of an MLP whose every kernel splits, compared bit for bit between 1,
// 2, 3 and 4 threads; and a bfloat16 product on a fresh thread.
#include <thread>
#include <vector>

#include "tests/test_util.h"
#include "tinyddp/nn/nn.h"
#include "tinyddp/tensor/all.h"

using namespace tinyddp;
using tensor::Tensor;
using testing::KeepThreads;

namespace {

// The ops' results at `threads` threads, from inputs drawn the same way each time.
std::vector<Tensor> ops_at(int threads) {
  tensor::set_num_threads(threads);
  tensor::Generator gen(3);
  const Tensor a = tensor::randn({300, 700}, {}, &gen), b = tensor::randn({700, 500}, {}, &gen);
  const Tensor wide = tensor::randn({5000, 3}, {}, &gen), big = tensor::randn({400, 900}, {}, &gen);
  std::vector<Tensor> out;
  out.push_back(tensor::matmul(a, b));  // rows split
  out.push_back(
      tensor::matmul(a.transpose(0, 1).contiguous().transpose(0, 1), b.transpose(0, 1).contiguous().transpose(0, 1)));
  out.push_back(tensor::matmul(b.transpose(0, 1), a.transpose(0, 1)));  // columns split, transposed operands
  out.push_back(tensor::matmul(a.to(tensor::kFloat64), b.to(tensor::kFloat64)));
  // bfloat16: oneDNN's kernels where the CPU has them (row blocks on the threads), else float32's;
  // Linear's x @ W^T + bias on 96 rows, 640 wide: column blocks of W^T, the output and the bias.
  out.push_back(tensor::matmul(a.to(tensor::kBFloat16), b.to(tensor::kBFloat16)));
  // Row blocks: b packed once (in column pieces on the threads when its width allows), and a
  // column-major a copied block by block.
  const Tensor tall = tensor::randn({512, 704}, {}, &gen).to(tensor::kBFloat16);
  const Tensor narrow = tensor::randn({704, 320}, {}, &gen).to(tensor::kBFloat16);
  out.push_back(tensor::matmul(tall, narrow));
  out.push_back(
      tensor::matmul(tensor::randn({256, 512}, {}, &gen).to(tensor::kBFloat16).t(), narrow.narrow(0, 0, 256)));
  out.push_back(tensor::matmul(tall.t().contiguous().t(), narrow));  // k > m: the blocks read a in place
  out.push_back(tensor::linear(a.narrow(0, 0, 96).to(tensor::kBFloat16),
                               tensor::randn({640, 700}, {}, &gen).to(tensor::kBFloat16),
                               tensor::randn({640}, {}, &gen).to(tensor::kBFloat16)));
  out.push_back(tensor::matmul(tensor::mul(a, 100.0).to(tensor::kInt64), tensor::mul(b, 100.0).to(tensor::kInt64)));
  out.push_back(tensor::add(tensor::mul(big, 3.0), tensor::exp(big)));
  out.push_back(tensor::mul(big.transpose(0, 1), 0.5));  // a strided loop
  out.push_back(tensor::sum(wide, {0}));                 // many rows: chunks in order
  out.push_back(tensor::sum(big, {1}));                  // independent rows
  out.push_back(tensor::sum(tensor::randn({70000, 2}, {}, &gen).to(tensor::kFloat64), {0}));
  out.push_back(tensor::softmax(big, 1));
  out.push_back(tensor::log_softmax(big, 0));
  // Forward and gradients of the ops with kernels of their own: convolution (im2col and the
  // direct kernel), pooling, batch and layer norm, embedding, causal softmax.
  const auto leaf = [&](const tensor::Shape& shape) { return tensor::randn(shape, {}, &gen).requires_grad_(); };
  const Tensor image = leaf({32, 8, 24, 24}), kernel = leaf({16, 8, 3, 3}), kernel_bias = leaf({16});
  const Tensor conv = tensor::conv2d(image, kernel, kernel_bias, 1, 1);
  const Tensor strided = tensor::conv2d(image, kernel, Tensor(), 2, 1);
  const Tensor pooled = tensor::max_pool2d(conv, 2);
  const Tensor normed = tensor::batch_norm(pooled, Tensor(), Tensor(), Tensor(), Tensor(), true);
  const Tensor rows = leaf({256, 5, 96}), gain = leaf({96}), shift = leaf({96});
  const Tensor ln = tensor::layer_norm(rows, {96}, gain, shift);
  const Tensor table = leaf({50, 96});
  std::vector<int64_t> ids(4000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i * 7 % 50);  // repeated ids
  const Tensor looked = tensor::embedding(tensor::from_vector<int64_t>(ids, tensor::Shape{4000}), table);
  const Tensor scores = leaf({96, 40, 40});
  const Tensor attention = tensor::causal_softmax(scores, 0.125);
  const Tensor total = tensor::add(
      tensor::add(tensor::add(tensor::sum(tensor::mul(normed, normed)), tensor::sum(tensor::mul(strided, strided))),
                  tensor::sum(tensor::mul(ln, ln))),
      tensor::add(tensor::sum(tensor::mul(looked, looked)), tensor::sum(tensor::mul(attention, attention))));
  total.backward();
  for (const Tensor& t : {conv, strided, pooled, normed, ln, looked, attention}) out.push_back(t.detach());
  for (const Tensor& t : {image, kernel, kernel_bias, rows, gain, shift, table, scores}) out.push_back(t.grad());
  // A bfloat16 convolution: oneDNN's kernels where the CPU has them (blocks of images on the
  // threads, the weights' gradient added block by block), else float32's. 18,432 weights: enough
  // that another order of the float32 sums changes some of them in bfloat16.
  const auto leaf16 = [&](const tensor::Shape& shape) {
    return tensor::randn(shape, {}, &gen).to(tensor::kBFloat16).requires_grad_();
  };
  const Tensor image16 = leaf16({40, 32, 8, 8}), kernel16 = leaf16({64, 32, 3, 3}), bias16 = leaf16({64});
  const Tensor conv16 = tensor::conv2d(image16, kernel16, bias16, 1, 1);
  conv16.backward(tensor::randn(conv16.sizes(), {}, &gen).to(tensor::kBFloat16));
  for (const Tensor& t : {conv16.detach(), image16.grad(), kernel16.grad(), bias16.grad()}) out.push_back(t);
  return out;
}

// Five SGD steps of a 512-1024-10 MLP on 1024 rows; the losses and the final parameters.
std::vector<Tensor> training_at(int threads) {
  tensor::set_num_threads(threads);
  tensor::manual_seed(11);
  auto model = nn::mlp({512, 1024, 10});
  nn::SGD optimizer(model->parameters(), nn::SGDOptions(0.05).momentum(0.9));
  tensor::Generator gen(12);
  const Tensor x = tensor::randn({1024, 512}, {}, &gen);
  const Tensor y = tensor::mul(tensor::rand({1024}, {}, &gen), 10.0).to(tensor::kInt64);
  std::vector<Tensor> out;
  for (int step = 0; step < 5; ++step) {
    optimizer.zero_grad();
    const Tensor loss = nn::cross_entropy(model->forward(x), y);
    loss.backward();
    optimizer.step();
    out.push_back(loss.detach());
  }
  for (const Tensor& p : model->parameters()) out.push_back(p.detach().clone());
  return out;
}

}  // namespace

TEST_CASE("Ops split over the intra-op threads give the same bits at 1, 2, 3 and 4 threads", "[parallel][bits]") {
  const KeepThreads keep;
  const std::vector<Tensor> one = ops_at(1);
  for (const int threads : {2, 3, 4}) {
    const std::vector<Tensor> many = ops_at(threads);
    REQUIRE(many.size() == one.size());
    for (size_t i = 0; i < one.size(); ++i) {
      INFO(threads << " threads, result " << i);
      CHECK(tensor::equal(many[i], one[i]));
    }
  }
}

TEST_CASE("An MLP trains to the same bits at 1, 2 and 3 threads", "[parallel][bits][training]") {
  const KeepThreads keep;
  const std::vector<Tensor> one = training_at(1);
  for (const int threads : {2, 3}) {
    const std::vector<Tensor> many = training_at(threads);
    REQUIRE(many.size() == one.size());
    for (size_t i = 0; i < one.size(); ++i) {
      INFO(threads << " threads, " << (i < 5 ? "loss of step " : "parameter ") << (i < 5 ? i : i - 5));
      CHECK(tensor::equal(many[i], one[i]));
    }
  }
}

TEST_CASE("A bfloat16 product gives the same bits on a thread that has not run one yet", "[parallel][bits]") {
  // oneDNN's kernels are made per thread (tensor/backends/cpu/onednn.cc); one made before the
  // thread's OpenMP is set to one thread may sum in another order. 1024 x 1024 x 1024 with a
  // transposed a, in row blocks on a machine of 2 CPUs or more: the shape where that showed.
  const KeepThreads keep;
  tensor::set_num_threads(2);
  tensor::Generator gen(5);
  const Tensor a = tensor::randn({1024, 1024}, {}, &gen).to(tensor::kBFloat16).t();
  const Tensor b = tensor::randn({1024, 1024}, {}, &gen).to(tensor::kBFloat16);
  const Tensor here = tensor::matmul(a, b);
  Tensor there;
  std::thread fresh([&] { there = tensor::matmul(a, b); });
  fresh.join();
  CHECK(tensor::equal(here, there));
  CHECK(tensor::equal(tensor::matmul(a, b), here));
}
