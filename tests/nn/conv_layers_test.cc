// Conv2d, BatchNorm1d/2d, pooling, Flatten and Dropout as modules: PyTorch's initial values,
// buffers and state-dict names, momentum=None, train/eval through a tree, repr, errors, and
// checkpoints whose buffers are missing or mis-shaped; ConvTranspose1d/2d and F::conv_transpose1d/2d; Conv1d/2d
// with padding(kSame) and padding modes.
// References: tests/tensor/fixtures/make_conv_fixtures.py and
// tests/nn/fixtures/make_functional_fixtures.py (PyTorch).
#include "tests/fixture_case.h"
#include "tests/test_util.h"
#include "tinyddp/autograd/gradcheck.h"
#include "tinyddp/nn/nn.h"
#include "tinyddp/tensor/cuda.h"

using namespace tinyddp;
using Catch::Contains;
using tensor::Tensor;

namespace {

Tensor value(const std::string& name, const tensor::Shape& shape) {
  static const auto values = testing::load_fixture("tests/tensor/fixtures/conv_reference.txt");
  const auto it = values.find(name);
  if (it == values.end()) throw std::runtime_error("conv_reference.txt has no entry " + name);
  return tensor::from_vector<double>(it->second, shape).to(tensor::kFloat32);
}

}  // namespace

TEST_CASE("Conv2d: weight and bias after manual_seed equal torch.nn.Conv2d's", "[nn][conv]") {
  tensor::manual_seed(3);
  nn::Conv2d conv(4, 6, {3, 2}, 1, 0, 1, /*groups=*/2);
  CHECK(tensor::equal(conv.weight, value("module_conv_weight", {6, 2, 3, 2})));
  CHECK(tensor::equal(conv.bias, value("module_conv_bias", {6})));
  CHECK(conv.state_dict().keys() == std::vector<std::string>{"weight", "bias"});
  CHECK(conv.repr() == "Conv2d(4, 6, kernel_size=(3, 2), stride=(1, 1), groups=2)");
  CHECK_THROWS_WITH(nn::Conv2d(4, 6, 3, 1, 0, 1, 4), Contains("Conv2d: groups (4) must be positive and divide"));
  CHECK_THROWS_WITH(
      conv.forward(tensor::randn({2, 3, 5, 5})),
      Contains("Conv2d: expected input [N, 4, H, W] or [4, H, W] (4 in_channels), got shape [2, 3, 5, 5]"));
}

TEST_CASE("BatchNorm2d: buffers, momentum=None as a cumulative average, eval, as torch.nn.BatchNorm2d", "[nn][conv]") {
  nn::BatchNorm2d bn(3, 1e-5, std::nullopt);
  CHECK(bn.state_dict().keys() ==
        std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"});
  CHECK(bn.parameters().size() == 2);
  CHECK(bn.buffers().size() == 3);
  CHECK(bn.num_batches_tracked.dtype() == tensor::kInt64);
  for (int k = 0; k < 3; ++k) {
    const Tensor out = bn.forward(value(fmt::format("module_bn_input{}", k), {4, 3, 2, 2}));
    CHECK(tensor::allclose(out, value(fmt::format("module_bn_out{}", k), {4, 3, 2, 2}), 1e-5, 1e-6));
  }
  CHECK(bn.num_batches_tracked.item<int64_t>() == 3);
  CHECK(tensor::allclose(bn.running_mean, value("module_bn_running_mean", {3}), 1e-5, 1e-6));
  CHECK(tensor::allclose(bn.running_var, value("module_bn_running_var", {3}), 1e-5, 1e-6));
  bn.eval();
  CHECK(tensor::allclose(bn.forward(value("module_bn_eval_input", {2, 3, 2, 2})),
                         value("module_bn_eval_out", {2, 3, 2, 2}), 1e-5, 1e-6));
  CHECK(bn.num_batches_tracked.item<int64_t>() == 3);  // eval counts nothing
  CHECK(bn.repr() == "BatchNorm2d(3, eps=1e-05, momentum=None, affine=True, track_running_stats=True)");
  CHECK_THROWS_WITH(bn.forward(tensor::randn({2, 3, 4})),
                    Contains("BatchNorm2d: expected 4D input [N, C, H, W], got shape [2, 3, 4]"));
  CHECK_THROWS_WITH(bn.forward(tensor::randn({2, 4, 1, 1})),
                    Contains("BatchNorm2d: expected input with 3 channels (dim 1), got shape [2, 4, 1, 1]"));
  nn::BatchNorm1d bn1(3);
  bn1.forward(tensor::randn({4, 3}));
  bn1.forward(tensor::randn({4, 3, 5}));
  CHECK_THROWS_WITH(bn1.forward(tensor::randn({4, 3, 5, 5})), Contains("BatchNorm1d: expected 2D or 3D input"));
  CHECK_THROWS_WITH(bn1.forward(tensor::randn({1, 3})),
                    Contains("expected more than 1 value per channel when training"));
  // Without running statistics: batch statistics in eval too, and no buffers.
  nn::BatchNorm1d untracked(3, 1e-5, 0.1, /*affine=*/false, /*track_running_stats=*/false);
  untracked.eval();
  const Tensor x = tensor::randn({6, 3});
  CHECK(untracked.state_dict().size() == 0);
  CHECK(tensor::allclose(untracked.forward(x), tensor::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true)));
}

