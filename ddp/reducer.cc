// The Reducer: see reducer.h.
#include "ddp/reducer.h"

#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tensor/ops.h"

namespace tinyddp::ddp {

using autograd::Engine;
using tensor::NoGradGuard;

tensor::Device control_device(const comm::ProcessGroup& pg, const std::vector<Tensor>& params) {
  return pg.backend() == "nccl" && !params.empty() ? params.front().device() : tensor::Device(tensor::kCPU);
}

Reducer::Reducer(std::vector<Tensor> params, std::vector<std::string> names, std::shared_ptr<comm::ProcessGroup> pg,
                 ReducerOptions options)
    : params_(std::move(params)), names_(std::move(names)), pg_(std::move(pg)),
      control_device_(control_device(*pg_, params_)), options_(options) {
  TDDP_CHECK(params_.size() == names_.size(), "Reducer: {} parameters but {} names", params_.size(), names_.size());
  comm_hook_ = [pg = pg_](GradBucket& bucket) -> std::shared_ptr<Future> {
    const Tensor buffer = bucket.buffer;  // already divided by the world size (mark_ready)
    return std::make_shared<WorkFuture>(pg->allreduce(buffer), [buffer] { return buffer; });
  };
  build_buckets(reverse_order(params_.size()));
  ready_.assign(params_.size(), false);
  unused_.assign(params_.size(), false);
  locally_used_.assign(params_.size(), false);
  for (size_t i = 0; i < params_.size(); ++i) {
    hooks_.push_back(params_[i].grad_accumulator()->add_post_hook([this, i] { mark_ready(i); }));
  }
}

Reducer::~Reducer() {
  for (auto& hook : hooks_) hook.remove();
}

void Reducer::build_buckets(const std::vector<size_t>& order) {
  assignment_ = assign_buckets(params_, order, options_.first_bucket_cap_bytes, options_.bucket_cap_bytes);
  NoGradGuard no_grad;
  std::vector<Bucket> buckets(assignment_.buckets.size());
  std::vector<Tensor> views(params_.size());
  bucket_of_.assign(params_.size(), 0);
  for (size_t b = 0; b < buckets.size(); ++b) {
    Bucket& bucket = buckets[b];
    bucket.params = assignment_.buckets[b];
    int64_t total = 0;
    for (size_t i : bucket.params) total += params_[i].numel();
    const Tensor& first = params_[bucket.params.front()];
    bucket.contents = tensor::zeros({total}, tensor::TensorOptions().dtype(first.dtype()).device(first.device()));
    bucket.inverse_world = tensor::scalar_like(bucket.contents, 1.0 / pg_->size(), "DistributedDataParallel");
    int64_t offset = 0;
    for (size_t i : bucket.params) {
      // The view has the parameter's shape, row-major, inside the flat contents.
      views[i] = bucket.contents.narrow(0, offset, params_[i].numel()).view(params_[i].sizes());
      offset += params_[i].numel();
      bucket_of_[i] = b;
      // gradient_as_bucket_view: an existing gradient moves into the (new) bucket slot.
      if (options_.gradient_as_bucket_view && params_[i].grad().defined()) {
        views[i].copy_(params_[i].grad());
        params_[i].mutable_grad() = views[i];
      }
    }
    bucket.pending = bucket.params.size();
  }
  buckets_ = std::move(buckets);
  views_ = std::move(views);
}

std::vector<Tensor> Reducer::bucket_contents() const {
  std::vector<Tensor> out;
  for (const Bucket& b : buckets_) out.push_back(b.contents);
  return out;
}

void Reducer::register_comm_hook(CommHook hook) {
  TDDP_CHECK(hook != nullptr, "register_comm_hook: the hook is empty");
  TDDP_CHECK(!backward_started_, "register_comm_hook: cannot change the hook during a backward pass");
  comm_hook_ = std::move(hook);
  builtin_hook_ = false;
}

void Reducer::check_previous_iteration() const {
  TDDP_CHECK(!iteration_incomplete_, "{}", incomplete_message_);
  TDDP_CHECK(!backward_started_,
             "DistributedDataParallel: the previous backward pass started reducing gradients but never finished (it "
             "raised an error part way, or it was not run to the end); the ranks no longer agree on which collectives "
             "come next, so this model cannot be used further. Recreate the process group and the "
             "DistributedDataParallel wrapper.");
}

void Reducer::prepare_for_backward(bool synchronize, const std::vector<Tensor>& outputs) {
  synchronize_ = synchronize;
  if (options_.static_graph && unused_known_) {  // the same graph as the first iteration
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!unused_[i]) locally_used_[i] = true;
    }
    return;
  }
  unused_.assign(params_.size(), false);
  if (!options_.find_unused_parameters && !options_.static_graph) {
    std::fill(locally_used_.begin(), locally_used_.end(), true);  // every parameter is expected to get a gradient
    return;
  }
  // Walk the graph from the outputs: accumulators reached belong to used parameters.
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
  for (size_t i = 0; i < params_.size(); ++i) {
    unused_[i] = !reached[i];
    if (reached[i]) locally_used_[i] = true;
  }
  unused_known_ = true;
}

