// The Reducer's unused-parameter steps (find_unused_parameters and static_graph): which
// parameters the forward output does not reach, the used-parameter map every rank allreduces,
// static_graph's first iteration (reduce after backward), and whether a parameter no rank
// used keeps its .grad. The main steps are in reducer.cc and reducer_backward.cc.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <unordered_map>
#include <unordered_set>

#include "tinyddp/ddp/reducer.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::ddp {

void Reducer::search_unused_parameters(const std::vector<Tensor>& outputs) {
  // Walk the graph from the outputs; the accumulators it does not reach belong to unused
  // parameters (they will not get a gradient in this backward).
  std::unordered_map<const autograd::Node*, size_t> accumulator_index;
  for (size_t i = 0; i < params_.size(); ++i) accumulator_index[params_[i].grad_accumulator().get()] = i;
  std::vector<bool> reached(params_.size(), false);
  std::unordered_set<const autograd::Node*> seen;
  std::vector<const autograd::Node*> stack;
  for (const Tensor& out : outputs) {
    if (out.defined() && out.grad_fn()) stack.push_back(out.grad_fn().get());
  }
  while (!stack.empty()) {
    const autograd::Node* node = stack.back();
    stack.pop_back();
    if (!seen.insert(node).second) continue;
    if (auto it = accumulator_index.find(node); it != accumulator_index.end()) reached[it->second] = true;
    for (const autograd::Edge& e : node->next_edges()) {
      if (e.is_valid()) stack.push_back(e.function.get());
    }
  }
  unused_parameters_.clear();
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!reached[i]) unused_parameters_.push_back(i);
  }
  // The search costs a walk of the graph every iteration; when it finds nothing, say so once
  // per process (as PyTorch's Reducer warns once).
  static std::atomic<bool> warned{false};
  if (unused_parameters_.empty() && !warned.exchange(true)) {
    std::fprintf(stderr,
                 "DistributedDataParallel: find_unused_parameters is on, but this forward pass used every parameter. "
                 "The search walks the autograd graph every iteration and costs time: turn the option off if the "
                 "model never leaves a parameter unused (later iterations that take other branches may still need "
                 "it)\n");
  }
}

void Reducer::all_reduce_local_used_map() {
  local_used_map_dev_ = tensor::from_vector(local_used_map_, {}, control_device_);
  local_used_work_ = pg_->allreduce(local_used_map_dev_);
  local_used_map_reduced_ = false;
}

void Reducer::delay_all_reduce() {
  // static_graph's first iteration, after the whole backward: the parameters whose hook never
  // fired are the unused ones from now on; every gradient goes into its bucket and every
  // bucket is reduced, in order.
  all_reduce_local_used_map();
  unused_parameters_.clear();
  for (size_t i = 0; i < params_.size(); ++i) {
    if (num_grad_hooks_triggered_[i] == 0) unused_parameters_.push_back(i);
  }
  require_finalize_ = true;
  set_divide_factor();
  for (size_t i = 0; i < params_.size(); ++i) {
    iteration_.ready[i] = true;
    copy_grad_to_bucket(i);
    --iteration_.pending[slot_of_[i].bucket];
  }
  mark_bucket_ready(0);  // every bucket, in order
  finalize_backward();
}

bool Reducer::globally_unused(size_t i) {
  if (!options_.static_graph() && !options_.find_unused_parameters()) return false;
  // Used here means used somewhere; only a locally unused parameter needs the reduced map.
  if (local_used_map_[i] != 0) return false;
  if (!local_used_map_reduced_) {
    local_used_work_->wait();
    local_used_map_ = local_used_map_dev_.to_vector<int64_t>();
    local_used_map_reduced_ = true;
  }
  return local_used_map_[i] == 0;
}

void Reducer::finish_local_used_map() {
  if ((dynamic_graph_find_unused() || static_graph_first_iteration()) && !local_used_map_reduced_) {
    local_used_work_->wait();  // no parameter needed it, but the collective must complete
  }
  if (dynamic_graph_find_unused()) {
    std::fill(local_used_map_.begin(), local_used_map_.end(), 0);  // counted afresh next iteration
    local_used_map_reduced_ = false;
  }
}

}  // namespace tinyddp::ddp
