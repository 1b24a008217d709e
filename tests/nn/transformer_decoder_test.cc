// TransformerDecoderLayer, TransformerDecoder and Transformer against PyTorch's
// (fixtures/make_transformer_encoder_fixture.py): initial weights after the same seed (the
// Transformer's xavier_uniform_ redraw too); in float64 (1e-12) a post-norm decoder layer with a
// causal target mask and a memory padding mask, a pre-norm GELU batch_first one with a float
// memory mask, and a Transformer's forward and backward: outputs and every gradient.
#include <nlohmann/json.hpp>

#include "tests/nn/json_fixture.h"
#include "tests/nn/nn_test_util.h"
#include "tinyddp/nn/transformer_decoder.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using Catch::Contains;
using tinyddp::testing::doubles;

namespace {

const nlohmann::json& reference() {
  static const nlohmann::json j = tinyddp::testing::read_nn_json_fixture("transformer_encoder_reference.json");
  return j;
}

// Every tensor of m's state dict equals the fixture's float32 values.
void check_init(Module& m, const nlohmann::json& state) {
  REQUIRE(m.state_dict().size() == state.size());
  for (const auto& [name, t] : m.state_dict()) {
    INFO(name);
    CHECK(tensor::allclose(t, doubles(state[name], t.sizes()).to(tensor::kFloat32), 0, 0));
  }
}

Tensor bool_mask(const nlohmann::json& flags, const tensor::Shape& shape) {
  std::vector<float> values;
  for (const bool b : flags.get<std::vector<bool>>()) values.push_back(b ? 1.0f : 0.0f);
  return tensor::from_vector(values, shape).to(tensor::kBool);
}

void check_grads(Module& m, const nlohmann::json& grads) {
  for (const auto& [name, p] : m.named_parameters()) {
    INFO(name);
    CHECK(tensor::allclose(p.grad(), doubles(grads[name], p.sizes()), 1e-12, 1e-12));
  }
}

}  // namespace

TEST_CASE("TransformerDecoderLayer equals PyTorch's: initial weights, post- and pre-norm with masks, gradients",
          "[nn][transformer][fixture]") {
  const auto& ref = reference();
  tensor::manual_seed(ref["decoder_init"]["seed"].get<uint64_t>());
  TransformerDecoderLayer fresh(TransformerDecoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.0));
  check_init(fresh, ref["decoder_init"]["state"]);

  const Tensor causal = generate_square_subsequent_mask(5, tensor::TensorOptions(tensor::kFloat64));
  TransformerDecoderLayer post(TransformerDecoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.0));
  tinyddp::testing::load_float64_state(post, ref["decoder_state"]);
  const nlohmann::json& c = ref["decoder_post"];
  const Tensor memory = doubles(c["memory"], {6, 3, 8});
  const Tensor padding = bool_mask(c["memory_padding"], {3, 6});
  const Tensor x = doubles(c["x"], {5, 3, 8}).requires_grad_();
  const Tensor y = post.forward(x, memory, causal, Tensor(), Tensor(), padding);
  CHECK(tensor::allclose(y, doubles(c["out"], {5, 3, 8}), 1e-12, 1e-12));
  y.backward(doubles(c["grad_out"], {5, 3, 8}));
  CHECK(tensor::allclose(x.grad(), doubles(c["grad_x"], {5, 3, 8}), 1e-12, 1e-12));
  check_grads(post, c["grads"]);

  TransformerDecoderLayer pre(TransformerDecoderLayerOptions(8, 2)
                                  .dim_feedforward(16)
                                  .dropout(0.0)
                                  .activation("gelu")
                                  .batch_first(true)
                                  .norm_first(true));
  tinyddp::testing::load_float64_state(pre, ref["decoder_state"]);
  const nlohmann::json& d = ref["decoder_pre"];
  const Tensor xb = doubles(d["x"], {3, 5, 8}).requires_grad_();
  const Tensor yb = pre.forward(xb, doubles(d["memory"], {3, 6, 8}), Tensor(), doubles(d["memory_mask"], {5, 6}));
  CHECK(tensor::allclose(yb, doubles(d["out"], {3, 5, 8}), 1e-12, 1e-12));
  yb.backward(doubles(d["grad_out"], {3, 5, 8}));
  CHECK(tensor::allclose(xb.grad(), doubles(d["grad_x"], {3, 5, 8}), 1e-12, 1e-12));
  check_grads(pre, d["grads"]);
  CHECK_THROWS_WITH(pre.forward(xb), Contains("forward needs the target and the memory"));
}

