// The registry behind fully_shard (internal to ddp/): a unit's slots (one per parameter), which
// parameters are sharded (by their TensorImpl), their shards, full shapes and groups, and each
// sharded module's unit. Ranks run
// as threads of one process in tests, each with its own model, so the keys never collide.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "tinyddp/ddp/fully_shard.h"

namespace tinyddp::ddp {

// One parameter of a unit (fully_shard.cc's work, fully_shard_api.cc registers it).
struct FullyShardedUnit::Slot {
  tensor::Tensor param;      // the module's parameter (full while gathered, else no elements)
  tensor::Shape full_shape;  // its shape
  int64_t rows = 1;          // its first dimension (1 for a scalar)
  int64_t block_rows = 1;    // rows per rank: ceil(rows / W)
  int64_t row_numel = 1;     // elements per row
  int64_t offset = 0;        // where its block starts in the packed shard buffer
  tensor::Tensor shard;      // this rank's block [block_rows, ...], padded with zeros
  uint64_t version = 0;      // the gathered storage's version when the forward saw it
  int64_t block_numel() const { return block_rows * row_numel; }
};

namespace detail {

using tensor::Tensor;

// Which parameters are sharded (by their TensorImpl): their shards, full shapes and groups.
// Ranks run as threads of one process in tests, each with its own model, so the keys never
// collide.
struct Sharded {
  Tensor shard;
  tensor::Shape full_shape;
  std::shared_ptr<comm::ProcessGroup> pg;
  const nn::Module* owner = nullptr;  // the module whose unit holds it
};
struct Registry {
  std::mutex mutex;
  std::unordered_map<const tensor::TensorImpl*, Sharded> entries;
  std::unordered_map<const nn::Module*, std::weak_ptr<FullyShardedUnit>> units;  // by module, until it goes
  std::unordered_set<const tensor::TensorImpl*> shard_impls;                     // the shards themselves
};
inline Registry& registry() {
  static Registry r;
  return r;
}

inline std::optional<Sharded> sharded(const Tensor& param) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.entries.find(param.impl());
  if (it == r.entries.end()) return std::nullopt;
  return it->second;
}

inline Tensor shard_of(const Tensor& param) {
  const std::optional<Sharded> entry = sharded(param);
  return entry ? entry->shard : Tensor();
}

// Whether `t` is a unit's shard.
inline bool is_shard(const Tensor& t) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.shard_impls.count(t.impl()) != 0;
}

// Waits for a unit's collective; a failure (a desync, a timeout, a rank gone) names the unit
// and the step, then what the process group said.
inline void wait_for(const std::shared_ptr<comm::Work>& work, const std::string& unit, const char* what) {
  try {
    work->wait();
  } catch (const std::exception& e) {
    throw Error(fmt::format("fully_shard({}): {}: {}", unit, what, e.what()));
  }
}

// Throws when a parameter a sub-module's unit holds is also registered in a module of `module`
// outside that sub-module (a weight tied across units), naming both (fully_shard_api.cc).
void check_not_shared_across_units(const nn::Module& module, const std::string& name);

}  // namespace detail
}  // namespace tinyddp::ddp
