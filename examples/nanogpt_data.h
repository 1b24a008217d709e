// nanoGPT's data files, read and written as nanoGPT's own scripts do, so a dataset prepared by
// either side serves the other:
//   DIR/train.bin, DIR/val.bin  token ids, uint16 little-endian, one after another
//   DIR/meta.pkl                a character-level vocabulary: the pickle of
//                               {'vocab_size': n, 'itos': {i: ch}, 'stoi': {ch: i}}
// prepare_char() is nanoGPT's data/shakespeare_char/prepare.py for any text: the text read as
// Python reads it (UTF-8, universal newlines), its distinct characters sorted by code point,
// the first 90% for training, and meta.pkl byte for byte as Python's pickle (protocol 4)
// writes it. read_meta() reads such a pickle and nothing else; open_dataset() maps the two
// .bin files and checks them against the vocabulary and the context length.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tinyddp::examples {

// A character-level vocabulary: itos[i] is token i's character, UTF-8 encoded.
struct CharVocab {
  std::vector<std::string> itos;
  std::map<std::string, int64_t> stoi;
  int64_t size() const { return static_cast<int64_t>(itos.size()); }
  // Token ids to text; an id outside the vocabulary is an error naming it.
  std::string decode(const std::vector<int64_t>& ids) const;
  // Text (UTF-8) to token ids; a character outside the vocabulary is an error naming it.
  std::vector<int64_t> encode(const std::string& text) const;
};

// The bytes of meta.pkl for `itos` (distinct characters, in token order), as Python 3.8+'s
// pickle.dump(meta, f) writes them: protocol 4, framed, memoized.
std::string meta_pickle(const std::vector<std::string>& itos);
// Reads a meta.pkl: a dict of 'vocab_size' (an int), 'itos' (int -> str) and 'stoi' (str ->
// int), consistent with each other. Anything else (another key, another type, an opcode such a
// dict does not use, a truncated file) is an error naming what and where.
CharVocab parse_meta_pickle(const std::string& bytes, const std::string& name = "meta.pkl");
CharVocab read_meta(const std::string& path);

// What prepare_char wrote, for its report.
struct PreparedText {
  int64_t characters = 0, train_tokens = 0, val_tokens = 0;
  std::vector<std::string> itos;
};
// Text as Python's open(path, 'r').read() sees it: UTF-8 decoded to code points (invalid UTF-8 is
// an error naming the byte offset), "\r\n" and lone "\r" turned into "\n". Each element is one
// character, UTF-8 encoded.
std::vector<std::string> read_text_characters(const std::string& bytes, const std::string& name);
// Writes out_dir/train.bin, val.bin and meta.pkl from `text_path`, as nanoGPT's prepare.py.
PreparedText prepare_char(const std::string& text_path, const std::string& out_dir);

// One split's token ids, memory-mapped read-only.
class TokenFile {
 public:
  // Opens and checks: an even byte count, at least `min_tokens` ids, every id below `vocab_size`.
  TokenFile(const std::string& path, int64_t vocab_size, int64_t min_tokens);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  int64_t size() const { return tokens_; }
  int64_t operator[](int64_t i) const { return static_cast<int64_t>(data_[i]); }  // little-endian hosts
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint16_t* data_ = nullptr;
  int64_t tokens_ = 0;
  size_t mapped_bytes_ = 0;
};

// A nanoGPT dataset directory: its vocabulary (meta.pkl, or `vocab_size` when there is none:
// ids only) and both splits, each long enough for one window of block_size + 1 tokens.
struct NanoGptDataset {
  std::string dir;
  std::unique_ptr<CharVocab> vocab;  // null without meta.pkl
  int64_t vocab_size = 0;
  std::unique_ptr<TokenFile> train, val;
};
NanoGptDataset open_dataset(const std::string& dir, int64_t block_size, int64_t vocab_size = 0);

// nanoGPT's data/<dataset>, or the directory itself when `dataset` names one.
std::string dataset_dir(const std::string& dataset);

}  // namespace tinyddp::examples
