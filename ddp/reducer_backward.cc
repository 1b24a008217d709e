// The Reducer's backward pass (reducer.h): from a parameter's post-hook to its bucket's
// allreduce (autograd_hook -> mark_variable_ready -> copy_grad_to_bucket ->
// mark_bucket_ready -> all_reduce_bucket), then finalize_backward, queued on the engine once
// the last bucket is launched, which waits for each bucket and writes the averages to .grad
// (-> copy_bucket_to_grad). Follow one gradient through it from the top.
#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "tinyddp/comm/flatten.h"
#include "tinyddp/ddp/reducer.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::ddp {

using autograd::Engine;
using tensor::NoGradGuard;

namespace {
bool aliases(const Tensor& a, const Tensor& b) {
  return a.shares_storage(b) && a.storage_offset() == b.storage_offset();
}
}  // namespace

// ---- Backward: from the hook to the allreduce -------------------------------------------------

void Reducer::autograd_hook(size_t i) {
  if (iteration_.expect_autograd_hooks && !iteration_.first_autograd_hook_called) {
    // The first gradient of a synchronised backward pass.
    iteration_.first_autograd_hook_called = true;
    ++num_bwd_calls_;
    recorder_.backward_start(Engine::backward_started_at());
  }
  // The parameter got a gradient since the last synchronised backward: it counts as used,
  // also inside no_sync (its accumulated .grad must be reduced).
  if (dynamic_graph_find_unused() || static_graph_first_iteration()) local_used_map_[i] = 1;
  if (!iteration_.expect_autograd_hooks) return;  // no_sync, or a second backward after finalize: local only

  if (backward_completed_) {
    // Once per engine pass: note whether the pass reaches its end (an error part way skips it).
    backward_completed_ = false;
    Engine::queue_callback([this] { backward_completed_ = true; });
  }
  NoGradGuard no_grad;
  recorder_.gradient_ready(names_[i]);
  iteration_.grad_ready_order.push_back(i);

  if (static_graph_first_iteration()) {
    // The first iteration of a static graph only counts the hooks; everything is reduced
    // after backward (delay_all_reduce), when the set of used parameters is known.
    ++num_grad_hooks_triggered_[i];
    if (!iteration_.delay_all_reduce_queued) {
      iteration_.delay_all_reduce_queued = true;
      Engine::queue_callback([this] { delay_all_reduce(); });
    }
    return;
  }
  if (!iteration_.has_marked_unused_parameters) {
    // Parameters this forward did not reach get no hook: they are ready now.
    iteration_.has_marked_unused_parameters = true;
    for (size_t u : unused_parameters_) mark_variable_ready(u);
  }
  if (static_graph_after_first_iteration()) {
    TDDP_CHECK(
        iteration_.hooks_left[i] > 0,
        "DistributedDataParallel: parameter {} ('{}') got a gradient, but it got none in the first iteration; with "
        "static_graph = true the training graph must not change",
        i, names_[i]);
    if (--iteration_.hooks_left[i] > 0) return;  // more firings to come in this backward
  }
  if (should_rebuild_buckets()) rebuilt_param_indices_.push_back(i);
  mark_variable_ready(i);
}

void Reducer::check_not_marked_twice(size_t i) const {
  if (!iteration_.ready[i]) return;
  const bool unused = std::find(unused_parameters_.begin(), unused_parameters_.end(), i) != unused_parameters_.end();
  throw Error(fmt::format(
      "DistributedDataParallel: parameter {} ('{}') was marked ready twice in one iteration: {}", i, names_[i],
      unused && iteration_.has_marked_unused_parameters
          ? "the forward output does not reach it (find_unused_parameters marked it unused), yet its gradient arrived. "
            "Make sure the parameter is used in forward, or turn find_unused_parameters off if every parameter "
            "always gets a gradient."
          : "its gradient arrived twice in one backward pass (a parameter used outside forward, or in several "
            "backward passes of one iteration). If the graph is the same every iteration, static_graph = true "
            "supports gradients that arrive several times."));
}

