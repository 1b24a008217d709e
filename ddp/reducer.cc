// The Reducer: see reducer.h. The functions follow one synchronised iteration: construction,
// the forward-side steps (rebuild_buckets, prepare_for_backward), then backward
// (autograd_hook -> mark_variable_ready -> copy_grad_to_bucket -> mark_bucket_ready ->
// all_reduce_bucket), then finalize_backward (-> copy_bucket_to_grad). The unused-parameter
// steps are in unused_parameters.cc, Join's in join.cc, statistics in recorder.cc.
#include "tinyddp/ddp/reducer.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tinyddp/comm/flatten.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::ddp {

using autograd::Engine;
using tensor::NoGradGuard;

tensor::Device control_device(const comm::ProcessGroup& pg, const std::vector<Tensor>& params) {
  const tensor::Device cpu(tensor::kCPU);
  return pg.tensor_rules().accepts(cpu) || params.empty() ? cpu : params.front().device();
}

namespace {
bool aliases(const Tensor& a, const Tensor& b) {
  return a.shares_storage(b) && a.storage_offset() == b.storage_offset();
}
}  // namespace

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
  per_iteration_ready_.assign(params_.size(), false);
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
  std::vector<Tensor> views(params_.size());
  bucket_of_.assign(params_.size(), 0);
  for (size_t b = 0; b < buckets.size(); ++b) {
    Bucket& bucket = buckets[b];
    bucket.params = assignment_.buckets[b];
    int64_t total = 0;
    std::vector<Tensor> members;
    for (size_t i : bucket.params) {
      total += params_[i].numel();
      members.push_back(params_[i]);
    }
    const Tensor& first = members.front();
    bucket.contents = tensor::zeros({total}, tensor::TensorOptions().dtype(first.dtype()).device(first.device()));
    // Each parameter's slot: its shape, row-major, inside the flat contents.
    bucket.views = comm::flat_views(bucket.contents, members);
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      const size_t i = bucket.params[k];
      views[i] = bucket.views[k];
      bucket_of_[i] = b;
      // gradient_as_bucket_view: an existing gradient moves into the (new) bucket slot.
      if (options_.gradient_as_bucket_view() && params_[i].grad().defined()) {
        views[i].copy_(params_[i].grad());
        params_[i].mutable_grad() = views[i];
      }
    }
    bucket.pending = bucket.params.size();
  }
  buckets_ = std::move(buckets);
  views_ = std::move(views);
}

Reducer::Snapshot Reducer::snapshot() const {
  Snapshot s{assignment_, has_rebuilt_bucket_, {}, views_, launch_order_, grad_ready_order_};
  for (const Bucket& b : buckets_) s.bucket_contents.push_back(b.contents);
  return s;
}

