// torch.nn.TransformerDecoderLayer, TransformerDecoder and Transformer, with PyTorch's module
// names (self_attn, multihead_attn, linear1, dropout, linear2, norm1..3, dropout1..3; encoder,
// decoder) and initialisation order. The decoder layer is self-attention over the target, then
// attention from the target to the encoder's output (memory), then the feed-forward block,
// each added to its input, post-norm or (norm_first) pre-norm, as the encoder layer
// (transformer_encoder.h). Transformer builds both stacks with final LayerNorms and then
// redraws every parameter of two or more dims with xavier_uniform_, as PyTorch's.
#pragma once

#include <memory>

#include "tinyddp/nn/transformer_encoder.h"

namespace tinyddp::nn {

using TransformerDecoderLayerOptions = TransformerEncoderLayerOptions;

class TransformerDecoderLayer : public Module {
 public:
  explicit TransformerDecoderLayer(const TransformerDecoderLayerOptions& options);
  // tgt [T, N, E] and memory [S, N, E] ([N, T, E], [N, S, E] with batch_first) -> like tgt.
  // Masks as MultiheadAttention's: tgt_mask [T, T], memory_mask [T, S], padding masks [N, T]
  // and [N, S]. tgt_is_causal and memory_is_causal: PyTorch 2's hints that tgt_mask and
  // memory_mask are causal (MultiheadAttention's is_causal).
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = Tensor(),
                 const Tensor& memory_mask = Tensor(), const Tensor& tgt_key_padding_mask = Tensor(),
                 const Tensor& memory_key_padding_mask = Tensor(), bool tgt_is_causal = false,
                 bool memory_is_causal = false);
  Tensor forward(const Tensor& input) override;  // refused: a decoder layer needs the memory
  std::shared_ptr<Module> clone_structure() const override;

  TransformerDecoderLayerOptions options;
  std::shared_ptr<MultiheadAttention> self_attn, multihead_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2, dropout3;
  std::shared_ptr<LayerNorm> norm1, norm2, norm3;
};

class TransformerDecoder : public Module {
 public:
  TransformerDecoder(const TransformerDecoderLayer& decoder_layer, int64_t num_layers,
                     std::shared_ptr<Module> norm = nullptr);
  // tgt_is_causal unset: false (as the encoder's is_causal).
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = Tensor(),
                 const Tensor& memory_mask = Tensor(), const Tensor& tgt_key_padding_mask = Tensor(),
                 const Tensor& memory_key_padding_mask = Tensor(), std::optional<bool> tgt_is_causal = std::nullopt,
                 bool memory_is_causal = false);
  Tensor forward(const Tensor& input) override;  // refused, as the layer's
  std::shared_ptr<Module> clone_structure() const override;

  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<Module> norm;  // null without one
  int64_t num_layers;
};

// nn.Transformer's arguments: the layers' options and the stacks' depths.
struct TransformerOptions {
  TransformerOptions() = default;
  TransformerOptions(int64_t d_model, int64_t nhead) : d_model_(d_model), nhead_(nhead) {}
  TINYDDP_ARG(int64_t, d_model) = 512;
  TINYDDP_ARG(int64_t, nhead) = 8;
  TINYDDP_ARG(int64_t, num_encoder_layers) = 6;
  TINYDDP_ARG(int64_t, num_decoder_layers) = 6;
  TINYDDP_ARG(int64_t, dim_feedforward) = 2048;
  TINYDDP_ARG(double, dropout) = 0.1;
  TINYDDP_ARG(std::string, activation) = "relu";
  TINYDDP_ARG(double, layer_norm_eps) = 1e-5;
  TINYDDP_ARG(bool, batch_first) = false;
  TINYDDP_ARG(bool, norm_first) = false;
  TINYDDP_ARG(bool, bias) = true;
};

class Transformer : public Module {
 public:
  explicit Transformer(const TransformerOptions& options = {});
  // src [S, N, E], tgt [T, N, E] (batch_first: [N, S, E], [N, T, E]) -> [T, N, E].
  Tensor forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask = Tensor(),
                 const Tensor& tgt_mask = Tensor(), const Tensor& memory_mask = Tensor(),
                 const Tensor& src_key_padding_mask = Tensor(), const Tensor& tgt_key_padding_mask = Tensor(),
                 const Tensor& memory_key_padding_mask = Tensor(), std::optional<bool> src_is_causal = std::nullopt,
                 std::optional<bool> tgt_is_causal = std::nullopt, bool memory_is_causal = false);
  Tensor forward(const Tensor& input) override;  // refused: a Transformer takes src and tgt
  std::shared_ptr<Module> clone_structure() const override;
  // nn.Transformer.generate_square_subsequent_mask
  static Tensor generate_square_subsequent_mask(int64_t size, tensor::TensorOptions options = {}) {
    return nn::generate_square_subsequent_mask(size, options);
  }

  TransformerOptions options;
  std::shared_ptr<TransformerEncoder> encoder;
  std::shared_ptr<TransformerDecoder> decoder;
};

}  // namespace tinyddp::nn
