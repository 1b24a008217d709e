// examples/nanogpt_data.h against nanoGPT's own prepare.py (fixtures/make_nanogpt_data_fixture.py
// ran it on three texts): prepare_char writes the same train.bin, val.bin and meta.pkl, byte for
// byte; the meta.pkl reader reads them and refuses pickles that are not a character vocabulary;
// the token files and the dataset directory give their errors.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "examples/nanogpt_data.h"
#include "tests/test_util.h"

using namespace tinyddp;
using namespace tinyddp::examples;
using Catch::Contains;
using testing::temp_path;

namespace {

const std::string kFixtures = "tests/examples/fixtures/nanogpt_data/";

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::string uint16s(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) {
    s.push_back(static_cast<char>(id & 0xff));
    s.push_back(static_cast<char>(id >> 8));
  }
  return s;
}

}  // namespace

TEST_CASE("prepare_char writes what nanoGPT's prepare.py writes, byte for byte", "[examples][nanogpt][fixture]") {
  for (const std::string name : {"small", "batch", "frames"}) {
    INFO(name);
    const std::string out = temp_path("prepared_" + name);
    std::filesystem::remove_all(out);
    const PreparedText r = prepare_char(kFixtures + name + "/input.txt", out);
    for (const std::string file : {"train.bin", "val.bin", "meta.pkl"}) {
      INFO(file);
      CHECK(read(out + "/" + file) == read(kFixtures + name + "/" + file));
    }
    CHECK(r.train_tokens + r.val_tokens == r.characters);
    // The reader gives back the vocabulary prepare_char chose, from nanoGPT's own file.
    const CharVocab vocab = read_meta(kFixtures + name + "/meta.pkl");
    CHECK(vocab.itos == r.itos);
    const std::string train = read(kFixtures + name + "/train.bin");
    std::vector<int64_t> ids;
    for (size_t i = 0; i < 40 && 2 * i + 1 < train.size(); ++i) {
      ids.push_back(static_cast<unsigned char>(train[2 * i]) | (static_cast<unsigned char>(train[2 * i + 1]) << 8));
    }
    CHECK(vocab.encode(vocab.decode(ids)) == ids);
  }
  // The small text's "\r\n" and lone "\r" became "\n" (Python's universal newlines), so "\r" is
  // no token, and its 4-byte emoji is one.
  const CharVocab small = read_meta(kFixtures + "small/meta.pkl");
  CHECK(small.stoi.count("\r") == 0);
  CHECK(small.stoi.count("\xF0\x9F\x98\x80") == 1);
}

TEST_CASE("meta.pkl: protocol 2 reads; anything but a character vocabulary is a clear error", "[examples][nanogpt]") {
  const CharVocab two = read_meta(kFixtures + "protocol2.pkl");
  CHECK(two.itos == std::vector<std::string>{"a", "b"});
  CHECK_THROWS_WITH(read_meta(kFixtures + "bad_extra_key.pkl"), Contains("holds the key 'block_size'"));
  CHECK_THROWS_WITH(read_meta(kFixtures + "bad_list.pkl"), Contains("opcode 0x5d at byte"));  // EMPTY_LIST
  CHECK_THROWS_WITH(read_meta(kFixtures + "bad_float.pkl"), Contains("opcode 0x47"));         // BINFLOAT
  CHECK_THROWS_WITH(read_meta(kFixtures + "bad_inverse.pkl"), Contains("not the inverse of 'itos'"));
  CHECK_THROWS_WITH(read_meta(kFixtures + "bad_word.pkl"), Contains("maps 1 to 'bc', not one character"));
  const std::string good = read(kFixtures + "small/meta.pkl");
  CHECK_THROWS_WITH(parse_meta_pickle(good.substr(0, good.size() / 2), "half.pkl"), Contains("half.pkl: truncated"));
  CHECK_THROWS_WITH(read_meta(temp_path("no_such_meta.pkl")), Contains("cannot open meta.pkl"));
  CHECK_THROWS_WITH(two.encode("abz"), Contains("the character 'z' is not in the vocabulary"));
  CHECK_THROWS_WITH(two.decode({0, 2}), Contains("token id 2 is outside the vocabulary of 2"));
}

TEST_CASE("A dataset directory: its files are checked, each bad one named", "[examples][nanogpt]") {
  namespace fs = std::filesystem;
  const std::string dir = temp_path("nanogpt_dataset");
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* file : {"train.bin", "val.bin", "meta.pkl"}) {
    fs::copy_file(kFixtures + "small/" + file, dir + "/" + file);
  }
  {
    const NanoGptDataset d = open_dataset(dir, 8);
    REQUIRE(d.vocab != nullptr);
    CHECK(d.vocab_size == 58);
    CHECK(d.train->size() * 2 == static_cast<int64_t>(fs::file_size(dir + "/train.bin")));
    CHECK((*d.val)[0] == d.vocab->stoi.at(d.vocab->itos[static_cast<size_t>((*d.val)[0])]));
  }
  CHECK_THROWS_WITH(open_dataset(dir, 8, 60), Contains("--vocab_size 60 disagrees with"));
  CHECK_THROWS_WITH(open_dataset(dir, 40), Contains("val.bin: 40 tokens, fewer than the 41"));
  CHECK_THROWS_WITH(open_dataset(dir + "/meta.pkl", 8), Contains("not a directory"));
  write(dir + "/val.bin", uint16s({1, 58, 2}) + std::string(20, '\0'));
  CHECK_THROWS_WITH(open_dataset(dir, 8), Contains("val.bin: token 1 is 58, not below the vocabulary size 58"));
  write(dir + "/val.bin", std::string(21, '\0'));
  CHECK_THROWS_WITH(open_dataset(dir, 8), Contains("val.bin: 21 bytes, an odd count"));
  fs::remove(dir + "/val.bin");
  CHECK_THROWS_WITH(open_dataset(dir, 8), Contains("no val.bin"));
  // Without meta.pkl: ids only, the vocabulary nanoGPT assumes (50304) or the one given.
  write(dir + "/val.bin", uint16s({300, 5, 7, 9, 11, 13, 15, 17, 19, 21}));
  fs::remove(dir + "/meta.pkl");
  CHECK(open_dataset(dir, 8).vocab_size == 50304);
  CHECK(open_dataset(dir, 8).vocab == nullptr);
  CHECK_THROWS_WITH(open_dataset(dir, 8, 100), Contains("token 0 is 300, not below the vocabulary size 100"));
  // prepare_char: text that is not UTF-8, and an empty one.
  write(dir + "/latin1.txt", "abc\xe9 d");
  CHECK_THROWS_WITH(prepare_char(dir + "/latin1.txt", dir + "/out"), Contains("not UTF-8 at byte 3 (0xe9)"));
  write(dir + "/empty.txt", "");
  CHECK_THROWS_WITH(prepare_char(dir + "/empty.txt", dir + "/out"), Contains("the text is empty"));
  fs::remove_all(dir);
}
