// A character-level LSTM language model ("char-rnn") trained with DDP, written as a PyTorch
// user would write it: Embedding -> 2-layer LSTM (batch_first) -> a ModuleList head of two
// Linears initialised by model->apply(xavier_uniform_ / zeros_), log_softmax + nll_loss over
// [B, vocab, T], AdamW under OneCycleLR. Each rank draws its own windows of the text (nanoGPT's
// get_batch: torch.randint(len - T, (B,)) from a generator seeded seed + rank), --accum
// micro-batches per step accumulate their gradients under no_sync but the last, whose backward
// has DDP average them, and rank 0 prints the loss (the mean over ranks) and, at the end, a
// continuation of a prompt, greedy or sampled (--temperature, multinomial). tests/examples/char_lstm_test.cc holds a
// run to PyTorch's DDP run of the same script (tests/examples/fixtures/make_char_lstm_fixture.py) step by step.
//   bazel run -c opt //examples:char_lstm                   (forks 2 ranks on the fortunes)
//   launch --nproc_per_node 2 -- bazel-bin/examples/char_lstm --text FILE --steps 300
#include <CLI/CLI.hpp>

#include "examples/example_util.h"
#include "examples/gpt_data.h"
#include "tinyddp/comm/comm.h"
#include "tinyddp/ddp/distributed.h"

namespace t = tinyddp::tensor;
using namespace tinyddp;
using tensor::Tensor;

