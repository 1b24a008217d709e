// CudaGraph (tensor/cuda.h): a captured graph replays what was queued during capture, reading
// the new values copied into its input tensors; a training step (forward, loss, backward, SGD
// with momentum, zero_grad setting gradients to none) captured after two eager steps and
// replayed gives the parameters of the same steps run eagerly, bit for bit (the same kernels in
// the same order), with MSE and with cross-entropy whose number of ignored targets changes at
// each step (its count of kept rows is computed on the GPU, not frozen), with
// clip_grad_norm_ in the step, and with a capturable AdamW. Dropout and attention dropout in a
// captured step: each replay draws its keys as the eager step would, so the parameters are the
// eager steps' bit for bit, and two replays on the same inputs drop differently. Waits on the
// host during capture, Adam's step (its bias correction is a host number) and dropout with its
// own generator are Errors that name them, after which the graph resets and the device works on. Without CUDA every
// call but reset() says so; the GPU cases skip without a GPU.
#include <memory>
#include <vector>

#include "tinyddp/tensor/fused.h"

#include "tests/test_util.h"
#include "tinyddp/nn/nn.h"
#include "tinyddp/tensor/all.h"
#include "tinyddp/tensor/cuda.h"

using namespace tinyddp;
using tensor::Device;
using tensor::Tensor;
using tensor::cuda::CudaGraph;

namespace {

const Device kGpu = Device::cuda(0);

// Skips the calling test case (a macro: TINYDDP_SKIP returns from it).
#define REQUIRE_GPU() \
  if (!tensor::cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << tensor::cuda::unavailable_reason())

// Steps of a small MLP on the batches, eagerly or (graph) two eagerly, then captured once and
// replayed for the rest; MSE against float targets, cross-entropy against int64 ones; with
// `clip`, clip_grad_norm_ to 0.05 between backward and the step; SGD with momentum, or
// (`adamw`) AdamW with capturable and amsgrad (its maximum updated in place). Returns the
// parameters after every step.
std::vector<std::vector<Tensor>> train(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys, bool graph,
                                       bool clip = false, bool adamw = false) {
  tensor::manual_seed(3);
  const auto model = nn::mlp({6, 16, 16, 3});
  model->to(kGpu);
  std::unique_ptr<nn::Optimizer> optimizer;
  if (adamw) {
    optimizer = std::make_unique<nn::AdamW>(model->parameters(), nn::AdamWOptions(0.01).capturable(true).amsgrad(true));
  } else {
    optimizer = std::make_unique<nn::SGD>(model->parameters(), nn::SGDOptions(0.05).momentum(0.9));
  }
  nn::Optimizer& opt = *optimizer;
  const Tensor x = tensor::empty({4, 6}, tensor::TensorOptions().device(kGpu));
  const Tensor y = tensor::empty(ys[0].sizes(), tensor::TensorOptions().dtype(ys[0].dtype()).device(kGpu));
  const bool classes = y.dtype() == tensor::kInt64;
  const auto step = [&] {
    opt.zero_grad();
    const Tensor out = model->forward(x);
    (classes ? nn::cross_entropy(out, y) : nn::mse_loss(out, y)).backward();
    if (clip) nn::clip_grad_norm_(model->parameters(), 0.05);  // no host read: capturable
    opt.step();
  };
  std::vector<std::vector<Tensor>> params;
  const auto record = [&] {
    params.emplace_back();
    for (const Tensor& p : model->parameters()) params.back().push_back(p.detach().to(tensor::kCPU));
  };
  CudaGraph g;
  for (size_t i = 0; i < xs.size(); ++i) {
    x.copy_(xs[i]);
    y.copy_(ys[i]);
    if (!graph || i < 2) {
      step();
    } else {
      if (!g.captured()) {
        g.capture_begin(0);
        step();  // recorded, not run
        g.capture_end();
      }
      g.replay();
    }
    record();
  }
  return params;
}

// Steps of Linear -> dropout(0.3) -> causal flash attention over 2 heads with attention dropout
// 0.25 -> mean square, with SGD, on one batch: eagerly, or two eagerly then one captured and
// replayed. Returns the weight after every step. (With the squares' sum the steps grew the
// weights until they overflowed at the sixth step, and NaN never equals NaN.)
std::vector<Tensor> train_dropped(bool graph, int steps) {
  tensor::manual_seed(5);
  nn::Linear linear(8, 16);
  linear.to(kGpu);
  nn::SGD sgd(linear.parameters(), nn::SGDOptions(0.05));
  const Tensor x = tensor::randn({12, 8}).to(kGpu);
  const auto step = [&] {
    sgd.zero_grad();
    const Tensor h = tensor::dropout(linear.forward(x), 0.3).view({12, 2, 8}).transpose(0, 1);
    const Tensor out = tensor::flash_attention(h, h, h, true, 0.35, 0.25);
    tensor::mean(tensor::mul(out, out)).backward();
    sgd.step();
  };
  std::vector<Tensor> weights;
  CudaGraph g;
  for (int i = 0; i < steps; ++i) {
    if (!graph || i < 2) {
      step();
    } else {
      if (!g.captured()) {
        g.capture_begin(0);
        step();
        g.capture_end();
      }
      g.replay();
    }
    weights.push_back(linear.weight.detach().to(tensor::kCPU));
  }
  return weights;
}

}  // namespace

