// ZeroRedundancyOptimizer: see zero_redundancy_optimizer.h.
#include "ddp/zero_redundancy_optimizer.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <numeric>
#include <unordered_set>

#include <fmt/format.h>

#include "comm/init.h"
#include "nn/safetensors.h"
#include "tensor/ops.h"

namespace tinyddp::ddp {

namespace {

constexpr const char* kName = "ZeroRedundancyOptimizer";

// "state.<index>.<key>" -> (index, key); nothing if the name has another form.
std::optional<std::pair<size_t, std::string>> parse_state_key(const std::string& name) {
  if (name.rfind("state.", 0) != 0) return std::nullopt;
  const size_t dot = name.find('.', 6);
  if (dot == std::string::npos || dot == 6 || dot + 1 == name.size()) return std::nullopt;
  size_t index = 0;
  const auto [end, error] = std::from_chars(name.data() + 6, name.data() + dot, index);
  if (error != std::errc() || end != name.data() + dot) return std::nullopt;
  return std::make_pair(index, name.substr(dot + 1));
}

// Bytes in an int64 tensor (padded to 8), to travel through a process group.
Tensor bytes_to_tensor(const std::string& bytes, tensor::Device device) {
  std::vector<int64_t> words((bytes.size() + 7) / 8, 0);
  if (!bytes.empty()) std::memcpy(words.data(), bytes.data(), bytes.size());
  return tensor::from_vector(words, tensor::Shape{static_cast<int64_t>(words.size())}).to(device);
}

std::string tensor_to_bytes(const Tensor& words, size_t size) {
  const Tensor host = words.to(tensor::kCPU).contiguous();
  std::string bytes(size, '\0');
  if (size > 0) std::memcpy(bytes.data(), host.raw_data_ptr(), size);
  return bytes;
}

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
    : nn::Optimizer(std::move(params), kName), pg_(pg ? std::move(pg) : comm::default_group()), options_(options) {
  TDDP_CHECK(pg_ != nullptr, "{}: no process group given and none initialised (call comm::init_process_group)", kName);
  TDDP_CHECK(!params_.empty(), "{}: no parameters to optimize", kName);
  TDDP_CHECK(optimizer != nullptr, "{}: no optimizer factory given", kName);
  device_ = params_.front().device();
  std::unordered_set<const tensor::TensorImpl*> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    TDDP_CHECK(seen.insert(params_[i].impl()).second, "{}: parameter {} is given twice", kName, i);
    TDDP_CHECK(params_[i].device() == device_, "{}: parameters are on several devices (parameter 0 on {}, parameter {} on {})",
               kName, device_.str(), i, params_[i].device().str());
    TDDP_CHECK(!options_.parameters_as_bucket_view || params_[i].dtype() == params_.front().dtype(),
               "{}: parameters_as_bucket_view needs one dtype, but parameter 0 is {} and parameter {} is {}", kName,
               tensor::dtype_name(params_.front().dtype()), i, tensor::dtype_name(params_[i].dtype()));
  }
  TDDP_CHECK(pg_->tensor_rules().accepts(device_), "{}: the {} backend cannot broadcast parameters on {} ({})", kName,
             pg_->backend(), device_.str(), pg_->tensor_rules().takes);
  partition_parameters();
  if (options_.parameters_as_bucket_view) build_buckets();
  std::vector<Tensor> shard;
  for (size_t i : partition_[pg_->rank()]) shard.push_back(params_[i]);
  local_ = optimizer(std::move(shard));  // possibly over no parameters: it then does nothing
  TDDP_CHECK(local_ != nullptr, "{}: the optimizer factory returned nothing", kName);
  // Checkpoints name the kind of state ("Adam"): a consolidated ZeRO state loads into a plain
  // optimizer of that kind and back.
  name_ = local_->name();
}

void ZeroRedundancyOptimizer::partition_parameters() {
  const int world = pg_->size();
  std::vector<size_t> order(params_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return params_[a].numel() > params_[b].numel(); });
  partition_.assign(world, {});
  owner_.assign(params_.size(), -1);
  std::vector<int64_t> sizes(world, 0);
  for (size_t i : order) {
    const int rank = static_cast<int>(std::min_element(sizes.begin(), sizes.end()) - sizes.begin());  // the first minimum
    partition_[rank].push_back(i);
    owner_[i] = rank;
    sizes[rank] += params_[i].numel();
  }
}

void ZeroRedundancyOptimizer::build_buckets() {
  tensor::NoGradGuard no_grad;
  for (const std::vector<size_t>& shard : partition_) {
    int64_t total = 0;
    for (size_t i : shard) total += params_[i].numel();
    const Tensor bucket = tensor::empty({total}, tensor::TensorOptions(params_.front().dtype()).device(device_));
    int64_t offset = 0;
    for (size_t i : shard) {
      const Tensor view = bucket.narrow(0, offset, params_[i].numel()).view(params_[i].sizes());
      view.copy_(params_[i]);
      params_[i].set_data(view);
      offset += params_[i].numel();
    }
    buckets_.push_back(bucket);
  }
}

