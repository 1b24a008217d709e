// torch.nn.MultiheadAttention: query, key and value projected by one packed weight
// (in_proj_weight [3E, E], in_proj_bias [3E]), split into num_heads heads of E / num_heads,
// softmax(q k^T / sqrt(head_dim) + mask) v per head, the heads joined and projected by
// out_proj. PyTorch's parameter names, initialisation order (out_proj as a Linear, then
// xavier_uniform_ for in_proj_weight, the biases zero) and defaults (batch_first false:
// [L, N, E]); composed from tensor ops, so gradients and both backends come with them.
// As PyTorch's: kdim/vdim other than embed_dim give separate q_proj_weight [E, E],
// k_proj_weight [E, kdim] and v_proj_weight [E, vdim] instead of the packed weight;
// add_bias_kv appends the learnt bias_k and bias_v [1, 1, E] (xavier_normal_) to the keys and
// values, add_zero_attn a zero key and value per head; dropout drops attention weights in
// training (tensor::dropout's draws, not torch's).
#pragma once

#include <optional>
#include <tuple>
#include <utility>

#include "tinyddp/nn/layers.h"

namespace tinyddp::nn {

class MultiheadAttention : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0, bool bias = true,
                     bool batch_first = false, bool add_bias_kv = false, bool add_zero_attn = false, int64_t kdim = 0,
                     int64_t vdim = 0);  // kdim, vdim 0: embed_dim
  explicit MultiheadAttention(const MultiheadAttentionOptions& o)
      : MultiheadAttention(o.embed_dim(), o.num_heads(), o.dropout(), o.bias(), o.batch_first(), o.add_bias_kv(),
                           o.add_zero_attn(), o.kdim(), o.vdim()) {}
  // query [L, N, E] (batch_first: [N, L, E]; unbatched [L, E]), key and value [S, N, E]:
  // returns (attn_output like query, attn_weights [N, L, S] averaged over the heads, or
  // [N, heads, L, S] without averaging; undefined unless need_weights). key_padding_mask [N, S]
  // and attn_mask [L, S] or [N * heads, L, S]: bool (true: not attended) or float (added).
  // is_causal, PyTorch 2's hint that attn_mask is the causal mask, needs attn_mask; without a
  // key_padding_mask and need_weights, the causal mask is then applied in its place (query i
  // sees keys 0..i), as PyTorch's, so a wrong hint gives the causal result there too.
  std::pair<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& key_padding_mask = Tensor(), bool need_weights = true,
                                    const Tensor& attn_mask = Tensor(), bool average_attn_weights = true,
                                    bool is_causal = false);
  // Self-attention as one tensor in, the output out (weights not kept).
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

  int64_t embed_dim, num_heads, head_dim, kdim, vdim;
  double dropout;
  bool batch_first, add_zero_attn;
  Tensor in_proj_weight, in_proj_bias;                 // [3E, E], [3E] (undefined without bias)
  Tensor q_proj_weight, k_proj_weight, v_proj_weight;  // with kdim or vdim != E (then no in_proj_weight)
  Tensor bias_k, bias_v;                               // [1, 1, E] with add_bias_kv
  std::shared_ptr<Linear> out_proj;

 private:
  // q, k, v projected ([L, N, E], [S, N, E], [S, N, E]).
  std::tuple<Tensor, Tensor, Tensor> project(const Tensor& query, const Tensor& key, const Tensor& value) const;
  // The masks as one additive float mask broadcastable to [N * heads, L, S'] (S' counts the
  // added bias and zero keys), or undefined.
  Tensor merged_mask(const Tensor& attn_mask, const Tensor& key_padding_mask, bool unbatched, int64_t tgt,
                     int64_t batch, int64_t src, const Tensor& like) const;
};

}  // namespace tinyddp::nn
