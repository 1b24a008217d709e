// nanoGPT's data files (nanogpt_data.h), the files themselves: prepare.py's text reading, split
// and outputs; the memory-mapped .bin files and their checks; the dataset directory.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "examples/nanogpt_data.h"
#include "tinyddp/base/error.h"

namespace tinyddp::examples {

namespace {

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  TDDP_CHECK(in.good(), "{}: cannot open {} ({})", path, what, std::strerror(errno));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  TDDP_CHECK(out.good(), "{}: cannot write ({})", path.string(), std::strerror(errno));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  TDDP_CHECK(out.good(), "{}: writing failed ({})", path.string(), std::strerror(errno));
}

// The length of the UTF-8 sequence starting with `lead`, and whether the sequence at `p` (of
// `left` bytes) is well formed as Python's decoder requires (no overlongs, no surrogates,
// nothing past U+10FFFF).
size_t utf8_length(const unsigned char* p, size_t left) {
  const unsigned char c = p[0];
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
  if (n == 0 || n > left) return 0;
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1fu) : n == 3 ? (c & 0x0fu) : (c & 0x07u);
  for (size_t i = 1; i < n; ++i) {
    if ((p[i] & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (p[i] & 0x3fu);
  }
  const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < least[n] || cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000)) return 0;
  return n;
}

// The ids of `characters` as uint16 little-endian bytes.
std::string token_bytes(const std::vector<std::string>& characters, size_t begin, size_t end,
                        const std::map<std::string, int64_t>& stoi) {
  std::string out;
  out.reserve((end - begin) * 2);
  for (size_t i = begin; i < end; ++i) {
    const int64_t id = stoi.at(characters[i]);
    out.push_back(static_cast<char>(id & 0xff));
    out.push_back(static_cast<char>(id >> 8));
  }
  return out;
}

}  // namespace

std::vector<std::string> read_text_characters(const std::string& bytes, const std::string& name) {
  std::vector<std::string> out;
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  for (size_t i = 0; i < bytes.size();) {
    if (p[i] == '\r') {  // universal newlines: "\r\n" and a lone "\r" read as "\n"
      out.emplace_back("\n");
      i += (i + 1 < bytes.size() && p[i + 1] == '\n') ? 2 : 1;
      continue;
    }
    const size_t n = utf8_length(p + i, bytes.size() - i);
    TDDP_CHECK(n > 0, "{}: not UTF-8 at byte {} (0x{:02x}); nanoGPT's prepare.py reads its text as UTF-8", name, i,
               p[i]);
    out.emplace_back(bytes.substr(i, n));
    i += n;
  }
  return out;
}

std::string CharVocab::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (int64_t id : ids) {
    TDDP_CHECK(id >= 0 && id < size(), "decode: token id {} is outside the vocabulary of {}", id, size());
    out += itos[static_cast<size_t>(id)];
  }
  return out;
}

std::vector<int64_t> CharVocab::encode(const std::string& text) const {
  std::vector<int64_t> ids;
  for (const std::string& ch : read_text_characters(text, "encode")) {
    const auto it = stoi.find(ch);
    TDDP_CHECK(it != stoi.end(), "encode: the character '{}' is not in the vocabulary", ch);
    ids.push_back(it->second);
  }
  return ids;
}

CharVocab read_meta(const std::string& path) { return parse_meta_pickle(read_file(path, "meta.pkl"), path); }

