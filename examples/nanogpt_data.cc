// nanoGPT's data files (nanogpt_data.h), meta.pkl: the pickle writer and the reader, and the
// checks that a pickle is a character-level vocabulary.
#include "examples/nanogpt_data.h"

#include <algorithm>
#include <climits>
#include <variant>

#include <fmt/format.h>

#include "tinyddp/base/error.h"

namespace tinyddp::examples {

namespace {

// ---- meta.pkl, written ------------------------------------------------------------------------

// Python's pickle at protocol 4 for a dict of ints, strings and dicts of them: opcodes go into
// frames of at least 64 KiB (each opened by FRAME and its 8-byte length, closed at the first
// object boundary past the size), strings are memoized and written once, then fetched by memo
// index; dict items go in batches of 1000 between MARK and SETITEMS (one item alone: SETITEM).
class PickleWriter {
 public:
  static constexpr size_t kFrameTarget = 64 * 1024;

  PickleWriter() { out_ = "\x80\x04"; }  // PROTO 4

  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      put('K');
      raw(v, 1);
    } else if (v >= 0 && v < 65536) {
      put('M');
      raw(v, 2);
    } else {
      TDDP_CHECK(v >= INT32_MIN && v <= INT32_MAX, "meta.pkl: {} does not fit the writer's 4-byte integers", v);
      put('J');
      raw(static_cast<uint32_t>(static_cast<int32_t>(v)), 4);
    }
    boundary();
  }

  void string(const std::string& s) {
    if (auto it = memo_.find(s); it != memo_.end()) {
      if (it->second < 256) {
        put('h');
        raw(it->second, 1);
      } else {
        put('j');
        raw(it->second, 4);
      }
    } else {
      if (s.size() < 256) {
        put('\x8c');
        raw(s.size(), 1);
      } else {
        put('X');
        raw(s.size(), 4);
      }
      write(s);
      memoize();
      memo_.emplace(s, memo_count_ - 1);
    }
    boundary();
  }

  // A dict whose items the callback writes, `count` of them, by calling item(i) for each.
  template <typename Item>
  void dict(size_t count, Item item) {
    put('}');
    memoize();
    if (count == 1) {
      item(0);
      put('s');
    } else if (count > 1) {
      size_t next = 0, batch = 0;
      do {  // a count that is a multiple of 1000 ends with an empty batch, as Python's does
        put('(');
        for (batch = 0; batch < kBatch && next < count; ++batch) item(next++);
        put('u');
      } while (batch == kBatch);
    }
    boundary();
  }

  std::string finish() {
    put('.');  // STOP
    commit_frame();
    return std::move(out_);
  }

 private:
  static constexpr size_t kBatch = 1000, kHeader = 9;

  void write(const std::string& bytes) {
    if (frame_start_ == std::string::npos) {  // a frame opens with the first byte after PROTO
      frame_start_ = out_.size();
      out_.append(kHeader, '\0');
    }
    out_ += bytes;
  }
  void put(char op) { write(std::string(1, op)); }
  void raw(uint64_t v, int bytes) {
    std::string s(static_cast<size_t>(bytes), '\0');
    for (int i = 0; i < bytes; ++i) s[static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
    write(s);
  }
  void memoize() {
    put('\x94');
    ++memo_count_;
  }
  void boundary() {
    if (frame_start_ != std::string::npos && out_.size() - frame_start_ - kHeader >= kFrameTarget) commit_frame();
  }
  void commit_frame() {
    if (frame_start_ == std::string::npos) return;
    const uint64_t length = out_.size() - frame_start_ - kHeader;
    if (length >= 4) {
      out_[frame_start_] = '\x95';
      for (int i = 0; i < 8; ++i)
        out_[frame_start_ + 1 + static_cast<size_t>(i)] = static_cast<char>(length >> (8 * i));
    } else {
      out_.erase(frame_start_, kHeader);
    }
    frame_start_ = std::string::npos;
  }

  std::string out_;
  size_t frame_start_ = std::string::npos;
  std::map<std::string, uint32_t> memo_;
  uint32_t memo_count_ = 0;
};

// ---- meta.pkl, read ---------------------------------------------------------------------------

struct PickleDict;
using PickleValue = std::variant<int64_t, std::string, std::shared_ptr<PickleDict>>;
struct PickleDict {
  std::vector<std::pair<PickleValue, PickleValue>> items;
};

std::string describe(const PickleValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return fmt::format("the int {}", *i);
  if (const auto* s = std::get_if<std::string>(&v)) return fmt::format("the str '{}'", *s);
  return "a dict";
}

// A pickle machine for exactly the opcodes a dict of ints, strings and dicts uses at protocols
// 2 to 5; every other opcode is refused by name and offset.
class PickleReader {
 public:
  PickleReader(const std::string& bytes, std::string name) : in_(bytes), name_(std::move(name)) {}

