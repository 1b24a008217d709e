// The Reducer (reducer.h), its construction and the steps DDP's forward drives: the buckets
// and each parameter's view into them, the comm hook, the check that the previous
// iteration finished, the one-time rebuild of the buckets in gradient-arrival order, and
// prepare_for_backward, which starts an iteration. The Reducer's other steps, each in its
// own file: reducer_backward.cc (from a gradient's hook to the allreduce, then finalize),
// reducer_unused.cc (unused parameters, static_graph), reducer_join.cc (a joined rank's part),
// and the statistics in recorder.cc.
#include "tinyddp/ddp/reducer.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tinyddp/comm/flatten.h"
#include "tinyddp/comm/objects.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::ddp {

using autograd::Engine;
using tensor::NoGradGuard;

tensor::Device control_device(const comm::ProcessGroup& pg, const std::vector<Tensor>& params) {
  const tensor::Device cpu(tensor::kCPU);
  return pg.tensor_rules().accepts(cpu) || params.empty() ? cpu : params.front().device();
}

// ---- Construction ----------------------------------------------------------------------------

Reducer::Reducer(std::vector<Tensor> params, std::vector<std::string> names, std::shared_ptr<comm::ProcessGroup> pg,
                 ReducerOptions options)
    : params_(std::move(params)), names_(std::move(names)), pg_(std::move(pg)),
      control_device_(control_device(*pg_, params_)), options_(options), comm_hook_(hooks::allreduce(pg_)),
      recorder_(params_.empty() || !params_[0].is_cuda() ? -1 : params_[0].device().index) {
  TDDP_CHECK(!params_.empty(), "Reducer: no parameters to reduce");
  TDDP_CHECK(params_.size() == names_.size(), "Reducer: {} parameters but {} names", params_.size(), names_.size());
  initialize_buckets(assign_buckets(params_, reverse_order(params_.size()), options_.first_bucket_cap_bytes(),
                                    options_.bucket_cap_bytes()));
  iteration_ = Iteration(assignment_, params_.size());
  local_used_map_.assign(params_.size(), 0);
  num_grad_hooks_triggered_.assign(params_.size(), 0);
  for (size_t i = 0; i < params_.size(); ++i) {
    hooks_.push_back(params_[i].grad_accumulator()->add_post_hook([this, i] { autograd_hook(i); }));
  }
}

Reducer::~Reducer() {
  for (auto& hook : hooks_) hook.remove();
}

void Reducer::initialize_buckets(const BucketAssignment& assignment) {
  assignment_ = assignment;
  NoGradGuard no_grad;
  std::vector<Bucket> buckets(assignment_.buckets.size());
  slot_of_.assign(params_.size(), Slot{});
  for (size_t b = 0; b < buckets.size(); ++b) {
    Bucket& bucket = buckets[b];
    int64_t total = 0;
    std::vector<Tensor> members;
    for (size_t i : params_of(b)) {
      total += params_[i].numel();
      members.push_back(params_[i]);
    }
    const Tensor& first = members.front();
    bucket.contents = tensor::zeros({total}, tensor::TensorOptions().dtype(first.dtype()).device(first.device()));
    // Each parameter's slot: its shape, row-major, inside the flat contents.
    bucket.views = comm::flat_views(bucket.contents, members);
    for (size_t k = 0; k < params_of(b).size(); ++k) {
      const size_t i = params_of(b)[k];
      slot_of_[i] = Slot{b, k};
      // gradient_as_bucket_view: an existing gradient moves into the (new) bucket slot.
      if (options_.gradient_as_bucket_view() && params_[i].grad().defined()) {
        bucket.views[k].copy_(params_[i].grad());
        params_[i].mutable_grad() = bucket.views[k];
      }
    }
  }
  buckets_ = std::move(buckets);
}

Reducer::Iteration::Iteration(const BucketAssignment& assignment, size_t params)
    : ready(params, false), futures(assignment.buckets.size()) {
  for (const std::vector<size_t>& bucket : assignment.buckets) pending.push_back(bucket.size());
}

Reducer::Snapshot Reducer::snapshot() const {
  Snapshot s;
  s.assignment = assignment_;
  s.buckets_rebuilt = has_rebuilt_bucket_;
  for (const Bucket& b : buckets_) s.bucket_contents.push_back(b.contents);
  s.bucket_views.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) s.bucket_views[i] = view_of(i);
  for (size_t b = 0; b < iteration_.launched; ++b) s.launch_order.push_back(b);
  s.grad_ready_order = iteration_.grad_ready_order;
  s.pending = iteration_.pending;
  s.launched = iteration_.launched;
  for (size_t b = 0; b < iteration_.launched && b < iteration_.futures.size(); ++b)
    s.reduced.push_back(iteration_.futures[b] != nullptr && iteration_.futures[b]->done());
  s.div_factor = iteration_.div_factor;
  s.divided_on_copy = builtin_hook_;
  return s;
}

