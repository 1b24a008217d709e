// The GPT of transformer.h, as nanoGPT's model.py: causal self-attention, the MLP, the block,
// the model's forward with its loss, generation, and the copies DataParallel replicates.
#include "tinyddp/nn/transformer.h"

#include <algorithm>
#include <cmath>

#include "tinyddp/nn/loss.h"
#include "tinyddp/tensor/random.h"

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
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  TDDP_CHECK(x.dim() == 3 && x.size(2) == n_embd, "CausalSelfAttention: expected input [B, T, {}], got shape {}",
             n_embd, tensor::format_shape(x.sizes()));
  const int64_t b = x.size(0), t = x.size(1), head = n_embd / n_head;
  TDDP_CHECK(t <= block_size, "CausalSelfAttention: sequence length {} is longer than block_size {}", t, block_size);
  // [B, T, C] -> q, k, v [B, n_head, T, head]
  const std::vector<Tensor> qkv = tensor::split((*c_attn)(x), n_embd, 2);
  const auto heads = [&](const Tensor& m) { return m.view({b, t, n_head, head}).transpose(1, 2); };
  const Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
  // softmax(q k^T / sqrt(head), future masked out) v in one op, flash attention's way where
  // the backend has a kernel (no T x T matrix in memory; on a GPU in 16 bits on tensor cores,
  // else only past cuda::kComposedAttentionBytes of weights, docs/tensor.md), as nanoGPT's
  // scaled_dot_product_attention branch; attention dropout inside it off the CPU (its mask is
  // dropout's own there). With attention dropout on the CPU, where dropout draws PyTorch's CPU
  // stream: the weights in one kernel (nanoGPT's mul, masked_fill and softmax, the same
  // numbers), dropped out, times v.
  const double scale = 1.0 / std::sqrt(static_cast<double>(head));
  const double p = is_training() ? attn_dropout->p : 0.0;
  const Tensor heads_out =
      p > 0.0 && x.device().type == tensor::DeviceType::kCPU
          ? tensor::matmul((*attn_dropout)(tensor::causal_softmax(tensor::matmul(q, k.transpose(-2, -1)), scale)), v)
          : tensor::flash_attention(q, k, v, true, scale, p);
  // [B, n_head, T, head] -> [B, T, C], the heads side by side
  const Tensor y = heads_out.transpose(1, 2).contiguous().view({b, t, n_embd});
  return (*resid_dropout)((*c_proj)(y));
}

MLP::MLP(const GPTConfig& config) : Module("MLP") {
  c_fc = register_module("c_fc", std::make_shared<Linear>(config.n_embd, 4 * config.n_embd, config.bias));
  gelu = register_module("gelu", std::make_shared<GELU>());
  c_proj = register_module("c_proj", std::make_shared<Linear>(4 * config.n_embd, config.n_embd, config.bias));
  dropout = register_module("dropout", std::make_shared<Dropout>(config.dropout));
}

Tensor MLP::forward(const Tensor& x) { return (*dropout)((*c_proj)((*gelu)((*c_fc)(x)))); }

Block::Block(const GPTConfig& config) : Module("Block") {
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(tensor::Shape{config.n_embd}, 1e-5, true, config.bias));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(config));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(tensor::Shape{config.n_embd}, 1e-5, true, config.bias));
  mlp = register_module("mlp", std::make_shared<MLP>(config));
}

Tensor Block::forward(const Tensor& x) {
  const Tensor h = tensor::add(x, (*attn)((*ln_1)(x)));
  return tensor::add(h, (*mlp)((*ln_2)(h)));
}

