// One step of examples/train --deterministic: the global batch cut into chunks of chunk_size
// rows, this rank's chunks run one forward and backward each, their gradients summed exactly
// over the chunks and the ranks (ddp::ExactGradientSum), so that 1, 2, 3, 4 or 6 ranks train
// to the same bits (docs/ddp.md, "The same bits at any world size").
#pragma once

#include <functional>
#include <memory>

#include "examples/train_data.h"
#include "tinyddp/ddp/exact_sum.h"
#include "tinyddp/nn/nn.h"

namespace tinyddp::examples {

// The chunks of a global batch of `rows`, and rank `rank` of `world`'s share of them (clear
// errors when chunk_size does not divide the batch, or the world the chunks).
struct ChunkShare {
  int64_t chunk_size = 0, total = 0, first = 0, count = 0;
};
ChunkShare chunk_share(int64_t rows, int64_t chunk_size, int rank, int world);

// Runs this rank's chunks of `global` (the whole global batch, on every rank: inputs and
// targets with rows first), each through `chunk_loss` (its forward and loss) and a backward,
// adds each chunk's gradients to `sum` and, when the sum asks (its first step, or gradients
// that outgrew its grid), runs them again. Leaves .grad holding the mean over all chunks;
// returns the step's loss, the mean of the chunks' losses (the same bits on every world size).
double exact_step(ddp::ExactGradientSum& sum, comm::ProcessGroup* pg, const Batch& global, const ChunkShare& share,
                  const std::function<tensor::Tensor(const tensor::Tensor&, const tensor::Tensor&)>& chunk_loss);

// The exact sum over `module`'s parameters (with their names), for `total_chunks` chunks a step.
std::unique_ptr<ddp::ExactGradientSum> exact_sum_of(const nn::Module& module, std::shared_ptr<comm::ProcessGroup> pg,
                                                    int64_t total_chunks);

}  // namespace tinyddp::examples
