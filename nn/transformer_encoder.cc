// TransformerEncoderLayer and TransformerEncoder (transformer_encoder.h), registered in
// PyTorch's order (self_attn first: its out_proj and in_proj draws, then linear1's and
// linear2's), so the same seed gives torch's initial weights.
#include "tinyddp/nn/transformer_encoder.h"

#include <cmath>

namespace tinyddp::nn {

TransformerEncoderLayer::TransformerEncoderLayer(const TransformerEncoderLayerOptions& o)
    : Module("TransformerEncoderLayer"), options(o) {
  TDDP_CHECK(o.activation() == "relu" || o.activation() == "gelu",
             "TransformerEncoderLayer: activation should be relu/gelu, not {}", o.activation());
  self_attn = register_module("self_attn",
                              transformer_attention(o.d_model(), o.nhead(), o.dropout(), o.bias(), o.batch_first()));
  linear1 = register_module("linear1", std::make_shared<Linear>(o.d_model(), o.dim_feedforward(), o.bias()));
  dropout = register_module("dropout", std::make_shared<Dropout>(o.dropout()));
  linear2 = register_module("linear2", std::make_shared<Linear>(o.dim_feedforward(), o.d_model(), o.bias()));
  const auto layer_norm = [&] { return transformer_norm(o.d_model(), o.layer_norm_eps(), o.bias()); };
  norm1 = register_module("norm1", layer_norm());
  norm2 = register_module("norm2", layer_norm());
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(o.dropout()));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(o.dropout()));
}

Tensor TransformerEncoderLayer::feed_forward(const Tensor& x) {
  const Tensor active = transformer_activation(options.activation(), linear1->forward(x));
  return dropout2->forward(linear2->forward(dropout->forward(active)));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask,
                                        bool is_causal) {
  const auto attend = [&](const Tensor& x) {
    return dropout1->forward(
        self_attn->forward(x, x, x, src_key_padding_mask, /*need_weights=*/false, src_mask, true, is_causal).first);
  };
  if (options.norm_first()) {
    const Tensor x = tensor::add(src, attend(norm1->forward(src)));
    return tensor::add(x, feed_forward(norm2->forward(x)));
  }
  const Tensor x = norm1->forward(tensor::add(src, attend(src)));
  return norm2->forward(tensor::add(x, feed_forward(x)));
}

std::shared_ptr<Module> TransformerEncoderLayer::clone_structure() const {
  return std::make_shared<TransformerEncoderLayer>(options);
}

std::shared_ptr<MultiheadAttention> transformer_attention(int64_t d_model, int64_t nhead, double dropout, bool bias,
                                                          bool batch_first) {
  return std::make_shared<MultiheadAttention>(
      MultiheadAttentionOptions(d_model, nhead).dropout(dropout).bias(bias).batch_first(batch_first));
}

std::shared_ptr<LayerNorm> transformer_norm(int64_t d_model, double eps, bool bias) {
  return std::make_shared<LayerNorm>(LayerNormOptions({d_model}).eps(eps).bias(bias));
}

std::shared_ptr<ModuleList> layer_copies(const Module& layer, int64_t num_layers) {
  auto copies = std::make_shared<ModuleList>();
  const std::vector<Tensor> params = layer.parameters();
  for (int64_t i = 0; i < num_layers; ++i) {
    std::shared_ptr<Module> copy;
    {
      SkipInitGuard skip;
      copy = layer.clone_structure();
    }
    if (!params.empty()) {
      copy->to(params.front().dtype());
      copy->to(params.front().device());
    }
    copy->load_state_dict(layer.state_dict());
    copy->train(layer.is_training());
    copies->append(copy);
  }
  return copies;
}

Tensor transformer_activation(const std::string& activation, const Tensor& x) {
  return activation == "gelu" ? tensor::gelu(x) : tensor::relu(x);
}

TransformerEncoder::TransformerEncoder(const TransformerEncoderLayer& encoder_layer, int64_t num_layers_,
                                       std::shared_ptr<Module> norm_)
    : Module("TransformerEncoder"), num_layers(num_layers_) {
  TDDP_CHECK(num_layers > 0, "TransformerEncoder: num_layers must be positive, got {}", num_layers);
  layers = register_module("layers", layer_copies(encoder_layer, num_layers));
  if (norm_) norm = register_module("norm", std::move(norm_));
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask,
                                   std::optional<bool> is_causal) {
  Tensor out = src;
  for (const std::shared_ptr<Module>& layer : *layers) {
    out = std::static_pointer_cast<TransformerEncoderLayer>(layer)->forward(out, mask, src_key_padding_mask,
                                                                            is_causal.value_or(false));
  }
  return norm ? norm->forward(out) : out;
}

std::shared_ptr<Module> TransformerEncoder::clone_structure() const {
  const auto first = layers->at<TransformerEncoderLayer>(0);
  SkipInitGuard skip;
  return std::make_shared<TransformerEncoder>(TransformerEncoderLayer(first->options), num_layers,
                                              norm ? norm->clone_structure() : nullptr);
}

Tensor generate_square_subsequent_mask(int64_t size, tensor::TensorOptions options) {
  TDDP_CHECK(size >= 0, "generate_square_subsequent_mask: size must be non-negative, got {}", size);
  return tensor::triu(tensor::full({size, size}, -INFINITY, options), 1);
}

}  // namespace tinyddp::nn