TEST_CASE("Transformer equals PyTorch's: xavier_uniform_ initial weights, forward and backward",
          "[nn][transformer][fixture]") {
  const auto& ref = reference();
  tensor::manual_seed(ref["transformer_init"]["seed"].get<uint64_t>());
  const auto options =
      TransformerOptions(8, 2).num_encoder_layers(2).num_decoder_layers(1).dim_feedforward(16).dropout(0.0);
  Transformer model(options);
  check_init(model, ref["transformer_init"]["state"]);
  CHECK(model.state_dict().keys().back() == "decoder.norm.bias");

  model.to(tensor::kFloat64);
  tinyddp::testing::load_float64_state(model, ref["transformer_init"]["state"]);  // the same values, now float64
  const nlohmann::json& c = ref["transformer"];
  const Tensor src = doubles(c["src"], {6, 2, 8}).requires_grad_();
  const Tensor tgt = doubles(c["x"], {4, 2, 8}).requires_grad_();
  const Tensor y = model.forward(
      src, tgt, Tensor(), Transformer::generate_square_subsequent_mask(4, tensor::TensorOptions(tensor::kFloat64)));
  CHECK(tensor::allclose(y, doubles(c["out"], {4, 2, 8}), 1e-12, 1e-12));
  y.backward(doubles(c["grad_out"], {4, 2, 8}));
  CHECK(tensor::allclose(tgt.grad(), doubles(c["grad_x"], {4, 2, 8}), 1e-12, 1e-12));
  CHECK(tensor::allclose(src.grad(), doubles(c["grad_src"], {6, 2, 8}), 1e-12, 1e-12));
  check_grads(model, c["grads"]);
  CHECK(model.clone_structure()->state_dict().keys() == model.state_dict().keys());
  CHECK_THROWS_WITH(model.forward(src, tensor::zeros({4, 3, 8}, tensor::kFloat64)),
                    Contains("the batch number of src and tgt must be equal"));
}

TEST_CASE("is_causal hints as PyTorch 2's: the causal mask's numbers, taken at their word, refused without a mask",
          "[nn][transformer]") {
  // (PyTorch 1.13, the fixtures' version, has no is_causal: the reference is the causal mask.)
  tensor::manual_seed(21);
  MultiheadAttention attn(8, 2);
  const Tensor x = tensor::randn({5, 3, 8});  // [L, N, E]
  const Tensor causal = generate_square_subsequent_mask(5), none = tensor::zeros({5, 5});
  const auto run = [&](const Tensor& mask, bool need_weights, bool hint, const Tensor& padding = Tensor()) {
    return attn.forward(x, x, x, padding, need_weights, mask, true, hint).first;
  };
  const Tensor expected = run(causal, false, false);
  CHECK(tensor::equal(run(causal, false, true), expected));
  // A wrong hint is taken at its word where PyTorch takes it (no padding mask, no weights) ...
  CHECK(tensor::equal(run(none, false, true), expected));
  // ... and not where it needs the mask itself.
  CHECK(tensor::equal(run(none, true, true), run(none, true, false)));
  const Tensor padding = tensor::zeros({3, 5}, tensor::kBool);
  CHECK(tensor::equal(run(none, false, true, padding), run(none, false, false, padding)));
  CHECK_THROWS_WITH(run(Tensor(), false, true), Contains("MultiheadAttention: Need attn_mask if specifying the "
                                                         "is_causal hint"));

  auto options = TransformerEncoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.0);
  TransformerEncoder encoder(TransformerEncoderLayer(options), 2);
  CHECK(tensor::equal(encoder.forward(x, causal, Tensor(), true), encoder.forward(x, causal)));
  CHECK(tensor::equal(encoder.forward(x, none, Tensor(), true), encoder.forward(x, causal)));
  Transformer model(
      TransformerOptions(8, 2).num_encoder_layers(1).num_decoder_layers(1).dim_feedforward(16).dropout(0.0));
  const Tensor tgt = tensor::randn({5, 3, 8});
  CHECK(tensor::equal(model.forward(x, tgt, Tensor(), causal, Tensor(), Tensor(), Tensor(), Tensor(), false, true),
                      model.forward(x, tgt, Tensor(), causal)));
  TransformerDecoderLayer layer(options);
  CHECK(tensor::equal(layer.forward(tgt, x, none, Tensor(), Tensor(), Tensor(), true), layer.forward(tgt, x, causal)));
  CHECK_THROWS_WITH(layer.forward(tgt, x, Tensor(), Tensor(), Tensor(), Tensor(), false, true),
                    Contains("Need attn_mask if specifying the is_causal hint"));
}
