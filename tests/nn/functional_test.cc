// nn/functional.h's composites against PyTorch (fixtures/make_functional_fixtures.py): forward
// and gradients in float64 on inputs that include each activation's boundaries (where
// PyTorch's gradients are one-sided or exclusive), a float64 gradcheck of each away from
// them, and the activation modules' forwards and reprs (PyTorch's strings), plus Identity
// and Unflatten; the 1-d pools and Dropout2d.
#include <cmath>
#include <functional>

#include "tests/fixture_case.h"
#include "tests/test_util.h"
#include "tinyddp/autograd/gradcheck.h"
#include "tinyddp/nn/nn.h"
#include "tinyddp/tensor/cuda.h"

using namespace tinyddp;
using tensor::Shape;
using tensor::Tensor;
using V = std::vector<Tensor>;
using Catch::Contains;
namespace F = tinyddp::nn::functional;

namespace {
const testing::Fixture& fixture() {
  static const testing::Fixture f("tests/nn/fixtures/functional_reference.txt");
  return f;
}
}  // namespace

TEST_CASE("F:: activations match PyTorch on inputs that include their boundaries, gradients too", "[nn][functional]") {
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> cases = {
      {"elu", [](const Tensor& x) { return F::elu(x, 1.5); }},
      {"selu", [](const Tensor& x) { return F::selu(x); }},
      {"silu", [](const Tensor& x) { return F::silu(x); }},
      {"softplus", [](const Tensor& x) { return F::softplus(x); }},
      {"softplus_beta", [](const Tensor& x) { return F::softplus(x, 2.0, 5.0); }},
      {"mish", [](const Tensor& x) { return F::mish(x); }},
      {"hardtanh", [](const Tensor& x) { return F::hardtanh(x); }},
      {"relu6", [](const Tensor& x) { return F::relu6(x); }},
      {"hardsigmoid", [](const Tensor& x) { return F::hardsigmoid(x); }},
      {"hardswish", [](const Tensor& x) { return F::hardswish(x); }},
  };
  for (const auto& [name, f] : cases) {
    fixture().check_case(name, {{"x", {4, 6}}}, {4, 6}, [f = f](const V& v) { return f(v[0]); });
  }
  fixture().check_case("glu", {{"x", {4, 6}}}, {4, 3}, [](const V& v) { return F::glu(v[0], 1); });
  fixture().check_case("prelu", {{"x", {2, 3, 4}}, {"w", {3}}}, {2, 3, 4},
                       [](const V& v) { return F::prelu(v[0], v[1]); });
  fixture().check_case("prelu_one", {{"x", {2, 3}}, {"w", {1}}}, {2, 3},
                       [](const V& v) { return F::prelu(v[0], v[1]); });
}

TEST_CASE("F::normalize, cosine_similarity and pad match PyTorch, gradients too", "[nn][functional]") {
  const auto& f = fixture();
  f.check_case("normalize", {{"x", {3, 4}}}, {3, 4}, [](const V& v) { return F::normalize(v[0]); });
  f.check_case("normalize_p1", {{"x", {3, 4}}}, {3, 4}, [](const V& v) { return F::normalize(v[0], 1.0, 0); });
  f.check_case("cosine_similarity", {{"a", {3, 4}}, {"b", {1, 4}}}, {3},
               [](const V& v) { return F::cosine_similarity(v[0], v[1]); });
  f.check_case("pad_constant", {{"x", {2, 3, 4}}}, {2, 3, 7}, [](const V& v) {
    return F::pad(v[0], {1, 2, -1, 1}, "constant", 0.5);
  });
  f.check_case("pad_reflect", {{"x", {2, 3, 4}}}, {2, 3, 7}, [](const V& v) {
    return F::pad(v[0], {2, 1}, "reflect");
  });
  f.check_case("pad_replicate", {{"x", {1, 2, 3, 4}}}, {1, 2, 5, 7}, [](const V& v) {
    return F::pad(v[0], {1, 2, 2, 0}, "replicate");
  });
  f.check_case("pad_circular", {{"x", {1, 2, 4}}}, {1, 2, 8}, [](const V& v) {
    return F::pad(v[0], {1, 3}, "circular");
  });
  CHECK_THROWS_WITH(F::pad(tensor::zeros({2, 3}), {3, 0}, "reflect"),
                    Contains("pad: padding size should be less than the corresponding input dimension"));
  CHECK_THROWS_WITH(F::pad(tensor::zeros({2, 3}), {1}), Contains("pad: padding length must be even"));
  CHECK_THROWS_WITH(F::glu(tensor::zeros({2, 3})), Contains("glu: Halving dimension must be even"));
  CHECK_THROWS_WITH(F::prelu(tensor::zeros({2, 3}), tensor::zeros({2})), Contains("prelu: Mismatch of parameter"));
}