TEST_CASE("train() and eval() reach every submodule: Dropout and BatchNorm in a Sequential", "[nn][conv]") {
  auto drop = std::make_shared<nn::Dropout>(0.5);
  auto bn = std::make_shared<nn::BatchNorm1d>(4);
  auto model = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{drop}), bn,
      std::make_shared<nn::Flatten>()});
  const Tensor x = tensor::randn({8, 4});
  model->eval();
  CHECK(!drop->is_training());
  CHECK(!bn->is_training());
  const Tensor y = model->forward(x);
  CHECK(tensor::equal(y, model->forward(x)));  // no dropout, running statistics: deterministic
  CHECK(bn->num_batches_tracked.item<int64_t>() == 0);
  model->train();
  CHECK(drop->is_training());
  model->forward(x);
  CHECK(bn->num_batches_tracked.item<int64_t>() == 1);
  CHECK(
      model->repr() ==
      "Sequential(\n  (0): Sequential(\n    (0): Dropout(p=0.5, inplace=False)\n  )\n  (1): BatchNorm1d(4, eps=1e-05, "
      "momentum=0.1, affine=True, track_running_stats=True)\n  (2): Flatten(start_dim=1, end_dim=-1)\n)");
  CHECK_THROWS_WITH(nn::Dropout(1.5), Contains("Dropout: probability p must be in [0, 1), got 1.5"));
  CHECK_THROWS_WITH(nn::Dropout(1.0), Contains("Dropout: probability p must be in [0, 1), got 1"));
}

TEST_CASE("pooling modules and Flatten: PyTorch's defaults and shapes", "[nn][conv]") {
  const Tensor x = tensor::randn({2, 3, 8, 6});
  CHECK(nn::MaxPool2d(2).forward(x).sizes() == tensor::Shape{2, 3, 4, 3});
  CHECK(nn::MaxPool2d(3, tensor::Size2d(1), 1).forward(x).sizes() == tensor::Shape{2, 3, 8, 6});
  CHECK(nn::AvgPool2d(tensor::Size2d{2, 3}).forward(x).sizes() == tensor::Shape{2, 3, 4, 2});
  CHECK(nn::AdaptiveAvgPool2d(1).forward(x).sizes() == tensor::Shape{2, 3, 1, 1});
  CHECK(nn::Flatten().forward(x).sizes() == tensor::Shape{2, 144});
  CHECK(nn::Flatten(0, 1).forward(x).sizes() == tensor::Shape{6, 8, 6});
  // (torch.nn.MaxPool2d(2)'s repr)
  CHECK(nn::MaxPool2d(2).repr() == "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)");
}

