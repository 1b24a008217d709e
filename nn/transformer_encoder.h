// torch.nn.TransformerEncoderLayer and TransformerEncoder, with PyTorch's module names
// (self_attn, linear1, dropout, linear2, norm1, norm2, dropout1, dropout2; layers.<i>, norm),
// so state dicts load on either side, and its initialisation order, so that after the same
// seed the weights are torch's. The layer is self-attention then a feed-forward block
// (linear2(dropout(activation(linear1(x))))), each added to its input: after the LayerNorms'
// sums (post-norm, the default) or on the normalised input (norm_first). Masks as
// MultiheadAttention takes them: src_mask [S, S] or [N * nhead, S, S] and
// src_key_padding_mask [N, S], bool (true: not attended) or float (added);
// generate_square_subsequent_mask(S) is the causal one. PyTorch's inference fast path
// (nested tensors) is not taken: padded positions come out as the layers compute them.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "tinyddp/nn/containers.h"
#include "tinyddp/nn/multihead_attention.h"
#include "tinyddp/nn/options.h"

namespace tinyddp::nn {

class TransformerEncoderLayer : public Module {
 public:
  explicit TransformerEncoderLayer(const TransformerEncoderLayerOptions& options);
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, int64_t dim_feedforward = 2048, double dropout = 0.1,
                          std::string activation = "relu")
      : TransformerEncoderLayer(TransformerEncoderLayerOptions(d_model, nhead)
                                    .dim_feedforward(dim_feedforward)
                                    .dropout(dropout)
                                    .activation(std::move(activation))) {}
  // src [S, N, E] ([N, S, E] with batch_first; unbatched [S, E]) -> the same shape.
  // is_causal: PyTorch 2's hint that src_mask is the causal mask (MultiheadAttention's).
  Tensor forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask = Tensor(),
                 bool is_causal = false);
  Tensor forward(const Tensor& src) override { return forward(src, Tensor()); }
  std::shared_ptr<Module> clone_structure() const override;

  TransformerEncoderLayerOptions options;
  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2;
  std::shared_ptr<LayerNorm> norm1, norm2;

 private:
  Tensor feed_forward(const Tensor& x);
};

// num_layers copies of `encoder_layer` (its values too: PyTorch deep-copies it, so every layer
// starts with the same weights) as layers.0 ..., then `norm` when given.
class TransformerEncoder : public Module {
 public:
  TransformerEncoder(const TransformerEncoderLayer& encoder_layer, int64_t num_layers,
                     std::shared_ptr<Module> norm = nullptr);
  // is_causal passed to each layer (unset: false; PyTorch then checks whether mask is the
  // causal one, which changes its speed, not its numbers).
  Tensor forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask = Tensor(),
                 std::optional<bool> is_causal = std::nullopt);
  Tensor forward(const Tensor& src) override { return forward(src, Tensor()); }
  std::shared_ptr<Module> clone_structure() const override;

  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<Module> norm;  // null without one
  int64_t num_layers;
};

// num_layers deep copies of `layer` (values, dtype, device and training mode; no draws from
// the generator), as PyTorch's copy.deepcopy of an encoder or decoder layer.
std::shared_ptr<ModuleList> layer_copies(const Module& layer, int64_t num_layers);
// The layers' attention (MultiheadAttention(d_model, nhead) with their dropout, bias and
// batch_first) and LayerNorm([d_model], eps, bias), built one way for every layer.
std::shared_ptr<MultiheadAttention> transformer_attention(int64_t d_model, int64_t nhead, double dropout, bool bias,
                                                          bool batch_first);
std::shared_ptr<LayerNorm> transformer_norm(int64_t d_model, double eps, bool bias);
// relu or gelu of x, as the layers' activation string names.
Tensor transformer_activation(const std::string& activation, const Tensor& x);

// The causal float mask [size, size]: 0 on and below the diagonal, -inf above (PyTorch's
// nn.Transformer.generate_square_subsequent_mask).
Tensor generate_square_subsequent_mask(int64_t size, tensor::TensorOptions options = {});

}  // namespace tinyddp::nn
