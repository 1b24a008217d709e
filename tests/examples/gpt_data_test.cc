// examples/gpt_data.h: the corpus (files, folders, and the errors for missing, empty and
// binary ones), its character vocabulary, the seeded split, the windows of each (rank, step),
// the bigram model (against the entropy of texts whose answer is known), and token batches
// from a file with their errors.
#include <filesystem>
#include <fstream>
#include <set>

#include "examples/gpt_data.h"
#include "tests/test_util.h"
#include "tinyddp/nn/safetensors.h"
#include "tinyddp/tensor/ops.h"
#include "tinyddp/tensor/random.h"

using namespace tinyddp;
using namespace tinyddp::examples;
using Catch::Contains;
using tensor::Tensor;
using testing::temp_path;

namespace {
void write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

// `n` characters drawn uniformly from `alphabet`.
std::string random_text(const std::string& alphabet, int64_t n, uint64_t seed) {
  tensor::Generator g(seed);
  std::string s;
  for (int64_t i = 0; i < n; ++i) s.push_back(alphabet[g.random() % alphabet.size()]);
  return s;
}
}  // namespace

TEST_CASE("a corpus reads a file or a folder's text files, and refuses what is not text", "[examples][gpt][data]") {
  const std::string dir = temp_path("corpus_dir");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  write(dir + "/b", "ba\n");
  write(dir + "/a", "ab\n");
  write(dir + "/a.dat", std::string("\0\1\2", 3));             // fortune's index files are skipped
  std::filesystem::create_symlink(dir + "/a", dir + "/a.u8");  // and links
  const TextCorpus c = TextCorpus::load(dir);
  CHECK(c.size() == 6);
  CHECK(c.vocab_size() == 3);  // '\n', 'a', 'b' in byte order
  CHECK(c.ids() == std::vector<int64_t>{1, 2, 0, 2, 1, 0});
  CHECK(c.decode(c.ids()) == "ab\nba\n");
  CHECK(c.encode("ba") == std::vector<int64_t>{2, 1});
  CHECK_THROWS_WITH(c.encode("abc"), Contains("character 2 of \"abc\" (byte 0x63) is not in the corpus's vocabulary"));
  CHECK_THROWS_WITH(c.decode({3}), Contains("decode: id 3 is outside the vocabulary of 3"));

  CHECK_THROWS_WITH(TextCorpus::load(dir + "/missing"), Contains("corpus: " + dir + "/missing does not exist"));
  write(dir + "/empty.txt", "");
  CHECK_THROWS_WITH(TextCorpus::load(dir + "/empty.txt"), Contains("is empty"));
  write(dir + "/binary", std::string("text\0more", 9));
  CHECK_THROWS_WITH(TextCorpus::load(dir + "/binary"), Contains("/binary is not text (byte 0x00 at offset 4"));
  write(dir + "/latin1", "caf\xe9!");
  CHECK_THROWS_WITH(TextCorpus::load(dir + "/latin1"), Contains("(byte 0xe9 at offset 3 is not UTF-8 text)"));
  write(dir + "/utf8", "caf\xc3\xa9");
  CHECK(TextCorpus::load(dir + "/utf8").vocab_size() == 5);  // bytes: a, c, f, 0xc3, 0xa9
  std::filesystem::remove_all(dir);
}