TEST_CASE("CudaGraph replays its captured work on the values copied into its inputs", "[cuda][graph]") {
  REQUIRE_GPU();
  const Tensor x = tensor::zeros({1000}, tensor::TensorOptions().device(kGpu));
  CudaGraph g;
  CHECK_FALSE(g.captured());
  g.capture_begin(0);
  CHECK(tensor::cuda::is_capturing(0));
  const Tensor y = tensor::add(tensor::mul(x, 2.0), 1.0);  // allocated from the graph's pool
  g.capture_end();
  CHECK_FALSE(tensor::cuda::is_capturing(0));
  CHECK(g.captured());
  for (const double v : {1.5, -4.0}) {
    x.copy_(tensor::full({1000}, v));
    g.replay();
    CHECK(tensor::equal(y.to(tensor::kCPU), tensor::full({1000}, 2 * v + 1)));
  }
  // An eager tensor made now is not handed the graph's blocks: a replay leaves it alone.
  const Tensor other = tensor::full({1000}, 7.0, tensor::TensorOptions().device(kGpu));
  g.replay();
  CHECK(tensor::equal(other.to(tensor::kCPU), tensor::full({1000}, 7.0)));
  g.reset();
  CHECK_FALSE(g.captured());
  CHECK_THROWS_WITH(g.replay(), Catch::Contains("CudaGraph::replay: nothing captured"));
}

TEST_CASE("A training step captured in a CudaGraph gives the eager steps' parameters", "[cuda][graph]") {
  REQUIRE_GPU();
  tensor::manual_seed(11);
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < 6; ++i) {
    xs.push_back(tensor::randn({4, 6}));
    ys.push_back(tensor::randn({4, 3}));
  }
  // Class targets with 0, 1, 2, ... rows ignored (-100) at successive steps.
  std::vector<Tensor> labels;
  for (int i = 0; i < 6; ++i) {
    labels.push_back(tensor::from_vector(std::vector<double>{0, 2, 1, 2}).to(tensor::kInt64));
    for (int r = 0; r < std::min(i, 3); ++r) labels.back().narrow(0, r, 1).fill_(-100.0);
  }
  for (const auto& targets : {ys, labels}) {
    INFO((targets[0].dtype() == tensor::kInt64 ? "cross_entropy" : "mse_loss"));
    const auto eager = train(xs, targets, false), replayed = train(xs, targets, true);
    for (size_t step = 0; step < eager.size(); ++step) {
      for (size_t i = 0; i < eager[step].size(); ++i) {
        INFO("step " << step << ", parameter " << i);
        CHECK(tensor::equal(replayed[step][i], eager[step][i]));
      }
    }
    // The steps changed the parameters (a graph that ran nothing would fail above; this
    // guards the test itself).
    CHECK_FALSE(tensor::equal(eager.back()[0], eager.front()[0]));
  }
  // clip_grad_norm_ inside the captured step: its norm and coefficient are device tensors, so
  // every replay clips by its own step's norm.
  const auto eager = train(xs, ys, false, true), replayed = train(xs, ys, true, true);
  for (size_t step = 0; step < eager.size(); ++step) {
    for (size_t i = 0; i < eager[step].size(); ++i) {
      INFO("clipped, step " << step << ", parameter " << i);
      CHECK(tensor::equal(replayed[step][i], eager[step][i]));
    }
  }
  CHECK_FALSE(tensor::equal(eager.back()[0], train(xs, ys, false).back()[0]));  // it did clip
  // AdamW with capturable = true: its step count and bias corrections live on the device, so
  // every replay steps with its own count, as the eager steps do.
  const auto adam_eager = train(xs, ys, false, true, true), adam_replayed = train(xs, ys, true, true, true);
  for (size_t step = 0; step < adam_eager.size(); ++step) {
    for (size_t i = 0; i < adam_eager[step].size(); ++i) {
      INFO("capturable AdamW, step " << step << ", parameter " << i);
      CHECK(tensor::equal(adam_replayed[step][i], adam_eager[step][i]));
    }
  }
}

