// TransformerDecoderLayer, TransformerDecoder and Transformer (transformer_decoder.h),
// registered in PyTorch's order so that the same seed gives torch's initial weights.
#include "tinyddp/nn/transformer_decoder.h"

#include "tinyddp/nn/init.h"

namespace tinyddp::nn {

namespace {
std::shared_ptr<MultiheadAttention> attention(const TransformerDecoderLayerOptions& o) {
  return transformer_attention(o.d_model(), o.nhead(), o.dropout(), o.bias(), o.batch_first());
}
}  // namespace

TransformerDecoderLayer::TransformerDecoderLayer(const TransformerDecoderLayerOptions& o)
    : Module("TransformerDecoderLayer"), options(o) {
  TDDP_CHECK(o.activation() == "relu" || o.activation() == "gelu",
             "TransformerDecoderLayer: activation should be relu/gelu, not {}", o.activation());
  self_attn = register_module("self_attn", attention(o));
  multihead_attn = register_module("multihead_attn", attention(o));
  linear1 = register_module("linear1", std::make_shared<Linear>(o.d_model(), o.dim_feedforward(), o.bias()));
  dropout = register_module("dropout", std::make_shared<Dropout>(o.dropout()));
  linear2 = register_module("linear2", std::make_shared<Linear>(o.dim_feedforward(), o.d_model(), o.bias()));
  const auto layer_norm = [&] { return transformer_norm(o.d_model(), o.layer_norm_eps(), o.bias()); };
  norm1 = register_module("norm1", layer_norm());
  norm2 = register_module("norm2", layer_norm());
  norm3 = register_module("norm3", layer_norm());
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(o.dropout()));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(o.dropout()));
  dropout3 = register_module("dropout3", std::make_shared<Dropout>(o.dropout()));
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                        const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                        const Tensor& memory_key_padding_mask, bool tgt_is_causal,
                                        bool memory_is_causal) {
  const auto self_block = [&](const Tensor& x) {
    return dropout1->forward(
        self_attn->forward(x, x, x, tgt_key_padding_mask, false, tgt_mask, true, tgt_is_causal).first);
  };
  const auto cross_block = [&](const Tensor& x) {
    return dropout2->forward(
        multihead_attn->forward(x, memory, memory, memory_key_padding_mask, false, memory_mask, true, memory_is_causal)
            .first);
  };
  const auto feed_forward = [&](const Tensor& x) {
    const Tensor active = transformer_activation(options.activation(), linear1->forward(x));
    return dropout3->forward(linear2->forward(dropout->forward(active)));
  };
  if (options.norm_first()) {
    Tensor x = tensor::add(tgt, self_block(norm1->forward(tgt)));
    x = tensor::add(x, cross_block(norm2->forward(x)));
    return tensor::add(x, feed_forward(norm3->forward(x)));
  }
  Tensor x = norm1->forward(tensor::add(tgt, self_block(tgt)));
  x = norm2->forward(tensor::add(x, cross_block(x)));
  return norm3->forward(tensor::add(x, feed_forward(x)));
}

Tensor TransformerDecoderLayer::forward(const Tensor&) {
  TDDP_CHECK(false, "TransformerDecoderLayer: forward needs the target and the memory: forward(tgt, memory, ...)");
  return Tensor();
}

std::shared_ptr<Module> TransformerDecoderLayer::clone_structure() const {
  return std::make_shared<TransformerDecoderLayer>(options);
}

TransformerDecoder::TransformerDecoder(const TransformerDecoderLayer& decoder_layer, int64_t num_layers_,
                                       std::shared_ptr<Module> norm_)
    : Module("TransformerDecoder"), num_layers(num_layers_) {
  TDDP_CHECK(num_layers > 0, "TransformerDecoder: num_layers must be positive, got {}", num_layers);
  layers = register_module("layers", layer_copies(decoder_layer, num_layers));
  if (norm_) norm = register_module("norm", std::move(norm_));
}

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                   const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                   const Tensor& memory_key_padding_mask, std::optional<bool> tgt_is_causal,
                                   bool memory_is_causal) {
  Tensor out = tgt;
  for (const std::shared_ptr<Module>& layer : *layers) {
    out = std::static_pointer_cast<TransformerDecoderLayer>(layer)->forward(
        out, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
        tgt_is_causal.value_or(false), memory_is_causal);
  }
  return norm ? norm->forward(out) : out;
}

Tensor TransformerDecoder::forward(const Tensor&) {
  TDDP_CHECK(false, "TransformerDecoder: forward needs the target and the memory: forward(tgt, memory, ...)");
  return Tensor();
}

std::shared_ptr<Module> TransformerDecoder::clone_structure() const {
  const auto first = layers->at<TransformerDecoderLayer>(0);
  SkipInitGuard skip;
  return std::make_shared<TransformerDecoder>(TransformerDecoderLayer(first->options), num_layers,
                                              norm ? norm->clone_structure() : nullptr);
}

Transformer::Transformer(const TransformerOptions& o) : Module("Transformer"), options(o) {
  const auto layer_options = TransformerEncoderLayerOptions(o.d_model(), o.nhead())
                                 .dim_feedforward(o.dim_feedforward())
                                 .dropout(o.dropout())
                                 .activation(o.activation())
                                 .layer_norm_eps(o.layer_norm_eps())
                                 .batch_first(o.batch_first())
                                 .norm_first(o.norm_first())
                                 .bias(o.bias());
  const auto final_norm = [&] { return transformer_norm(o.d_model(), o.layer_norm_eps(), o.bias()); };
  encoder = register_module("encoder", std::make_shared<TransformerEncoder>(TransformerEncoderLayer(layer_options),
                                                                            o.num_encoder_layers(), final_norm()));
  decoder = register_module("decoder", std::make_shared<TransformerDecoder>(TransformerDecoderLayer(layer_options),
                                                                            o.num_decoder_layers(), final_norm()));
  if (SkipInitGuard::active()) return;
  for (const Tensor& p : parameters()) {
    if (p.dim() > 1) init::xavier_uniform_(p);
  }
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask, const Tensor& tgt_mask,
                            const Tensor& memory_mask, const Tensor& src_key_padding_mask,
                            const Tensor& tgt_key_padding_mask, const Tensor& memory_key_padding_mask,
                            std::optional<bool> src_is_causal, std::optional<bool> tgt_is_causal,
                            bool memory_is_causal) {
  const bool batched = src.dim() == 3;
  const int64_t batch_dim = options.batch_first() ? 0 : 1;
  TDDP_CHECK(!batched || src.size(batch_dim) == tgt.size(batch_dim),
             "Transformer: the batch number of src and tgt must be equal, got {} and {}",
             tensor::format_shape(src.sizes()), tensor::format_shape(tgt.sizes()));
  TDDP_CHECK(src.size(-1) == options.d_model() && tgt.size(-1) == options.d_model(),
             "Transformer: the feature number of src and tgt must be equal to d_model ({}), got {} and {}",
             options.d_model(), tensor::format_shape(src.sizes()), tensor::format_shape(tgt.sizes()));
  const Tensor memory = encoder->forward(src, src_mask, src_key_padding_mask, src_is_causal);
  return decoder->forward(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
                          tgt_is_causal, memory_is_causal);
}

Tensor Transformer::forward(const Tensor&) {
  TDDP_CHECK(false, "Transformer: forward needs src and tgt: forward(src, tgt, ...)");
  return Tensor();
}

std::shared_ptr<Module> Transformer::clone_structure() const {
  SkipInitGuard skip;
  return std::make_shared<Transformer>(options);
}

}  // namespace tinyddp::nn
