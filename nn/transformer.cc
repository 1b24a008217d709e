// The GPT pieces: see transformer.h.
#include "tinyddp/nn/transformer.h"

#include <cmath>

namespace tinyddp::nn {

CausalSelfAttention::CausalSelfAttention(const GPTConfig& config)
    : Module("CausalSelfAttention"), n_head(config.n_head), n_embd(config.n_embd), block_size(config.block_size) {
  TDDP_CHECK(n_head > 0 && n_embd > 0 && n_embd % n_head == 0,
             "CausalSelfAttention: n_embd {} must be a positive multiple of n_head {}", n_embd, n_head);
  TDDP_CHECK(block_size > 0, "CausalSelfAttention: block_size must be positive, got {}", block_size);
  c_attn = register_module("c_attn", std::make_shared<Linear>(n_embd, 3 * n_embd, config.bias));
  c_proj = register_module("c_proj", std::make_shared<Linear>(n_embd, n_embd, config.bias));
  attn_dropout = register_module("attn_dropout", std::make_shared<Dropout>(config.dropout));
  resid_dropout = register_module("resid_dropout", std::make_shared<Dropout>(config.dropout));
  tensor::NoGradGuard no_grad;
  future_ = tensor::eq(tensor::tril(tensor::ones({block_size, block_size})), 0.0);
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  TDDP_CHECK(x.dim() == 3 && x.size(2) == n_embd, "CausalSelfAttention: expected input [B, T, {}], got shape {}",
             n_embd, tensor::format_shape(x.sizes()));
  const int64_t b = x.size(0), t = x.size(1), head = n_embd / n_head;
  TDDP_CHECK(t <= block_size, "CausalSelfAttention: sequence length {} is longer than block_size {}", t, block_size);
  // [B, T, C] -> q, k, v [B, n_head, T, head]
  const std::vector<Tensor> qkv = tensor::split(c_attn->forward(x), n_embd, 2);
  const auto heads = [&](const Tensor& m) { return m.view({b, t, n_head, head}).transpose(1, 2); };
  const Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
  Tensor att = tensor::mul(tensor::matmul(q, k.transpose(-2, -1)), 1.0 / std::sqrt(static_cast<double>(head)));
  if (future_.device() != x.device()) future_ = future_.to(x.device());
  att = tensor::masked_fill(att, future_.narrow(0, 0, t).narrow(1, 0, t), -INFINITY);
  att = attn_dropout->forward(tensor::softmax(att, -1));
  // [B, n_head, T, head] -> [B, T, C], the heads side by side
  const Tensor y = tensor::matmul(att, v).transpose(1, 2).contiguous().view({b, t, n_embd});
  return resid_dropout->forward(c_proj->forward(y));
}

MLP::MLP(const GPTConfig& config) : Module("MLP") {
  c_fc = register_module("c_fc", std::make_shared<Linear>(config.n_embd, 4 * config.n_embd, config.bias));
  gelu = register_module("gelu", std::make_shared<GELU>());
  c_proj = register_module("c_proj", std::make_shared<Linear>(4 * config.n_embd, config.n_embd, config.bias));
  dropout = register_module("dropout", std::make_shared<Dropout>(config.dropout));
}

Tensor MLP::forward(const Tensor& x) { return dropout->forward(c_proj->forward(gelu->forward(c_fc->forward(x)))); }

Block::Block(const GPTConfig& config) : Module("Block") {
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(tensor::Shape{config.n_embd}, 1e-5, true, config.bias));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(config));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(tensor::Shape{config.n_embd}, 1e-5, true, config.bias));
  mlp = register_module("mlp", std::make_shared<MLP>(config));
}

Tensor Block::forward(const Tensor& x) {
  const Tensor h = tensor::add(x, attn->forward(ln_1->forward(x)));
  return tensor::add(h, mlp->forward(ln_2->forward(h)));
}

}  // namespace tinyddp::nn
