// The text behind //examples:train_gpt: a corpus of plain text files (by default the English
// fortune-cookie files of Debian's `fortunes` package, about 2.5 MB), its character-level
// vocabulary (every byte value that occurs, in byte order), a seeded train/validation split,
// the random windows each rank trains on, a bigram model to beat, and batches replayed from
// a file (--data).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tinyddp/tensor/tensor.h"

namespace tinyddp::examples {

// Where the setup script's `fortunes` package puts its files.
inline const char* const kFortunesPath = "/usr/share/games/fortunes";

// A corpus read into memory, as token ids.
class TextCorpus {
 public:
  // `path` is a text file, or a folder whose regular files (not "*.dat" indexes, not links)
  // are read in name order. Throws naming the path when it is missing, empty, or not text
  // (a NUL byte, or bytes that are not UTF-8).
  static TextCorpus load(const std::string& path);
  // The corpus of a string (tests).
  static TextCorpus from_text(std::string text, std::string source = "text");

  int64_t vocab_size() const { return static_cast<int64_t>(chars_.size()); }
  int64_t size() const { return static_cast<int64_t>(ids_.size()); }
  const std::vector<int64_t>& ids() const { return ids_; }
  const std::string& source() const { return source_; }
  // Text -> ids; throws naming the first character outside the vocabulary.
  std::vector<int64_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int64_t>& ids) const;

 private:
  std::string source_;
  std::vector<unsigned char> chars_;  // id -> byte
  std::array<int16_t, 256> id_of_{};  // byte -> id, -1 when absent
  std::vector<int64_t> ids_;
};

// The corpus cut into blocks of kSplitBlock tokens; a generator seeded with `seed` picks one
// block in ten (at least one) for validation. Windows never cross a block's end, so no window
// mixes training and validation text.
class TextSplit {
 public:
  static constexpr int64_t kSplitBlock = 4096;
  // Keeps a reference to `corpus`, which must outlive it.
  TextSplit(const TextCorpus& corpus, uint64_t seed, int64_t context);

  // Rank `rank`'s `rows` training windows of step `step`: inputs and targets (inputs shifted
  // by one token), int64 [rows, context]. Drawn from a generator seeded by (seed, rank, step)
  // alone, so a resumed run draws the same windows and no two ranks draw from one stream.
  std::pair<tensor::Tensor, tensor::Tensor> train_batch(int64_t step, int rank, int64_t rows) const;
  // `count` validation windows, the same on every rank and every call.
  std::pair<tensor::Tensor, tensor::Tensor> validation(int64_t count) const;
  // Cross entropy of a bigram model (next-token counts over the training blocks, plus one for
  // every pair) on the targets of validation(count): the loss a model must beat to have
  // learnt more than which character follows which.
  double bigram_loss(int64_t count) const;

  int64_t train_tokens() const;
  int64_t validation_tokens() const;

 private:
  std::pair<tensor::Tensor, tensor::Tensor> windows(const std::vector<int64_t>& blocks, uint64_t seed,
                                                    int64_t rows) const;
  const TextCorpus& corpus_;
  uint64_t seed_;
  int64_t context_;
  std::vector<int64_t> train_blocks_, validation_blocks_;  // start offsets into the corpus
};

// Batches from a safetensors file: "inputs" and "targets", int64 [steps, batch, T]. Rank r of
// W takes rows [r * batch / W, (r + 1) * batch / W) of each step's global batch. Throws naming
// what does not fit: a missing tensor, dtype, shape, too few steps, T over the context, a
// batch that W does not divide.
class TokenBatches {
 public:
  TokenBatches(const std::string& path, int64_t steps, int64_t context, int rank, int world);
  std::pair<tensor::Tensor, tensor::Tensor> batch(int64_t step) const;
  int64_t global_batch() const { return inputs_.size(1); }
  int64_t max_id() const { return max_id_; }

 private:
  tensor::Tensor inputs_, targets_;
  int64_t first_ = 0, rows_ = 0, max_id_ = 0;
};

}  // namespace tinyddp::examples
