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

namespace {

// BatchNorm under the option: each rank keeps its chunks' batch statistics (BatchNorm's
// deferred statistics) instead of moving the running ones.
std::vector<nn::BatchNorm*> tracked_norms(nn::Module& module) {
  std::vector<nn::BatchNorm*> norms;
  for (const auto& [name, m] : module.named_modules()) {
    auto* norm = dynamic_cast<nn::BatchNorm*>(m.get());
    if (norm != nullptr && norm->track_running_stats) norms.push_back(norm);
  }
  return norms;
}

// After the step: the ranks' chunk statistics gathered (in rank order, which is chunk order;
// float64 holds any float32 bit for bit), and every rank moves each BatchNorm's running
// statistics through all the step's chunks in order: the bits of one process that ran them.
void replay_chunk_statistics(comm::ProcessGroup& pg, const std::vector<nn::BatchNorm*>& norms, int64_t count) {
  if (norms.empty()) return;
  // Calls per chunk (a shared module may run several times in one chunk), agreed.
  std::vector<int64_t> calls;
  for (nn::BatchNorm* norm : norms) {
    const auto made = static_cast<int64_t>(norm->deferred_statistics().size());
    TDDP_CHECK(made % count == 0,
               "deterministic_step: a BatchNorm ran {} times in {} chunks: every chunk must run it "
               "the same number of times",
               made, count);
    calls.push_back(made / count);
  }
  std::vector<int64_t> control = calls;  // then their negatives: the max gives the least count too
  for (int64_t c : calls) control.push_back(-c);
  Tensor agreed = tensor::from_vector(control);
  pg.allreduce(agreed, comm::ReduceOp::kMax)->wait();
  const std::vector<int64_t> got = agreed.to_vector<int64_t>();
  for (size_t b = 0; b < norms.size(); ++b) {
    TDDP_CHECK(got[b] == -got[norms.size() + b],
               "deterministic_step: the ranks ran a BatchNorm a different number of "
               "times per chunk (from {} to {}): chunk_loss must do the same on every rank",
               -got[norms.size() + b], got[b]);
  }
  std::vector<Tensor> mine;  // chunk by chunk: each BatchNorm's calls, mean then variance
  for (int64_t c = 0; c < count; ++c) {
    for (size_t b = 0; b < norms.size(); ++b) {
      for (int64_t k = 0; k < calls[b]; ++k) {
        const nn::BatchNorm::BatchStatistics& st = norms[b]->deferred_statistics()[c * calls[b] + k];
        mine.push_back(st.mean.to(tensor::kFloat64));
        mine.push_back(st.unbiased_var.to(tensor::kFloat64));
      }
    }
  }
  const Tensor flat = tensor::cat(mine);
  std::vector<Tensor> all;
  for (int r = 0; r < pg.size(); ++r) all.push_back(tensor::empty_like(flat));
  pg.allgather(all, flat)->wait();
  for (const Tensor& rank_chunks : all) {
    int64_t at = 0;
    for (int64_t c = 0; c < count; ++c) {
      for (size_t b = 0; b < norms.size(); ++b) {
        const int64_t n = norms[b]->num_features;
        for (int64_t k = 0; k < calls[b]; ++k, at += 2 * n) {
          norms[b]->apply_running_stats(rank_chunks.narrow(0, at, n), rank_chunks.narrow(0, at + n, n));
        }
      }
    }
  }
}

}  // namespace

int64_t DistributedDataParallel::step_chunks(const Tensor& inputs, const Tensor& targets) {
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
    exact_->keep_chunks(8);
    exact_->load_grid_state(grids);
  }
  return total;
}

std::vector<double> DistributedDataParallel::run_chunks(const Tensor& inputs, const Tensor& targets,
                                                        const ChunkLoss& chunk_loss, int64_t first, int64_t count) {
  const int64_t chunk = options_.chunk_size();
  std::vector<double> losses;
  for (int64_t c = first; c < first + count; ++c) {
    tensor::default_generator().manual_seed(
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
  return losses;
}

double DistributedDataParallel::deterministic_step(const Tensor& inputs, const Tensor& targets,
                                                   const ChunkLoss& chunk_loss) {
  const int64_t total = step_chunks(inputs, targets);
  for (Tensor& p : params_) p.mutable_grad() = Tensor();  // the step's .grad is its own
  const int64_t count = total / pg_->size(), first = pg_->rank() * count;
  in_deterministic_step_ = true;
  const std::vector<nn::BatchNorm*> norms = tracked_norms(*module_);
  // The rank's own generator comes back after the step, whatever the chunks drew, and the
  // BatchNorms move their running statistics themselves again.
  struct Leave {
    bool& flag;
    tensor::Generator& generator;
    std::string state;
    const std::vector<nn::BatchNorm*>& norms;
    ~Leave() {
      flag = false;
      generator.set_state(state);
      for (nn::BatchNorm* norm : norms) norm->defer_running_stats(false);
    }
  } leave{in_deterministic_step_, tensor::default_generator(), tensor::default_generator().get_state(), norms};
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (nn::BatchNorm* norm : norms) norm->defer_running_stats(true);  // (a rerun drops the first run's)
    const std::vector<double> losses = run_chunks(inputs, targets, chunk_loss, first, count);
    // The first step, or gradients that outgrew the grid: every rank runs its chunks again (the
    // same parameters and data: the same gradients, which the agreed grid now bounds).
    if (exact_->finish()) {
      replay_chunk_statistics(*pg_, norms, count);
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
