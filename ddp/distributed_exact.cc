// DistributedDataParallel's deterministic option (distributed.h): the global batch in chunks,
// this rank's chunks run one forward and backward each, their gradients summed exactly over the
// chunks and the ranks by an ExactGradientSum, so that every world size gives the same bits
// (docs/ddp.md, "The same bits at any world size"). The step itself is ExactSteps'
// (exact_step.h), which fully_shard's option shares.
#include <memory>
#include <string>
#include <vector>

#include "tinyddp/base/error.h"
#include "tinyddp/comm/host_staging.h"
#include "tinyddp/ddp/distributed.h"

namespace tinyddp::ddp {

void DistributedDataParallel::check_deterministic() const {
  TDDP_CHECK(options_.chunk_size() >= 1, "DistributedDataParallel: chunk_size must be at least 1 row, got {}",
             options_.chunk_size());
  TDDP_CHECK(!options_.find_unused_parameters() && !options_.static_graph(),
             "DistributedDataParallel: the deterministic option does not take find_unused_parameters or static_graph "
             "(a parameter without a gradient adds zeros to the exact sum)");
  // What would make a chunk's result depend on the rank that runs it, or on the chunks before it.
  check_exact_module(*module_, "DistributedDataParallel");
}

void DistributedDataParallel::start_exact_steps() {
  // The steps' collectives take CPU tensors: on NCCL they are copied to the GPU and back.
  const std::shared_ptr<comm::ProcessGroup> group = comm::host_staged(pg_, control_device_);
  exact_ = std::make_unique<ExactSteps>(group, options_.chunk_size(), params_.size(), [this, group](int64_t total) {
    auto sum = std::make_unique<ExactGradientSum>(params_, param_names_, group, total);
    sum->keep_chunks(8);
    return sum;
  });
}

void DistributedDataParallel::register_comm_hook(CommHook hook) {
  TDDP_CHECK(!options_.deterministic(),
             "DistributedDataParallel: the deterministic option sums the gradients exactly and takes no comm hook");
  reducer_->register_comm_hook(std::move(hook));
}

double DistributedDataParallel::deterministic_step(const Tensor& inputs, const Tensor& targets,
                                                   const ChunkLoss& chunk_loss, BatchRows rows) {
  TDDP_CHECK(options_.deterministic(),
             "DistributedDataParallel::deterministic_step: the deterministic option is off "
             "(DDPOptions().deterministic(true).chunk_size(rows))");
  return exact_->step(*module_, inputs, targets, chunk_loss, rows);
}

std::vector<int64_t> DistributedDataParallel::deterministic_state() const {
  return exact_ ? exact_->state() : std::vector<int64_t>{0};
}

void DistributedDataParallel::load_deterministic_state(std::vector<int64_t> state) {
  TDDP_CHECK(options_.deterministic(),
             "DistributedDataParallel::load_deterministic_state: the deterministic option is off");
  exact_->load_state(std::move(state), "DistributedDataParallel::load_deterministic_state");
}

}  // namespace tinyddp::ddp
