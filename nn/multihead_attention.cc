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
                                       bool batch_first_, bool add_bias_kv, bool add_zero_attn_, int64_t kdim_,
                                       int64_t vdim_)
    : Module("MultiheadAttention"), embed_dim(embed_dim_), num_heads(num_heads_),
      head_dim(num_heads_ > 0 ? embed_dim_ / num_heads_ : 0), kdim(kdim_ > 0 ? kdim_ : embed_dim_),
      vdim(vdim_ > 0 ? vdim_ : embed_dim_), dropout(dropout_), batch_first(batch_first_),
      add_zero_attn(add_zero_attn_) {
  TDDP_CHECK(embed_dim > 0 && num_heads > 0 && head_dim * num_heads == embed_dim,
             "MultiheadAttention: embed_dim ({}) must be divisible by num_heads ({})", embed_dim, num_heads);
  TDDP_CHECK(dropout >= 0 && dropout < 1, "MultiheadAttention: dropout must be in [0, 1), got {}", dropout);
  TDDP_CHECK(kdim_ >= 0 && vdim_ >= 0, "MultiheadAttention: kdim ({}) and vdim ({}) must be positive (0: embed_dim)",
             kdim_, vdim_);
  // PyTorch's registration order (the state dict's) and order of draws: out_proj as a Linear
  // (weight, bias), then the projection weights, then bias_k and bias_v.
  const bool packed = kdim == embed_dim && vdim == embed_dim;
  if (packed) {
    in_proj_weight = register_parameter("in_proj_weight", t::empty({3 * embed_dim, embed_dim}));
  } else {
    q_proj_weight = register_parameter("q_proj_weight", t::empty({embed_dim, embed_dim}));
    k_proj_weight = register_parameter("k_proj_weight", t::empty({embed_dim, kdim}));
    v_proj_weight = register_parameter("v_proj_weight", t::empty({embed_dim, vdim}));
  }
  if (bias) in_proj_bias = register_parameter("in_proj_bias", t::zeros({3 * embed_dim}));
  if (add_bias_kv) {
    bias_k = register_parameter("bias_k", t::empty({1, 1, embed_dim}));
    bias_v = register_parameter("bias_v", t::empty({1, 1, embed_dim}));
  }
  out_proj = register_module("out_proj", std::make_shared<Linear>(embed_dim, embed_dim, bias));
  if (SkipInitGuard::active()) return;
  for (const Tensor& w : {in_proj_weight, q_proj_weight, k_proj_weight, v_proj_weight}) {
    if (w.defined()) init::xavier_uniform_(w);
  }
  if (bias) init::zeros_(out_proj->bias);
  if (add_bias_kv) {
    init::xavier_normal_(bias_k);
    init::xavier_normal_(bias_v);
  }
}

std::tuple<Tensor, Tensor, Tensor> MultiheadAttention::project(const Tensor& query, const Tensor& key,
                                                               const Tensor& value) const {
  const auto b = [&](int64_t i) {
    return in_proj_bias.defined() ? in_proj_bias.narrow(0, i * embed_dim, embed_dim) : Tensor();
  };
  if (in_proj_weight.defined()) {
    const auto w = [&](int64_t i) { return in_proj_weight.narrow(0, i * embed_dim, embed_dim); };
    return {t::linear(query, w(0), b(0)), t::linear(key, w(1), b(1)), t::linear(value, w(2), b(2))};
  }
  return {t::linear(query, q_proj_weight, b(0)), t::linear(key, k_proj_weight, b(1)),
          t::linear(value, v_proj_weight, b(2))};
}

