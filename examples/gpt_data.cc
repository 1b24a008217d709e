// The text of //examples:train_gpt (gpt_data.h): a corpus read as bytes, its character
// vocabulary, the train/validation split, batches of windows, and the bigram baseline loss.
#include "examples/gpt_data.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "tinyddp/base/error.h"
#include "tinyddp/nn/safetensors.h"
#include "tinyddp/tensor/ops.h"
#include "tinyddp/tensor/random.h"

namespace tinyddp::examples {

namespace fs = std::filesystem;
using tensor::splitmix64;
using tensor::Tensor;

namespace {

// The offset of the first byte that breaks UTF-8 (or a NUL), or npos.
size_t first_non_text(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == 0) return i;
    const size_t length = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (length == 0 || i + length > s.size()) return i;
    for (size_t k = 1; k < length; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return i;
    }
    i += length;
  }
  return std::string::npos;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  TDDP_CHECK(in.good(), "corpus: cannot read {}", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TextCorpus TextCorpus::load(const std::string& path) {
  TDDP_CHECK(fs::exists(path), "corpus: {} does not exist{}", path,
             path == kFortunesPath ? " (the setup script installs Debian's fortunes package there; or pass another "
                                     "text file or folder)"
                                   : "");
  std::vector<fs::path> files;
  if (fs::is_directory(path)) {
    for (const auto& entry : fs::directory_iterator(path)) {
      if (entry.is_symlink() || !entry.is_regular_file() || entry.path().extension() == ".dat") continue;
      files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    TDDP_CHECK(!files.empty(), "corpus: the folder {} holds no text files", path);
  } else {
    files.emplace_back(path);
  }
  std::string text;
  for (const fs::path& file : files) {
    const std::string part = read_file(file);
    const size_t bad = first_non_text(part);
    TDDP_CHECK(bad == std::string::npos, "corpus: {} is not text (byte 0x{:02x} at offset {} is not UTF-8 text)",
               file.string(), static_cast<unsigned char>(part[bad]), bad);
    text += part;
  }
  TDDP_CHECK(!text.empty(), "corpus: {} is empty", path);
  return from_text(std::move(text), path);
}

TextCorpus TextCorpus::from_text(std::string text, std::string source) {
  TDDP_CHECK(!text.empty(), "corpus: {} is empty", source);
  TextCorpus c;
  c.source_ = std::move(source);
  std::array<bool, 256> seen{};
  for (char ch : text) seen[static_cast<unsigned char>(ch)] = true;
  c.id_of_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    if (!seen[b]) continue;
    c.id_of_[b] = static_cast<int16_t>(c.chars_.size());
    c.chars_.push_back(static_cast<unsigned char>(b));
  }
  c.ids_.reserve(text.size());
  for (char ch : text) c.ids_.push_back(c.id_of_[static_cast<unsigned char>(ch)]);
  return c;
}

std::vector<int64_t> TextCorpus::encode(const std::string& text) const {
  std::vector<int64_t> out;
  for (size_t i = 0; i < text.size(); ++i) {
    const int16_t id = id_of_[static_cast<unsigned char>(text[i])];
    TDDP_CHECK(id >= 0, "encode: character {} of \"{}\" (byte 0x{:02x}) is not in the corpus's vocabulary", i, text,
               static_cast<unsigned char>(text[i]));
    out.push_back(id);
  }
  return out;
}

std::string TextCorpus::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (int64_t id : ids) {
    TDDP_CHECK(id >= 0 && id < vocab_size(), "decode: id {} is outside the vocabulary of {}", id, vocab_size());
    out.push_back(static_cast<char>(chars_[id]));
  }
  return out;
}

// ---- The split and the windows -----------------------------------------------------------------

TextSplit::TextSplit(const TextCorpus& corpus, uint64_t seed, int64_t context)
    : corpus_(corpus), seed_(seed), context_(context) {
  std::vector<int64_t> starts;
  for (int64_t start = 0; start < corpus.size(); start += kSplitBlock) {
    if (std::min(kSplitBlock, corpus.size() - start) > context) starts.push_back(start);  // room for one window
  }
  TDDP_CHECK(starts.size() >= 2,
             "corpus: {} has {} tokens, too few for a training and a validation part with windows of {} + 1 tokens",
             corpus.source(), corpus.size(), context);
  tensor::Generator g(splitmix64(seed) ^ 0x5711);
  const Tensor order = tensor::randperm(static_cast<int64_t>(starts.size()), &g);
  const int64_t validation = std::max<int64_t>(1, static_cast<int64_t>(starts.size()) / 10);
  for (int64_t i = 0; i < order.numel(); ++i) {
    const int64_t start = starts[order[i].item<int64_t>()];
    (i < validation ? validation_blocks_ : train_blocks_).push_back(start);
  }
  std::sort(train_blocks_.begin(), train_blocks_.end());
  std::sort(validation_blocks_.begin(), validation_blocks_.end());
}

std::pair<Tensor, Tensor> TextSplit::windows(const std::vector<int64_t>& blocks, uint64_t seed, int64_t rows) const {
  tensor::Generator g(seed);
  std::vector<int64_t> inputs, targets;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t start = blocks[g.random64() % blocks.size()];
    const int64_t length = std::min(kSplitBlock, corpus_.size() - start);
    const int64_t offset = start + static_cast<int64_t>(g.random64() % static_cast<uint64_t>(length - context_));
    const auto& ids = corpus_.ids();
    inputs.insert(inputs.end(), ids.begin() + offset, ids.begin() + offset + context_);
    targets.insert(targets.end(), ids.begin() + offset + 1, ids.begin() + offset + context_ + 1);
  }
  return {tensor::from_vector(inputs, tensor::Shape{rows, context_}),
          tensor::from_vector(targets, tensor::Shape{rows, context_})};
}

