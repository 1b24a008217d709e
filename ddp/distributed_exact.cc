// DistributedDataParallel's deterministic option (distributed.h): the global batch in chunks,
// this rank's chunks run one forward and backward each, their gradients summed exactly over the
// chunks and the ranks by an ExactGradientSum, so that every world size gives the same bits
// (docs/ddp.md, "The same bits at any world size").
#include <memory>
#include <string>
#include <vector>

#include "tinyddp/base/error.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/ddp/sync_batchnorm.h"
#include "tinyddp/nn/batchnorm.h"
#include "tinyddp/tensor/random.h"

namespace tinyddp::ddp {

using tensor::splitmix64;

void DistributedDataParallel::check_deterministic() const {
  TDDP_CHECK(options_.chunk_size() >= 1, "DistributedDataParallel: chunk_size must be at least 1 row, got {}",
             options_.chunk_size());
  TDDP_CHECK(control_device_.type == tensor::kCPU,
             "DistributedDataParallel: the deterministic option sums on the CPU, but this process group ({}) takes "
             "device tensors only: use a gloo group",
             pg_->backend());
  TDDP_CHECK(!options_.find_unused_parameters() && !options_.static_graph(),
             "DistributedDataParallel: the deterministic option does not take find_unused_parameters or static_graph "
             "(a parameter without a gradient adds zeros to the exact sum)");
  // What would make a chunk's result depend on the rank that runs it, or on the chunks before it.
  for (const auto& [name, m] : module_->named_modules()) {
    const std::string where = name.empty() ? "the module" : fmt::format("'{}'", name);
    TDDP_CHECK(dynamic_cast<SyncBatchNorm*>(m.get()) == nullptr,
               "DistributedDataParallel: the deterministic option does not take SyncBatchNorm ({}): its statistics "
               "are gathered over the ranks, whose count changes",
               where);
    TDDP_CHECK(dynamic_cast<nn::BatchNorm*>(m.get()) == nullptr,
               "DistributedDataParallel: the deterministic option does not take BatchNorm yet ({}): its running "
               "statistics would follow the chunks each rank runs, not the chunk order",
               where);
  }
}

void DistributedDataParallel::agree_chunk_seed() {
  Tensor seed = tensor::from_vector<int64_t>({static_cast<int64_t>(tensor::default_generator().initial_seed())});
  pg_->broadcast(seed, 0)->wait();
  chunk_seed_ = static_cast<uint64_t>(seed.item<int64_t>());
}

void DistributedDataParallel::register_comm_hook(CommHook hook) {
  TDDP_CHECK(!options_.deterministic(),
             "DistributedDataParallel: the deterministic option sums the gradients exactly and takes no comm hook");
  reducer_->register_comm_hook(std::move(hook));
}

double DistributedDataParallel::deterministic_step(const Tensor& inputs, const Tensor& targets,
                                                   const ChunkLoss& chunk_loss) {
  TDDP_CHECK(options_.deterministic(),
             "DistributedDataParallel::deterministic_step: the deterministic option is off "
             "(DDPOptions().deterministic(true).chunk_size(rows))");
  TDDP_CHECK(inputs.dim() >= 1 && targets.dim() >= 1 && inputs.size(0) == targets.size(0),
             "deterministic_step: inputs and targets must hold the same rows first, got shapes {} and {}",
             tensor::format_shape(inputs.sizes()), tensor::format_shape(targets.sizes()));
  const int64_t rows = inputs.size(0), chunk = options_.chunk_size(), world = pg_->size();
  TDDP_CHECK(rows % chunk == 0,
             "deterministic_step: chunk_size {} does not divide the global batch of {} rows: choose a chunk size "
             "that divides it",
             chunk, rows);
  const int64_t total = rows / chunk;
  TDDP_CHECK(total % world == 0,
             "deterministic_step: the {} chunks of {} rows do not split over {} ranks: every rank takes the same "
             "number of chunks (choose a world size that divides {}, or another chunk_size)",
             total, chunk, world, total);
  if (!exact_ || exact_->total_chunks() != total) {
    const std::vector<int64_t> grids = exact_ ? exact_->grid_state() : loaded_grids_;
    exact_ = std::make_unique<ExactGradientSum>(params_, param_names_, pg_, total);
    exact_->load_grid_state(grids);
  }
  for (Tensor& p : params_) p.mutable_grad() = Tensor();  // the step's .grad is its own
  const int64_t count = total / world, first = pg_->rank() * count;
  in_deterministic_step_ = true;
  // The rank's own generator comes back after the step, whatever the chunks drew.
  tensor::Generator& generator = tensor::default_generator();
  struct Leave {
    bool& flag;
    tensor::Generator& generator;
    std::string state;
    ~Leave() {
      flag = false;
      generator.set_state(state);
    }
  } leave{in_deterministic_step_, generator, generator.get_state()};
  std::vector<double> losses;
  for (int attempt = 0; attempt < 2; ++attempt) {
    losses.clear();
    for (int64_t c = first; c < first + count; ++c) {
      generator.manual_seed(
          splitmix64(splitmix64(chunk_seed_ ^ splitmix64(static_cast<uint64_t>(deterministic_steps_))) +
                     static_cast<uint64_t>(c)));  // this chunk's draws, on any rank
      const Tensor loss = chunk_loss(inputs.narrow(0, c * chunk, chunk), targets.narrow(0, c * chunk, chunk));
      TDDP_CHECK(loss.defined() && loss.numel() == 1,
                 "deterministic_step: chunk_loss must return the chunk's loss, one value, got {}",
                 loss.defined() ? tensor::format_shape(loss.sizes()) : std::string("an undefined tensor"));
      losses.push_back(loss.item<double>());
      if (c + 1 == first + count) exact_->overlap_next_chunk();  // its sums travel during backward
      loss.backward();
      exact_->add_chunk();
    }
    // The first step, or gradients that outgrew the grid: every rank runs its chunks again (the
    // same parameters and data: the same gradients, which the agreed grid now bounds).
    if (exact_->finish()) {
      ++deterministic_steps_;
      return chunk_mean(pg_.get(), losses, first, total);
    }
  }
  throw Error(
      "deterministic_step: the step's gradients changed when its chunks ran again (a nondeterministic kernel, or "
      "a chunk_loss that changes state it reads?)");
}

std::vector<int64_t> DistributedDataParallel::deterministic_state() const {
  std::vector<int64_t> state{deterministic_steps_};
  for (int64_t bound : exact_ ? exact_->grid_state() : loaded_grids_) state.push_back(bound);
  return state;
}

void DistributedDataParallel::load_deterministic_state(std::vector<int64_t> state) {
  TDDP_CHECK(options_.deterministic(),
             "DistributedDataParallel::load_deterministic_state: the deterministic option is off");
  TDDP_CHECK(state.size() == params_.size() + 1 && state[0] >= 0,
             "DistributedDataParallel::load_deterministic_state: {} values, expected {} (the steps done, then a bound "
             "for each of the {} parameters): a state saved for another model?",
             state.size(), params_.size() + 1, params_.size());
  std::vector<int64_t> bounds(state.begin() + 1, state.end());
  if (exact_) exact_->load_grid_state(bounds);
  loaded_grids_ = std::move(bounds);
  deterministic_steps_ = state[0];
}

}  // namespace tinyddp::ddp
