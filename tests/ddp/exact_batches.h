// The deterministic option's tests (deterministic_test, fully_shard_exact_test): global batches
// of 24 rows, 6 inputs and 3 targets, cut into 12 chunks of 2 rows, which 1, 2, 3, 4 and 6
// ranks split evenly; and one chunk's backward into an ExactGradientSum (exact_sum_test,
// exact_widened_test).
#pragma once

#include <cstdint>
#include <vector>

#include "tinyddp/ddp/exact_sum.h"
#include "tinyddp/tensor/graph.h"
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

// One chunk's backward of `loss` into `sum`, then add_chunk(). `overlap`: the rank's last chunk,
// whose sums leave during its backward; `products`: linear()'s weight products handed to the sum.
inline void chunk_backward(ddp::ExactGradientSum& sum, const tensor::Tensor& loss, bool overlap, bool products) {
  if (overlap) sum.overlap_next_chunk();
  if (products) {
    tensor::WeightGradientSinkScope sink(&sum);
    loss.backward();
  } else {
    loss.backward();
  }
  sum.add_chunk();
}

}  // namespace tinyddp::testing