void Reducer::register_comm_hook(CommHook hook) {
  TDDP_CHECK(hook != nullptr, "register_comm_hook: the hook is empty");
  TDDP_CHECK(builtin_hook_,
             "register_comm_hook: a communication hook is already registered; it can only be "
             "registered once (as in PyTorch)");
  TDDP_CHECK(num_iterations_ == 0 && !iteration_.expect_autograd_hooks,
             "register_comm_hook: register the hook before the first forward pass");
  comm_hook_ = std::move(hook);
  builtin_hook_ = false;
}

// ---- Forward-side steps ----------------------------------------------------------------------

void Reducer::prepare_for_forward() { ++num_iterations_; }

void Reducer::ensure_prior_reduction_finished() const {
  if (!require_finalize_) return;
  std::vector<std::string> unmarked;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!iteration_.ready[i]) unmarked.push_back(names_[i]);
  }
  if (!backward_completed_) {
    throw Error(fmt::format(
        "DistributedDataParallel: the previous backward pass started reducing gradients but never finished (it "
        "raised an error part way, or it was not run to the end; rank {} still waited for parameter(s) [{}]); the "
        "ranks no longer agree on which collectives come next, so this model cannot be used further. Recreate the "
        "process group and the DistributedDataParallel wrapper.",
        pg_->rank(), fmt::join(unmarked, ", ")));
  }
  const std::string why =
      options_.static_graph()
          ? "With static_graph = true the set of parameters that get gradients must not change after the first "
            "iteration, but these got one then and none now."
      : options_.find_unused_parameters()
          ? "These parameters were reached from the forward output, but the loss did not use every output (make "
            "sure all outputs of forward take part in the loss)."
          : "These parameters were not used to compute the loss. If the model legitimately skips parameters in "
            "some iterations, construct DistributedDataParallel with find_unused_parameters = true (or make sure "
            "every parameter takes part in the loss).";
  throw Error(fmt::format(
      "DistributedDataParallel: expected the previous iteration to finish reducing gradients before a new one "
      "starts, but rank {} finished backward without gradients for parameter(s) [{}], so their buckets were never "
      "reduced. {}",
      pg_->rank(), fmt::join(unmarked, ", "), why));
}

bool Reducer::rebuild_buckets() {
  ensure_prior_reduction_finished();
  if (!should_rebuild_buckets() || rebuilt_param_indices_.empty()) return false;
  TDDP_CHECK(rebuilt_param_indices_.size() == params_.size(),
             "DistributedDataParallel: internal error: {} of {} parameters recorded for the bucket rebuild",
             rebuilt_param_indices_.size(), params_.size());
  // Buckets in the order they closed along the arrival order (no re-sorting); rank 0's
  // assignment is the one every rank adopts.
  BucketAssignment mine = assign_buckets(params_, rebuilt_param_indices_, options_.first_bucket_cap_bytes(),
                                         options_.bucket_cap_bytes(), /*sort_by_first_parameter=*/false);
  std::vector<std::vector<int64_t>> lists;
  for (const auto& b : mine.buckets) lists.emplace_back(b.begin(), b.end());
  // The longest encoding of any assignment (a bucket per parameter): the same bound everywhere.
  const size_t bound = 2 * params_.size() + 1;
  BucketAssignment rank0;
  for (const std::vector<int64_t>& list : comm::broadcast_int_lists(*pg_, control_device_, lists, bound, 0)) {
    std::vector<size_t> bucket(list.begin(), list.end());
    size_t bytes = 0;
    for (size_t i : bucket) bytes += params_[i].nbytes();
    rank0.buckets.push_back(std::move(bucket));
    rank0.bytes.push_back(bytes);
  }
  has_rebuilt_bucket_ = true;
  rebuilt_param_indices_.clear();
  initialize_buckets(rank0);
  return true;
}

void Reducer::prepare_for_backward(const std::vector<Tensor>& outputs) {
  iteration_ = Iteration(assignment_, params_.size());
  iteration_.expect_autograd_hooks = true;
  if (options_.static_graph()) iteration_.hooks_left = num_grad_hooks_triggered_;
  if (dynamic_graph_find_unused()) search_unused_parameters(outputs);
}

void Reducer::set_divide_factor() {
  if (iteration_.div_factor != 0) return;
  iteration_.div_factor = pg_->size();
  // Join: this forward's count of the ranks still active, used once.
  const std::shared_ptr<comm::Work> active = std::move(forward_pass_work_);
  if (active && !use_static_world_size_) {
    active->wait();
    iteration_.div_factor = static_cast<int>(forward_pass_active_.item<int64_t>());
  }
}

}  // namespace tinyddp::ddp