void Reducer::mark_unused_ready() {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (unused_[i] && !ready_[i]) {
      views_[i].zero_();  // contributes nothing to the sum
      ready_[i] = true;
      --buckets_[bucket_of_[i]].pending;
    }
  }
}

void Reducer::mark_ready(size_t i) {
  if (!synchronize_) return;  // no_sync: .grad accumulates locally
  NoGradGuard no_grad;
  const auto now = Timeline::Clock::now();
  if (!backward_started_) {
    backward_started_ = true;
    backward_start_ = Engine::backward_started_at();
    launch_order_.clear();
    Engine::queue_callback([this] { finalize(); });
    if (options_.find_unused_parameters || options_.static_graph) mark_unused_ready();
  }
  TDDP_CHECK(!ready_[i], "DistributedDataParallel: the gradient of parameter {} ('{}') was produced twice in one "
             "backward pass; DDP supports one gradient per parameter per iteration", i, names_[i]);
  ready_[i] = true;
  arrival_order_.push_back(i);
  last_hook_ = now;
  if (timeline_enabled_) timeline_.instant("grad ready: " + names_[i], now);
  const Tensor& grad = params_[i].grad();
  const Tensor& view = views_[i];
  Bucket& bucket = buckets_[bucket_of_[i]];
  const bool aliased = grad.shares_storage(view) && grad.storage_offset() == view.storage_offset();
  if (builtin_hook_) {
    // The gradient into its bucket slot, divided by the world size on the way: the sum that
    // the allreduce computes is then the average.
    tensor::mul_out(view, aliased ? view : grad, bucket.inverse_world, "DistributedDataParallel");
  } else if (!aliased) {
    view.copy_(grad);  // the gradient into its bucket slot; the hook averages
  }
  if (!aliased && options_.gradient_as_bucket_view) params_[i].mutable_grad() = view;
  if (timeline_enabled_) timeline_.span("into bucket " + std::to_string(bucket_of_[i]) + ": " + names_[i], now, Timeline::Clock::now());
  if (--bucket.pending == 0) launch_ready_buckets();
}

void Reducer::launch_ready_buckets() {
  // Strictly in index order: a complete bucket waits for every earlier one.
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& bucket = buckets_[next_bucket_];
    GradBucket grad_bucket{next_bucket_, bucket.contents, bucket.params, next_bucket_ + 1 == buckets_.size()};
    bucket.future = comm_hook_(grad_bucket);
    TDDP_CHECK(bucket.future != nullptr, "DistributedDataParallel: the communication hook returned no future for bucket {}",
               next_bucket_);
    bucket.launched_at = Timeline::Clock::now();
    if (launch_order_.empty()) first_launch_ = bucket.launched_at;
    if (timeline_enabled_) timeline_.instant("bucket " + std::to_string(next_bucket_) + " launched", Timeline::Clock::now());
    launch_order_.push_back(next_bucket_);
    ++next_bucket_;
  }
}