TEST_CASE("load_state_dict refuses a checkpoint whose BatchNorm buffers are missing or mis-shaped, naming the key",
          "[nn][conv]") {
  const auto make = [] {
    return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Conv2d>(1, 4, 3), std::make_shared<nn::BatchNorm2d>(4)});
  };
  const auto model = make();
  model->forward(tensor::randn({2, 1, 5, 5}));  // running statistics and the count move
  const auto saved = model->state_dict();
  const auto fresh = make();
  const Tensor before = fresh->state_dict().at("1.running_mean").clone();

  nn::OrderedDict<Tensor> missing;
  for (const auto& [name, t] : saved) {
    if (name != "1.running_var") missing.insert(name, t);
  }
  CHECK_THROWS_WITH(fresh->load_state_dict(missing), Contains("missing key(s): \"1.running_var\""));
  nn::OrderedDict<Tensor> misshaped;
  for (const auto& [name, t] : saved) misshaped.insert(name, name == "1.running_mean" ? tensor::zeros({5}) : t);
  CHECK_THROWS_WITH(fresh->load_state_dict(misshaped),
                    Contains("size mismatch for 1.running_mean (checkpoint [5], model [4])"));
  CHECK(tensor::equal(fresh->state_dict().at("1.running_mean"), before));  // unchanged

  fresh->load_state_dict(saved);  // buffers included
  CHECK(tensor::equal(fresh->state_dict().at("1.running_var"), saved.at("1.running_var")));
  CHECK(fresh->state_dict().at("1.num_batches_tracked").item<int64_t>() == 1);
}

TEST_CASE("ConvTranspose2d and F::conv_transpose2d match PyTorch: outputs, gradients, initial weights",
          "[nn][conv][conv_transpose]") {
  namespace F = tinyddp::nn::functional;
  using V = std::vector<Tensor>;
  const testing::Fixture f("tests/nn/fixtures/functional_reference.txt");
  f.check_case("ct_basic", {{"x", {2, 3, 4, 5}}, {"w", {3, 2, 3, 3}}, {"b", {2}}}, {2, 2, 8, 10},
               [](const V& v) { return F::conv_transpose2d(v[0], v[1], v[2], 2, 1, 1); });
  f.check_case("ct_groups", {{"x", {1, 4, 3, 5}}, {"w", {4, 3, 2, 3}}}, {1, 6, 3, 5}, [](const V& v) {
    return F::conv_transpose2d(v[0], v[1], Tensor(), {1, 2}, {1, 3}, 0, 2, {2, 1});
  });
  f.check_case("ct_unbatched", {{"x", {3, 4, 4}}, {"w", {3, 2, 2, 2}}}, {2, 8, 8},
               [](const V& v) { return F::conv_transpose2d(v[0], v[1], Tensor(), 2); });

  tensor::manual_seed(11);
  nn::ConvTranspose2d layer(nn::ConvTranspose2dOptions(4, 6, 3).groups(2));
  CHECK(tensor::equal(layer.weight, f.value("ct_init_weight", {4, 3, 3, 3}, tensor::kFloat32)));
  CHECK(tensor::equal(layer.bias, f.value("ct_init_bias", {6}, tensor::kFloat32)));
  CHECK(layer.repr() == "ConvTranspose2d(4, 6, kernel_size=(3, 3), stride=(1, 1), groups=2)");
  CHECK(nn::ConvTranspose2d(
            nn::ConvTranspose2dOptions(3, 2, {2, 3}).stride(2).padding(1).output_padding(1).bias(false).dilation(2))
            .repr() ==
        "ConvTranspose2d(3, 2, kernel_size=(2, 3), stride=(2, 2), padding=(1, 1), dilation=(2, 2), "
        "output_padding=(1, 1), bias=False)");
  CHECK(layer.clone_structure()->repr() == layer.repr());
  CHECK(layer(tensor::zeros({2, 4, 5, 5})).sizes() == tensor::Shape{2, 6, 7, 7});
  CHECK_THROWS_WITH(F::conv_transpose2d(tensor::zeros({1, 3, 4, 4}), tensor::zeros({3, 2, 3, 3}), Tensor(), 1, 0, 1),
                    Contains("output padding must be smaller than either stride or dilation"));
  CHECK_THROWS_WITH(layer(tensor::zeros({2, 3, 5, 5})), Contains("expected weight [3, out / groups, kh, kw]"));

  tensor::Generator g(2);
  const auto random = [&](const tensor::Shape& shape) {
    return tensor::randn(shape, tensor::TensorOptions(tensor::kFloat64), &g).requires_grad_();
  };
  CHECK(autograd::gradcheck([](const V& v) { return F::conv_transpose2d(v[0], v[1], v[2], 2, 1, 1); },
                            {random({1, 2, 3, 3}), random({2, 2, 2, 2}), random({2})}) == "");
}