void ZeroRedundancyOptimizer::step() {
  tensor::NoGradGuard no_grad;
  Join::notify_join_context(*this);  // counts this rank as active when ZeRO is the first joinable
  local_->step();
  sync_params();
}

void ZeroRedundancyOptimizer::sync_params() {
  // Every rank's shard from its owner, all queued before any is waited for.
  std::vector<std::shared_ptr<comm::Work>> works;
  for (int rank = 0; rank < pg_->size(); ++rank) {
    if (options_.parameters_as_bucket_view) {
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

void ZeroRedundancyOptimizer::consolidate_state_dict(int to) {
  TDDP_CHECK(to >= 0 && to < pg_->size(), "{}: consolidate_state_dict: rank {} is not in a world of {}", kName, to,
             pg_->size());
  tensor::NoGradGuard no_grad;
  // This rank's shard state, keyed by the global index.
  nn::OrderedDict<Tensor> mine;
  for (const auto& [name, t] : local_->state_dict()) {
    const auto key = parse_state_key(name);
    TDDP_CHECK(key.has_value(), "{}: the local optimizer wrote an unexpected key '{}'", kName, name);
    mine.insert(fmt::format("state.{}.{}", partition_[pg_->rank()].at(key->first), key->second), t);
  }
  const std::string my_bytes = nn::serialize_safetensors(mine);
  // Each rank's bytes to everyone (a broadcast per rank: its length, then the bytes); rank
  // `to` keeps them. The keys of all ranks together are those of one plain optimizer.
  std::vector<std::pair<int, nn::OrderedDict<Tensor>>> shards;
  for (int rank = 0; rank < pg_->size(); ++rank) {
    const Tensor length = tensor::from_vector(std::vector<int64_t>{static_cast<int64_t>(my_bytes.size())}, {}, device_);
    pg_->broadcast(length, rank)->wait();
    const auto size = static_cast<size_t>(length.to(tensor::kCPU).item<int64_t>());
    Tensor words = rank == pg_->rank() ? bytes_to_tensor(my_bytes, device_)
                                       : tensor::zeros({static_cast<int64_t>((size + 7) / 8)},
                                                       tensor::TensorOptions(tensor::kInt64).device(device_));
    if (words.numel() > 0) pg_->broadcast(words, rank)->wait();
    if (pg_->rank() != to) continue;
    const nn::SafetensorsFile file = nn::parse_safetensors(tensor_to_bytes(words, size), fmt::format("rank {}'s optimizer state", rank));
    shards.emplace_back(rank, file.tensors);
  }
  consolidated_.reset();
  if (pg_->rank() != to) return;
  // In parameter order, as a plain optimizer over params() writes them.
  std::vector<std::vector<std::pair<std::string, Tensor>>> by_param(params_.size());
  for (const auto& [rank, tensors] : shards) {
    for (const auto& [name, t] : tensors) {
      const auto key = parse_state_key(name);
      TDDP_CHECK(key && key->first < params_.size() && owner_[key->first] == rank,
                 "{}: rank {} sent state '{}' for a parameter it does not own", kName, rank, name);
      by_param[key->first].emplace_back(name, t.to(device_));
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

void ZeroRedundancyOptimizer::load_state_dict(const nn::OrderedDict<Tensor>& state) {
  // Every key names a parameter; this rank keeps those of its shard, renumbered for its local
  // optimizer, which checks them (kinds of state, shapes) before changing anything.
  std::vector<size_t> local_index(params_.size(), SIZE_MAX);
  const std::vector<size_t>& shard = partition_[pg_->rank()];
  for (size_t k = 0; k < shard.size(); ++k) local_index[shard[k]] = k;
  nn::OrderedDict<Tensor> local;
  for (const auto& [name, t] : state) {
    const auto key = parse_state_key(name);
    TDDP_CHECK(key.has_value(), "{}: load_state_dict: unexpected key '{}' (expected state.<index>.<key>)", kName, name);
    TDDP_CHECK(key->first < params_.size(), "{}: load_state_dict: key '{}' refers to parameter {} but there are only {}",
               kName, name, key->first, params_.size());
    TDDP_CHECK(key->second == "step" || (t.defined() && t.sizes() == params_[key->first].sizes()),
               "{}: load_state_dict: '{}' has shape {} but parameter {} has shape {}", kName, name,
               t.defined() ? tensor::format_shape(t.sizes()) : "(undefined)", key->first,
               tensor::format_shape(params_[key->first].sizes()));
    if (local_index[key->first] != SIZE_MAX) local.insert(fmt::format("state.{}.{}", local_index[key->first], key->second), t);
  }
  local_->load_state_dict(local);
  consolidated_.reset();
}

std::unique_ptr<JoinHook> ZeroRedundancyOptimizer::join_hook() { return std::make_unique<ZeroJoinHook>(*this); }

}  // namespace tinyddp::ddp