void Reducer::finalize() {
  NoGradGuard no_grad;
  if (next_bucket_ < buckets_.size()) {
    // Some parameters never got a gradient: without find_unused_parameters the buckets
    // holding them cannot be reduced. Name them, wait for what was launched, and fail.
    std::vector<std::string> missing;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!ready_[i]) missing.push_back(names_[i]);
    }
    for (Bucket& b : buckets_) {
      if (b.future) b.future->wait();
    }
    iteration_incomplete_ = true;
    incomplete_message_ = fmt::format(
        "DistributedDataParallel: rank {} finished backward without gradients for parameter(s) [{}], so their "
        "gradients could not be reduced. These parameters were not used to compute the loss. If the model "
        "legitimately skips parameters in some iterations, construct DistributedDataParallel with "
        "find_unused_parameters = true (or make sure every parameter takes part in the loss).",
        pg_->rank(), fmt::join(missing, ", "));
    reset_iteration();
    throw Error(incomplete_message_);
  }
  std::vector<int64_t> used_everywhere(params_.size(), 1);
  if (options_.find_unused_parameters || options_.static_graph) {
    // Which parameters some rank used: the others keep their .grad untouched.
    std::vector<int64_t> local(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) local[i] = locally_used_[i] ? 1 : 0;
    const Tensor bitmap = tensor::from_vector(local, {}, control_device_);
    pg_->allreduce(bitmap)->wait();
    used_everywhere = bitmap.to_vector<int64_t>();
  }
  const auto finalize_start = Timeline::Clock::now();
  // Join: zeros came from the ranks that ran out of inputs; average over the active ones.
  const double rescale = active_ranks_ > 0 ? static_cast<double>(pg_->size()) / active_ranks_ : 1.0;
  Timeline::Clock::time_point comm_end = first_launch_;
  for (Bucket& bucket : buckets_) {
    // The hook's result: the averaged contents (the built-in hook's input was divided already).
    const Tensor reduced = bucket.future->wait();
    if (!reduced.is_same(bucket.contents)) bucket.contents.copy_(reduced);
    comm_end = std::max(comm_end, bucket.future->completed_at().value_or(Timeline::Clock::now()));
    if (rescale != 1.0) bucket.contents.mul_(rescale);
    for (size_t i : bucket.params) {
      if (used_everywhere[i] == 0) continue;  // unused on every rank: .grad stays as it was
      Tensor& grad = params_[i].mutable_grad();
      if (options_.gradient_as_bucket_view) {
        grad = views_[i];
      } else if (grad.defined()) {
        grad.copy_(views_[i]);
      } else {
        grad = views_[i].clone();
      }
    }
  }
  record_iteration(finalize_start, comm_end);
  // Rebuild once, after the first synchronised iteration, in the order gradients arrived
  // on rank 0 (broadcast, so that every rank builds the same buckets).
  if (!rebuilt_) {
    std::vector<int64_t> order(arrival_order_.begin(), arrival_order_.end());
    // Parameters that produced no gradient (unused) go last, last registered first.
    for (size_t i = params_.size(); i-- > 0;) {
      if (std::find(arrival_order_.begin(), arrival_order_.end(), i) == arrival_order_.end()) {
        order.push_back(static_cast<int64_t>(i));
      }
    }
    const Tensor shared = tensor::from_vector(order, {}, control_device_);
    pg_->broadcast(shared, 0)->wait();
    const std::vector<int64_t> agreed = shared.to_vector<int64_t>();
    build_buckets(std::vector<size_t>(agreed.begin(), agreed.end()));
    rebuilt_ = true;
  }
  reset_iteration();
}