void Reducer::register_comm_hook(CommHook hook) {
  TDDP_CHECK(hook != nullptr, "register_comm_hook: the hook is empty");
  TDDP_CHECK(builtin_hook_,
             "register_comm_hook: a communication hook is already registered; it can only be "
             "registered once (as in PyTorch)");
  TDDP_CHECK(num_iterations_ == 0 && !expect_autograd_hooks_,
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
    if (!per_iteration_ready_[i]) unmarked.push_back(names_[i]);
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
  std::vector<int64_t> flat;  // bucket count, then each bucket's size and indices
  flat.push_back(static_cast<int64_t>(mine.buckets.size()));
  for (const auto& b : mine.buckets) {
    flat.push_back(static_cast<int64_t>(b.size()));
    flat.insert(flat.end(), b.begin(), b.end());
  }
  flat.resize(2 * params_.size() + 1, -1);  // the longest possible encoding: same length everywhere
  const Tensor shared = tensor::from_vector(flat, {}, control_device_);
  pg_->broadcast(shared, 0)->wait();
  const std::vector<int64_t> agreed = shared.to_vector<int64_t>();
  BucketAssignment rank0;
  size_t pos = 1;
  for (int64_t b = 0; b < agreed[0]; ++b) {
    const auto count = static_cast<size_t>(agreed[pos++]);
    std::vector<size_t> bucket(agreed.begin() + static_cast<int64_t>(pos),
                               agreed.begin() + static_cast<int64_t>(pos + count));
    pos += count;
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

void Reducer::reset_bucket_counting() {
  next_bucket_ = 0;
  for (Bucket& b : buckets_) {
    b.pending = b.params.size();
    b.future.reset();
  }
  if (options_.static_graph()) num_grad_hooks_triggered_this_iteration_ = num_grad_hooks_triggered_;
}

void Reducer::prepare_for_backward(const std::vector<Tensor>& outputs) {
  expect_autograd_hooks_ = true;
  delay_all_reduce_queued_ = false;
  grad_ready_order_.clear();
  launch_order_.clear();
  reset_bucket_counting();
  has_marked_unused_parameters_ = false;
  std::fill(per_iteration_ready_.begin(), per_iteration_ready_.end(), false);
  if (dynamic_graph_find_unused()) search_unused_parameters(outputs);
}

void Reducer::set_divide_factor() {
  if (div_factor_ != kUnsetDivFactor) return;
  div_factor_ = pg_->size();
  if (forward_pass_work_ && !use_static_world_size_) {
    forward_pass_work_->wait();
    div_factor_ = static_cast<int>(forward_pass_active_.item<int64_t>());
  }
}

// ---- Backward: from the hook to the allreduce -------------------------------------------------

void Reducer::autograd_hook(size_t i) {
  if (expect_autograd_hooks_ && !first_autograd_hook_called_) {
    // The first gradient of a synchronised backward pass.
    first_autograd_hook_called_ = true;
    ++num_bwd_calls_;
    recorder_.backward_start(Engine::backward_started_at());
  }
  // The parameter got a gradient since the last synchronised backward: it counts as used,
  // also inside no_sync (its accumulated .grad must be reduced).
  if (dynamic_graph_find_unused() || static_graph_first_iteration()) local_used_map_[i] = 1;
  if (!expect_autograd_hooks_) return;  // no_sync, or a second backward after finalize: local only

  if (backward_completed_) {
    // Once per engine pass: note whether the pass reaches its end (an error part way skips it).
    backward_completed_ = false;
    Engine::queue_callback([this] { backward_completed_ = true; });
  }
  NoGradGuard no_grad;
  recorder_.gradient_ready(names_[i]);
  grad_ready_order_.push_back(i);

  if (static_graph_first_iteration()) {
    // The first iteration of a static graph only counts the hooks; everything is reduced
    // after backward (delay_all_reduce), when the set of used parameters is known.
    ++num_grad_hooks_triggered_[i];
    if (!delay_all_reduce_queued_) {
      delay_all_reduce_queued_ = true;
      Engine::queue_callback([this] { delay_all_reduce(); });
    }
    return;
  }
  if (!has_marked_unused_parameters_) {
    // Parameters this forward did not reach get no hook: they are ready now.
    has_marked_unused_parameters_ = true;
    for (size_t u : unused_parameters_) mark_variable_ready(u);
  }
  if (static_graph_after_first_iteration()) {
    TDDP_CHECK(
        num_grad_hooks_triggered_this_iteration_[i] > 0,
        "DistributedDataParallel: parameter {} ('{}') got a gradient, but it got none in the first iteration; with "
        "static_graph = true the training graph must not change",
        i, names_[i]);
    if (--num_grad_hooks_triggered_this_iteration_[i] > 0) return;  // more firings to come in this backward
  }
  if (should_rebuild_buckets()) rebuilt_param_indices_.push_back(i);
  mark_variable_ready(i);
}

void Reducer::check_not_marked_twice(size_t i) const {
  if (!per_iteration_ready_[i]) return;
  const bool unused = std::find(unused_parameters_.begin(), unused_parameters_.end(), i) != unused_parameters_.end();
  throw Error(fmt::format(
      "DistributedDataParallel: parameter {} ('{}') was marked ready twice in one iteration: {}", i, names_[i],
      unused && has_marked_unused_parameters_
          ? "the forward output does not reach it (find_unused_parameters marked it unused), yet its gradient arrived. "
            "Make sure the parameter is used in forward, or turn find_unused_parameters off if every parameter "
            "always gets a gradient."
          : "its gradient arrived twice in one backward pass (a parameter used outside forward, or in several "
            "backward passes of one iteration). If the graph is the same every iteration, static_graph = true "
            "supports gradients that arrive several times."));
}

void Reducer::mark_variable_ready(size_t i) {
  check_not_marked_twice(i);
  per_iteration_ready_[i] = true;
  require_finalize_ = true;
  set_divide_factor();
  const size_t b = bucket_of_[i];
  copy_grad_to_bucket(i);
  if (--buckets_[b].pending == 0) mark_bucket_ready(b);
  if (next_bucket_ == buckets_.size()) {
    // The last bucket is on its way: reduce the used-parameter map, and finish at the end of
    // this backward pass.
    if (dynamic_graph_find_unused()) all_reduce_local_used_map();
    Engine::queue_callback([this] {
      if (static_graph_after_first_iteration() && should_rebuild_buckets()) {
        for (size_t u : unused_parameters_) rebuilt_param_indices_.push_back(u);
      }
      finalize_backward();
    });
  }
}

void Reducer::copy_grad_to_bucket(size_t i) {
  Bucket& bucket = buckets_[bucket_of_[i]];
  const Tensor& view = views_[i];
  Tensor& grad = params_[i].mutable_grad();
  const auto start = Recorder::Clock::now();
  if (!grad.defined()) {
    view.zero_();  // no gradient (an unused parameter): contributes nothing
    return;
  }
  TDDP_CHECK(grad.dtype() == view.dtype() && grad.device() == view.device(),
             "DistributedDataParallel: the gradient of parameter '{}' is {} on {} but its bucket is {} on {}",
             names_[i], tensor::dtype_name(grad.dtype()), grad.device().str(), tensor::dtype_name(view.dtype()),
             view.device().str());
  if (aliases(grad, view)) {
    // gradient_as_bucket_view: .grad is the slot already.
    if (builtin_hook_) view.div_(static_cast<double>(div_factor_));
  } else {
    if (builtin_hook_) {
      // Divided on the way in: the sum the allreduce computes is then the average.
      if (bucket.inverse_div_of != div_factor_) {
        bucket.inverse_div = tensor::scalar_like(bucket.contents, 1.0 / div_factor_, "DistributedDataParallel");
        bucket.inverse_div_of = div_factor_;
      }
      tensor::mul_out(view, grad, bucket.inverse_div, "DistributedDataParallel");
    } else {
      view.copy_(grad);  // the hook does its own averaging
    }
    if (options_.gradient_as_bucket_view()) grad = view;
  }
  recorder_.gradient_copied(bucket_of_[i], names_[i], start);
}

void Reducer::mark_bucket_ready(size_t b) {
  if (b != next_bucket_) return;  // strictly in index order: it waits for the earlier ones
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    all_reduce_bucket(next_bucket_);
    ++next_bucket_;
  }
}

GradBucket Reducer::make_grad_bucket(size_t b, Tensor buffer) const {
  const Bucket& bucket = buckets_[b];
  GradBucket grad_bucket{b, std::move(buffer), bucket.params, b + 1 == buckets_.size(), {}, builtin_hook_, {}};
  for (size_t i : bucket.params) grad_bucket.params.push_back(params_[i]);
  // The bucket's own views; for another buffer (Join's zeros), the same layout over it.
  grad_bucket.views = grad_bucket.buffer.is_same(bucket.contents)
                          ? bucket.views
                          : comm::flat_views(grad_bucket.buffer, grad_bucket.params);
  return grad_bucket;
}

void Reducer::all_reduce_bucket(size_t b) {
  Bucket& bucket = buckets_[b];
  const bool first = launch_order_.empty();
  recorder_.bucket_launching(first);
  GradBucket grad_bucket = make_grad_bucket(b, bucket.contents);
  bucket.future = comm_hook_(grad_bucket);
  TDDP_CHECK(bucket.future != nullptr,
             "DistributedDataParallel: the communication hook returned no future for bucket {}", b);
  recorder_.bucket_launched(b, first);
  launch_order_.push_back(b);
}

// ---- finalize_backward: wait, then write the averages to .grad --------------------------------

void Reducer::copy_bucket_to_grad(size_t i, const Tensor& reduced_view, bool global_unused) {
  if (global_unused) return;  // no rank used it: .grad stays as it was
  Tensor& grad = params_[i].mutable_grad();
  if (grad.defined()) {
    grad.copy_(reduced_view);
  } else {
    grad = reduced_view.clone();
  }
}

void Reducer::finalize_bucket_dense(Bucket& bucket, const Tensor& result) {
  if (!options_.gradient_as_bucket_view()) {
    // Straight from the hook's result: the bucket's views, or the same slots of another
    // tensor the hook returned (PyTorch's populate_bucket_views_out).
    const std::vector<Tensor> reduced =
        result.is_same(bucket.contents) ? bucket.views : comm::flat_views(result, bucket.views);
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      copy_bucket_to_grad(bucket.params[k], reduced[k], globally_unused(bucket.params[k]));
    }
    return;
  }
  // .grad is the bucket slot: another tensor the hook returned goes into the contents.
  if (!result.is_same(bucket.contents)) bucket.contents.copy_(result);
  for (size_t i : bucket.params) {
    if (globally_unused(i)) continue;
    Tensor& grad = params_[i].mutable_grad();
    if (!grad.defined()) {
      grad = views_[i];  // used elsewhere, not here: .grad becomes the slot
    } else {
      TDDP_CHECK(aliases(grad, views_[i]),
                 "DistributedDataParallel: the .grad of parameter '{}' is no longer its bucket view "
                 "(gradient_as_bucket_view); was .grad replaced during backward?",
                 names_[i]);
    }
  }
}

void Reducer::finalize_backward() {
  NoGradGuard no_grad;
  const auto start = Recorder::Clock::now();
  expect_autograd_hooks_ = false;  // until the next prepare_for_backward
  first_autograd_hook_called_ = false;
  require_finalize_ = false;
  delay_all_reduce_queued_ = false;
  // Wait for each bucket's reduction, in order, and write its averages to .grad.
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Tensor result = buckets_[b].future->wait();
    recorder_.bucket_waited(b, buckets_[b].future->completed_at());
    finalize_bucket_dense(buckets_[b], result);
  }
  div_factor_ = kUnsetDivFactor;  // Join may change it next time
  forward_pass_work_.reset();
  finish_local_used_map();
  recorder_.finalized(start, assignment_.bytes);
}

}  // namespace tinyddp::ddp