std::pair<Tensor, Tensor> TextSplit::train_batch(int64_t step, int rank, int64_t rows) const {
  return windows(train_blocks_,
                 splitmix64(splitmix64(splitmix64(seed_) + static_cast<uint64_t>(rank)) + static_cast<uint64_t>(step)),
                 rows);
}

std::pair<Tensor, Tensor> TextSplit::validation(int64_t count) const {
  return windows(validation_blocks_, splitmix64(seed_ ^ 0xE7A1), count);
}

double TextSplit::bigram_loss(int64_t count) const {
  const int64_t v = corpus_.vocab_size();
  std::vector<double> pairs(static_cast<size_t>(v * v), 1.0), rows(static_cast<size_t>(v), static_cast<double>(v));
  const auto& ids = corpus_.ids();
  for (int64_t start : train_blocks_) {
    const int64_t end = std::min(start + kSplitBlock, corpus_.size());
    for (int64_t i = start; i + 1 < end; ++i) {
      pairs[ids[i] * v + ids[i + 1]] += 1;
      rows[ids[i]] += 1;
    }
  }
  const auto [inputs, targets] = validation(count);
  const std::vector<int64_t> a = inputs.to_vector<int64_t>(), b = targets.to_vector<int64_t>();
  double total = 0;
  for (size_t i = 0; i < a.size(); ++i) total -= std::log(pairs[a[i] * v + b[i]] / rows[a[i]]);
  return total / static_cast<double>(a.size());
}

int64_t TextSplit::train_tokens() const {
  int64_t n = 0;
  for (int64_t start : train_blocks_) n += std::min(kSplitBlock, corpus_.size() - start);
  return n;
}

int64_t TextSplit::validation_tokens() const {
  int64_t n = 0;
  for (int64_t start : validation_blocks_) n += std::min(kSplitBlock, corpus_.size() - start);
  return n;
}

// ---- Batches from a file -----------------------------------------------------------------------

TokenBatches::TokenBatches(const std::string& path, int64_t steps, int64_t context, int rank, int world) {
  const nn::SafetensorsFile file = nn::load_safetensors(path);
  for (const char* key : {"inputs", "targets"}) {
    TDDP_CHECK(file.tensors.contains(key), "--data {}: no tensor '{}' (expected inputs and targets [steps, batch, T])",
               path, key);
    const Tensor& t = file.tensors.at(key);
    TDDP_CHECK(t.dtype() == tensor::kInt64 && t.dim() == 3,
               "--data {}: '{}' must be int64 [steps, batch, T], got {} {}", path, key, tensor::dtype_name(t.dtype()),
               tensor::format_shape(t.sizes()));
  }
  inputs_ = file.tensors.at("inputs");
  targets_ = file.tensors.at("targets");
  TDDP_CHECK(inputs_.sizes() == targets_.sizes(), "--data {}: inputs {} and targets {} differ in shape", path,
             tensor::format_shape(inputs_.sizes()), tensor::format_shape(targets_.sizes()));
  TDDP_CHECK(inputs_.size(0) >= steps, "--data {}: {} steps of batches, but --steps {}", path, inputs_.size(0), steps);
  TDDP_CHECK(inputs_.size(2) <= context, "--data {}: sequences of {} tokens, longer than --block_size {}", path,
             inputs_.size(2), context);
  TDDP_CHECK(inputs_.size(1) % world == 0,
             "--data {}: a global batch of {} rows does not split over {} ranks (each takes an equal share)", path,
             inputs_.size(1), world);
  rows_ = inputs_.size(1) / world;
  first_ = rank * rows_;
  max_id_ = tensor::max(inputs_).item<int64_t>();
}

std::pair<Tensor, Tensor> TokenBatches::batch(int64_t step) const {
  return {inputs_[step].narrow(0, first_, rows_).contiguous(), targets_[step].narrow(0, first_, rows_).contiguous()};
}

}  // namespace tinyddp::examples