namespace {

struct Config {
  std::string text = examples::kFortunesPath;
  int64_t steps = 300, batch_size = 32, seq_len = 64, embed = 32, hidden = 128, layers = 2, log_every = 20;
  int64_t accum = 1;  // micro-batches per step, all but the last under no_sync
  double lr = 0.01, weight_decay = 0.01;
  double temperature = 0;  // 0: continue the prompt greedily; else sample softmax(logits / temperature)
  uint64_t seed = 1337;
  int nproc = 2;
  std::string prompt = "The ", metrics, save;
  int64_t sample = 120;
};

// ids [B, T] -> log-probabilities [B, vocab, T] (nll_loss's layout for a sequence).
struct CharLSTM : nn::Module {
  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::LSTM> lstm;
  std::shared_ptr<nn::ModuleList> head;
  CharLSTM(int64_t vocab, const Config& c) : Module("CharLSTM") {
    embed = register_module("embed", std::make_shared<nn::Embedding>(vocab, c.embed));
    lstm = register_module("lstm", std::make_shared<nn::LSTM>(c.embed, c.hidden, c.layers, true, /*batch_first=*/true));
    head = register_module("head", std::make_shared<nn::ModuleList>());
    head->append(std::make_shared<nn::Linear>(c.hidden, c.hidden));
    head->append(std::make_shared<nn::Linear>(c.hidden, vocab));
  }
  // The hidden states of the sequence ([B, T, H]) and the state after it, from `state`.
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> run(const Tensor& ids,
                                                     const std::optional<std::tuple<Tensor, Tensor>>& state) {
    return lstm->forward(embed->forward(ids), state);
  }
  Tensor log_probs(const Tensor& hidden) {
    const Tensor h = t::tanh((*head)[0]->forward(hidden));
    return t::log_softmax((*head)[1]->forward(h), -1);
  }
  Tensor forward(const Tensor& ids) override { return log_probs(std::get<0>(run(ids, std::nullopt))).transpose(1, 2); }
};

// Rank `rank`'s windows for one step: inputs and the targets one character on.
std::pair<Tensor, Tensor> get_batch(const std::vector<int64_t>& ids, const Config& c, t::Generator& gen) {
  const int64_t n = static_cast<int64_t>(ids.size());
  const std::vector<int64_t> starts = t::randint(n - c.seq_len, {c.batch_size}, &gen).to_vector<int64_t>();
  std::vector<int64_t> x, y;
  for (const int64_t s : starts) {
    x.insert(x.end(), ids.begin() + s, ids.begin() + s + c.seq_len);
    y.insert(y.end(), ids.begin() + s + 1, ids.begin() + s + c.seq_len + 1);
  }
  const t::Shape shape{c.batch_size, c.seq_len};
  return {t::from_vector(x, shape), t::from_vector(y, shape)};
}

// The prompt continued `c.sample` characters, the LSTM's state carried: each the most likely one
// (temperature 0) or drawn from softmax(log_probs / temperature) by multinomial.
std::string continue_prompt(CharLSTM& model, const examples::TextCorpus& corpus, const Config& c) {
  t::NoGradGuard no_grad;
  model.eval();
  t::Generator gen(c.seed);
  Tensor input = t::from_vector(corpus.encode(c.prompt), t::Shape{1, static_cast<int64_t>(c.prompt.size())});
  std::optional<std::tuple<Tensor, Tensor>> state;
  std::vector<int64_t> out;
  for (int64_t i = 0; i < c.sample; ++i) {
    auto [hidden, next_state] = model.run(input, state);
    state = next_state;
    const Tensor last = model.log_probs(hidden.select(1, hidden.size(1) - 1));  // [1, vocab]
    const Tensor next = c.temperature > 0 ? t::multinomial((last / c.temperature).softmax(-1), 1, false, &gen)
                                          : last.argmax(-1, /*keepdim=*/true);
    out.push_back(next.item<int64_t>());
    input = next;
  }
  model.train();
  return c.prompt + corpus.decode(out);
}

int train(int rank, const Config& c) {
  auto pg = comm::init_from_env();
  const examples::TextCorpus corpus = examples::TextCorpus::load(c.text);
  TDDP_CHECK(corpus.size() > c.seq_len + 1, "char_lstm: the text ({} characters) is shorter than --seq_len + 2",
             corpus.size());
  if (c.sample > 0) corpus.encode(c.prompt);  // a prompt the text cannot spell fails now, not after training
  t::manual_seed(c.seed);                     // every rank builds the same model (DDP would broadcast rank 0's anyway)
  auto model = std::make_shared<CharLSTM>(corpus.vocab_size(), c);
  model->apply([](nn::Module& m) {
    if (auto* linear = dynamic_cast<nn::Linear*>(&m)) {
      nn::init::xavier_uniform_(linear->weight);
      nn::init::zeros_(linear->bias);
    }
  });
  ddp::DistributedDataParallel ddp_model(model, pg);
  nn::AdamW optimizer(model->parameters(), nn::AdamWOptions(c.lr).weight_decay(c.weight_decay));
  nn::OneCycleLR schedule(optimizer, c.lr, c.steps);
  t::Generator gen(c.seed + static_cast<uint64_t>(rank));
  std::FILE* metrics = rank == 0 && !c.metrics.empty() ? std::fopen(c.metrics.c_str(), "w") : nullptr;
  if (metrics) std::fprintf(metrics, "step,loss,lr\n");
  for (int64_t step = 0; step < c.steps; ++step) {
    const double lr = optimizer.lr();
    optimizer.zero_grad();
    Tensor total = t::zeros({});
    const auto accumulate = [&](const Tensor& x, const Tensor& y) {
      const Tensor loss = nn::nll_loss(ddp_model(x), y) / static_cast<double>(c.accum);
      loss.backward();
      total += loss.detach();
    };
    for (int64_t micro = 0; micro < c.accum; ++micro) {
      const auto [x, y] = get_batch(corpus.ids(), c, gen);
      if (micro + 1 < c.accum) {  // gradients accumulate locally; the last backward averages them
        auto no_sync = ddp_model.no_sync();
        accumulate(x, y);
      } else {
        accumulate(x, y);
      }
    }
    optimizer.step();
    schedule.step();
    const Tensor mean = total.clone();  // the loss averaged over the ranks, for the log
    pg->allreduce({mean})->wait();
    const double value = mean.item<double>() / pg->size();
    if (metrics) std::fprintf(metrics, "%lld,%.9g,%.9g\n", static_cast<long long>(step), value, lr);
    if (rank == 0 && (step % c.log_every == 0 || step + 1 == c.steps)) {
      fmt::print("step {}: loss {:.4f}, lr {:.3g}\n", step, value, lr);
      std::fflush(stdout);
    }
  }
  if (metrics) std::fclose(metrics);
  if (rank == 0 && !c.save.empty()) nn::save_safetensors(c.save, model->state_dict());
  if (rank == 0 && c.sample > 0) fmt::print("sample: {}\n", continue_prompt(*model, corpus, c));
  std::fflush(stdout);
  pg->barrier()->wait();
  comm::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"Train a character-level LSTM language model with DDP (2 ranks unless launched)."};
  app.add_option("--text", c.text, "a text file, or a folder of them")->capture_default_str();
  app.add_option("--steps", c.steps)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--batch_size", c.batch_size, "windows per rank and step")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--seq_len", c.seq_len)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--embed", c.embed)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--hidden", c.hidden)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--layers", c.layers)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--accum", c.accum, "micro-batches per step (gradient accumulation under no_sync)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", c.lr, "OneCycleLR's max_lr")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--weight_decay", c.weight_decay)->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--seed", c.seed)->capture_default_str();
  app.add_option("--log_every", c.log_every)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--nproc", c.nproc, "ranks to fork when not under the launcher")->capture_default_str();
  app.add_option("--prompt", c.prompt)->capture_default_str();
  app.add_option("--temperature", c.temperature, "0: greedy; else sample softmax(logits / temperature)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--sample", c.sample, "characters to generate at the end (0: none)")->capture_default_str();
  app.add_option("--metrics", c.metrics, "write step,loss,lr (the loss averaged over ranks) as CSV");
  app.add_option("--save", c.save, "write the final state dict (safetensors)");
  CLI11_PARSE(app, argc, argv);
  return examples::run_ranks("char_lstm", c.nproc, [&](int rank) { return train(rank, c); });
}
