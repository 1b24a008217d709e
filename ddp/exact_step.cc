// ExactSteps (exact_step.h): the deterministic option's step, for DistributedDataParallel and
// fully_shard alike.
#include "tinyddp/ddp/exact_step.h"

#include <memory>
#include <string>
#include <vector>

#include "tinyddp/base/error.h"
#include "tinyddp/ddp/sync_batchnorm.h"
#include "tinyddp/nn/batchnorm.h"
#include "tinyddp/tensor/random.h"

namespace tinyddp::ddp {

using tensor::splitmix64;

void check_exact_module(const nn::Module& module, const std::string& who) {
  for (const auto& [name, m] : module.named_modules()) {
    const std::string where = name.empty() ? "the module" : fmt::format("'{}'", name);
    TDDP_CHECK(dynamic_cast<SyncBatchNorm*>(m.get()) == nullptr,
               "{}: the deterministic option does not take SyncBatchNorm ({}): its statistics "
               "are gathered over the ranks, whose count changes",
               who, where);
  }
}

ExactSteps::ExactSteps(std::shared_ptr<comm::ProcessGroup> pg, int64_t chunk_size, size_t param_count, MakeSum make_sum)
    : pg_(std::move(pg)), chunk_size_(chunk_size), make_sum_(std::move(make_sum)),
      loaded_grids_(param_count, ExactGradientSum::kUnknownBound) {
  Tensor seed = tensor::from_vector<int64_t>({static_cast<int64_t>(tensor::default_generator().initial_seed())});
  pg_->broadcast(seed, 0)->wait();
  chunk_seed_ = static_cast<uint64_t>(seed.item<int64_t>());
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

int64_t ExactSteps::prepare(const Tensor& inputs, const Tensor& targets, BatchRows held) {
  TDDP_CHECK(inputs.dim() >= 1 && targets.dim() >= 1 && inputs.size(0) == targets.size(0),
             "deterministic_step: inputs and targets must hold the same rows first, got shapes {} and {}",
             tensor::format_shape(inputs.sizes()), tensor::format_shape(targets.sizes()));
  const int64_t chunk = chunk_size_, world = pg_->size();
  if (held == BatchRows::kRank) {
    TDDP_CHECK(inputs.size(0) % chunk == 0,
               "deterministic_step: this rank's {} rows (BatchRows::kRank) are not a whole number of chunks of {} "
               "rows: each rank holds its chunks, the same number on every rank",
               inputs.size(0), chunk);
  }
  const int64_t rows = held == BatchRows::kRank ? inputs.size(0) * world : inputs.size(0);
  TDDP_CHECK(rows % chunk == 0,
             "deterministic_step: chunk_size {} does not divide the global batch of {} rows: choose a chunk size "
             "that divides it",
             chunk, rows);
  const int64_t total = rows / chunk;
  TDDP_CHECK(total % world == 0,
             "deterministic_step: the {} chunks of {} rows do not split over {} ranks: every rank takes the same "
             "number of chunks (choose a world size that divides {}, or another chunk_size)",
             total, chunk, world, total);
  if (!sum_ || sum_->total_chunks() != total) {
    const std::vector<int64_t> grids = sum_ ? sum_->grid_state() : loaded_grids_;
    sum_ = make_sum_(total);
    sum_->load_grid_state(grids);
  }
  return total;
}

std::vector<double> ExactSteps::run_chunks(const Tensor& inputs, const Tensor& targets, const ChunkLoss& chunk_loss,
                                           int64_t first, int64_t count, int64_t held) {
  const int64_t chunk = chunk_size_;
  std::vector<double> losses;
  for (int64_t c = first; c < first + count; ++c) {
    tensor::default_generator().manual_seed(
        splitmix64(splitmix64(chunk_seed_ ^ splitmix64(static_cast<uint64_t>(steps_))) +
                   static_cast<uint64_t>(c)));  // this chunk's draws, on any rank
    const int64_t at = (c - held) * chunk;
    const Tensor loss = chunk_loss(inputs.narrow(0, at, chunk), targets.narrow(0, at, chunk));
    TDDP_CHECK(loss.defined() && loss.numel() == 1,
               "deterministic_step: chunk_loss must return the chunk's loss, one value, got {}",
               loss.defined() ? tensor::format_shape(loss.sizes()) : std::string("an undefined tensor"));
    losses.push_back(loss.item<double>());
    if (c + 1 == first + count) sum_->overlap_next_chunk();  // its sums travel during backward
    {
      tensor::WeightGradientSinkScope products(sum_.get());  // linear()'s weight products go to the sum
      loss.backward();
    }
    sum_->add_chunk();
  }
  return losses;
}

double ExactSteps::step(nn::Module& module, const Tensor& inputs, const Tensor& targets, const ChunkLoss& chunk_loss,
                        BatchRows rows) {
  const int64_t total = prepare(inputs, targets, rows);
  sum_->clear_gradients();  // the step's .grad is its own
  const int64_t count = total / pg_->size(), first = pg_->rank() * count;
  const int64_t held = rows == BatchRows::kRank ? first : 0;
  in_step_ = true;
  const std::vector<nn::BatchNorm*> norms = tracked_norms(module);
  // The rank's own generator comes back after the step, whatever the chunks drew, and the
  // BatchNorms move their running statistics themselves again.
  struct Leave {
    bool& flag;
    tensor::Generator& generator;
    tensor::Generator::Snapshot state;
    const std::vector<nn::BatchNorm*>& norms;
    ~Leave() {
      flag = false;
      generator.restore(state);
      for (nn::BatchNorm* norm : norms) norm->defer_running_stats(false);
    }
  } leave{in_step_, tensor::default_generator(), tensor::default_generator().snapshot(), norms};
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (nn::BatchNorm* norm : norms) norm->defer_running_stats(true);  // (a rerun drops the first run's)
    // The chunks' losses ride the sum's control allreduce (chunk_slots).
    std::vector<int64_t> losses =
        chunk_slots(run_chunks(inputs, targets, chunk_loss, first, count, held), first, total);
    // The first step, or gradients that outgrew the grid: every rank runs its chunks again (the
    // same parameters and data: the same gradients, which the agreed grid now bounds).
    if (sum_->finish(&losses)) {
      replay_chunk_statistics(*pg_, norms, count);
      ++steps_;
      return slots_mean(losses);
    }
  }
  throw Error(
      "deterministic_step: the step's gradients changed when its chunks ran again (a nondeterministic kernel, or "
      "a chunk_loss that changes state it reads?)");
}

std::vector<int64_t> ExactSteps::state() const {
  std::vector<int64_t> state{steps_};
  for (int64_t bound : sum_ ? sum_->grid_state() : loaded_grids_) state.push_back(bound);
  return state;
}

void ExactSteps::load_state(std::vector<int64_t> state, const std::string& who) {
  TDDP_CHECK(state.size() == loaded_grids_.size() + 1 && state[0] >= 0,
             "{}: {} values, expected {} (the steps done, then a bound for each of the {} parameters): a state saved "
             "for another model?",
             who, state.size(), loaded_grids_.size() + 1, loaded_grids_.size());
  std::vector<int64_t> bounds(state.begin() + 1, state.end());
  if (sum_) sum_->load_grid_state(bounds);
  loaded_grids_ = std::move(bounds);
  steps_ = state[0];
}

}  // namespace tinyddp::ddp