GPT::GPT(const GPTConfig& config) : Module("GPT"), config(config) {
  TDDP_CHECK(config.vocab_size > 0 && config.n_layer >= 0, "GPT: vocab_size must be positive and n_layer not negative");
  // Construction draws from the default generator in nanoGPT's order: wte, wpe, the blocks,
  // lm_head (each Linear's default initialisation), so the re-initialisation below sees
  // the same generator state as nanoGPT's.
  transformer = register_module("transformer", std::make_shared<Module>("ModuleDict"));
  wte = transformer->register_module("wte", std::make_shared<Embedding>(config.vocab_size, config.n_embd));
  wpe = transformer->register_module("wpe", std::make_shared<Embedding>(config.block_size, config.n_embd));
  drop = transformer->register_module("drop", std::make_shared<Dropout>(config.dropout));
  const auto blocks = transformer->register_module("h", std::make_shared<Module>("ModuleList"));
  for (int64_t i = 0; i < config.n_layer; ++i) {
    h.push_back(blocks->register_module(std::to_string(i), std::make_shared<Block>(config)));
  }
  ln_f = transformer->register_module(
      "ln_f", std::make_shared<LayerNorm>(tensor::Shape{config.n_embd}, 1e-5, true, config.bias));
  lm_head = register_module("lm_head", std::make_shared<Linear>(config.n_embd, config.vocab_size, false));
  lm_head->weight = lm_head->replace_parameter("weight", wte->weight);

  // nanoGPT's _init_weights, applied to the leaf modules in order (lm_head last: it draws the
  // tied weight's final values), then the residual projections.
  if (SkipInitGuard::active()) return;
  tensor::NoGradGuard no_grad;
  std::vector<const Module*> leaves;
  const auto visit = [&](const Module& m, const auto& self) -> void {
    if (m.named_children().empty()) leaves.push_back(&m);
    for (const auto& [name, child] : m.named_children()) self(*child, self);
  };
  visit(*this, visit);
  for (const Module* m : leaves) {
    if (const auto* linear = dynamic_cast<const Linear*>(m)) {
      tensor::normal_(linear->weight, 0.0, 0.02);
      if (linear->bias.defined()) linear->bias.zero_();
    } else if (const auto* embedding = dynamic_cast<const Embedding*>(m)) {
      tensor::normal_(embedding->weight, 0.0, 0.02);
    }
  }
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config.n_layer));
  for (const auto& block : h) {
    tensor::normal_(block->attn->c_proj->weight, 0.0, proj_std);
    tensor::normal_(block->mlp->c_proj->weight, 0.0, proj_std);
  }
}

Tensor GPT::forward(const Tensor& ids) {
  TDDP_CHECK(ids.dim() == 2 && ids.dtype() == tensor::kInt64, "GPT: expected int64 token ids [B, T], got {} {}",
             tensor::dtype_name(ids.dtype()), tensor::format_shape(ids.sizes()));
  const int64_t t = ids.size(1);
  TDDP_CHECK(t <= config.block_size, "GPT: sequence length {} is longer than block_size {} (the context)", t,
             config.block_size);
  if (!positions_.defined() || positions_.device() != ids.device()) {
    positions_ = tensor::arange(int64_t{0}, config.block_size, int64_t{1}, tensor::TensorOptions(ids.device()));
  }
  const Tensor positions = positions_.narrow(0, 0, t);
  Tensor x = (*drop)(tensor::add((*wte)(ids), (*wpe)(positions)));
  for (const auto& block : h) x = (*block)(x);
  return (*lm_head)((*ln_f)(x));
}

std::vector<Tensor> GPT::forward_many(const std::vector<Tensor>& inputs) {
  TDDP_CHECK(inputs.size() == 1 || inputs.size() == 2, "GPT: forward takes (ids) or (ids, targets), got {} inputs",
             inputs.size());
  const Tensor logits = forward(inputs[0]);
  if (inputs.size() == 1) return {logits};
  const Tensor& targets = inputs[1];
  TDDP_CHECK(targets.sizes() == inputs[0].sizes(), "GPT: targets have shape {} but the ids {}",
             tensor::format_shape(targets.sizes()), tensor::format_shape(inputs[0].sizes()));
  const Tensor loss = cross_entropy(logits.reshape({-1, config.vocab_size}), targets.reshape({-1}), -1);
  return {logits, loss};
}

