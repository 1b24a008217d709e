// The free functions of fully_shard.h: fully_shard itself (the registry of the units and their
// shards, the module hooks around a unit), set_requires_gradient_sync, the shards for an
// optimizer, the full state dict, and clipping over shards.
#include <algorithm>
#include <cmath>
#include <mutex>
#include <optional>

#include "tinyddp/ddp/fully_shard.h"
#include "tinyddp/ddp/fully_shard_registry.h"
#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::ddp {

using detail::is_shard;
using detail::registry;
using detail::Registry;
using detail::sharded;
using detail::Sharded;
using tensor::NoGradGuard;
using tensor::Tensor;

namespace detail {
// Throws when a parameter a sub-module's unit holds is also registered in a module of
// `module` outside that sub-module (a weight tied across units: the sub-unit frees it while
// the other module computes with it), naming both places.
void check_not_shared_across_units(const nn::Module& module, const std::string& name) {
  for (const auto& [path, m] : module.named_modules()) {
    for (const auto& [local, p] : m->named_registered_parameters(/*recurse=*/false)) {
      const std::optional<Sharded> held = sharded(p);
      if (!held || held->owner == m.get()) continue;
      bool within = false;  // m inside the holding unit's module
      for (const auto& [owner_path, owner] : module.named_modules()) {
        if (owner.get() != held->owner) continue;
        for (const auto& inner : owner->modules()) within |= inner.get() == m.get();
        TDDP_CHECK(within,
                   "fully_shard({}): parameter '{}' is held by the unit of '{}' but also used by '{}', outside that "
                   "unit: a parameter shared across units is not supported (shard the module that holds both uses "
                   "as one unit)",
                   name, path.empty() ? local : path + "." + local, owner_path, path.empty() ? name : path);
      }
    }
  }
}
}  // namespace detail

namespace {
thread_local int units_in_forward = 0;  // the root is the unit whose forward starts at 0
}  // namespace

// mp_policy's casts of the units' inputs and outputs (the module hooks' part of mixed precision).
namespace {
bool is_floating(const Tensor& t) { return t.defined() && tensor::is_floating_point(t.dtype()); }

// `tensors` with each floating-point one cast to `dtype` (differentiably); nullopt when none
// changes.
std::optional<nn::Tensors> cast_floating(const nn::Tensors& tensors, std::optional<tensor::DType> dtype) {
  if (!dtype || std::none_of(tensors.begin(), tensors.end(),
                             [&](const Tensor& t) { return is_floating(t) && t.dtype() != *dtype; }))
    return std::nullopt;
  nn::Tensors out;
  for (const Tensor& t : tensors) out.push_back(is_floating(t) ? t.to(*dtype) : t);
  return out;
}
}  // namespace

std::optional<nn::Tensors> FullyShardedUnit::cast_inputs(const nn::Tensors& inputs) const {
  if (!options_.mp_policy().cast_forward_inputs()) return std::nullopt;
  return cast_floating(inputs, options_.mp_policy().param_dtype());
}

std::optional<nn::Tensors> FullyShardedUnit::cast_outputs(const nn::Tensors& outputs) const {
  return cast_floating(outputs, options_.mp_policy().output_dtype());
}

void FullyShardedUnit::register_shards(nn::Module& module) {
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    for (const Slot& slot : slots_) {
      r.entries[slot.param.impl()] = {slot.shard, slot.full_shape, pg_, module_address_};
      r.shard_impls.insert(slot.shard.impl());
    }
  }
  // From now on the module lists each shard where its parameter is (FSDP2's DTensor
  // parameters): under every name the parameter has, in whichever module of the tree.
  for (const auto& m : module.modules()) {
    for (const auto& [local, p] : m->named_registered_parameters(/*recurse=*/false)) {
      for (const Slot& slot : slots_) {
        if (slot.param.is_same(p)) m->set_parameter_stand_in(local, slot.shard);
      }
    }
  }
}

std::shared_ptr<FullyShardedUnit> fully_shard(const std::shared_ptr<nn::Module>& module,
                                              std::shared_ptr<comm::ProcessGroup> pg, FullyShardOptions options) {
  TDDP_CHECK(module != nullptr, "fully_shard: the module is null");
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    TDDP_CHECK(r.units.emplace(module.get(), std::weak_ptr<FullyShardedUnit>()).second,
               "fully_shard({}): this module is sharded already", module->type_name());
  }
  std::shared_ptr<FullyShardedUnit> unit;
  try {
    unit = std::make_shared<FullyShardedUnit>(module, std::move(pg), options);
  } catch (...) {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.units.erase(module.get());
    throw;
  }
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.units[module.get()] = unit;
    // The units inside this module are named on the timeline by their paths in it.
    for (const auto& [path, m] : module->named_modules("", /*include_self=*/false)) {
      const auto it = r.units.find(m.get());
      if (it == r.units.end()) continue;
      if (const std::shared_ptr<FullyShardedUnit> inner = it->second.lock()) inner->set_label(path);
    }
  }
  // Gather before the forward; with grad mode on, count this backward's gradients.
  module->register_forward_pre_hook([unit](nn::Module&, const nn::Tensors& inputs) -> std::optional<nn::Tensors> {
    // (Counted once it began: a refusal leaves the count as it was.)
    unit->begin_forward(units_in_forward == 0);
    ++units_in_forward;
    return unit->cast_inputs(inputs);
  });
  // After it: without grad mode no backward will come, so free the parameters; with it, free
  // their bytes until the backward gathers them again (reshard_after_forward; not the root's,
  // whose backward comes first).
  module->register_forward_hook(
      [unit](nn::Module&, const nn::Tensors&, const nn::Tensors& outputs) -> std::optional<nn::Tensors> {
        --units_in_forward;
        unit->end_forward();
        return unit->cast_outputs(outputs);
      },
      false, /*always_call=*/true);
  // Before the unit's backward: its parameters again, if they were freed after the forward.
  module->register_full_backward_pre_hook([unit](nn::Module&, const nn::Tensors&) -> std::optional<nn::Tensors> {
    unit->begin_backward();
    return std::nullopt;
  });
  return unit;
}