void Reducer::record_forward(Timeline::Clock::time_point start, Timeline::Clock::time_point end) {
  forward_start_ = start;
  forward_end_ = end;
  if (timeline_enabled_) timeline_.span("forward", start, end);
}

void Reducer::record_iteration(Timeline::Clock::time_point finalize_start, Timeline::Clock::time_point comm_end) {
  const auto us = [](auto from, auto to) { return std::max(0.0, std::chrono::duration<double, std::micro>(to - from).count()); };
  const auto end = Timeline::Clock::now();
  stats_.iterations += 1;
  stats_.last_forward_compute_us = us(forward_start_, forward_end_);
  stats_.last_backward_compute_us = us(backward_start_, last_hook_);
  stats_.last_backward_comm_us = us(first_launch_, comm_end);
  stats_.last_overlap_us = us(first_launch_, std::min(last_hook_, comm_end));
  sum_forward_ += stats_.last_forward_compute_us;
  sum_backward_ += stats_.last_backward_compute_us;
  sum_comm_ += stats_.last_backward_comm_us;
  sum_overlap_ += stats_.last_overlap_us;
  if (timeline_enabled_) {
    timeline_.span("backward (to the last gradient)", backward_start_, last_hook_);
    for (size_t b = 0; b < buckets_.size(); ++b) {
      // Launch instants are on the compute track; each allreduce's span on the communication track.
      const auto done = buckets_[b].future->completed_at().value_or(end);
      timeline_.span(fmt::format("allreduce bucket {} ({} KiB)", b, buckets_[b].contents.nbytes() >> 10),
                     buckets_[b].launched_at, done, Timeline::kCommunication);
    }
    timeline_.span("finalize", finalize_start, end);
  }
}

DDPStats Reducer::stats() const {
  DDPStats out = stats_;
  out.bucket_bytes = assignment_.bytes;
  out.buckets_rebuilt = rebuilt_;
  if (out.iterations > 0) {
    const double n = static_cast<double>(out.iterations);
    out.avg_forward_compute_us = sum_forward_ / n;
    out.avg_backward_compute_us = sum_backward_ / n;
    out.avg_backward_comm_us = sum_comm_ / n;
    out.avg_overlap_us = sum_overlap_ / n;
  }
  return out;
}

void Reducer::shadow_iteration() {
  NoGradGuard no_grad;
  // The buckets' collectives, through the same hook (so the same wire format), on zeros.
  std::vector<std::shared_ptr<Future>> futures;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    GradBucket zeros{b, tensor::zeros_like(buckets_[b].contents), buckets_[b].params, b + 1 == buckets_.size()};
    futures.push_back(comm_hook_(zeros));
  }
  for (auto& f : futures) f->wait();
  if (options_.find_unused_parameters || options_.static_graph) {
    const Tensor bitmap =
        tensor::zeros({static_cast<int64_t>(params_.size())}, tensor::TensorOptions(tensor::kInt64).device(control_device_));
    pg_->allreduce(bitmap)->wait();
  }
  // A rank that joined before its first iteration still takes part in the one-time rebuild
  // that ends the others' first iteration (with rank 0's order, like them).
  if (!rebuilt_) {
    std::vector<int64_t> order;
    for (size_t i = params_.size(); i-- > 0;) order.push_back(static_cast<int64_t>(i));
    const Tensor shared = tensor::from_vector(order, {}, control_device_);
    pg_->broadcast(shared, 0)->wait();
    const std::vector<int64_t> agreed = shared.to_vector<int64_t>();
    build_buckets(std::vector<size_t>(agreed.begin(), agreed.end()));
    rebuilt_ = true;
  }
}

void Reducer::reset_iteration() {
  backward_started_ = false;
  ready_.assign(params_.size(), false);
  std::fill(locally_used_.begin(), locally_used_.end(), false);
  next_bucket_ = 0;
  arrival_order_.clear();
  for (Bucket& b : buckets_) {
    b.pending = b.params.size();
    b.future.reset();
  }
}

}  // namespace tinyddp::ddp