Tensor MultiheadAttention::merged_mask(const Tensor& attn_mask, const Tensor& key_padding_mask, bool unbatched,
                                       int64_t tgt, int64_t batch, int64_t src, const Tensor& like) const {
  Tensor mask;
  const double neg_inf = -std::numeric_limits<double>::infinity();
  const auto additive = [&](const Tensor& m) {
    return m.dtype() == t::kBool
               ? t::masked_fill(t::zeros(m.sizes(), t::TensorOptions(like.dtype()).device(like.device())), m, neg_inf)
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
  // The added bias and zero keys are attended by every query (PyTorch pads both masks with 0).
  const int64_t extra = (bias_k.defined() ? 1 : 0) + (add_zero_attn ? 1 : 0);
  if (mask.defined() && extra > 0) {
    tensor::Shape pad = mask.sizes();
    pad.back() = extra;
    mask = t::cat({mask, t::zeros(pad, t::TensorOptions(mask.dtype()).device(mask.device()))}, -1);
  }
  return mask;
}

std::pair<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query_in, const Tensor& key_in,
                                                      const Tensor& value_in, const Tensor& key_padding_mask,
                                                      bool need_weights, const Tensor& attn_mask,
                                                      bool average_attn_weights, bool is_causal) {
  TDDP_CHECK(!is_causal || attn_mask.defined(),
             "MultiheadAttention: Need attn_mask if specifying the is_causal hint. You may use the Transformer "
             "module method `generate_square_subsequent_mask` to create this mask.");
  const bool unbatched = query_in.dim() == 2;
  TDDP_CHECK(query_in.dim() == 3 || unbatched, "MultiheadAttention: expected a 2-D or 3-D query, got shape {}",
             t::format_shape(query_in.sizes()));
  // As [L, N, E] (PyTorch's layout inside), whatever the caller's.
  const auto seq_first = [&](const Tensor& x) {
    if (unbatched) return x.unsqueeze(1);
    return batch_first ? x.transpose(0, 1) : x;
  };
  const Tensor query = seq_first(query_in), key = seq_first(key_in), value = seq_first(value_in);
  TDDP_CHECK(query.size(2) == embed_dim && key.size(2) == kdim && value.size(2) == vdim,
             "MultiheadAttention: expected query, key and value of sizes {}, {} and {} (embed_dim, kdim, vdim) in "
             "their last dim, got {}, {}, {}",
             embed_dim, kdim, vdim, query.size(2), key.size(2), value.size(2));
  TDDP_CHECK(key.size(0) == value.size(0) && key.size(1) == value.size(1),
             "MultiheadAttention: key shape {} and value shape {} differ in their sequence or batch dims",
             t::format_shape(key.sizes()), t::format_shape(value.sizes()));
  const int64_t tgt = query.size(0), batch = query.size(1), src = key.size(0);
  auto [q, k, v] = project(query, key, value);
  if (bias_k.defined()) {
    k = t::cat({k, bias_k.expand({1, batch, embed_dim})}, 0);
    v = t::cat({v, bias_v.expand({1, batch, embed_dim})}, 0);
  }
  // [S, N, E] -> [N * heads, S, head_dim]
  const auto heads_of = [&](const Tensor& x) {
    return x.reshape({x.size(0), batch * num_heads, head_dim}).transpose(0, 1);
  };
  q = heads_of(q);
  k = heads_of(k);
  v = heads_of(v);
  if (add_zero_attn) {
    const Tensor zero = t::zeros({batch * num_heads, 1, head_dim}, t::TensorOptions(k.dtype()).device(k.device()));
    k = t::cat({k, zero}, 1);
    v = t::cat({v, zero}, 1);
  }
  // The hint taken at its word where PyTorch takes it: query i attends keys 0..i.
  const bool causal = is_causal && !key_padding_mask.defined() && !need_weights;
  const Tensor given =
      causal ? t::triu(t::full({tgt, src}, -INFINITY, t::TensorOptions(q.dtype()).device(q.device())), 1) : attn_mask;
  const Tensor mask = merged_mask(given, key_padding_mask, unbatched, tgt, batch, src, q);
  Tensor scores = t::matmul(t::div(q, std::sqrt(static_cast<double>(head_dim))), k.transpose(1, 2));
  if (mask.defined()) scores = t::add(scores, mask);
  Tensor weights = t::softmax(scores, -1);  // [N * heads, L, S']
  if (dropout > 0 && is_training()) weights = t::dropout(weights, dropout);
  const Tensor joined = t::matmul(weights, v).transpose(0, 1).reshape({tgt * batch, embed_dim});
  Tensor out = (*out_proj)(joined).view({tgt, batch, embed_dim});
  out = unbatched ? out.squeeze(1) : (batch_first ? out.transpose(0, 1) : out);
  Tensor kept;
  if (need_weights) {
    kept = weights.view({batch, num_heads, tgt, weights.size(2)});
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
  return std::make_shared<MultiheadAttention>(embed_dim, num_heads, dropout, in_proj_bias.defined(), batch_first,
                                              bias_k.defined(), add_zero_attn, kdim, vdim);
}

}  // namespace tinyddp::nn