TEST_CASE("F:: composites pass gradcheck away from their kinks", "[nn][functional]") {
  tensor::Generator g(9);
  const auto random = [&](const Shape& shape) {
    return tensor::randn(shape, tensor::TensorOptions(tensor::kFloat64), &g).requires_grad_();
  };
  const std::vector<std::function<Tensor(const V&)>> fns = {
      [](const V& v) { return F::elu(v[0]); },
      [](const V& v) { return F::silu(v[0]); },
      [](const V& v) { return F::softplus(v[0]); },
      [](const V& v) { return F::mish(v[0]); },
      [](const V& v) { return F::hardswish(v[0]); },
      [](const V& v) { return F::glu(v[0], 0); },
      [](const V& v) { return F::normalize(v[0]); },
      [](const V& v) {
        return F::pad(v[0], {1, 1}, "reflect");
      },
      [](const V& v) { return F::cosine_similarity(v[0], v[0].flip({1})); },
      [](const V& v) { return F::max_pool1d(v[0], 2, 1); },  // (random values: no ties)
      [](const V& v) { return F::avg_pool1d(v[0], 2, 1, 1); },
  };
  for (size_t i = 0; i < fns.size(); ++i) {
    INFO("function " << i);
    CHECK(autograd::gradcheck(fns[i], {random({4, 3})}) == "");
  }
}

TEST_CASE("the activation modules run their functions and print as PyTorch's", "[nn][functional]") {
  const Tensor x = tensor::randn({2, 4});
  CHECK(tensor::equal(nn::SiLU()(x), F::silu(x)));
  CHECK(tensor::equal(nn::Softmax(1)(x), tensor::softmax(x, 1)));
  CHECK(tensor::equal(nn::Identity()(x), x));
  CHECK(nn::Unflatten(1, {2, 2})(x).sizes() == Shape{2, 2, 2});
  const std::vector<std::pair<std::shared_ptr<nn::Module>, std::string>> reprs = {
      {std::make_shared<nn::Softplus>(), "Softplus(beta=1.0, threshold=20.0)"},
      {std::make_shared<nn::ELU>(), "ELU(alpha=1.0)"},
      {std::make_shared<nn::Hardtanh>(), "Hardtanh(min_val=-1.0, max_val=1.0)"},
      {std::make_shared<nn::PReLU>(), "PReLU(num_parameters=1)"},
      {std::make_shared<nn::GLU>(), "GLU(dim=-1)"},
      {std::make_shared<nn::Softmax>(1), "Softmax(dim=1)"},
      {std::make_shared<nn::LogSoftmax>(-1), "LogSoftmax(dim=-1)"},
      {std::make_shared<nn::SiLU>(), "SiLU()"},
      {std::make_shared<nn::ReLU6>(), "ReLU6()"},
      {std::make_shared<nn::Mish>(), "Mish()"},
      {std::make_shared<nn::Identity>(), "Identity()"},
      {std::make_shared<nn::Unflatten>(1, Shape{2, 3}), "Unflatten(dim=1, unflattened_size=(2, 3))"},
  };
  for (const auto& [module, want] : reprs) {
    CHECK(module->repr() == want);
    CHECK(module->clone_structure()->repr() == want);
  }
  nn::PReLU prelu(3);
  CHECK(prelu.named_parameters().size() == 1);
  CHECK(tensor::equal(prelu.weight, tensor::full({3}, 0.25)));
  CHECK(nn::repr_float(1e-5) == "1e-05");
  CHECK(nn::repr_float(-2.0) == "-2.0");
}