TEST_CASE("ConvTranspose1d and F::conv_transpose1d match PyTorch: outputs, gradients, initial weights",
          "[nn][conv][conv_transpose]") {
  namespace F = tinyddp::nn::functional;
  using V = std::vector<Tensor>;
  const testing::Fixture f("tests/nn/fixtures/functional_reference.txt");
  f.check_case("ct1_basic", {{"x", {2, 3, 6}}, {"w", {3, 2, 3}}, {"b", {2}}}, {2, 2, 12},
               [](const V& v) { return F::conv_transpose1d(v[0], v[1], v[2], 2, 1, 1); });
  f.check_case("ct1_groups", {{"x", {1, 4, 5}}, {"w", {4, 3, 2}}}, {1, 6, 5},
               [](const V& v) { return F::conv_transpose1d(v[0], v[1], Tensor(), 1, 1, 0, 2, 2); });
  f.check_case("ct1_unbatched", {{"x", {3, 4}}, {"w", {3, 2, 2}}}, {2, 8},
               [](const V& v) { return F::conv_transpose1d(v[0], v[1], Tensor(), 2); });
  tensor::manual_seed(12);
  nn::ConvTranspose1d layer(nn::ConvTranspose1dOptions(4, 6, 3).groups(2));
  CHECK(tensor::equal(layer.weight, f.value("ct1_init_weight", {4, 3, 3}, tensor::kFloat32)));
  CHECK(tensor::equal(layer.bias, f.value("ct1_init_bias", {6}, tensor::kFloat32)));
  CHECK(layer.repr() == "ConvTranspose1d(4, 6, kernel_size=(3,), stride=(1,), groups=2)");
  CHECK(layer.clone_structure()->repr() == layer.repr());
  CHECK(nn::ConvTranspose1d(3, 2, 4, 2, 1, 1).repr() ==
        "ConvTranspose1d(3, 2, kernel_size=(4,), stride=(2,), padding=(1,), output_padding=(1,))");
  CHECK(layer(tensor::zeros({2, 4, 5})).sizes() == tensor::Shape{2, 6, 7});
  CHECK_THROWS_WITH(layer(tensor::zeros({2, 4, 5, 5})), Contains("conv_transpose1d: expected a 2-D or 3-D input"));
  CHECK_THROWS_WITH(nn::ConvTranspose1d(nn::ConvTranspose1dOptions(4, 6, 3).groups(3)),
                    Contains("ConvTranspose1d: groups (3) must be positive and divide in_channels (4)"));
  tensor::Generator g(3);
  const auto random = [&](const tensor::Shape& shape) {
    return tensor::randn(shape, tensor::TensorOptions(tensor::kFloat64), &g).requires_grad_();
  };
  CHECK(autograd::gradcheck([](const V& v) { return F::conv_transpose1d(v[0], v[1], v[2], 2, 1, 1); },
                            {random({1, 2, 4}), random({2, 2, 3}), random({2})}) == "");
}

