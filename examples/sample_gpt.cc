// //examples:sample_gpt: nanoGPT's sample.py for train_gpt --dataset's checkpoints. Loads
// out_dir/ckpt.safetensors (the model under nanoGPT's names and its arguments), encodes the
// start text with the dataset's meta.pkl, and prints num_samples continuations of
// max_new_tokens tokens each, drawn with temperature and top_k, each followed by a line of
// dashes as sample.py prints them. The draws follow sample.py's: the default generator seeded
// with --seed, the model built after it (its initialisation draws, then the checkpoint's
// weights), then GPT::generate's torch.multinomial draws, so the same weights and seed give
// sample.py's text.
//   bazel-bin/examples/sample_gpt --out_dir=out-shakespeare-char --start="ROMEO:" --num_samples=3
#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "examples/nanogpt_checkpoint.h"
#include "examples/nanogpt_data.h"
#include "tinyddp/base/error.h"
#include "tinyddp/nn/safetensors.h"
#include "tinyddp/nn/transformer.h"
#include "tinyddp/tensor/ops.h"
#include "tinyddp/tensor/random.h"

namespace {

namespace ex = tinyddp::examples;
namespace nn = tinyddp::nn;
namespace t = tinyddp::tensor;
using tinyddp::Error;

struct Options {
  std::string out_dir = "out", start = "\n", dataset;
  int64_t num_samples = 10, max_new_tokens = 500, top_k = 200;
  double temperature = 0.8;
  uint64_t seed = 1337;
};

// The model of out_dir's checkpoint: its arguments, then its weights ("model.<name>"); sets
// `dataset` to the checkpoint's unless given.
std::shared_ptr<nn::GPT> load_model(const std::string& path, std::string& dataset) {
  TDDP_CHECK(std::filesystem::exists(path), "no checkpoint at {} (train_gpt --dataset saves one in its out_dir)", path);
  const nn::SafetensorsFile file = nn::load_safetensors(path);
  const ex::CheckpointArgs args = ex::checkpoint_args(file.metadata, path);
  if (dataset.empty()) dataset = args.dataset;
  auto model = std::make_shared<nn::GPT>(args.model);  // after the seed: sample.py builds its model there too
  nn::OrderedDict<t::Tensor> weights;
  for (const auto& [name, tensor] : file.tensors) {
    if (name.rfind("model.", 0) == 0) weights.insert(name.substr(6), tensor);
  }
  model->load_state_dict(weights);
  return model;
}

// The start text, or the file it names ("FILE:path"), as sample.py reads it.
std::string start_text(const std::string& start) {
  if (start.rfind("FILE:", 0) != 0) return start;
  std::ifstream in(start.substr(5), std::ios::binary);
  TDDP_CHECK(in.good(), "--start={}: cannot open {}", start, start.substr(5));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void sample(const Options& o) {
  t::manual_seed(o.seed);  // sample.py: torch.manual_seed(seed) first
  std::string dataset = o.dataset;
  const std::shared_ptr<nn::GPT> model = load_model(ex::checkpoint_path(o.out_dir), dataset);
  const std::string dir = ex::dataset_dir(dataset);
  const std::filesystem::path meta = std::filesystem::path(dir) / "meta.pkl";
  TDDP_CHECK(std::filesystem::exists(meta),
             "{}: no meta.pkl to encode and decode with (a character-level dataset has one)", dir);
  const ex::CharVocab vocab = ex::read_meta(meta.string());
  TDDP_CHECK(vocab.size() == model->config.vocab_size, "{} has {} characters; the checkpoint's model {}", meta.string(),
             vocab.size(), model->config.vocab_size);
  const std::vector<int64_t> ids = vocab.encode(start_text(o.start));
  TDDP_CHECK(!ids.empty(), "--start is empty: the model needs at least one token to continue");
  const t::Tensor prompt = t::from_vector<int64_t>(ids, t::Shape{1, static_cast<int64_t>(ids.size())});
  for (int64_t k = 0; k < o.num_samples; ++k) {
    const t::Tensor out = model->generate(prompt, o.max_new_tokens, o.temperature, o.top_k);
    std::cout << vocab.decode(out.select(0, 0).to_vector<int64_t>()) << "\n---------------\n" << std::flush;
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Sample from a train_gpt --dataset checkpoint, as nanoGPT's sample.py."};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--out_dir", o.out_dir, "the run's out_dir, holding ckpt.safetensors (default out)");
  app.add_option("--start", o.start, "the text to continue, or FILE:path (default a newline)");
  app.add_option("--num_samples", o.num_samples, "samples to draw (default 10)")->check(CLI::PositiveNumber);
  app.add_option("--max_new_tokens", o.max_new_tokens, "tokens per sample (default 500)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--temperature", o.temperature, "below 1 sharper, above 1 flatter (default 0.8)");
  app.add_option("--top_k", o.top_k, "draw among the k most likely tokens (default 200)");
  app.add_option("--seed", o.seed, "the draws' seed (default 1337)");
  app.add_option("--dataset", o.dataset, "the data folder with meta.pkl (default: the checkpoint's dataset)");
  CLI11_PARSE(app, argc, argv);
  try {
    sample(o);
  } catch (const std::exception& e) {
    std::cerr << "sample_gpt: error: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
