// The pieces of a GPT as nanoGPT writes them, with its module and state-dict names:
// CausalSelfAttention (c_attn, c_proj), MLP (c_fc, GELU, c_proj) and the pre-norm Block
// (ln_1, attn, ln_2, mlp). Inputs are [B, T, n_embd] with T <= block_size.
#pragma once

#include <memory>

#include "tinyddp/nn/layers.h"

namespace tinyddp::nn {

// nanoGPT's GPTConfig (its defaults are GPT-2's; these are a small model's).
struct GPTConfig {
  int64_t block_size = 64;
  int64_t vocab_size = 65;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  double dropout = 0.0;
  bool bias = true;  // in the Linears and LayerNorms
};

// Multi-head causal self-attention: q, k, v from one Linear (c_attn, n_embd -> 3 n_embd),
// split into n_head heads by views, softmax(q k^T / sqrt(head width)) with the future masked
// out, then the heads side by side through c_proj. Dropout on the attention weights
// (attn_dropout) and on the output (resid_dropout).
class CausalSelfAttention : public Module {
 public:
  explicit CausalSelfAttention(const GPTConfig& config);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Linear> c_attn, c_proj;
  std::shared_ptr<Dropout> attn_dropout, resid_dropout;
  int64_t n_head, n_embd, block_size;

 private:
  Tensor future_;  // bool [block_size, block_size]: true above the diagonal (masked out)
};

// c_fc (n_embd -> 4 n_embd), exact GELU, c_proj (back to n_embd), dropout.
class MLP : public Module {
 public:
  explicit MLP(const GPTConfig& config);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Linear> c_fc, c_proj;
  std::shared_ptr<GELU> gelu;
  std::shared_ptr<Dropout> dropout;
};

// x + attn(ln_1(x)), then x + mlp(ln_2(x)): layer norms before each part (eps 1e-5).
class Block : public Module {
 public:
  explicit Block(const GPTConfig& config);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<MLP> mlp;
};

}  // namespace tinyddp::nn