TEST_CASE("Conv2d and Conv1d with padding(kSame) and padding modes match PyTorch: weights, reprs, outputs, gradients",
          "[nn][conv][padding]") {
  using V = std::vector<Tensor>;
  const testing::Fixture f("tests/nn/fixtures/functional_reference.txt");
  struct Case {
    std::string name;
    uint64_t seed;
    std::function<std::shared_ptr<nn::Module>()> make;
    tensor::Shape input;
    std::string repr;
  };
  const std::vector<Case> cases = {
      {"conv_same_reflect",
       14,
       [] {
         return std::make_shared<nn::Conv2d>(
             nn::Conv2dOptions(2, 3, {3, 4}).padding(nn::kSame).dilation({1, 2}).padding_mode("reflect"));
       },
       {2, 2, 5, 9},
       "Conv2d(2, 3, kernel_size=(3, 4), stride=(1, 1), padding=same, dilation=(1, 2), padding_mode=reflect)"},
      {"conv_circular",
       15,
       [] { return std::make_shared<nn::Conv2d>(nn::Conv2dOptions(2, 3, 3).padding(1).padding_mode("circular")); },
       {1, 2, 4, 5},
       "Conv2d(2, 3, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), padding_mode=circular)"},
      {"conv_same_zeros",
       16,
       [] { return std::make_shared<nn::Conv2d>(nn::Conv2dOptions(2, 2, 4).padding(nn::kSame).bias(false)); },
       {1, 2, 5, 5},
       "Conv2d(2, 2, kernel_size=(4, 4), stride=(1, 1), padding=same, bias=False)"},
      {"conv1d_same_replicate",
       17,
       [] {
         return std::make_shared<nn::Conv1d>(nn::Conv1dOptions(2, 3, 4).padding(nn::kSame).padding_mode("replicate"));
       },
       {2, 2, 7},
       "Conv1d(2, 3, kernel_size=(4,), stride=(1,), padding=same, padding_mode=replicate)"}};
  for (const Case& c : cases) {
    INFO(c.name);
    tensor::manual_seed(c.seed);
    const std::shared_ptr<nn::Module> layer = c.make();
    CHECK(layer->repr() == c.repr);
    CHECK(layer->clone_structure()->repr() == c.repr);
    for (const auto& [name, p] : layer->named_parameters()) {
      CHECK(tensor::equal(p, f.value(c.name + "_" + name, p.sizes(), tensor::kFloat32)));
    }
    layer->to(tensor::kFloat64);
    f.check_case(c.name, {{"x", c.input}},
                 c.input.size() == 4 ? tensor::Shape{c.input[0], layer->parameters()[0].size(0), c.input[2], c.input[3]}
                                     : tensor::Shape{c.input[0], 3, c.input[2]},
                 [&](const V& v) { return layer->forward(v[0]); });
  }
  CHECK_THROWS_WITH(nn::Conv2d(nn::Conv2dOptions(2, 2, 3).padding(nn::kSame).stride(2)),
                    Contains("Conv2d: padding='same' is not supported for strided convolutions"));
  CHECK_THROWS_WITH(nn::Conv1d(nn::Conv1dOptions(2, 2, 3).padding_mode("mirror")),
                    Contains("padding_mode must be one of ['zeros', 'reflect', 'replicate', 'circular'], but got "
                             "padding_mode='mirror'"));
  CHECK(nn::Conv2d(nn::Conv2dOptions(2, 2, 3).padding(nn::kValid))(tensor::zeros({1, 2, 5, 5})).sizes() ==
        tensor::Shape{1, 2, 3, 3});
  // The last padding set holds, as libtorch's padding variant: a size after kSame replaces it.
  CHECK(nn::Conv2d(nn::Conv2dOptions(2, 2, 3).padding(nn::kSame).padding(2))(tensor::zeros({1, 2, 5, 5})).sizes() ==
        tensor::Shape{1, 2, 7, 7});
  CHECK(
      nn::Conv1d(nn::Conv1dOptions(2, 2, 3).padding(nn::kSame).padding(nn::kValid))(tensor::zeros({1, 2, 5})).sizes() ==
      tensor::Shape{1, 2, 3});
}

TEST_CASE("CUDA: conv_transpose2d matches the CPU", "[nn][conv][conv_transpose][cuda]") {
  if (!tensor::cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << tensor::cuda::unavailable_reason());
  const auto opts = tensor::TensorOptions(tensor::kFloat64);
  testing::expect_matches_cpu(
      {tensor::randn({2, 4, 3, 3}, opts), tensor::randn({4, 3, 3, 3}, opts), tensor::randn({6}, opts)},
      [](const std::vector<Tensor>& v) {
        return tinyddp::nn::functional::conv_transpose2d(v[0], v[1], v[2], 2, 1, 1, 2);
      },
      "conv_transpose2d", 1e-12);
}
