// The deterministic option's tests (deterministic_test, fully_shard_exact_test): global batches
// of 24 rows, 6 inputs and 3 targets, cut into 12 chunks of 2 rows, which 1, 2, 3, 4 and 6
// ranks split evenly.
#pragma once

#include <cstdint>
#include <vector>

#include "tinyddp/tensor/random.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::testing {

constexpr int64_t kChunk = 2, kRows = 24;

struct Batches {
  std::vector<tensor::Tensor> inputs, targets;
};

// `steps` batches drawn from a generator of their own (seed `seed`): the same on every thread.
inline Batches make_batches(int steps, tensor::DType dtype, uint64_t seed) {
  tensor::Generator g(seed);
  Batches b;
  for (int s = 0; s < steps; ++s) {
    b.inputs.push_back(tensor::randn({kRows, 6}, tensor::TensorOptions().dtype(dtype), &g));
    b.targets.push_back(tensor::randn({kRows, 3}, tensor::TensorOptions().dtype(dtype), &g));
  }
  return b;
}

}  // namespace tinyddp::testing
