// The UCI optical recognition of handwritten digits, as Debian's python3-sklearn ships it
// (sklearn/datasets/data/digits.csv.gz, what sklearn.datasets.load_digits reads): 1,797 rows,
// each 64 pixel values of an 8x8 image read row by row (integers 0..16) and then its label
// (0..9), comma-separated, gzip-compressed. The reader checks every field and says which line
// of which file is wrong; the held-out split is seeded, so every rank and every run sees the
// same one (train_data.h batches the rest with nn::DataLoader).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tinyddp/tensor/all.h"

namespace tinyddp::examples {

// Where python3-sklearn puts the file; the environment variable TINYDDP_DIGITS overrides it.
inline constexpr const char* kDigitsPath = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz";
std::string default_digits_path();

inline constexpr int64_t kDigitsPixels = 64;
inline constexpr int64_t kDigitsClasses = 10;
inline constexpr int kDigitsMaxPixel = 16;

struct Digits {
  std::vector<float> pixels;    // rows x 64, already divided by 16 (in [0, 1])
  std::vector<int64_t> labels;  // 0..9
  int64_t rows() const { return static_cast<int64_t>(labels.size()); }
  // The rows `index` as tensors: inputs [n, 64] float32, targets [n] int64.
  tensor::Tensor inputs(const std::vector<int64_t>& index) const;
  tensor::Tensor targets(const std::vector<int64_t>& index) const;
};

// Reads a digits CSV (gzip-compressed or plain). Throws tinyddp::Error naming the file and
// line for a missing or unreadable file, a truncated stream, a row without 65 fields, a field
// that is not an integer, a pixel outside 0..16 or a label outside 0..9, or no rows at all.
Digits load_digits(const std::string& path);

// 0..n-1 shuffled by Fisher-Yates on Generator(seed): the same order for the same seed.
std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed);

// A fixed split of the rows: the first `held_out` of seeded_permutation(rows, seed) are kept
// aside for evaluation, the rest are for training (both in that permuted order).
struct DigitsSplit {
  std::vector<int64_t> train, held_out;
};
DigitsSplit split_digits(int64_t rows, int64_t held_out, uint64_t seed);

}  // namespace tinyddp::examples
