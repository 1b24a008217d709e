// ZeroRedundancyOptimizer (zero_redundancy_optimizer.h): the parameters partitioned by size,
// each rank's local optimizer over its shard, the broadcasts after each step, the state
// consolidated on one rank, its Join hook, and the step overlapped with DDP's buckets
// (hook_with_zero_step).
#include "tinyddp/ddp/zero_redundancy_optimizer.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "tinyddp/comm/flatten.h"
#include "tinyddp/comm/init.h"
#include "tinyddp/comm/objects.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/nn/safetensors.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::ddp {

namespace {

constexpr const char* kName = "ZeroRedundancyOptimizer";

class ZeroJoinHook : public JoinHook {
 public:
  explicit ZeroJoinHook(ZeroRedundancyOptimizer& zero) : zero_(zero) {}
  // The others step once per iteration: so does this rank, on its shard, and broadcasts it.
  void main_hook() override { zero_.step(); }

 private:
  ZeroRedundancyOptimizer& zero_;
};

}  // namespace

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<Tensor> params, OptimizerFactory optimizer,
                                                 std::shared_ptr<comm::ProcessGroup> pg, ZeroOptions options)
    : ZeroRedundancyOptimizer(std::vector<nn::ParamGroup>{nn::ParamGroup(std::move(params))}, std::move(optimizer),
                              std::move(pg), options) {}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<nn::ParamGroup> groups, OptimizerFactory optimizer,
                                                 std::shared_ptr<comm::ProcessGroup> pg, ZeroOptions options)
    : nn::Optimizer(groups, kName, 0, 0), pg_(pg ? std::move(pg) : comm::default_group()), options_(options),
      factory_(std::move(optimizer)) {
  for (const nn::ParamGroup& g : groups) group_settings_.push_back({g.lr, g.weight_decay});
  TDDP_CHECK(!options_.overlap_with_ddp() || num_param_groups() == 1,
             "{}: overlap_with_ddp takes one parameter group, got {}", kName, num_param_groups());
  TDDP_CHECK(pg_ != nullptr, "{}: no process group given and none initialised (call comm::init_process_group)", kName);
  TDDP_CHECK(!params_.empty(), "{}: no parameters to optimize", kName);
  TDDP_CHECK(factory_ != nullptr, "{}: no optimizer factory given", kName);
  TDDP_CHECK(!(options_.overlap_with_ddp() && options_.parameters_as_bucket_view()),
             "{}: overlap_with_ddp broadcasts DDP's buckets; parameters_as_bucket_view cannot be combined with it",
             kName);
  device_ = params_.front().device();
  std::unordered_set<const tensor::TensorImpl*> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    TDDP_CHECK(seen.insert(params_[i].impl()).second, "{}: parameter {} is given twice", kName, i);
    TDDP_CHECK(params_[i].device() == device_,
               "{}: parameters are on several devices (parameter 0 on {}, parameter {} on {})", kName, device_.str(), i,
               params_[i].device().str());
    TDDP_CHECK(!options_.parameters_as_bucket_view() || params_[i].dtype() == params_.front().dtype(),
               "{}: parameters_as_bucket_view needs one dtype, but parameter 0 is {} and parameter {} is {}", kName,
               tensor::dtype_name(params_.front().dtype()), i, tensor::dtype_name(params_[i].dtype()));
  }
  TDDP_CHECK(pg_->tensor_rules().accepts(device_), "{}: the {} backend cannot broadcast parameters on {} ({})", kName,
             pg_->backend(), device_.str(), pg_->tensor_rules().takes);
  if (!options_.overlap_with_ddp()) {
    partition_parameters();
    if (options_.parameters_as_bucket_view()) build_buckets();
  }
  // The local optimizer over this rank's shard, possibly empty (with overlap_with_ddp: empty
  // until the partition is known).
  make_local(partition_.empty() ? std::vector<size_t>{} : partition_[pg_->rank()]);
}