Tensor GPT::generate(const Tensor& ids, int64_t max_new_tokens, double temperature, std::optional<int64_t> top_k,
                     tensor::Generator* generator) {
  TDDP_CHECK(temperature > 0, "GPT::generate: temperature must be positive, got {}", temperature);
  TDDP_CHECK(!top_k || *top_k >= 1, "GPT::generate: top_k must be at least 1, got {}", top_k.value_or(0));
  TDDP_CHECK(ids.dim() == 2 && ids.size(1) >= 1, "GPT::generate: expected a prompt of token ids [B, T >= 1], got {}",
             tensor::format_shape(ids.sizes()));
  tensor::Generator& gen = generator != nullptr ? *generator : tensor::default_generator();
  const bool was_training = is_training();
  eval();
  tensor::NoGradGuard no_grad;
  const int64_t batch = ids.size(0), vocab = config.vocab_size, k = std::min(top_k.value_or(vocab), vocab);
  Tensor out = ids;
  for (int64_t n = 0; n < max_new_tokens; ++n) {
    const int64_t t = out.size(1), context = std::min(t, config.block_size);
    const Tensor last = forward(out.narrow(1, t - context, context)).select(1, context - 1);  // [B, vocab]
    // nanoGPT's step in float32: logits / temperature, all but the top k set to -inf, softmax.
    std::vector<float> logits =
        tensor::div(last.to(tensor::kFloat32), temperature).to(tensor::Device()).contiguous().to_vector<float>();
    for (int64_t b = 0; b < batch; ++b) {
      const auto row = logits.begin() + b * vocab;
      std::vector<float> sorted(row, row + vocab);
      std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<>());
      std::replace_if(
          row, row + vocab, [kth = sorted[k - 1]](float v) { return v < kth; }, -INFINITY);
    }
    const std::vector<float> probs =
        tensor::softmax(tensor::from_vector(logits, tensor::Shape{batch, vocab}), 1).to_vector<float>();
    // torch.multinomial(probs, 1): the argmax of probs / q, q ~ Exp(1) drawn for every entry in
    // order (float32 of -log(1 - u), u a 53-bit uniform), the first of equal maxima.
    std::vector<int64_t> next(batch);
    for (int64_t b = 0; b < batch; ++b) {
      float best = -1;
      for (int64_t v = 0; v < vocab; ++v) {
        const auto q = static_cast<float>(-std::log(1.0 - gen.uniform_double()));
        const float score = probs[static_cast<size_t>(b * vocab + v)] / q;
        if (score > best) {
          best = score;
          next[b] = v;
        }
      }
    }
    out = tensor::cat({out, tensor::from_vector(next, tensor::Shape{batch, 1}).to(ids.device())}, 1);
  }
  train(was_training);
  return out;
}

int64_t GPT::num_parameters(bool non_embedding) const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return non_embedding ? n - wpe->weight.numel() : n;
}

// ---- clone_structure (Module::clone_structure): a new module from the same configuration ------

namespace {
GPTConfig config_of(int64_t n_embd, int64_t n_head, int64_t block_size, double dropout, bool bias) {
  GPTConfig c;
  c.n_embd = n_embd;
  c.n_head = n_head;
  c.block_size = block_size;
  c.dropout = dropout;
  c.bias = bias;
  return c;
}
}  // namespace

std::shared_ptr<Module> CausalSelfAttention::clone_structure() const {
  return std::make_shared<CausalSelfAttention>(
      config_of(n_embd, n_head, block_size, attn_dropout->p, c_attn->bias.defined()));
}
std::shared_ptr<Module> MLP::clone_structure() const {
  return std::make_shared<MLP>(config_of(c_fc->in_features, 1, 1, dropout->p, c_fc->bias.defined()));
}
std::shared_ptr<Module> Block::clone_structure() const {
  return std::make_shared<Block>(
      config_of(attn->n_embd, attn->n_head, attn->block_size, attn->attn_dropout->p, attn->c_attn->bias.defined()));
}
std::shared_ptr<Module> GPT::clone_structure() const { return std::make_shared<GPT>(config); }

}  // namespace tinyddp::nn
