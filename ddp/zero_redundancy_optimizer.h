// ZeroRedundancyOptimizer: PyTorch's ZeRO stage 1 (torch.distributed.optim). The parameters are
// partitioned across the ranks; each rank keeps a local optimizer (SGD, Adam, AdamW) over its
// shard only, so the optimizer state (momentum, Adam's moments) takes about 1/W of the memory.
// step() updates the local shard from .grad (averaged by DDP beforehand), then every rank
// receives the others' updated shards: one broadcast per parameter from its owner, or one per
// rank with parameters_as_bucket_view, where each rank's parameters live in one flat bucket.
//
//   auto zero = ZeroRedundancyOptimizer(model->parameters(), optimizer_class<nn::Adam>(nn::AdamOptions(1e-3)), pg);
//   ... loss.backward(); zero.step();   (with DDP around the model)
//
// The partition is PyTorch's: parameters by size, largest first (ties in the order given),
// each to the rank with the fewest elements so far (the lowest such rank); every rank computes
// the same one. It is a Joinable (join.h): under Join a rank that ran out of inputs keeps
// stepping its shard and broadcasting it. With overlap_with_ddp the update runs inside DDP's
// backward instead (hook_with_zero_step, below).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "tinyddp/comm/process_group.h"
#include "tinyddp/ddp/comm_hooks.h"
#include "tinyddp/ddp/join.h"
#include "tinyddp/nn/optim.h"

namespace tinyddp::ddp {

using tensor::Tensor;

struct ZeroOptions {
  // Each rank's shard in one flat tensor, the parameters views of it (set_data): one broadcast
  // per rank instead of one per parameter. Needs one dtype and device for all parameters.
  ZeroOptions& parameters_as_bucket_view(bool v) {
    parameters_as_bucket_view_ = v;
    return *this;
  }
  // The update runs inside DDP's backward instead of in step(): register
  // hook_with_zero_step(hook, ddp, zero) as DDP's communication hook (below); step() does
  // nothing then. As in PyTorch, the partition follows DDP's buckets (bucket b to rank
  // b % world size), learnt after DDP rebuilds them, so the first two iterations update
  // nothing (three with static_graph).
  ZeroOptions& overlap_with_ddp(bool v) {
    overlap_with_ddp_ = v;
    return *this;
  }
  bool parameters_as_bucket_view() const { return parameters_as_bucket_view_; }
  bool overlap_with_ddp() const { return overlap_with_ddp_; }

 private:
  bool parameters_as_bucket_view_ = false;
  bool overlap_with_ddp_ = false;
};

class DistributedDataParallel;

class ZeroRedundancyOptimizer : public nn::Optimizer, public Joinable {
 public:
  // Makes the local optimizer over this rank's shard of each parameter group (see
  // optimizer_class below).
  using OptimizerFactory = std::function<std::unique_ptr<nn::Optimizer>(std::vector<nn::ParamGroup>)>;

  // `pg` defaults to comm::default_group(). Parameters must be floating-point leaves, each
  // given once; with parameters_as_bucket_view all of one dtype and device.
  ZeroRedundancyOptimizer(std::vector<Tensor> params, OptimizerFactory optimizer,
                          std::shared_ptr<comm::ProcessGroup> pg = nullptr, ZeroOptions options = {});
  // Parameter groups, as PyTorch's: each group is partitioned in turn (largest first, to the
  // rank with the fewest elements so far, counting earlier groups), and the local optimizer
  // has the same groups over this rank's share of each. Learning rates and weight decays set
  // here (by a scheduler) reach the local optimizer at the next step; a group's unset values
  // are the factory's options. Not with overlap_with_ddp, which partitions by DDP's buckets.
  ZeroRedundancyOptimizer(std::vector<nn::ParamGroup> groups, OptimizerFactory optimizer,
                          std::shared_ptr<comm::ProcessGroup> pg = nullptr, ZeroOptions options = {});

  // The local step, then every rank receives every shard (inside NoGradGuard).
  using Optimizer::step;
  void step() override;

  // partition()[r]: the indices (into params()) that rank r updates, in the order it keeps them.
  const std::vector<std::vector<size_t>>& partition() const { return partition_; }
  int owner(size_t index) const { return owner_.at(index); }
  // The local optimizer over this rank's shard (which may be empty). name() is its name
  // ("Adam"), so that checkpoints of the consolidated state load into either.
  nn::Optimizer& local_optimizer() const { return *local_; }
  // Bytes of optimizer state this rank holds (its local optimizer's state tensors).
  int64_t local_state_bytes() const;

  // Gathers every rank's shard state on rank `to` (a collective: every rank calls it). There,
  // state_dict() then returns the state of the whole optimizer, keyed by the index into
  // params() as a plain optimizer of the same kind over params() keys it: save it with
  // nn::save_optimizer_state and load it into such an optimizer, or into a
  // ZeroRedundancyOptimizer over the same parameters (any world size), which keeps its shard.
  void consolidate_state_dict(int to = 0);
  nn::OrderedDict<Tensor> state_dict() const override;
  void load_state_dict(const nn::OrderedDict<Tensor>& state) override;
  // Refused: the shards are laid out at construction (build a new ZeroRedundancyOptimizer).
  void add_param_group(nn::ParamGroup group) override;