PreparedText prepare_char(const std::string& text_path, const std::string& out_dir) {
  const std::vector<std::string> characters = read_text_characters(read_file(text_path, "the text"), text_path);
  TDDP_CHECK(!characters.empty(), "{}: the text is empty", text_path);
  // Sorted by code point: for UTF-8, byte order is code point order.
  const std::set<std::string> distinct(characters.begin(), characters.end());
  PreparedText r;
  r.itos.assign(distinct.begin(), distinct.end());
  TDDP_CHECK(r.itos.size() <= 65536, "{}: {} distinct characters; uint16 token ids hold at most 65536", text_path,
             r.itos.size());
  std::map<std::string, int64_t> stoi;
  for (size_t i = 0; i < r.itos.size(); ++i) stoi.emplace(r.itos[i], static_cast<int64_t>(i));
  const size_t n = characters.size();
  const auto split = static_cast<size_t>(static_cast<double>(n) * 0.9);  // Python's int(n * 0.9)
  std::filesystem::create_directories(out_dir);
  const std::filesystem::path dir(out_dir);
  write_file(dir / "train.bin", token_bytes(characters, 0, split, stoi));
  write_file(dir / "val.bin", token_bytes(characters, split, n, stoi));
  write_file(dir / "meta.pkl", meta_pickle(r.itos));
  r.characters = static_cast<int64_t>(n);
  r.train_tokens = static_cast<int64_t>(split);
  r.val_tokens = static_cast<int64_t>(n - split);
  return r;
}

TokenFile::TokenFile(const std::string& path, int64_t vocab_size, int64_t min_tokens) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TDDP_CHECK(fd >= 0, "{}: cannot open ({})", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw Error(fmt::format("{}: cannot stat ({})", path, std::strerror(errno)));
  }
  const auto bytes = static_cast<size_t>(st.st_size);
  if (bytes % 2 != 0 || static_cast<int64_t>(bytes / 2) < min_tokens) {
    ::close(fd);
    TDDP_CHECK(bytes % 2 == 0, "{}: {} bytes, an odd count: not uint16 token ids", path, bytes);
    throw Error(fmt::format("{}: {} tokens, fewer than the {} one window of block_size + 1 needs", path, bytes / 2,
                            min_tokens));
  }
  tokens_ = static_cast<int64_t>(bytes / 2);
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  TDDP_CHECK(map != MAP_FAILED, "{}: cannot map ({})", path, std::strerror(errno));
  data_ = static_cast<const uint16_t*>(map);
  mapped_bytes_ = bytes;
  const uint16_t* top = std::max_element(data_, data_ + tokens_);
  if (*top >= vocab_size) {
    const int64_t at = top - data_, id = *top;
    ::munmap(map, bytes);
    throw Error(fmt::format("{}: token {} is {}, not below the vocabulary size {}", path, at, id, vocab_size));
  }
}

TokenFile::~TokenFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint16_t*>(data_), mapped_bytes_);
}

std::string dataset_dir(const std::string& dataset) {
  if (std::filesystem::is_directory(dataset)) return dataset;
  return (std::filesystem::path("data") / dataset).string();
}

NanoGptDataset open_dataset(const std::string& dir, int64_t block_size, int64_t vocab_size) {
  namespace fs = std::filesystem;
  TDDP_CHECK(fs::is_directory(dir),
             "--dataset {}: not a directory (nanoGPT's data/<name>, holding train.bin and "
             "val.bin)",
             dir);
  NanoGptDataset d;
  d.dir = dir;
  const fs::path meta = fs::path(dir) / "meta.pkl";
  if (fs::exists(meta)) {
    d.vocab = std::make_unique<CharVocab>(read_meta(meta.string()));
    TDDP_CHECK(vocab_size == 0 || vocab_size == d.vocab->size(), "--vocab_size {} disagrees with {}'s vocab_size {}",
               vocab_size, meta.string(), d.vocab->size());
    d.vocab_size = d.vocab->size();
  } else {
    d.vocab_size = vocab_size > 0 ? vocab_size : 50304;  // nanoGPT's default: GPT-2's 50257, padded
  }
  for (const char* split : {"train.bin", "val.bin"}) {
    const fs::path path = fs::path(dir) / split;
    TDDP_CHECK(fs::exists(path), "--dataset {}: no {} (nanoGPT's prepare.py writes train.bin and val.bin)", dir, split);
    (std::string(split) == "train.bin" ? d.train : d.val) =
        std::make_unique<TokenFile>(path.string(), d.vocab_size, block_size + 1);
  }
  return d;
}

}  // namespace tinyddp::examples