void ZeroRedundancyOptimizer::make_local(const std::vector<size_t>& shard) {
  std::vector<nn::ParamGroup> local_groups;
  for (size_t g = 0; g < num_param_groups(); ++g) {
    local_groups.emplace_back(std::vector<Tensor>{});
    local_groups.back().lr = group_settings_[g].first;
    local_groups.back().weight_decay = group_settings_[g].second;
  }
  for (size_t i : shard) {
    size_t g = 0;
    while (i >= group_end(g)) ++g;
    local_groups[g].params.push_back(params_[i]);
  }
  local_ = factory_(std::move(local_groups));
  TDDP_CHECK(local_ != nullptr, "{}: the optimizer factory returned nothing", kName);
  TDDP_CHECK(local_->num_param_groups() == num_param_groups(),
             "{}: the optimizer factory made {} parameter groups from {}", kName, local_->num_param_groups(),
             num_param_groups());
  // The groups' values the factory's options filled in are this optimizer's too.
  for (size_t g = 0; g < num_param_groups(); ++g) {
    set_lr(g, local_->lr(g));
    set_weight_decay(g, local_->weight_decay(g));
  }
  // And its momentum (what OneCycleLR cycles), where it has one.
  if (!local_->momentum_name().empty()) {
    use_momentum(local_->momentum_name(), local_->momentum(0), local_->momentum_name() == "beta1");
    for (size_t g = 0; g < num_param_groups(); ++g) set_momentum(g, local_->momentum(g));
  }
  // Checkpoints name the kind of state ("Adam"): a consolidated ZeRO state loads into a plain
  // optimizer of that kind and back.
  name_ = local_->name();
}

void ZeroRedundancyOptimizer::sync_param_groups() {
  for (size_t g = 0; g < num_param_groups(); ++g) {
    local_->set_lr(g, lr(g));
    local_->set_weight_decay(g, weight_decay(g));
    if (!momentum_name().empty()) local_->set_momentum(g, momentum(g));
  }
}

void ZeroRedundancyOptimizer::partition_parameters() {
  const int world = pg_->size();
  partition_.assign(world, {});
  owner_.assign(params_.size(), -1);
  std::vector<int64_t> sizes(world, 0);  // carried from group to group
  for (size_t g = 0; g < num_param_groups(); ++g) {
    std::vector<size_t> order(group_end(g) - group_begin(g));
    std::iota(order.begin(), order.end(), group_begin(g));
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return params_[a].numel() > params_[b].numel(); });
    for (size_t i : order) {
      const int rank =
          static_cast<int>(std::min_element(sizes.begin(), sizes.end()) - sizes.begin());  // the first minimum
      partition_[rank].push_back(i);
      owner_[i] = rank;
      sizes[rank] += params_[i].numel();
    }
  }
}

void ZeroRedundancyOptimizer::build_buckets() {
  tensor::NoGradGuard no_grad;
  for (const std::vector<size_t>& shard : partition_) {
    int64_t total = 0;
    std::vector<Tensor> members;
    for (size_t i : shard) {
      total += params_[i].numel();
      members.push_back(params_[i]);
    }
    const Tensor bucket = tensor::empty({total}, tensor::TensorOptions(params_.front().dtype()).device(device_));
    const std::vector<Tensor> views = comm::flat_views(bucket, members);
    for (size_t k = 0; k < shard.size(); ++k) {
      views[k].copy_(params_[shard[k]]);
      params_[shard[k]].set_data(views[k]);
    }
    buckets_.push_back(bucket);
  }
}

void ZeroRedundancyOptimizer::step() {
  if (options_.overlap_with_ddp()) {
    // The update happens in DDP's communication hook (hook_with_zero_step).
    static bool warned = false;
    if (!warned)
      std::fprintf(stderr, "%s: step() does nothing with overlap_with_ddp; the hook updates the parameters\n", kName);
    warned = true;
    return;
  }
  tensor::NoGradGuard no_grad;
  Join::notify_join_context(*this);  // counts this rank as active when ZeRO is the first joinable
  sync_param_groups();
  local_->step();
  sync_params();
}

