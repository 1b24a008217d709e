// torch.nn.MultiheadAttention: query, key and value projected by one packed weight
// (in_proj_weight [3E, E], in_proj_bias [3E]), split into num_heads heads of E / num_heads,
// softmax(q k^T / sqrt(head_dim) + mask) v per head, the heads joined and projected by
// out_proj. PyTorch's parameter names, initialisation order (out_proj as a Linear, then
// xavier_uniform_ for in_proj_weight, the biases zero) and defaults (batch_first false:
// [L, N, E]); composed from tensor ops, so gradients and both backends come with them.
// Not supported (an error says so): kdim/vdim other than embed_dim, add_bias_kv,
// add_zero_attn, dropout > 0 in training.
#pragma once

#include <optional>
#include <utility>

#include "tinyddp/nn/layers.h"

namespace tinyddp::nn {

class MultiheadAttention : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0, bool bias = true,
                     bool batch_first = false);
  // query [L, N, E] (batch_first: [N, L, E]; unbatched [L, E]), key and value [S, N, E]:
  // returns (attn_output like query, attn_weights [N, L, S] averaged over the heads, or
  // [N, heads, L, S] without averaging; undefined unless need_weights). key_padding_mask [N, S]
  // and attn_mask [L, S] or [N * heads, L, S]: bool (true: not attended) or float (added).
  std::pair<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& key_padding_mask = Tensor(), bool need_weights = true,
                                    const Tensor& attn_mask = Tensor(), bool average_attn_weights = true);
  // Self-attention as one tensor in, the output out (weights not kept).
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

  int64_t embed_dim, num_heads, head_dim;
  double dropout;
  bool batch_first;
  Tensor in_proj_weight, in_proj_bias;  // [3E, E], [3E] (undefined without bias)
  std::shared_ptr<Linear> out_proj;
};

}  // namespace tinyddp::nn