  PickleValue run() {
    while (true) {
      const size_t at = pos_;
      const auto op = static_cast<unsigned char>(take(1)[0]);
      switch (op) {
        case 0x80: take(1); break;  // PROTO
        case 0x95: take(8); break;  // FRAME: its length only groups what follows
        case '}': push(std::make_shared<PickleDict>()); break;
        case 0x94: memo_.push_back(top(at)); break;  // MEMOIZE
        case 'q': put_memo(number(1), at); break;    // BINPUT (protocols 2 and 3)
        case 'r': put_memo(number(4), at); break;    // LONG_BINPUT
        case 'h': push(get_memo(number(1), at)); break;
        case 'j': push(get_memo(number(4), at)); break;
        case '(': marks_.push_back(stack_.size()); break;
        case 'K': push(static_cast<int64_t>(number(1))); break;
        case 'M': push(static_cast<int64_t>(number(2))); break;
        case 'J': push(static_cast<int64_t>(static_cast<int32_t>(number(4)))); break;
        case 0x8c: push(take(number(1))); break;  // SHORT_BINUNICODE
        case 'X': push(take(number(4))); break;   // BINUNICODE
        case 's': set_items(stack_.size() - 2, at); break;
        case 'u': {
          TDDP_CHECK(!marks_.empty(), "{}: SETITEMS without a MARK at byte {}", name_, at);
          const size_t mark = marks_.back();
          marks_.pop_back();
          set_items(mark, at);
          break;
        }
        case '.':
          TDDP_CHECK(stack_.size() == 1 && marks_.empty(), "{}: STOP at byte {} leaves {} values", name_, at,
                     stack_.size());
          return stack_.back();
        default:
          throw Error(
              fmt::format("{}: opcode 0x{:02x} at byte {} is not one a vocabulary's dict of ints and strings "
                          "uses (is this nanoGPT's meta.pkl?)",
                          name_, op, at));
      }
    }
  }

 private:
  std::string take(size_t n) {
    TDDP_CHECK(n <= in_.size() - pos_, "{}: truncated: {} more bytes wanted at byte {} of {}", name_, n, pos_,
               in_.size());
    std::string s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  uint64_t number(int bytes) {
    const std::string s = take(static_cast<size_t>(bytes));
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[static_cast<size_t>(i)]);
    return v;
  }
  void push(PickleValue v) { stack_.push_back(std::move(v)); }
  const PickleValue& top(size_t at) const {
    TDDP_CHECK(!stack_.empty(), "{}: an opcode at byte {} needs a value and the stack is empty", name_, at);
    return stack_.back();
  }
  void put_memo(uint64_t index, size_t at) {
    if (memo_.size() <= index) memo_.resize(index + 1);
    memo_[index] = top(at);
  }
  PickleValue get_memo(uint64_t index, size_t at) const {
    TDDP_CHECK(index < memo_.size(), "{}: memo {} at byte {} was never stored", name_, index, at);
    return memo_[index];
  }
  // Pops the key-value pairs above stack_[from] into the dict just below them.
  void set_items(size_t from, size_t at) {
    TDDP_CHECK(from >= 1 && from <= stack_.size() && (stack_.size() - from) % 2 == 0,
               "{}: SETITEM(S) at byte {} without a dict and whole key-value pairs", name_, at);
    auto* dict = std::get_if<std::shared_ptr<PickleDict>>(&stack_[from - 1]);
    TDDP_CHECK(dict != nullptr, "{}: SETITEM(S) at byte {} on {}, not a dict", name_, at, describe(stack_[from - 1]));
    for (size_t i = from; i < stack_.size(); i += 2) (*dict)->items.emplace_back(stack_[i], stack_[i + 1]);
    stack_.resize(from);
  }

  const std::string& in_;
  std::string name_;
  size_t pos_ = 0;
  std::vector<PickleValue> stack_, memo_;
  std::vector<size_t> marks_;
};

// The number of UTF-8 encoded code points in `s` (s is valid UTF-8: it came from a pickle's str).
size_t code_points(const std::string& s) {
  return static_cast<size_t>(
      std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xc0) != 0x80; }));
}

