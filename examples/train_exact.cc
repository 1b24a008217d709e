// examples/train --deterministic's step (train_exact.h).
#include "examples/train_exact.h"

#include "examples/run_env.h"
#include "tinyddp/base/error.h"

namespace tinyddp::examples {

ChunkShare chunk_share(int64_t rows, int64_t chunk_size, int rank, int world) {
  TDDP_CHECK(rows % chunk_size == 0,
             "--deterministic: --chunk_size {} does not divide the global batch of {} rows: choose a chunk size that "
             "divides it",
             chunk_size, rows);
  ChunkShare share;
  share.chunk_size = chunk_size;
  share.total = rows / chunk_size;
  TDDP_CHECK(share.total % world == 0,
             "--deterministic: the {} chunks of {} rows do not split over {} {}: every rank takes the same number of "
             "chunks (choose a world size that divides {}, or another --chunk_size)",
             share.total, chunk_size, world_size_variable(), world, share.total);
  share.count = share.total / world;
  share.first = rank * share.count;
  return share;
}

std::unique_ptr<ddp::ExactGradientSum> exact_sum_of(const nn::Module& module, std::shared_ptr<comm::ProcessGroup> pg,
                                                    int64_t total_chunks) {
  std::vector<std::string> names;
  std::vector<tensor::Tensor> params;
  for (const auto& [name, p] : module.named_parameters()) {
    names.push_back(name);
    params.push_back(p);
  }
  return std::make_unique<ddp::ExactGradientSum>(params, names, std::move(pg), total_chunks);
}

double exact_step(ddp::ExactGradientSum& sum, comm::ProcessGroup* pg, const Batch& global, const ChunkShare& share,
                  const std::function<tensor::Tensor(const tensor::Tensor&, const tensor::Tensor&)>& chunk_loss) {
  std::vector<double> losses;
  for (int attempt = 0; attempt < 2; ++attempt) {
    losses.clear();
    for (int64_t c = share.first; c < share.first + share.count; ++c) {
      const tensor::Tensor inputs = global.inputs.narrow(0, c * share.chunk_size, share.chunk_size);
      const tensor::Tensor targets = global.targets.narrow(0, c * share.chunk_size, share.chunk_size);
      const tensor::Tensor loss = chunk_loss(inputs, targets);
      losses.push_back(loss.item<double>());
      if (c + 1 == share.first + share.count) sum.overlap_next_chunk();  // its sums travel during backward
      loss.backward();
      sum.add_chunk();
    }
    // The first step, or gradients that outgrew the grid: every rank runs its chunks again
    // (the same parameters and data: the same gradients, which the agreed grid now bounds).
    if (sum.finish()) return ddp::chunk_mean(pg, losses, share.first, share.total);
  }
  throw Error("--deterministic: the step's gradients changed when its chunks ran again (a nondeterministic kernel?)");
}

}  // namespace tinyddp::examples
