// --deterministic in examples/train and train_gpt: DistributedDataParallel's deterministic
// option (the global batch cut into chunks of chunk_size rows, this rank's chunks run one
// forward and backward each, their gradients summed exactly over the chunks and the ranks), so
// that 1, 2, 3, 4 or 6 ranks train to the same bits (docs/ddp.md, "The same bits at any world
// size"), and its grids in the checkpoints, so that a resumed run, on any world size, does too.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "examples/train_data.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/ddp/fully_shard.h"
#include "tinyddp/nn/nn.h"

namespace tinyddp::examples {

// The chunks of a global batch of `rows`, and rank `rank` of `world`'s share of them (clear
// errors naming --chunk_size and the world size when chunk_size does not divide the batch, or
// the world the chunks).
struct ChunkShare {
  int64_t chunk_size = 0, total = 0, first = 0, count = 0;
};
ChunkShare chunk_share(int64_t rows, int64_t chunk_size, int rank, int world);

// DDP with the deterministic option around `model`, over `pg`, or over a world of one (a gloo
// group of this process alone) when the run has no process group.
// `pg`, or (null) a gloo group of this process alone.
std::shared_ptr<comm::ProcessGroup> world_of_one(std::shared_ptr<comm::ProcessGroup> pg = nullptr);
std::shared_ptr<ddp::DistributedDataParallel> deterministic_ddp(std::shared_ptr<nn::Module> model,
                                                                std::shared_ptr<comm::ProcessGroup> pg,
                                                                int64_t chunk_size);

// One step of the whole global batch (on every rank: inputs and targets with rows first; with
// BatchRows::kRank only this rank's chunks of it): the flags checked first (chunk_share), then
// ddp.deterministic_step, each chunk through `chunk_loss` (its forward and loss). Leaves .grad
// holding the mean over all chunks; returns the step's loss, the mean of the chunks' losses
// (the same bits on every world size), as a float64 scalar.
tensor::Tensor exact_step(ddp::DistributedDataParallel& ddp, const Batch& batch,
                          const std::function<tensor::Tensor(const tensor::Tensor&, const tensor::Tensor&)>& chunk_loss,
                          ddp::BatchRows rows = ddp::BatchRows::kGlobal);
// The same for a module fully_shard made the root of its units with the deterministic option
// (ddp::deterministic_step), over `pg` in chunks of `chunk_size` rows.
tensor::Tensor exact_step(
    nn::Module& sharded, const comm::ProcessGroup& pg, int64_t chunk_size, const Batch& global,
    const std::function<tensor::Tensor(const tensor::Tensor&, const tensor::Tensor&)>& chunk_loss);

// The option's state (DistributedDataParallel::deterministic_state: the steps done, then the
// grids' bounds) as checkpoint metadata ("deterministic.state", comma-separated), and back (nothing when the checkpoint
// has none: its first step then runs twice and takes its grids from its own gradients).
void save_grids(const ddp::DistributedDataParallel& ddp, std::map<std::string, std::string>& metadata);
void load_grids(const std::map<std::string, std::string>& metadata, ddp::DistributedDataParallel& ddp);
// fully_shard's (ddp::deterministic_state): an int64 tensor "deterministic.state" among a
// sharded checkpoint's extra tensors, and back (nothing when there is none).
void save_grids(nn::Module& sharded, nn::OrderedDict<tensor::Tensor>& extra);
void load_grids(const nn::OrderedDict<tensor::Tensor>& extra, nn::Module& sharded);

}  // namespace tinyddp::examples