const PickleDict& as_dict(const PickleValue& v, const std::string& what, const std::string& name) {
  const auto* d = std::get_if<std::shared_ptr<PickleDict>>(&v);
  TDDP_CHECK(d != nullptr, "{}: {} is {}, not a dict", name, what, describe(v));
  return **d;
}

}  // namespace

std::string meta_pickle(const std::vector<std::string>& itos) {
  PickleWriter w;
  w.dict(3, [&](size_t item) {
    if (item == 0) {
      w.string("vocab_size");
      w.integer(static_cast<int64_t>(itos.size()));
    } else if (item == 1) {
      w.string("itos");
      w.dict(itos.size(), [&](size_t i) {
        w.integer(static_cast<int64_t>(i));
        w.string(itos[i]);
      });
    } else {
      w.string("stoi");
      w.dict(itos.size(), [&](size_t i) {
        w.string(itos[i]);
        w.integer(static_cast<int64_t>(i));
      });
    }
  });
  return w.finish();
}

CharVocab parse_meta_pickle(const std::string& bytes, const std::string& name) {
  const PickleValue root = PickleReader(bytes, name).run();
  const PickleDict& meta = as_dict(root, "the pickled value", name);
  const PickleValue *vocab_size = nullptr, *itos = nullptr, *stoi = nullptr;
  for (const auto& [key, value] : meta.items) {
    const auto* k = std::get_if<std::string>(&key);
    TDDP_CHECK(k != nullptr, "{}: a key of the top dict is {}; nanoGPT's meta.pkl has 'vocab_size', 'itos', 'stoi'",
               name, describe(key));
    const PickleValue** slot = *k == "vocab_size" ? &vocab_size : *k == "itos" ? &itos : *k == "stoi" ? &stoi : nullptr;
    TDDP_CHECK(slot != nullptr,
               "{}: holds the key '{}'; nanoGPT's character-level meta.pkl has only 'vocab_size', "
               "'itos' and 'stoi' (a GPT-2 BPE dataset has no meta.pkl: give --vocab_size)",
               name, *k);
    *slot = &value;
  }
  TDDP_CHECK(vocab_size && itos && stoi, "{}: needs 'vocab_size', 'itos' and 'stoi'; missing {}", name,
             !vocab_size ? "'vocab_size'"
             : !itos     ? "'itos'"
                         : "'stoi'");
  const auto* n = std::get_if<int64_t>(vocab_size);
  TDDP_CHECK(n != nullptr && *n > 0, "{}: 'vocab_size' is {}, not a positive int", name, describe(*vocab_size));
  CharVocab vocab;
  vocab.itos.resize(static_cast<size_t>(*n));
  std::vector<bool> seen(static_cast<size_t>(*n), false);
  for (const auto& [key, value] : as_dict(*itos, "'itos'", name).items) {
    const auto* i = std::get_if<int64_t>(&key);
    const auto* ch = std::get_if<std::string>(&value);
    TDDP_CHECK(i != nullptr && ch != nullptr, "{}: 'itos' maps {} to {}; it maps ints to one-character strs", name,
               describe(key), describe(value));
    TDDP_CHECK(*i >= 0 && *i < *n && !seen[static_cast<size_t>(*i)],
               "{}: 'itos' has the id {} twice or outside [0, vocab_size {})", name, *i, *n);
    TDDP_CHECK(code_points(*ch) == 1, "{}: 'itos' maps {} to '{}', not one character", name, *i, *ch);
    seen[static_cast<size_t>(*i)] = true;
    vocab.itos[static_cast<size_t>(*i)] = *ch;
  }
  const size_t missing = static_cast<size_t>(std::count(seen.begin(), seen.end(), false));
  TDDP_CHECK(missing == 0, "{}: 'itos' lacks {} of the vocab_size {} ids", name, missing, *n);
  for (const auto& [key, value] : as_dict(*stoi, "'stoi'", name).items) {
    const auto* ch = std::get_if<std::string>(&key);
    const auto* i = std::get_if<int64_t>(&value);
    TDDP_CHECK(ch != nullptr && i != nullptr && *i >= 0 && *i < *n && vocab.itos[static_cast<size_t>(*i)] == *ch,
               "{}: 'stoi' maps {} to {}, which is not the inverse of 'itos'", name, describe(key), describe(value));
    vocab.stoi.emplace(*ch, *i);
  }
  TDDP_CHECK(static_cast<int64_t>(vocab.stoi.size()) == *n, "{}: 'stoi' has {} characters, 'itos' {}", name,
             vocab.stoi.size(), *n);
  return vocab;
}

}  // namespace tinyddp::examples
