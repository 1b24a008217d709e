// nn::GPT beyond its PyTorch fixture (tests/ddp/gpt_test.cc): errors for bad input, sampling
// (greedy with top_k = 1 is the argmax of the logits; top_k limits the choice; seeded draws
// repeat), and nanoGPT's parameter count.
#include "tinyddp/nn/transformer.h"
#include "tests/nn/nn_test_util.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using Catch::Contains;

namespace {
GPTConfig tiny() {
  GPTConfig c;
  c.block_size = 6;
  c.vocab_size = 11;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  return c;
}
}  // namespace

TEST_CASE("GPT refuses bad input with errors that name it", "[nn][gpt][errors]") {
  tensor::manual_seed(0);
  GPT model(tiny());
  CHECK_THROWS_WITH(model.forward(tensor::full({1, 7}, 1.0, tensor::kInt64)),
                    Contains("GPT: sequence length 7 is longer than block_size 6 (the context)"));
  CHECK_THROWS_WITH(model.forward(tensor::full({1, 3}, 11.0, tensor::kInt64)), Contains("out of range"));
  CHECK_THROWS_WITH(model.forward(tensor::zeros({1, 3})),
                    Contains("GPT: expected int64 token ids [B, T], got float32"));
  CHECK_THROWS_WITH(model(tensor::zeros({1, 3}, tensor::kInt64), tensor::zeros({1, 4}, tensor::kInt64)),
                    Contains("GPT: targets have shape [1, 4] but the ids [1, 3]"));
  GPTConfig odd = tiny();
  odd.n_head = 3;
  CHECK_THROWS_WITH(GPT(odd), Contains("n_embd 8 must be a positive multiple of n_head 3"));
  const Tensor prompt = tensor::zeros({1, 2}, tensor::kInt64);
  CHECK_THROWS_WITH(model.generate(prompt, 3, 0.0), Contains("temperature must be positive, got 0"));
  CHECK_THROWS_WITH(model.generate(prompt, 3, 1.0, 0), Contains("top_k must be at least 1, got 0"));
}

TEST_CASE("GPT: the loss ignores targets of -1, and the parameter count is nanoGPT's", "[nn][gpt]") {
  tensor::manual_seed(1);
  GPT model(tiny());
  const Tensor ids = tensor::tensor({{1, 2, 3, 4}}, tensor::kInt64);
  const Tensor targets = tensor::tensor({{2, -1, 4, -1}}, tensor::kInt64);
  const std::vector<Tensor> out = model(ids, targets);
  REQUIRE(out.size() == 2);
  CHECK(out[0].sizes() == tensor::Shape{1, 4, 11});
  // Mean of -log softmax at the two kept positions.
  const Tensor logp = tensor::log_softmax(out[0][0], -1);
  const double want = -(logp[0][2].item<double>() + logp[2][4].item<double>()) / 2;
  CHECK(out[1].item<double>() == Approx(want).epsilon(1e-6));
  // 12 n_embd^2 per block plus its biases and norms, the tied embedding once, ln_f.
  const int64_t c = 8, blocks = 2 * (12 * c * c + 3 * c + c + 4 * c + c + 4 * c);
  CHECK(model.num_parameters(false) == blocks + 11 * c + 6 * c + 2 * c);
  CHECK(model.num_parameters() == blocks + 11 * c + 2 * c);
}

TEST_CASE("GPT::generate: greedy with top_k 1, limited to the top k, seeded, context cropped", "[nn][gpt][sample]") {
  tensor::manual_seed(2);
  GPT model(tiny());
  const Tensor prompt = tensor::tensor({{3, 1}, {7, 7}}, tensor::kInt64);
  const Tensor greedy = model.generate(prompt, 8, 1.0, 1);
  REQUIRE(greedy.sizes() == tensor::Shape{2, 10});
  CHECK(tensor::equal(greedy.narrow(1, 0, 2), prompt));
  CHECK(model.is_training());  // the mode is restored
  for (int64_t t = 2; t < 10; ++t) {
    const int64_t context = std::min<int64_t>(t, 6);
    tensor::NoGradGuard no_grad;
    model.eval();
    const Tensor logits = model.forward(greedy.narrow(1, t - context, context)).select(1, context - 1);
    model.train();
    for (int64_t b = 0; b < 2; ++b) {
      const std::vector<float> row = logits[b].to_vector<float>();
      const int64_t argmax = std::max_element(row.begin(), row.end()) - row.begin();
      CHECK(greedy[b][t].item<int64_t>() == argmax);
    }
  }
  tensor::Generator g1(5), g2(5);
  const Tensor a = model.generate(prompt, 12, 0.8, 3, &g1), b = model.generate(prompt, 12, 0.8, 3, &g2);
  CHECK(tensor::equal(a, b));
  // Every drawn token is among the 3 most likely at its position.
  model.eval();
  tensor::NoGradGuard no_grad;
  for (int64_t t = 2; t < 14; ++t) {
    const int64_t context = std::min<int64_t>(t, 6);
    const Tensor logits = model.forward(a.narrow(1, t - context, context)).select(1, context - 1);
    for (int64_t r = 0; r < 2; ++r) {
      std::vector<float> row = logits[r].to_vector<float>();
      const float drawn = row[a[r][t].item<int64_t>()];
      std::sort(row.begin(), row.end(), std::greater<>());
      CHECK(drawn >= row[2]);
    }
  }
}
