// The data behind //examples:train: global batches by step number, the same on every rank (each
// rank then takes its share of the rows), and held-out samples for the accuracy printed at the
// end. Three sources: a safetensors file of batches (--data), synthetic classes or a synthetic
// teacher (the default), and the handwritten digits of digits.h (--dataset digits).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "examples/digits.h"
#include "tinyddp/tensor/all.h"

namespace tinyddp::examples {

// Inputs [rows, in] float32 and targets ([rows, out] float32 for mse, [rows] int64 for ce).
struct Batch {
  tensor::Tensor inputs, targets;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  // The global batch of training step `step`.
  virtual Batch batch(int64_t step) = 0;
  // Samples kept out of training, for a final accuracy (classification only); none by default.
  virtual std::optional<Batch> held_out() { return std::nullopt; }
  // For the progress line ("synthetic data", "1497 training digits from ...").
  virtual std::string describe() const = 0;
  // What held_out() is, for the accuracy line ("1024 new samples").
  virtual std::string describe_held_out() const { return {}; }
};

// Batches stored in a safetensors file: "inputs" [steps, batch, in] float32 and "targets"
// ([steps, batch] int64 for classification, [steps, batch, out] float32 otherwise).
std::unique_ptr<Dataset> file_dataset(const std::string& path, int64_t steps, int64_t in, int64_t out,
                                      bool classification);

// Drawn from seeded generators. Classification: class centres in input space, inputs =
// centre[label] + noise; regression: targets = inputs @ teacher^T + noise. held_out(): 1024
// fresh samples of the same distribution (classification only).
std::unique_ptr<Dataset> synthetic_dataset(uint64_t seed, int64_t batch, int64_t in, int64_t out, bool classification);

// The digits of `path` (digits.h), split once with `seed`: kDigitsHeldOut rows held out, the
// rest served in seeded, shuffled batches of `batch` rows.
inline constexpr int64_t kDigitsHeldOut = 297;
std::unique_ptr<Dataset> digits_dataset(const std::string& path, uint64_t seed, int64_t batch);

}  // namespace tinyddp::examples