  // overlap_with_ddp: whether the partition is known yet (after DDP's rebuild).
  bool overlap_initialized() const { return !partition_.empty(); }

  // Joinable: the hook steps (the local shard and the broadcasts) once per iteration of the
  // others; on a joined rank DDP's hook has written the others' averages to .grad.
  std::unique_ptr<JoinHook> join_hook() override;
  tensor::Device join_device() const override { return device_; }
  comm::ProcessGroup& join_process_group() const override { return *pg_; }
  bool needs_gradients_when_joined() const override { return true; }

 private:
  friend CommHook hook_with_zero_step(CommHook hook, DistributedDataParallel& ddp, ZeroRedundancyOptimizer& zero);
  friend CommHook hook_with_zero_step_interleaved(CommHook hook, DistributedDataParallel& ddp,
                                                  ZeroRedundancyOptimizer& zero);
  CommHook overlap_hook(CommHook hook, DistributedDataParallel& ddp, bool interleaved);
  // overlap_with_ddp: the state the hook keeps across iterations (PyTorch's _OverlapInfo).
  struct Overlap {
    enum class Status { kUninitialized, kDdpHasRebuiltBuckets, kInitialized } status = Status::kUninitialized;
    std::vector<std::vector<Tensor>> params_per_bucket;  // recorded in the iteration after the rebuild
    std::vector<size_t> bucket_owner;                    // bucket b -> rank b % world
    // This iteration: the owned buckets and their reductions, and the broadcasts issued.
    std::map<size_t, std::pair<GradBucket, std::shared_ptr<Future>>> owned;
    std::vector<std::shared_ptr<comm::Work>> broadcasts;
  };
  void init_for_overlap();
  // Bucket b's update: its owner steps with the reduced gradients; every rank broadcasts it.
  void update_bucket(size_t b);
  // The local step on one DDP bucket's parameters, with the bucket's reduced gradients.
  void step_bucket(const GradBucket& bucket, const Tensor& reduced);
  void require_initialized(const char* what) const;
  void partition_parameters();
  // The local optimizer over the indices `shard` (grouped as this optimizer's groups).
  void make_local(const std::vector<size_t>& shard);
  // This optimizer's groups' lr and weight decay to the local optimizer's (PyTorch's
  // _sync_param_groups).
  void sync_param_groups();
  void build_buckets();
  void sync_params();

  std::shared_ptr<comm::ProcessGroup> pg_;
  ZeroOptions options_;
  tensor::Device device_;
  std::vector<std::vector<size_t>> partition_;
  std::vector<int> owner_;
  OptimizerFactory factory_;
  std::vector<std::pair<std::optional<double>, std::optional<double>>> group_settings_;  // lr, weight decay given
  Overlap overlap_;
  std::unique_ptr<nn::Optimizer> local_;
  std::vector<Tensor> buckets_;                          // parameters_as_bucket_view: rank r's shard, flat
  std::optional<nn::OrderedDict<Tensor>> consolidated_;  // on the rank consolidate_state_dict chose
};

// DDP's communication hook `hook` with the ZeRO step folded in (PyTorch's
// ddp_zero_hook.hook_with_zero_step): when the last bucket is launched, each rank waits for the
// reductions of the buckets it owns, updates their parameters with the reduced gradients, and
// every bucket's parameters are broadcast from their owner, all before backward returns.
// `zero` must have overlap_with_ddp; DDP must rebuild its buckets (not find_unused_parameters
// without static_graph). Register it once, before the first forward:
//   ddp.register_comm_hook(hook_with_zero_step(hooks::allreduce(pg), ddp, zero));
CommHook hook_with_zero_step(CommHook hook, DistributedDataParallel& ddp, ZeroRedundancyOptimizer& zero);
// The same with each bucket's update as soon as possible (PyTorch's
// hook_with_zero_step_interleaved): in the hook of the next bucket, the owner waits for the
// bucket's reduction and steps, and every rank joins its broadcast, while backward computes
// the earlier layers. The same numbers as hook_with_zero_step.
CommHook hook_with_zero_step_interleaved(CommHook hook, DistributedDataParallel& ddp, ZeroRedundancyOptimizer& zero);

// A factory for the local optimizer, as PyTorch's optimizer_class plus its keyword arguments:
// optimizer_class<nn::Adam>(nn::AdamOptions(1e-3)), optimizer_class<nn::SGD>(nn::SGDOptions(0.1).momentum(0.9)).
template <typename Optimizer, typename Options>
ZeroRedundancyOptimizer::OptimizerFactory optimizer_class(Options options) {
  return [options](std::vector<nn::ParamGroup> groups) -> std::unique_ptr<nn::Optimizer> {
    return std::make_unique<Optimizer>(std::move(groups), options);
  };
}

}  // namespace tinyddp::ddp
