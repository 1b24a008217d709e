// The data behind //examples:train: this rank's batch of each step, and held-out samples for the
// accuracy printed at the end. Three sources: a safetensors file of batches (--data) and
// synthetic classes or a synthetic teacher (the default), whose global batches are the same on
// every rank and split by rows; and the handwritten digits of digits.h (--dataset digits),
// served by nn::DataLoader from a DistributedSampler's share of a shuffled epoch.
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
  // This rank's batch of training step `step` (rank r of W: 1/W of the step's global batch).
  virtual Batch batch(int64_t step) = 0;
  // Samples kept out of training, for a final accuracy (classification only); none by default.
  virtual std::optional<Batch> held_out() { return std::nullopt; }
  // For the progress line ("synthetic data", "1497 training digits from ...").
  virtual std::string describe() const = 0;
  // What held_out() is, for the accuracy line ("1024 new samples").
  virtual std::string describe_held_out() const { return {}; }
};

// Batches stored in a safetensors file: "inputs" [steps, batch, *sample] float32 and "targets"
// ([steps, batch] int64 for classification, [steps, batch, out] float32 otherwise).
// Rank r of W takes rows [r*B/W, (r+1)*B/W) of each batch of B rows.
std::unique_ptr<Dataset> file_dataset(const std::string& path, int64_t steps, const tensor::Shape& sample, int64_t out,
                                      bool classification, int rank, int world);

// Drawn from seeded generators (global batches of `batch` rows, split as file_dataset's).
// Classification: class centres in input space, inputs = centre[label] + noise; regression:
// targets = inputs @ teacher^T + noise. held_out(): 1024 fresh samples of the same
// distribution (classification only).
std::unique_ptr<Dataset> synthetic_dataset(uint64_t seed, int64_t batch, int64_t in, int64_t out, bool classification,
                                           int rank, int world);

// The digits of `path` (digits.h), split once with `seed`: kDigitsHeldOut rows held out, the
// rest a TensorDataset served by a DataLoader with drop_last, batches of batch / world rows
// from DistributedSampler(rows, world, rank, shuffle, seed), epoch number = step / batches per
// epoch. The ranks' batches of a step together are one process's batch of `batch` rows. With
// `blocks` (--deterministic), rank r's batch is instead rows [r n, (r + 1) n) of one process's
// batch (n = batch / world): its chunks, the same rows on any world size.
inline constexpr int64_t kDigitsHeldOut = 297;
std::unique_ptr<Dataset> digits_dataset(const std::string& path, uint64_t seed, int64_t batch, int rank, int world,
                                        bool blocks = false);

}  // namespace tinyddp::examples
