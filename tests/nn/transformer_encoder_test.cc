// TransformerEncoderLayer and TransformerEncoder against PyTorch's
// (fixtures/make_transformer_encoder_fixture.py): initial weights after the same seed and the
// state-dict names; in float64 (1e-12) a post-norm ReLU layer with a causal mask, a pre-norm
// GELU batch_first layer with a key padding mask, and a two-layer encoder with a final
// LayerNorm: outputs and every gradient. Then the deep copies, reprs' names, errors.
#include <nlohmann/json.hpp>

#include "tests/nn/json_fixture.h"
#include "tests/nn/nn_test_util.h"
#include "tinyddp/nn/transformer_encoder.h"
#include "tinyddp/tensor/cuda.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using Catch::Contains;

namespace {

using tinyddp::testing::doubles;

// forward on the case's input, backward of its grad_out: output, input gradient and every
// parameter's gradient within 1e-12.
void check_case(Module& m, const nlohmann::json& c, const tensor::Shape& shape,
                const std::function<Tensor(const Tensor&)>& forward) {
  const Tensor x = doubles(c["x"], shape).requires_grad_();
  const Tensor y = forward(x);
  CHECK(tensor::allclose(y, doubles(c["out"], shape), 1e-12, 1e-12));
  y.backward(doubles(c["grad_out"], shape));
  CHECK(tensor::allclose(x.grad(), doubles(c["grad_x"], shape), 1e-12, 1e-12));
  for (const auto& [name, p] : m.named_parameters()) {
    INFO(name);
    CHECK(tensor::allclose(p.grad(), doubles(c["grads"][name], p.sizes()), 1e-12, 1e-12));
  }
}

}  // namespace

TEST_CASE("TransformerEncoderLayer equals PyTorch's: initial weights, post-norm and pre-norm, masks, gradients",
          "[nn][transformer][fixture]") {
  const nlohmann::json ref = tinyddp::testing::read_nn_json_fixture("transformer_encoder_reference.json");
  tensor::manual_seed(ref["init"]["seed"].get<uint64_t>());
  TransformerEncoderLayer fresh(TransformerEncoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.0));
  std::vector<std::string> names;
  for (const auto& [name, t] : fresh.state_dict()) {
    INFO(name);
    names.push_back(name);
    CHECK(tensor::allclose(t, doubles(ref["init"]["state"][name], t.sizes()).to(tensor::kFloat32), 0, 0));
  }
  CHECK(names == std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.in_proj_bias",
                                          "self_attn.out_proj.weight", "self_attn.out_proj.bias", "linear1.weight",
                                          "linear1.bias", "linear2.weight", "linear2.bias", "norm1.weight",
                                          "norm1.bias", "norm2.weight", "norm2.bias"});

  TransformerEncoderLayer post(8, 2, 16, 0.0);
  tinyddp::testing::load_float64_state(post, ref["state"]);
  const Tensor causal = generate_square_subsequent_mask(5, tensor::TensorOptions(tensor::kFloat64));
  check_case(post, ref["post"], {5, 3, 8}, [&](const Tensor& x) { return post.forward(x, causal); });

  TransformerEncoderLayer pre(TransformerEncoderLayerOptions(8, 2)
                                  .dim_feedforward(16)
                                  .dropout(0.0)
                                  .activation("gelu")
                                  .batch_first(true)
                                  .norm_first(true));
  tinyddp::testing::load_float64_state(pre, ref["state"]);
  std::vector<float> padding;
  for (const bool b : ref["pre"]["padding"].get<std::vector<bool>>()) padding.push_back(b ? 1.0f : 0.0f);
  const Tensor pad = tensor::from_vector(padding, tensor::Shape{3, 5}).to(tensor::kBool);
  check_case(pre, ref["pre"], {3, 5, 8}, [&](const Tensor& x) { return pre.forward(x, Tensor(), pad); });
}

TEST_CASE("TransformerEncoder deep-copies its layer and matches PyTorch's with a final norm", "[nn][transformer]") {
  const nlohmann::json ref = tinyddp::testing::read_nn_json_fixture("transformer_encoder_reference.json");
  TransformerEncoderLayer layer(8, 2, 16, 0.0);
  tinyddp::testing::load_float64_state(layer, ref["state"]);
  auto final_norm = std::make_shared<LayerNorm>(tensor::Shape{8});
  final_norm->to(tensor::kFloat64);
  TransformerEncoder encoder(layer, 2, final_norm);
  // separate tensors with the layer's values
  const Tensor w0 = encoder.layers->at<TransformerEncoderLayer>(0)->linear1->weight;
  CHECK(tensor::equal(w0, layer.linear1->weight));
  {
    tensor::NoGradGuard no_grad;
    encoder.layers->at<TransformerEncoderLayer>(1)->linear1->weight.mul_(-1.0);
  }
  CHECK(tensor::equal(w0, layer.linear1->weight));
  const Tensor causal = generate_square_subsequent_mask(5, tensor::TensorOptions(tensor::kFloat64));
  check_case(encoder, ref["encoder"], {5, 3, 8}, [&](const Tensor& x) { return encoder.forward(x, causal); });
  CHECK(encoder.state_dict().keys().front() == "layers.0.self_attn.in_proj_weight");
  CHECK(encoder.state_dict().keys().back() == "norm.bias");
  const auto copy = encoder.clone_structure();
  CHECK(copy->state_dict().keys() == encoder.state_dict().keys());
  CHECK_THROWS_WITH(TransformerEncoderLayer(8, 2, 16, 0.1, "tanh"),
                    Contains("activation should be relu/gelu, not tanh"));
  CHECK_THROWS_WITH(TransformerEncoder(layer, 0), Contains("num_layers must be positive"));
  CHECK(tensor::equal(generate_square_subsequent_mask(2),
                      tensor::from_vector<float>({0.0f, -INFINITY, 0.0f, 0.0f}, tensor::Shape{2, 2})));
}

TEST_CASE("CUDA: TransformerEncoderLayer on a GPU matches the CPU", "[nn][transformer][cuda]") {
  if (!tensor::cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << tensor::cuda::unavailable_reason());
  const auto options = TransformerEncoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.0).norm_first(true);
  TransformerEncoderLayer cpu(options), gpu(options);
  cpu.to(tensor::kFloat64);
  gpu.to(tensor::kFloat64);
  gpu.load_state_dict(cpu.state_dict());
  gpu.to(tensor::Device::cuda(0));
  const Tensor x = tensor::randn({5, 3, 8}, tensor::TensorOptions(tensor::kFloat64));
  const Tensor mask = generate_square_subsequent_mask(5, tensor::TensorOptions(tensor::kFloat64));
  const Tensor want = cpu.forward(x, mask);
  const Tensor got = gpu.forward(x.to(tensor::Device::cuda(0)), mask.to(tensor::Device::cuda(0)));
  CHECK(got.is_cuda());
  CHECK(tensor::allclose(got.to(tensor::Device::cpu()), want, 1e-12, 1e-12));
}
