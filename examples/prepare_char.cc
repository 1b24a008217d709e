// //examples:prepare_char: nanoGPT's data/shakespeare_char/prepare.py for any text file. Writes
// OUT_DIR/train.bin and val.bin (uint16 token ids: the first 90% of the characters, then the
// rest) and meta.pkl (vocab_size, itos, stoi), byte for byte as that script writes them for the
// same text, so `train_gpt --dataset OUT_DIR` and nanoGPT's train.py read the same files.
//   bazel run -c opt //examples:prepare_char -- input.txt data/mytext
#include <CLI/CLI.hpp>
#include <iostream>
#include <string>

#include <fmt/format.h>

#include "examples/nanogpt_data.h"
#include "tinyddp/base/error.h"

int main(int argc, char** argv) {
  std::string text, out_dir;
  CLI::App app{"Prepare a text for character-level training, as nanoGPT's shakespeare_char/prepare.py."};
  app.add_option("text", text, "the text (UTF-8)")->required();
  app.add_option("out_dir", out_dir, "where train.bin, val.bin and meta.pkl go")->required();
  CLI11_PARSE(app, argc, argv);
  try {
    const tinyddp::examples::PreparedText r = tinyddp::examples::prepare_char(text, out_dir);
    std::string all;
    for (const std::string& ch : r.itos) all += ch;
    std::cout << fmt::format("length of dataset in characters: {}\n", r.characters);
    std::cout << "all the unique characters: " << all << "\n";
    std::cout << fmt::format(
        "vocab size: {}\ntrain has {} tokens\nval has {} tokens\nwrote {}/train.bin, val.bin, "
        "meta.pkl\n",
        r.itos.size(), r.train_tokens, r.val_tokens, out_dir);
  } catch (const std::exception& e) {
    std::cerr << "prepare_char: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