void ZeroRedundancyOptimizer::sync_params() {
  // Every rank's shard from its owner, all queued before any is waited for.
  std::vector<std::shared_ptr<comm::Work>> works;
  for (int rank = 0; rank < pg_->size(); ++rank) {
    if (options_.parameters_as_bucket_view()) {
      if (buckets_[rank].numel() > 0) works.push_back(pg_->broadcast(buckets_[rank], rank));
      continue;
    }
    for (size_t i : partition_[rank]) works.push_back(pg_->broadcast(params_[i], rank));
  }
  for (auto& work : works) work->wait();
}

int64_t ZeroRedundancyOptimizer::local_state_bytes() const {
  int64_t bytes = 0;
  for (const auto& [name, t] : local_->state_dict()) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

void ZeroRedundancyOptimizer::require_initialized(const char* what) const {
  TDDP_CHECK(overlap_initialized(),
             "{}: {} needs the partition, which overlap_with_ddp learns from DDP's rebuilt buckets (after two "
             "iterations); call it later",
             kName, what);
}

void ZeroRedundancyOptimizer::consolidate_state_dict(int to) {
  require_initialized("consolidate_state_dict");
  TDDP_CHECK(to >= 0 && to < pg_->size(), "{}: consolidate_state_dict: rank {} is not in a world of {}", kName, to,
             pg_->size());
  tensor::NoGradGuard no_grad;
  // This rank's shard state, keyed by the global index.
  nn::OrderedDict<Tensor> mine;
  for (const auto& [name, t] : local_->state_dict()) {
    const auto key = nn::parse_state_key(name);
    TDDP_CHECK(key.has_value(), "{}: the local optimizer wrote an unexpected key '{}'", kName, name);
    mine.insert(nn::state_key(partition_[pg_->rank()].at(key->index), key->key), t);
  }
  const std::string my_bytes = nn::serialize_safetensors(mine);
  // Each rank's bytes to everyone (a broadcast per rank: its length, then the bytes); rank
  // `to` keeps them. The keys of all ranks together are those of one plain optimizer.
  std::vector<std::pair<int, nn::OrderedDict<Tensor>>> shards;
  for (int rank = 0; rank < pg_->size(); ++rank) {
    const std::string bytes = comm::broadcast_bytes(*pg_, device_, my_bytes, rank);
    if (pg_->rank() != to) continue;
    shards.emplace_back(rank, nn::parse_safetensors(bytes, fmt::format("rank {}'s optimizer state", rank)).tensors);
  }
  consolidated_.reset();
  if (pg_->rank() != to) return;
  // In parameter order, as a plain optimizer over params() writes them.
  std::vector<std::vector<std::pair<std::string, Tensor>>> by_param(params_.size());
  for (const auto& [rank, tensors] : shards) {
    for (const auto& [name, t] : tensors) {
      const auto key = nn::parse_state_key(name);
      TDDP_CHECK(key && key->index < params_.size() && owner_[key->index] == rank,
                 "{}: rank {} sent state '{}' for a parameter it does not own", kName, rank, name);
      by_param[key->index].emplace_back(name, t.to(device_));
    }
  }
  nn::OrderedDict<Tensor> all;
  for (const auto& entries : by_param) {
    for (const auto& [name, t] : entries) all.insert(name, t);
  }
  consolidated_ = std::move(all);
}

nn::OrderedDict<Tensor> ZeroRedundancyOptimizer::state_dict() const {
  TDDP_CHECK(consolidated_.has_value(),
             "{}: the optimizer state has not been consolidated on rank {}; call consolidate_state_dict(to) on every "
             "rank first (to: the rank that saves it)",
             kName, pg_->rank());
  return *consolidated_;
}

void ZeroRedundancyOptimizer::add_param_group(nn::ParamGroup) {
  TDDP_CHECK(false,
             "ZeroRedundancyOptimizer: add_param_group is not supported: the parameters' shards are laid out when it "
             "is made (make a new ZeroRedundancyOptimizer over every group)");
}

void ZeroRedundancyOptimizer::load_state_dict(const nn::OrderedDict<Tensor>& state) {
  require_initialized("load_state_dict");
  // Every key names a parameter; this rank keeps those of its shard, renumbered for its local
  // optimizer, which checks them (kinds of state, shapes) before changing anything.
  std::vector<size_t> local_index(params_.size(), SIZE_MAX);
  const std::vector<size_t>& shard = partition_[pg_->rank()];
  for (size_t k = 0; k < shard.size(); ++k) local_index[shard[k]] = k;
  nn::OrderedDict<Tensor> local;
  for (const auto& [name, t] : state) {
    const auto key = nn::parse_state_key(name);
    TDDP_CHECK(key.has_value(), "{}: load_state_dict: unexpected key '{}' (expected state.<index>.<key>)", kName, name);
    TDDP_CHECK(key->index < params_.size(),
               "{}: load_state_dict: key '{}' refers to parameter {} but there are only {}", kName, name, key->index,
               params_.size());
    TDDP_CHECK(key->key == "step" || (t.defined() && t.sizes() == params_[key->index].sizes()),
               "{}: load_state_dict: '{}' has shape {} but parameter {} has shape {}", kName, name,
               t.defined() ? tensor::format_shape(t.sizes()) : "(undefined)", key->index,
               tensor::format_shape(params_[key->index].sizes()));
    if (local_index[key->index] != SIZE_MAX) local.insert(nn::state_key(local_index[key->index], key->key), t);
  }
  local_->load_state_dict(local);
  consolidated_.reset();
}

std::unique_ptr<JoinHook> ZeroRedundancyOptimizer::join_hook() {
  TDDP_CHECK(!options_.overlap_with_ddp(),
             "{}: Join with overlap_with_ddp is not supported (the joined rank's share of "
             "the update would have to run from DDP's hook)",
             kName);
  return std::make_unique<ZeroJoinHook>(*this);
}

// ---- overlap_with_ddp -------------------------------------------------------------------------

void ZeroRedundancyOptimizer::init_for_overlap() {
  // Bucket b (DDP's rebuilt order) belongs to rank b % world; this rank's shard is its
  // buckets' parameters, in bucket order.
  std::unordered_map<const tensor::TensorImpl*, size_t> index_of;
  for (size_t i = 0; i < params_.size(); ++i) index_of[params_[i].impl()] = i;
  const int world = pg_->size();
  partition_.assign(world, {});
  owner_.assign(params_.size(), -1);
  overlap_.bucket_owner.clear();
  for (size_t b = 0; b < overlap_.params_per_bucket.size(); ++b) {
    const int rank = static_cast<int>(b % static_cast<size_t>(world));
    overlap_.bucket_owner.push_back(static_cast<size_t>(rank));
    for (const Tensor& p : overlap_.params_per_bucket[b]) {
      const auto it = index_of.find(p.impl());
      TDDP_CHECK(it != index_of.end(), "{}: a parameter of DDP's bucket {} is not one of this optimizer's", kName, b);
      partition_[rank].push_back(it->second);
      owner_[it->second] = rank;
    }
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    TDDP_CHECK(owner_[i] >= 0,
               "{}: parameter {} is in none of DDP's buckets (overlap_with_ddp needs every parameter "
               "to be reduced by DDP)",
               kName, i);
  }
  make_local(partition_[pg_->rank()]);
  overlap_.status = Overlap::Status::kInitialized;
}

void ZeroRedundancyOptimizer::step_bucket(const GradBucket& bucket, const Tensor& reduced) {
  tensor::NoGradGuard no_grad;
  // The local optimizer updates the parameters that have a .grad: give those of this bucket
  // their reduced gradients, hide the others', and put everything back afterwards.
  const std::vector<Tensor>& local_params = local_->params();
  std::vector<Tensor> saved;
  for (const Tensor& p : local_params) saved.push_back(p.grad());
  // The bucket's slots in the reduced contents (the bucket itself, or another tensor a hook returned).
  const std::vector<Tensor> views =
      reduced.is_same(bucket.buffer) ? bucket.gradients() : comm::flat_views(reduced, bucket.params);
  std::unordered_map<const tensor::TensorImpl*, Tensor> reduced_of;
  for (size_t k = 0; k < bucket.params.size(); ++k) reduced_of[bucket.params[k].impl()] = views[k];
  for (const Tensor& p : local_params) {
    const auto it = reduced_of.find(p.impl());
    p.mutable_grad() = it != reduced_of.end() ? it->second : Tensor();
  }
  sync_param_groups();
  local_->step();
  for (size_t k = 0; k < local_params.size(); ++k) local_params[k].mutable_grad() = saved[k];
}

// Both overlap hooks: the hook's reduction, the setup iterations, then `update(bucket, future)`
// once the partition is known.
CommHook ZeroRedundancyOptimizer::overlap_hook(CommHook hook, DistributedDataParallel& ddp, bool interleaved) {
  TDDP_CHECK(hook != nullptr, "hook_with_zero_step: no hook given");
  TDDP_CHECK(options_.overlap_with_ddp(),
             "hook_with_zero_step: the ZeroRedundancyOptimizer was not made with overlap_with_ddp = true");
  TDDP_CHECK(&ddp.process_group() == pg_.get(), "hook_with_zero_step: DDP and ZeRO must share one process group");
  return [this, hook = std::move(hook), &ddp, interleaved](GradBucket& bucket) -> std::shared_ptr<Future> {
    std::shared_ptr<Future> future = hook(bucket);  // waited for here and by DDP's finalize
    using Status = Overlap::Status;
    Overlap& o = overlap_;
    // Until DDP has rebuilt its buckets: a plain reduction. The iteration after: record the
    // buckets. The one after that: the partition, and from then on the updates.
    if (!ddp.reducer().buckets_rebuilt()) return future;
    if (o.status == Status::kUninitialized) o.status = Status::kDdpHasRebuiltBuckets;
    if (o.status == Status::kDdpHasRebuiltBuckets) {
      if (bucket.index == 0 && !o.params_per_bucket.empty()) {
        init_for_overlap();
      } else {
        o.params_per_bucket.push_back(bucket.params);
        return future;
      }
    }
    if (o.bucket_owner.at(bucket.index) == static_cast<size_t>(pg_->rank())) o.owned[bucket.index] = {bucket, future};
    const bool last = bucket.index + 1 == o.params_per_bucket.size();
    if (interleaved) {
      // The previous bucket's update, while backward goes on: its owner waits for its
      // reduction (launched one bucket ago) and steps; every rank joins the broadcast, at the
      // same place in the order of collectives.
      if (bucket.index > 0) update_bucket(bucket.index - 1);
      if (last) update_bucket(bucket.index);
    } else if (last) {
      // All updates after the last bucket's launch (PyTorch's hook_with_zero_step).
      for (size_t b = 0; b < o.params_per_bucket.size(); ++b) update_bucket(b);
    }
    if (last) {
      for (auto& work : o.broadcasts) work->wait();  // every parameter current before the next forward
      o.broadcasts.clear();
      o.owned.clear();
    }
    return future;
  };
}

void ZeroRedundancyOptimizer::update_bucket(size_t b) {
  Overlap& o = overlap_;
  const int owner = static_cast<int>(o.bucket_owner.at(b));
  if (owner == pg_->rank()) {
    auto& [bucket, future] = o.owned.at(b);
    step_bucket(bucket, future->wait());
  }
  tensor::NoGradGuard no_grad;
  for (const Tensor& p : o.params_per_bucket[b]) o.broadcasts.push_back(pg_->broadcast(p, owner));
}

CommHook hook_with_zero_step(CommHook hook, DistributedDataParallel& ddp, ZeroRedundancyOptimizer& zero) {
  return zero.overlap_hook(std::move(hook), ddp, /*interleaved=*/false);
}

CommHook hook_with_zero_step_interleaved(CommHook hook, DistributedDataParallel& ddp, ZeroRedundancyOptimizer& zero) {
  return zero.overlap_hook(std::move(hook), ddp, /*interleaved=*/true);
}

}  // namespace tinyddp::ddp