std::vector<std::shared_ptr<FullyShardedUnit>> fully_shard_by_policy(
    const std::shared_ptr<nn::Module>& module, std::shared_ptr<comm::ProcessGroup> pg,
    const std::function<bool(const nn::Module&)>& policy, FullyShardOptions options) {
  TDDP_CHECK(module != nullptr, "fully_shard_by_policy: the module is null");
  std::vector<std::shared_ptr<nn::Module>> chosen;
  for (const auto& m : module->modules(/*include_self=*/false)) {
    if (policy(*m)) chosen.push_back(m);
  }
  std::vector<std::shared_ptr<FullyShardedUnit>> units;
  // modules() lists a parent before its children: backwards, the innermost come first.
  for (auto it = chosen.rbegin(); it != chosen.rend(); ++it) units.push_back(fully_shard(*it, pg, options));
  units.push_back(fully_shard(module, std::move(pg), options));
  return units;
}

void set_requires_gradient_sync(const nn::Module& module, bool sync) {
  std::vector<const nn::Module*> all{&module};
  for (const auto& child : module.modules(/*include_self=*/false)) all.push_back(child.get());
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const nn::Module* m : all) {
    auto it = r.units.find(m);
    if (it == r.units.end()) continue;
    if (const std::shared_ptr<FullyShardedUnit> unit = it->second.lock()) unit->set_requires_gradient_sync(sync);
  }
}

std::vector<Tensor> sharded_parameters(const nn::Module& module) { return sharded_named_parameters(module).values(); }

nn::OrderedDict<Tensor> sharded_named_parameters(const nn::Module& module) { return module.named_parameters(); }

nn::OrderedDict<Tensor> full_state_dict(const nn::Module& module) {
  NoGradGuard no_grad;
  const nn::OrderedDict<Tensor> params = module.named_registered_parameters();
  nn::OrderedDict<Tensor> out;
  for (const auto& [name, value] : module.state_dict()) {
    const Tensor* param = params.find(name);
    const std::optional<Sharded> entry = param != nullptr ? sharded(*param) : std::nullopt;
    if (!entry) {
      out.insert(name, value);
      continue;
    }
    // Every rank's block, in rank order, then the padding cut off.
    const int64_t world = entry->pg->size();
    std::vector<Tensor> blocks;
    for (int64_t r = 0; r < world; ++r) blocks.push_back(tensor::empty_like(entry->shard));
    entry->pg->allgather(blocks, entry->shard.detach())->wait();
    const int64_t rows = entry->full_shape.empty() ? 1 : entry->full_shape[0];
    out.insert(name, tensor::cat(blocks, 0).narrow(0, 0, rows).reshape(entry->full_shape));
  }
  return out;
}

namespace {
// Whether `shard`'s unit has the deterministic option.
bool deterministic_shard(const Tensor& shard) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& [impl, entry] : r.entries) {
    if (!entry.shard.is_same(shard)) continue;
    const auto it = r.units.find(entry.owner);
    const std::shared_ptr<FullyShardedUnit> unit = it == r.units.end() ? nullptr : it->second.lock();
    return unit != nullptr && unit->options().deterministic();
  }
  return false;
}
}  // namespace

Tensor clip_sharded_grad_norm_(const std::vector<Tensor>& params, double max_norm, comm::ProcessGroup& pg,
                               double norm_type) {
  TDDP_CHECK(norm_type == 2.0 || std::isinf(norm_type),
             "clip_sharded_grad_norm_: norm_type must be 2 or infinity, got {}", norm_type);
  TDDP_CHECK(max_norm >= 0, "clip_sharded_grad_norm_: max_norm must not be negative, got {}", max_norm);
  NoGradGuard no_grad;
  const bool inf = std::isinf(norm_type);
  // This rank's part: its shards, and the parameters every rank holds whole on rank 0 only.
  std::vector<Tensor> grads, mine;
  bool exact = false;  // the deterministic option's: the same bits on any world size
  for (const Tensor& p : params) {
    if (!p.grad().defined()) continue;
    grads.push_back(p.grad());
    exact = exact || (!inf && is_shard(p) && deterministic_shard(p));  // (the largest is exact anyway)
    if (is_shard(p) || pg.rank() == 0) mine.push_back(p.grad());
  }
  Tensor total;
  if (exact) {
    total = tensor::full({}, std::sqrt(exact_square_sum(mine, &pg)), tensor::TensorOptions().dtype(tensor::kFloat64));
  } else {
    Tensor local = tensor::zeros({1}, tensor::kFloat64);  // summed in float64 on the host
    for (const Tensor& grad : mine) {
      const Tensor g = grad.to(tensor::kFloat64).to(tensor::Device());
      local = inf ? tensor::maximum(local, tensor::max(tensor::abs(g)).reshape({1}))
                  : local + tensor::sum(tensor::mul(g, g)).reshape({1});
    }
    pg.allreduce(local, inf ? comm::ReduceOp::kMax : comm::ReduceOp::kSum)->wait();
    total = (inf ? local : tensor::sqrt(local)).reshape({});
  }
  const double coef = std::min(1.0, max_norm / (total.item<double>() + 1e-6));
  for (const Tensor& g : grads) g.mul_(coef);
  return grads.empty() ? total.to(tensor::kFloat32) : total.to(grads.front().dtype());
}

}  // namespace tinyddp::ddp
