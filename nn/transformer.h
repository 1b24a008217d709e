// A GPT as nanoGPT writes it, with its module and state-dict names: CausalSelfAttention
// (c_attn, c_proj), MLP (c_fc, GELU, c_proj), the pre-norm Block (ln_1, attn, ln_2, mlp) and
// GPT (transformer.{wte, wpe, drop, h.<i>, ln_f} and lm_head, whose weight is wte's). Blocks
// take [B, T, n_embd] with T <= block_size; GPT takes int64 token ids [B, T].
#pragma once

#include <memory>
#include <optional>

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
// out (tensor::causal_softmax: one kernel), then the heads side by side through c_proj. Dropout on the attention
// weights (attn_dropout) and on the output (resid_dropout).
class CausalSelfAttention : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  explicit CausalSelfAttention(const GPTConfig& config);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Linear> c_attn, c_proj;
  std::shared_ptr<Dropout> attn_dropout, resid_dropout;
  int64_t n_head, n_embd, block_size;
};

// c_fc (n_embd -> 4 n_embd), exact GELU, c_proj (back to n_embd), dropout.
class MLP : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  explicit MLP(const GPTConfig& config);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Linear> c_fc, c_proj;
  std::shared_ptr<GELU> gelu;
  std::shared_ptr<Dropout> dropout;
};

// x + attn(ln_1(x)), then x + mlp(ln_2(x)): layer norms before each part (eps 1e-5).
class Block : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  explicit Block(const GPTConfig& config);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<MLP> mlp;
};

// The whole model. The constructor initialises as nanoGPT does: every Linear weight and
// both embeddings ~ N(0, 0.02), biases 0, then the c_proj weights (the two projections that
// feed the residual stream) ~ N(0, 0.02 / sqrt(2 n_layer)); after the same manual_seed the
// values equal nanoGPT's (module construction draws the same numbers as torch's does first).
// lm_head.weight is transformer.wte.weight: one parameter, listed and saved once (as
// transformer.wte.weight; a checkpoint's lm_head.weight is accepted too).
class GPT : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  explicit GPT(const GPTConfig& config);

  // ids [B, T] -> logits [B, T, vocab_size].
  Tensor forward(const Tensor& ids) override;
  // {ids} -> {logits}; {ids, targets} -> {logits, loss}: cross entropy of the logits against
  // the targets [B, T] (int64, -1 marks a position to ignore, as nanoGPT).
  std::vector<Tensor> forward_many(const std::vector<Tensor>& inputs) override;

  // Appends `max_new_tokens` tokens to each row of ids [B, T0], each drawn from the softmax
  // of the last position's logits / temperature, among the top_k most likely if given
  // (nanoGPT's generate); the context is cropped to the last block_size tokens. The draw is
  // torch.multinomial's on the CPU (one exponential number per vocabulary entry and row, the
  // argmax of probability over it), so after the same seed the tokens are PyTorch's. Runs
  // without gradients, in eval mode, and restores the mode. Refuses temperature <= 0 and
  // top_k < 1.
  Tensor generate(const Tensor& ids, int64_t max_new_tokens, double temperature = 1.0,
                  std::optional<int64_t> top_k = std::nullopt, tensor::Generator* generator = nullptr);

  // Parameters, the tied one counted once; with non_embedding, less wpe (nanoGPT's count).
  int64_t num_parameters(bool non_embedding = true) const;

  GPTConfig config;
  std::shared_ptr<Module> transformer;  // a container, as nanoGPT's nn.ModuleDict
  std::shared_ptr<Embedding> wte, wpe;
  std::shared_ptr<Dropout> drop;
  std::vector<std::shared_ptr<Block>> h;  // transformer.h.<i>
  std::shared_ptr<LayerNorm> ln_f;
  std::shared_ptr<Linear> lm_head;

 private:
  // 0 .. block_size - 1 on the device of the last forward, made once there: a forward
  // captured in a CUDA graph then reads positions already on the GPU (arange writes them
  // from the host, which a capture cannot). Not a parameter or buffer: not in the state dict.
  Tensor positions_;
};

}  // namespace tinyddp::nn
