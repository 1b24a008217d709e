// fully_shard's deterministic option (fully_shard.h): DDP's exact step (exact_step.h) over the
// units' full gradients, whose integer sums are reduce-scattered to the shards.
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "tinyddp/comm/host_staging.h"
#include "tinyddp/ddp/fully_shard.h"
#include "tinyddp/ddp/fully_shard_registry.h"
#include "tinyddp/ddp/reducer.h"

namespace tinyddp::ddp {

using detail::registry;
using detail::Registry;
using tensor::Tensor;

namespace {

// The units of `root`'s tree (root's own first when it has one).
std::vector<std::shared_ptr<FullyShardedUnit>> units_in(const nn::Module& root) {
  std::vector<std::shared_ptr<FullyShardedUnit>> units;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& m : root.modules()) {
    const auto it = r.units.find(m.get());
    if (it == r.units.end()) continue;
    if (std::shared_ptr<FullyShardedUnit> unit = it->second.lock()) units.push_back(std::move(unit));
  }
  return units;
}

// `module`'s own unit, which must have the deterministic option; `what` names the caller.
std::shared_ptr<FullyShardedUnit> exact_root(const nn::Module& module, const char* what) {
  std::shared_ptr<FullyShardedUnit> unit;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    const auto it = r.units.find(&module);
    if (it != r.units.end()) unit = it->second.lock();
  }
  TDDP_CHECK(unit != nullptr,
             "{}: the module ({}) is not sharded: call fully_shard(module, pg, "
             "FullyShardOptions().deterministic(true)) on it, after its sub-modules",
             what, module.type_name());
  TDDP_CHECK(unit->options().deterministic(),
             "{}: the deterministic option is off for this module's unit "
             "(FullyShardOptions().deterministic(true).chunk_size(rows))",
             what);
  return unit;
}

}  // namespace

ExactSteps& FullyShardedUnit::exact_steps(const nn::Module& root) {
  if (exact_) return *exact_;
  TDDP_CHECK(options_.chunk_size() >= 1, "fully_shard({}): chunk_size must be at least 1 row, got {}", name_,
             options_.chunk_size());
  check_exact_module(root, fmt::format("fully_shard({})", name_));
  // Every unit's slots by their parameter, then the module's parameters in its order (DDP's).
  std::unordered_map<const tensor::TensorImpl*, const Slot*> slots;
  for (const std::shared_ptr<FullyShardedUnit>& unit : units_in(root)) {
    TDDP_CHECK(unit->options_.deterministic(),
               "fully_shard({}): the deterministic option is on at the root but off at the unit of '{}': give every "
               "unit the same options (fully_shard_by_policy does)",
               name_, unit->label_);
    for (const Slot& slot : unit->slots_) slots.emplace(slot.param.impl(), &slot);
  }
  std::vector<Tensor> params;
  std::vector<std::string> names;
  ShardedGradients layout;
  for (const auto& [name, p] : root.named_registered_parameters()) {
    const auto it = slots.find(p.impl());
    if (it == slots.end()) continue;  // frozen: no gradient
    params.push_back(p);
    names.push_back(name);
    layout.shards.push_back(it->second->shard);
    layout.full_shapes.push_back(it->second->full_shape);
    layout.block_rows.push_back(it->second->block_rows);
  }
  // (One chunk's gradients folded at a time: keeping more, as DDP does, would hold more full
  // gradients, what sharding saves.)
  // The steps' collectives take CPU tensors: on NCCL they are copied to the GPU and back.
  const std::shared_ptr<comm::ProcessGroup> group = comm::host_staged(pg_, control_device(*pg_, params));
  exact_ = std::make_unique<ExactSteps>(group, options_.chunk_size(), params.size(),
                                        [params, names, layout, pg = group](int64_t total) {
                                          return std::make_unique<ExactGradientSum>(params, names, pg, total, layout);
                                        });
  return *exact_;
}

double FullyShardedUnit::exact_step(nn::Module& root, const Tensor& inputs, const Tensor& targets,
                                    const ChunkLoss& chunk_loss, BatchRows rows) {
  ExactSteps& steps = exact_steps(root);
  // No reduce-scatter of floats: each unit keeps its full gradients after a chunk's backward,
  // and the exact sum takes them (and sets them to None) before the next.
  const std::vector<std::shared_ptr<FullyShardedUnit>> units = units_in(root);
  struct Restore {
    const std::vector<std::shared_ptr<FullyShardedUnit>>& units;
    std::vector<bool> sync;
    ~Restore() {
      for (size_t u = 0; u < units.size(); ++u) units[u]->requires_gradient_sync_ = sync[u];
    }
  } restore{units, {}};
  for (const auto& unit : units) {
    restore.sync.push_back(unit->requires_gradient_sync_);
    unit->requires_gradient_sync_ = false;
  }
  return steps.step(root, inputs, targets, chunk_loss, rows);
}

double deterministic_step(nn::Module& module, const Tensor& inputs, const Tensor& targets, const ChunkLoss& chunk_loss,
                          BatchRows rows) {
  return exact_root(module, "deterministic_step")->exact_step(module, inputs, targets, chunk_loss, rows);
}

std::vector<int64_t> deterministic_state(nn::Module& module) {
  return exact_root(module, "deterministic_state")->exact_steps(module).state();
}

void load_deterministic_state(nn::Module& module, std::vector<int64_t> state) {
  exact_root(module, "load_deterministic_state")
      ->exact_steps(module)
      .load_state(std::move(state), "load_deterministic_state");
}

}  // namespace tinyddp::ddp
