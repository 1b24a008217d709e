// MultiheadAttention (multihead_attention.h), step for step as PyTorch 1.13's
// multi_head_attention_forward for the packed projection.
#include "tinyddp/nn/multihead_attention.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "tinyddp/nn/init.h"

namespace tinyddp::nn {

namespace t = tinyddp::tensor;

MultiheadAttention::MultiheadAttention(int64_t embed_dim_, int64_t num_heads_, double dropout_, bool bias,
                                       bool batch_first_)
    : Module("MultiheadAttention"), embed_dim(embed_dim_), num_heads(num_heads_),
      head_dim(num_heads_ > 0 ? embed_dim_ / num_heads_ : 0), dropout(dropout_), batch_first(batch_first_) {
  TDDP_CHECK(embed_dim > 0 && num_heads > 0 && head_dim * num_heads == embed_dim,
             "MultiheadAttention: embed_dim ({}) must be divisible by num_heads ({})", embed_dim, num_heads);
  TDDP_CHECK(dropout >= 0 && dropout < 1, "MultiheadAttention: dropout must be in [0, 1), got {}", dropout);
  // PyTorch's order of draws: out_proj as a Linear (weight, bias), then in_proj_weight.
  in_proj_weight = register_parameter("in_proj_weight", t::empty({3 * embed_dim, embed_dim}));
  if (bias) in_proj_bias = register_parameter("in_proj_bias", t::zeros({3 * embed_dim}));
  out_proj = register_module("out_proj", std::make_shared<Linear>(embed_dim, embed_dim, bias));
  if (!SkipInitGuard::active()) {
    init::xavier_uniform_(in_proj_weight);
    if (bias) init::zeros_(out_proj->bias);
  }
}

std::pair<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query_in, const Tensor& key_in,
                                                      const Tensor& value_in, const Tensor& key_padding_mask,
                                                      bool need_weights, const Tensor& attn_mask,
                                                      bool average_attn_weights) {
  TDDP_CHECK(!(is_training() && dropout > 0),
             "MultiheadAttention: attention dropout in training is not supported yet (dropout={})", dropout);
  const bool unbatched = query_in.dim() == 2;
  TDDP_CHECK(query_in.dim() == 3 || unbatched, "MultiheadAttention: expected a 2-D or 3-D query, got shape {}",
             t::format_shape(query_in.sizes()));
  // As [L, N, E] (PyTorch's layout inside), whatever the caller's.
  const auto seq_first = [&](const Tensor& x) {
    if (unbatched) return x.unsqueeze(1);
    return batch_first ? x.transpose(0, 1) : x;
  };
  const Tensor query = seq_first(query_in), key = seq_first(key_in), value = seq_first(value_in);
  TDDP_CHECK(query.size(2) == embed_dim && key.size(2) == embed_dim && value.size(2) == embed_dim,
             "MultiheadAttention: expected query, key and value of embed_dim {} (kdim and vdim are not supported), "
             "got {}, {}, {}",
             embed_dim, query.size(2), key.size(2), value.size(2));
  TDDP_CHECK(key.sizes() == value.sizes(), "MultiheadAttention: key shape {} and value shape {} differ",
             t::format_shape(key.sizes()), t::format_shape(value.sizes()));
  const int64_t tgt = query.size(0), batch = query.size(1), src = key.size(0);
  const auto part = [&](int64_t i) {
    const Tensor w = in_proj_weight.narrow(0, i * embed_dim, embed_dim);
    return std::pair{w, in_proj_bias.defined() ? in_proj_bias.narrow(0, i * embed_dim, embed_dim) : Tensor()};
  };
  // [L, N, E] -> [N * heads, L, head_dim]
  const auto heads_of = [&](const Tensor& x, int64_t len) {
    return x.reshape({len, batch * num_heads, head_dim}).transpose(0, 1);
  };
  const auto [wq, bq] = part(0);
  const auto [wk, bk] = part(1);
  const auto [wv, bv] = part(2);
  const Tensor q = heads_of(t::linear(query, wq, bq), tgt), k = heads_of(t::linear(key, wk, bk), src),
               v = heads_of(t::linear(value, wv, bv), src);
  // The masks as one additive [N * heads, L, S] (or broadcastable) float mask.
  Tensor mask;
  const double neg_inf = -std::numeric_limits<double>::infinity();
  const auto additive = [&](const Tensor& m) {
    return m.dtype() == t::kBool
               ? t::masked_fill(t::zeros(m.sizes(), t::TensorOptions(q.dtype()).device(q.device())), m, neg_inf)
               : m;
  };
  if (attn_mask.defined()) {
    TDDP_CHECK((attn_mask.dim() == 2 && attn_mask.size(0) == tgt && attn_mask.size(1) == src) ||
                   (attn_mask.dim() == 3 && attn_mask.size(0) == batch * num_heads),
               "MultiheadAttention: attn_mask of shape {} should be [{}, {}] or [{}, {}, {}]",
               t::format_shape(attn_mask.sizes()), tgt, src, batch * num_heads, tgt, src);
    mask = additive(attn_mask);
    if (mask.dim() == 2) mask = mask.unsqueeze(0);
  }
  if (key_padding_mask.defined()) {
    const Tensor kpm = unbatched ? key_padding_mask.reshape({1, src}) : key_padding_mask;
    TDDP_CHECK(kpm.dim() == 2 && kpm.size(0) == batch && kpm.size(1) == src,
               "MultiheadAttention: key_padding_mask of shape {} should be [{}, {}]",
               t::format_shape(key_padding_mask.sizes()), batch, src);
    const Tensor per_head =
        additive(kpm).view({batch, 1, 1, src}).expand({batch, num_heads, 1, src}).reshape({batch * num_heads, 1, src});
    mask = mask.defined() ? t::add(mask, per_head) : per_head;
  }
  Tensor scores = t::matmul(t::div(q, std::sqrt(static_cast<double>(head_dim))), k.transpose(1, 2));
  if (mask.defined()) scores = t::add(scores, mask);
  const Tensor weights = t::softmax(scores, -1);  // [N * heads, L, S]
  const Tensor joined = t::matmul(weights, v).transpose(0, 1).reshape({tgt * batch, embed_dim});
  Tensor out = (*out_proj)(joined).view({tgt, batch, embed_dim});
  out = unbatched ? out.squeeze(1) : (batch_first ? out.transpose(0, 1) : out);
  Tensor kept;
  if (need_weights) {
    kept = weights.view({batch, num_heads, tgt, src});
    if (average_attn_weights) kept = t::mean(kept, {1});
    if (unbatched) kept = kept.squeeze(0);
  }
  return {out, kept};
}

Tensor MultiheadAttention::forward(const Tensor& input) { return forward(input, input, input, {}, false).first; }

std::string MultiheadAttention::extra_repr() const {
  return fmt::format("embed_dim={}, num_heads={}{}", embed_dim, num_heads, batch_first ? ", batch_first=True" : "");
}

std::shared_ptr<Module> MultiheadAttention::clone_structure() const {
  return std::make_shared<MultiheadAttention>(embed_dim, num_heads, dropout, in_proj_bias.defined(), batch_first);
}

}  // namespace tinyddp::nn