TEST_CASE("CUDA: the F:: composites match the CPU on a GPU", "[nn][functional][cuda]") {
  if (!tensor::cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << tensor::cuda::unavailable_reason());
  const Tensor x = tensor::randn({4, 6}, tensor::TensorOptions(tensor::kFloat64));
  const std::vector<std::pair<std::string, std::function<Tensor(const V&)>>> fns = {
      {"elu", [](const V& v) { return F::elu(v[0]); }},
      {"softplus", [](const V& v) { return F::softplus(v[0], 2.0, 1.0); }},
      {"mish", [](const V& v) { return F::mish(v[0]); }},
      {"hardswish", [](const V& v) { return F::hardswish(v[0]); }},
      {"relu6", [](const V& v) { return F::relu6(tensor::mul(v[0], 4.0)); }},
      {"glu", [](const V& v) { return F::glu(v[0]); }},
      {"normalize", [](const V& v) { return F::normalize(v[0]); }},
      {"pad reflect",
       [](const V& v) {
         return F::pad(v[0], {2, 1}, "reflect");
       }},
      {"pad constant",
       [](const V& v) {
         return F::pad(v[0], {1, -1}, "constant", 3.0);
       }},
      {"max_pool1d", [](const V& v) { return F::max_pool1d(v[0], 3, 2, 1); }},
      {"avg_pool1d", [](const V& v) { return F::avg_pool1d(v[0], 3, 2, 1, false); }},
  };
  for (const auto& [name, f] : fns) testing::expect_matches_cpu({x}, f, name, 1e-12);
}

TEST_CASE("pad_sequence, parameters_to_vector and vector_to_parameters match PyTorch's", "[nn][utils]") {
  const auto& f = fixture();
  const std::vector<std::pair<std::string, Shape>> seqs = {{"a", {2, 3}}, {"b", {4, 3}}, {"c", {3, 3}}};
  f.check_case("pad_sequence", seqs, {3, 4, 3}, [](const V& v) {
    return nn::pad_sequence({v[0], v[1], v[2]}, true, -1.0);
  });
  f.check_case("pad_sequence_time", seqs, {4, 3, 3}, [](const V& v) { return nn::pad_sequence({v[0], v[1], v[2]}); });
  f.check_case("parameters_to_vector", {{"a", {2, 3}}, {"b", {4}}}, {10}, [](const V& v) {
    return nn::parameters_to_vector({v[0], v[1]});
  });
  // left padding: the zeros come first
  const Tensor left = nn::pad_sequence({tensor::ones({1}), tensor::ones({3})}, true, 0.0, "left");
  CHECK(tensor::equal(left, tensor::from_vector<float>({0, 0, 1, 1, 1, 1}, Shape{2, 3})));
  // vector_to_parameters writes each parameter's slice back
  nn::Linear linear(3, 2);
  const auto params = linear.parameters();
  const Tensor v = tensor::arange(8.0);
  nn::vector_to_parameters(v, params);
  CHECK(tensor::equal(nn::parameters_to_vector(params).detach(), v));
  CHECK_THROWS_WITH(nn::vector_to_parameters(tensor::arange(7.0), params),
                    Contains("vector_to_parameters: vec has 7 elements but the parameters have 8"));
  CHECK_THROWS_WITH(nn::pad_sequence({}), Contains("pad_sequence: received an empty list of sequences"));
}

