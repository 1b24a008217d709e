// The deterministic option's training step, shared by DistributedDataParallel and fully_shard
// (docs/ddp.md, "The same bits at any world size"): the global batch cut into chunks, this
// rank's share run one forward and backward each into an ExactGradientSum (exact_sum.h), the
// step run again when the grid moved, each chunk's randomness seeded by the chunk, BatchNorm's
// running statistics replayed in chunk order, and the state a checkpoint keeps.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tinyddp/comm/process_group.h"
#include "tinyddp/ddp/exact_sum.h"
#include "tinyddp/nn/module.h"

namespace tinyddp::ddp {

// One chunk's forward and loss: rows of the global batch in, a one-element loss out.
using ChunkLoss = std::function<Tensor(const Tensor& inputs, const Tensor& targets)>;

// The rows a deterministic step is handed: the whole global batch, the same on every rank
// (kGlobal), or only this rank's chunks (kRank): rows [r n, (r + 1) n) of a global batch of
// W n rows, which a rank can load alone (the other ranks' rows never read). Either way chunk c
// is rows [c chunk_size, (c + 1) chunk_size) of the global batch: the same bits.
enum class BatchRows { kGlobal, kRank };

// Throws, naming the module and `who`, when `module` holds what would make a chunk's result
// depend on the ranks (SyncBatchNorm, whose statistics span them).
void check_exact_module(const nn::Module& module, const std::string& who);

class ExactSteps {
 public:
  // The sum for a step of `total_chunks` chunks (DDP's allreduces, fully_shard's scatters).
  using MakeSum = std::function<std::unique_ptr<ExactGradientSum>(int64_t total_chunks)>;

  // A collective: every rank takes rank 0's initial seed for the chunks' randomness.
  // `param_count`: the parameters the sum will hold (the size of the state).
  ExactSteps(std::shared_ptr<comm::ProcessGroup> pg, int64_t chunk_size, size_t param_count, MakeSum make_sum);

  // One step over the global batch (`inputs` and `targets`, rows first: all of it, or this
  // rank's chunks, as `rows` says), through `module`'s BatchNorms
  // (DistributedDataParallel::deterministic_step says the rest). Returns the mean of the
  // chunks' losses.
  double step(nn::Module& module, const Tensor& inputs, const Tensor& targets, const ChunkLoss& chunk_loss,
              BatchRows rows = BatchRows::kGlobal);
  bool in_step() const { return in_step_; }

  // The steps done, then the grids' bounds (ExactGradientSum::grid_state), and back; `who`
  // names the caller in the errors.
  std::vector<int64_t> state() const;
  void load_state(std::vector<int64_t> state, const std::string& who);
  // Null before the first step.
  const ExactGradientSum* sum() const { return sum_.get(); }

 private:
  // The batch's checks and the step's chunk count (the sum made for it).
  int64_t prepare(const Tensor& inputs, const Tensor& targets, BatchRows rows);
  // This rank's chunks [first, first + count), returning their losses; chunk c is rows
  // [(c - held) chunk_size, ...) of `inputs` (held: the first chunk `inputs` holds).
  std::vector<double> run_chunks(const Tensor& inputs, const Tensor& targets, const ChunkLoss& chunk_loss,
                                 int64_t first, int64_t count, int64_t held);

  std::shared_ptr<comm::ProcessGroup> pg_;
  int64_t chunk_size_;
  MakeSum make_sum_;
  std::unique_ptr<ExactGradientSum> sum_;  // made at the first step, again when the chunk count changes
  std::vector<int64_t> loaded_grids_;
  bool in_step_ = false;
  uint64_t chunk_seed_ = 0;  // rank 0's initial seed
  int64_t steps_ = 0;        // steps done (the chunks' seeds count them)
};

}  // namespace tinyddp::ddp