TEST_CASE("the split keeps a tenth for validation; windows depend on (seed, rank, step) only",
          "[examples][gpt][data]") {
  const TextCorpus c = TextCorpus::from_text(random_text("abcdefgh", 20 * TextSplit::kSplitBlock, 1));
  const TextSplit split(c, 7, 16);
  CHECK(split.validation_tokens() == 2 * TextSplit::kSplitBlock);
  CHECK(split.train_tokens() == 18 * TextSplit::kSplitBlock);
  const auto [x, y] = split.train_batch(3, 1, 5);
  CHECK(x.sizes() == tensor::Shape{5, 16});
  CHECK(tensor::equal(x.narrow(1, 1, 15), y.narrow(1, 0, 15)));  // targets: the next tokens
  const auto [x2, y2] = split.train_batch(3, 1, 5);
  CHECK(tensor::equal(x, x2));  // the same (rank, step), the same windows
  CHECK_FALSE(tensor::equal(x, split.train_batch(3, 0, 5).first));
  CHECK_FALSE(tensor::equal(x, split.train_batch(4, 1, 5).first));
  CHECK_FALSE(tensor::equal(x, TextSplit(c, 8, 16).train_batch(3, 1, 5).first));
  CHECK(tensor::equal(split.validation(4).first, split.validation(4).first));
  // Every window is a stretch of the corpus.
  const std::string text = c.decode(c.ids());
  for (int64_t r = 0; r < 5; ++r) CHECK(text.find(c.decode(x[r].to_vector<int64_t>())) != std::string::npos);
  // Training windows come from training blocks only: no window of many steps starts in a
  // validation block.
  std::set<int64_t> validation_blocks;
  const auto [vx, vy] = split.validation(64);
  for (int64_t r = 0; r < 64; ++r) {
    validation_blocks.insert(static_cast<int64_t>(text.find(c.decode(vx[r].to_vector<int64_t>()))) /
                             TextSplit::kSplitBlock);
  }
  CHECK(validation_blocks.size() <= 2);
  for (int64_t step = 0; step < 20; ++step) {
    const Tensor w = split.train_batch(step, 0, 8).first;
    for (int64_t r = 0; r < 8; ++r) {
      const int64_t block =
          static_cast<int64_t>(text.find(c.decode(w[r].to_vector<int64_t>()))) / TextSplit::kSplitBlock;
      CHECK(validation_blocks.count(block) == 0);
    }
  }
  CHECK_THROWS_WITH(TextSplit(TextCorpus::from_text("short"), 1, 16),
                    Contains("too few for a training and a validation"));
}

TEST_CASE("the bigram model's loss is the entropy of the next character", "[examples][gpt][data]") {
  // Uniform random characters: nothing to learn, log(8) nats.
  const TextCorpus uniform = TextCorpus::from_text(random_text("abcdefgh", 40 * TextSplit::kSplitBlock, 2));
  CHECK(TextSplit(uniform, 1, 32).bigram_loss(64) == Approx(std::log(8.0)).margin(0.03));
  // A cycle: the next character is certain, the loss only the add-one smoothing's.
  std::string cycle;
  while (cycle.size() < 12 * TextSplit::kSplitBlock) cycle += "abcd";
  CHECK(TextSplit(TextCorpus::from_text(cycle), 1, 32).bigram_loss(16) < 1e-3);
}

TEST_CASE("token batches from a file: each rank its rows; bad files named", "[examples][gpt][data][errors]") {
  const std::string path = temp_path("tokens.safetensors");
  const Tensor inputs = tensor::arange(int64_t{0}, int64_t{2 * 4 * 3}).view({2, 4, 3});
  nn::OrderedDict<Tensor> tensors;
  tensors.insert("inputs", inputs);
  tensors.insert("targets", tensor::add(inputs, int64_t{1}));
  nn::save_safetensors(path, tensors);
  const TokenBatches rank1(path, 2, 8, 1, 2);
  CHECK(tensor::equal(rank1.batch(1).first, inputs[1].narrow(0, 2, 2)));
  CHECK(rank1.max_id() == 23);
  CHECK_THROWS_WITH(TokenBatches(path, 3, 8, 0, 1), Contains("2 steps of batches, but --steps 3"));
  CHECK_THROWS_WITH(TokenBatches(path, 2, 2, 0, 1), Contains("sequences of 3 tokens, longer than --block_size 2"));
  CHECK_THROWS_WITH(TokenBatches(path, 2, 8, 0, 3), Contains("a global batch of 4 rows does not split over 3 ranks"));
  nn::OrderedDict<Tensor> floats;
  floats.insert("inputs", tensor::zeros({2, 4, 3}));
  floats.insert("targets", tensor::zeros({2, 4, 3}));
  nn::save_safetensors(path, floats);
  CHECK_THROWS_WITH(TokenBatches(path, 2, 8, 0, 1), Contains("'inputs' must be int64 [steps, batch, T], got float32"));
  nn::save_safetensors(path, {});
  CHECK_THROWS_WITH(TokenBatches(path, 2, 8, 0, 1), Contains("no tensor 'inputs'"));
}