TEST_CASE("F::max_pool1d and avg_pool1d match PyTorch's; Dropout2d drops whole channels", "[nn][functional]") {
  const auto& f = fixture();
  f.check_case("max_pool1d", {{"x", {2, 3, 7}}}, {2, 3, 4}, [](const V& v) { return F::max_pool1d(v[0], 3, 2, 1); });
  f.check_case("max_pool1d_dilated", {{"x", {3, 8}}}, {3, 3},
               [](const V& v) { return F::max_pool1d(v[0], 2, std::nullopt, 0, 2); });
  f.check_case("avg_pool1d", {{"x", {2, 3, 7}}}, {2, 3, 4}, [](const V& v) { return F::avg_pool1d(v[0], 3, 2, 1); });
  f.check_case("avg_pool1d_exclude_pad", {{"x", {3, 7}}}, {3, 4},
               [](const V& v) { return F::avg_pool1d(v[0], 3, 2, 1, false); });
  CHECK(nn::MaxPool1d(3, 2, 1).repr() == "MaxPool1d(kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=False)");
  CHECK(nn::AvgPool1d(2).repr() == "AvgPool1d(kernel_size=(2,), stride=(2,), padding=(0,))");
  CHECK(nn::Dropout2d(0.3).repr() == "Dropout2d(p=0.3, inplace=False)");
  // Dropout2d: each channel is all zeros or all x / (1 - p); about p of them are zeros; the
  // gradient is the same mask; outside training the identity.
  nn::Dropout2d drop(0.25);
  const Tensor x = tensor::rand({64, 16, 3, 3}).add_(1.0).requires_grad_();
  const Tensor y = drop.forward(x);
  y.sum().backward();
  const std::vector<float> xs = x.detach().to_vector<float>(), ys = y.detach().to_vector<float>(),
                           gs = x.grad().to_vector<float>();
  int64_t dropped = 0;
  for (size_t c = 0; c < 64 * 16; ++c) {
    const bool zero = ys[c * 9] == 0.0f;
    dropped += zero;
    for (size_t k = c * 9; k < c * 9 + 9; ++k) {
      CHECK(ys[k] == (zero ? 0.0f : xs[k] * (1.0f / 0.75f)));
      CHECK(gs[k] == (zero ? 0.0f : 1.0f / 0.75f));
    }
  }
  // 1024 channels, p = 0.25: 256 expected, standard deviation sqrt(1024 * 0.25 * 0.75) ~ 13.9.
  CHECK(std::abs(dropped - 256) < 6 * 14);
  drop.eval();
  CHECK(tensor::equal(drop.forward(x), x));
  CHECK(F::dropout2d(tensor::ones({2, 3, 3}), 0.5).sizes() == Shape{2, 3, 3});  // unbatched [C, H, W]
  CHECK_THROWS_WITH(F::dropout2d(tensor::ones({2, 3}), 0.5), Contains("dropout2d: expected a 4-D input"));
  CHECK_THROWS_WITH(F::max_pool1d(tensor::ones({2, 3, 4, 5}), 2), Contains("max_pool1d: expected a 2-D [C, L] or 3-D"));
}

TEST_CASE("Embedding(padding_idx) and F::embedding(..., padding_idx) match PyTorch: the padding row takes no gradient",
          "[nn][embedding]") {
  const auto& f = fixture();
  const Tensor ids = tensor::from_vector<int64_t>({1, 4, 1, 0, 5, 3}, Shape{2, 3});
  f.check_case("embedding_padding", {{"w", {6, 3}}}, {2, 3, 3}, [&](const V& v) { return F::embedding(ids, v[0], 1); });
  f.check_case("embedding_padding_negative", {{"w", {6, 3}}}, {2, 3, 3},
               [&](const V& v) { return F::embedding(ids, v[0], -1); });
  tensor::manual_seed(13);
  nn::Embedding layer(nn::EmbeddingOptions(6, 3).padding_idx(-2));
  // randn's numbers up to the last bit or two of float32 (Box-Muller's log and cos), the padding row zeros
  CHECK(tensor::allclose(layer.weight, f.value("embedding_init_weight", {6, 3}, tensor::kFloat32), 1e-6, 1e-7));
  CHECK(tensor::equal(layer.weight.select(0, 4), tensor::zeros({3})));
  CHECK(layer.repr() == "Embedding(6, 3, padding_idx=4)");
  CHECK(layer.clone_structure()->repr() == layer.repr());
  layer(tensor::from_vector<int64_t>({4, 4, 2}, Shape{3})).sum().backward();
  CHECK(tensor::equal(layer.weight.grad().select(0, 4), tensor::zeros({3})));
  CHECK(tensor::equal(layer.weight.grad().select(0, 2), tensor::ones({3})));
  const auto pretrained = nn::Embedding::from_pretrained(tensor::ones({4, 2}), false, 0);
  CHECK(tensor::equal(pretrained->weight.select(0, 0), tensor::ones({2})));  // kept as given
  CHECK(pretrained->padding_idx == 0);
  CHECK_THROWS_WITH(nn::Embedding(6, 3, 6), Contains("Padding_idx must be within num_embeddings"));
}