TEST_CASE("Dropout in a captured step draws new masks at each replay, the eager step's", "[cuda][graph]") {
  REQUIRE_GPU();
  const auto eager = train_dropped(false, 6), replayed = train_dropped(true, 6);
  for (size_t step = 0; step < eager.size(); ++step) {
    INFO("step " << step);
    CHECK(tensor::equal(replayed[step], eager[step]));
    CHECK(tensor::all(tensor::isfinite(eager[step])).item<bool>());  // what equal compares is a number
  }
  CHECK_FALSE(tensor::equal(eager.back(), eager.front()));  // the steps moved the weight
  // Two replays on the same input give different outputs (a frozen key would repeat its mask);
  // after manual_seed the same replays give the same outputs again.
  const Tensor x = tensor::ones({4096}, tensor::TensorOptions().device(kGpu));
  CudaGraph g;
  g.capture_begin(0);
  const Tensor y = tensor::dropout(x, 0.5);
  g.capture_end();
  tensor::manual_seed(9);
  g.replay();
  const Tensor first = y.to(tensor::kCPU);
  g.replay();
  const Tensor second = y.to(tensor::kCPU);
  CHECK_FALSE(tensor::equal(first, second));
  const double kept = tensor::sum(tensor::gt(first, 0.0)).item<double>();
  CHECK(kept > 4096 * 0.5 - 5 * 32);  // Binomial(4096, 0.5): mean 2048, sd 32
  CHECK(kept < 4096 * 0.5 + 5 * 32);
  tensor::manual_seed(9);
  g.replay();
  CHECK(tensor::equal(y.to(tensor::kCPU), first));
  // A generator of the caller's own: refused, naming the op (the graph draws from the default one).
  tensor::Generator own(1);
  CudaGraph refused;
  refused.capture_begin(0);
  const Tensor doubled = tensor::mul(x, 2.0);
  CHECK_THROWS_WITH(tensor::dropout(x, 0.5, true, &own),
                    Catch::Contains("dropout: a CUDA graph being captured draws its random keys from the default"));
  refused.capture_end();  // the refused call queued nothing: the capture itself is whole
  refused.replay();
  CHECK(tensor::equal(doubled.to(tensor::kCPU), tensor::full({4096}, 2.0)));
}

TEST_CASE("Host waits during capture are Errors that name them; the graph then resets", "[cuda][graph]") {
  REQUIRE_GPU();
  const Tensor x = tensor::ones({8}, tensor::TensorOptions().device(kGpu));
  struct Case {
    const char* what;
    std::function<void()> body;
  };
  const std::vector<Case> cases = {
      {"copy_ to the host", [&] { (void)tensor::sum(x).item<double>(); }},
      {"copy_ from the host", [&] { x.copy_(tensor::zeros({8})); }},
      {"synchronize", [] { tensor::cuda::synchronize(0); }},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    {
      CudaGraph g;
      g.capture_begin(0);
      CHECK_THROWS_WITH(c.body(), Catch::Contains(c.what) && Catch::Contains("capturing a CUDA graph"));
      CHECK_THROWS_WITH(g.capture_end(), Catch::Contains("CudaGraph::capture_end: the capture on cuda:0 failed"));
      CHECK_FALSE(tensor::cuda::is_capturing(0));
    }
    // The device works on, eagerly.
    CHECK(tensor::sum(tensor::mul(x, 3.0)).item<double>() == 24.0);
  }
  // Adam's bias correction would be frozen at the captured step: refused, naming why and the
  // way out (capturable).
  {
    const Tensor w = tensor::ones({8}, tensor::TensorOptions().device(kGpu)).requires_grad_();
    tensor::sum(tensor::mul(w, w)).backward();
    nn::Adam adam({w}, nn::AdamOptions(0.01));
    adam.step();  // eagerly: fine
    CudaGraph g;
    g.capture_begin(0);
    CHECK_THROWS_WITH(adam.step(), Catch::Contains("Adam.step: cannot be captured in a CUDA graph") &&
                                       Catch::Contains("capturable(true)"));
  }
  CHECK_FALSE(tensor::cuda::is_capturing(0));
  // Abandoned without capture_end (an exception leaving the scope): the destructor cleans up.
  {
    CudaGraph g;
    g.capture_begin(0);
    CHECK_THROWS_WITH(g.capture_begin(0), Catch::Contains("already holds a capture"));
  }
  CHECK_FALSE(tensor::cuda::is_capturing(0));
  CHECK(tensor::sum(x).item<double>() == 8.0);
}

TEST_CASE("Without CUDA, CudaGraph says so", "[graph]") {
  if (tensor::cuda::is_available()) TINYDDP_SKIP("a CUDA device is present: the GPU cases run instead");
  CudaGraph g;
  CHECK_THROWS_WITH(g.capture_begin(0), Catch::Contains("CudaGraph::capture_begin"));
  CHECK_THROWS_WITH(g.replay(), Catch::Contains("CudaGraph::replay"));
  CHECK_FALSE(g.captured());
  CHECK_FALSE(tensor::cuda::is_capturing(0));
  g.reset();  // nothing to free
}