void Reducer::mark_variable_ready(size_t i) {
  check_not_marked_twice(i);
  iteration_.ready[i] = true;
  require_finalize_ = true;
  set_divide_factor();
  const size_t b = slot_of_[i].bucket;
  copy_grad_to_bucket(i);
  if (--iteration_.pending[b] == 0) mark_bucket_ready(b);
  if (iteration_.launched == buckets_.size()) {
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
  Bucket& bucket = buckets_[slot_of_[i].bucket];
  const Tensor& view = view_of(i);
  const int div_factor = iteration_.div_factor;
  Tensor& grad = params_[i].mutable_grad();
  const auto start = Recorder::Clock::now();
  if (!grad.defined()) {
    view.zero_();  // no gradient (an unused parameter): contributes nothing
    return;
  }
  if (grad.requires_grad() && !create_graph_seen_) {
    // backward(create_graph): the bucket gets the values only, as PyTorch 1.13's Reducer.
    create_graph_seen_ = true;
    std::fprintf(stderr,
                 "DistributedDataParallel: backward with create_graph=true: the gradients are averaged over the "
                 "ranks, but a higher-order gradient through them is not: their graphs stay each rank's own and "
                 "do not pass through the allreduce\n");
  }
  TDDP_CHECK(grad.dtype() == view.dtype() && grad.device() == view.device(),
             "DistributedDataParallel: the gradient of parameter '{}' is {} on {} but its bucket is {} on {}",
             names_[i], tensor::dtype_name(grad.dtype()), grad.device().str(), tensor::dtype_name(view.dtype()),
             view.device().str());
  if (aliases(grad, view)) {
    // gradient_as_bucket_view: .grad is the slot already.
    if (builtin_hook_) view.div_(static_cast<double>(div_factor));
  } else {
    if (builtin_hook_) {
      // Divided on the way in: the sum the allreduce computes is then the average.
      if (bucket.inverse_div_of != div_factor) {
        bucket.inverse_div = tensor::scalar_like(bucket.contents, 1.0 / div_factor, "DistributedDataParallel");
        bucket.inverse_div_of = div_factor;
      }
      tensor::mul_out(view, grad, bucket.inverse_div, "DistributedDataParallel");
    } else {
      view.copy_(grad);  // the hook does its own averaging
    }
    if (options_.gradient_as_bucket_view()) grad = view;
  }
  recorder_.gradient_copied(slot_of_[i].bucket, names_[i], start);
}

void Reducer::mark_bucket_ready(size_t b) {
  if (b != iteration_.launched) return;  // strictly in index order: it waits for the earlier ones
  while (iteration_.launched < buckets_.size() && iteration_.pending[iteration_.launched] == 0) {
    all_reduce_bucket(iteration_.launched);
    ++iteration_.launched;
  }
}

GradBucket Reducer::make_grad_bucket(size_t b, Tensor buffer) const {
  const Bucket& bucket = buckets_[b];
  GradBucket grad_bucket{b, std::move(buffer), params_of(b), b + 1 == buckets_.size(), {}, builtin_hook_, {}};
  for (size_t i : params_of(b)) grad_bucket.params.push_back(params_[i]);
  // The bucket's own views; for another buffer (Join's zeros), the same layout over it.
  grad_bucket.views = grad_bucket.buffer.is_same(bucket.contents)
                          ? bucket.views
                          : comm::flat_views(grad_bucket.buffer, grad_bucket.params);
  return grad_bucket;
}

void Reducer::all_reduce_bucket(size_t b) {
  const bool first = b == 0;  // buckets launch in index order
  recorder_.bucket_launching(first);
  GradBucket grad_bucket = make_grad_bucket(b, buckets_[b].contents);
  std::shared_ptr<Future>& future = iteration_.futures[b];
  future = comm_hook_(grad_bucket);
  TDDP_CHECK(future != nullptr, "DistributedDataParallel: the communication hook returned no future for bucket {}", b);
  recorder_.bucket_launched(b, first);
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

void Reducer::finalize_bucket_dense(size_t b, const Tensor& result) {
  Bucket& bucket = buckets_[b];
  if (!options_.gradient_as_bucket_view()) {
    // Straight from the hook's result: the bucket's views, or the same slots of another
    // tensor the hook returned (PyTorch's populate_bucket_views_out).
    const std::vector<Tensor> reduced =
        result.is_same(bucket.contents) ? bucket.views : comm::flat_views(result, bucket.views);
    for (size_t k = 0; k < params_of(b).size(); ++k) {
      copy_bucket_to_grad(params_of(b)[k], reduced[k], globally_unused(params_of(b)[k]));
    }
    return;
  }
  // .grad is the bucket slot: another tensor the hook returned goes into the contents.
  if (!result.is_same(bucket.contents)) bucket.contents.copy_(result);
  for (size_t i : params_of(b)) {
    if (globally_unused(i)) continue;
    Tensor& grad = params_[i].mutable_grad();
    if (!grad.defined()) {
      grad = view_of(i);  // used elsewhere, not here: .grad becomes the slot
    } else {
      TDDP_CHECK(aliases(grad, view_of(i)),
                 "DistributedDataParallel: the .grad of parameter '{}' is no longer its bucket view "
                 "(gradient_as_bucket_view); was .grad replaced during backward?",
                 names_[i]);
    }
  }
}

void Reducer::finalize_backward() {
  NoGradGuard no_grad;
  const auto start = Recorder::Clock::now();
  iteration_.expect_autograd_hooks = false;  // later hooks (no_sync, a second backward) stay local
  require_finalize_ = false;
  // Wait for each bucket's reduction, in order, and write its averages to .grad.
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Tensor result = iteration_.futures[b]->wait();
    recorder_.bucket_waited(b, iteration_.futures[b]->completed_at());
    finalize_bucket_dense(b, result);
  }
  finish_local_used_map();
  recorder_.finalized(start, assignment_.bytes);
}

}  // namespace tinyddp::ddp