TEST_CASE("Embedding(scale_grad_by_freq) and F::embedding's options match PyTorch: each id's gradient over its count",
          "[nn][embedding]") {
  const auto& f = fixture();
  const Tensor ids = tensor::tensor({{3, 1, 3}, {3, 0, 1}});
  f.check_case("embedding_freq", {{"w", {5, 3}}}, {2, 3, 3},
               [&](const V& v) { return F::embedding(ids, v[0], F::EmbeddingFuncOptions().scale_grad_by_freq(true)); });
  f.check_case("embedding_freq_padding", {{"w", {5, 3}}}, {2, 3, 3}, [&](const V& v) {
    nn::Embedding layer(nn::EmbeddingOptions(5, 3).padding_idx(1).scale_grad_by_freq(true));
    layer.weight = layer.replace_parameter("weight", v[0]);
    return layer(ids);
  });
  CHECK(nn::Embedding(nn::EmbeddingOptions(5, 3).padding_idx(1).scale_grad_by_freq(true)).repr() ==
        "Embedding(5, 3, padding_idx=1, scale_grad_by_freq=True)");
  // (Not gradcheck's business: these gradients are scaled on purpose, away from the true ones.)
  CHECK_THROWS_WITH(nn::Embedding(nn::EmbeddingOptions(5, 3).sparse(true)),
                    Contains("Embedding: sparse=true is not supported in tinyddp (no sparse gradients)"));
  CHECK_THROWS_WITH(F::embedding(ids, tensor::zeros({5, 3}), F::EmbeddingFuncOptions().sparse(true)),
                    Contains("embedding: sparse=true is not supported"));
}

TEST_CASE("Embedding with max_norm renormalises the rows it looks up in place, as PyTorch's", "[nn][embedding]") {
  const Tensor ids = tensor::tensor({{1, 4, 1}, {0, 5, 3}});
  for (const auto& [c, norm_type, repr] :
       {std::tuple<std::string, double, std::string>{"embedding_max_norm", 2.0, "Embedding(6, 3, max_norm=1.0)"},
        {"embedding_max_norm_l1", 1.0, "Embedding(6, 3, max_norm=1.0, norm_type=1.0)"}}) {
    INFO(c);
    nn::Embedding layer(nn::EmbeddingOptions(6, 3).max_norm(1.0).norm_type(norm_type));
    CHECK(layer.repr() == repr);
    CHECK(layer.clone_structure()->repr() == repr);
    layer.to(tensor::kFloat64);
    {
      tensor::NoGradGuard no_grad;
      layer.weight.copy_(fixture().value(c + "_weight", {6, 3}));
    }
    const Tensor out = layer.forward(ids);
    CHECK(tensor::allclose(layer.weight, fixture().value(c + "_renormed", {6, 3}), 1e-12, 1e-12));
    CHECK(tensor::allclose(out, fixture().value(c + "_out", {2, 3, 3}), 1e-12, 1e-12));
    out.backward(fixture().value(c + "_grad_out", {2, 3, 3}));
    CHECK(tensor::allclose(layer.weight.grad(), fixture().value(c + "_grad_weight", {6, 3}), 1e-12, 1e-12));
  }
  CHECK_THROWS_WITH(nn::Embedding(nn::EmbeddingOptions(6, 3).max_norm(1.0).norm_type(3.0)),
                    Contains("Embedding: max_norm must be positive and norm_type 1 or 2"));
}
