// FullyShardedUnit (fully_shard.h): the shards, the gather before a unit's forward (and again
// before its backward), and the reduce-scatter when its backward has produced every gradient.
// The free functions around it are in fully_shard_api.cc.
#include "tinyddp/ddp/fully_shard.h"
#include "tinyddp/ddp/fully_shard_registry.h"

#include <algorithm>
#include <mutex>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "tinyddp/autograd/engine.h"
#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::ddp {

using tensor::NoGradGuard;
using tensor::Tensor;

using detail::registry;
using detail::Registry;
using detail::wait_for;

namespace {
// The timeline's rows for the units' collectives (the compute row is Timeline::kCompute).
constexpr int kGatherTrack = 1, kReduceTrack = 2;

// Counts the root's forwards on this thread (a rank): a gather prefetched in one forward is
// used only in it and its backward.
thread_local uint64_t forward_epoch = 0;
// The units whose forward began since the root's did, in that order (the root first).
thread_local std::vector<std::weak_ptr<FullyShardedUnit>> forward_order;
int64_t forward_epoch_now() { return static_cast<int64_t>(forward_epoch); }
}  // namespace

namespace {
// `shape` with its first dimension set to `rows` (a scalar counts as [1]).
tensor::Shape with_rows(const tensor::Shape& shape, int64_t rows) {
  tensor::Shape s = shape.empty() ? tensor::Shape{1} : shape;
  s[0] = rows;
  return s;
}

// A freed parameter: no elements, but its number of dimensions (so code that groups
// parameters by dim still sees a matrix as one) and the dtype the module computes in.
Tensor nothing_like(const Tensor& shard, tensor::DType dtype) {
  return tensor::empty(with_rows(shard.sizes(), 0), tensor::TensorOptions(dtype).device(shard.device()));
}

}  // namespace

FullyShardedUnit::FullyShardedUnit(std::shared_ptr<nn::Module> module, std::shared_ptr<comm::ProcessGroup> pg,
                                   FullyShardOptions options)
    : module_(module), module_address_(module.get()), name_(module->type_name()), label_(name_), pg_(std::move(pg)),
      options_(options) {
  TDDP_CHECK(pg_ != nullptr, "fully_shard({}): the process group is null", name_);
  const int64_t world = pg_->size();
  NoGradGuard no_grad;
  detail::check_not_shared_across_units(*module, name_);
  // Every rank starts from rank 0's values, as DDP's construction makes them.
  std::vector<const nn::Module*> inside;  // the sub-modules, whose units may hold parameters
  for (const auto& m : module->modules(/*include_self=*/false)) inside.push_back(m.get());
  for (const auto& [name, p] : module->named_registered_parameters()) {
    if (const std::optional<detail::Sharded> held = detail::sharded(p)) {
      // A sub-module's unit's; one held by a unit outside this module would be freed while
      // this module computes with it.
      TDDP_CHECK(std::find(inside.begin(), inside.end(), held->owner) != inside.end(),
                 "fully_shard({}): parameter '{}' is shared with a module outside this one that a unit holds "
                 "already: a parameter shared across units is not supported (shard the module that holds both "
                 "uses as one unit)",
                 name_, name);
      continue;
    }
    if (!p.requires_grad()) continue;  // frozen: every rank keeps it whole
    TDDP_CHECK(p.numel() > 0, "fully_shard({}): parameter '{}' has no elements (sharded twice?)", name_, name);
    wait_for(pg_->broadcast(p, 0), name_, "broadcasting the parameters from rank 0");
    Slot slot;
    slot.param = p;
    slot.full_shape = p.sizes();
    slot.rows = p.dim() == 0 ? 1 : p.size(0);
    slot.row_numel = p.numel() / slot.rows;
    slot.block_rows = (slot.rows + world - 1) / world;
    slot.offset = shard_numel_;
    shard_numel_ += slot.block_numel();
    // This rank's rows, padded with zeros to block_rows.
    slot.shard =
        tensor::zeros(with_rows(slot.full_shape, slot.block_rows), tensor::TensorOptions(p.dtype()).device(p.device()));
    const int64_t first = pg_->rank() * slot.block_rows;
    const int64_t count = std::max<int64_t>(0, std::min(slot.rows, first + slot.block_rows) - first);
    if (count > 0) {
      slot.shard.narrow(0, 0, count).copy_(p.reshape(with_rows(slot.full_shape, slot.rows)).narrow(0, first, count));
    }
    slot.shard.requires_grad_(true);
    TDDP_CHECK(slots_.empty() || slots_.front().param.dtype() == p.dtype(),
               "fully_shard({}): parameter '{}' is {} where the unit's others are {}: one dtype per unit", name_, name,
               tensor::dtype_name(p.dtype()), tensor::dtype_name(slots_.front().param.dtype()));
    slots_.push_back(std::move(slot));
  }
  for (const Tensor& b : module->buffers())
    wait_for(pg_->broadcast(b, 0), name_, "broadcasting the buffers from rank 0");
  const MixedPrecisionPolicy& mp = options_.mp_policy();
  for (const auto& dtype : {mp.param_dtype(), mp.reduce_dtype(), mp.output_dtype()}) {
    TDDP_CHECK(!dtype || tensor::is_floating_point(*dtype),
               "fully_shard({}): mp_policy's dtypes must be floating-point types, got {}", name_,
               tensor::dtype_name(*dtype));
  }
  if (!slots_.empty()) compute_dtype_ = mp.param_dtype().value_or(slots_.front().shard.dtype());
  reduce_dtype_ = mp.reduce_dtype().value_or(compute_dtype_);
  register_shards(*module);
  stats_.shard_numel = shard_numel_;
  for (const Slot& slot : slots_) stats_.full_numel += slot.param.numel();
  ready_.assign(slots_.size(), false);
  if (options_.timeline() && !options_.timeline()->aligned()) {
    options_.timeline()->align(
        agree_on_time_zero(*pg_, slots_.empty() ? tensor::Device(tensor::kCPU) : slots_.front().shard.device()));
    options_.timeline()->name_track(kGatherTrack, "all-gather");
    options_.timeline()->name_track(kReduceTrack, "reduce-scatter");
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    handles_.push_back(slots_[i].param.grad_accumulator()->add_post_hook([this, i] { on_gradient(i); }));
  }
  reshard();
}

FullyShardedUnit::~FullyShardedUnit() {
  // A gather or reduce-scatter still on its way (a prefetch nothing used) finishes first.
  try {
    if (prefetch_) prefetch_->work->wait();
    if (pending_reduce_) pending_reduce_->work->wait();
  } catch (...) {  // the group's failure was reported where it mattered
  }
  for (autograd::RemovableHandle& h : handles_) h.remove();
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const Slot& slot : slots_) {
    r.entries.erase(slot.param.impl());
    r.shard_impls.erase(slot.shard.impl());
  }
  r.units.erase(module_address_);
}

FullyShardStats FullyShardedUnit::stats() const { return stats_; }

namespace {
Timeline::Clock::time_point finished(const comm::Work& work) {
  return work.finished_at().value_or(Timeline::Clock::now());
}
}  // namespace

void FullyShardedUnit::record(const char* what, Timeline::Clock::time_point start,
                              Timeline::Clock::time_point end) const {
  if (options_.timeline())
    options_.timeline()->span(fmt::format("{} {}", what, label_), start, end, forward_epoch_now());
}

void FullyShardedUnit::record_collective(const char* what, Timeline::Clock::time_point start,
                                         Timeline::Clock::time_point end, int track, tensor::DType dtype,
                                         const char* more) const {
  if (!options_.timeline()) return;  // nothing formatted on the hot path without a timeline
  const double mib = static_cast<double>(shard_numel_ * pg_->size()) * tensor::element_size(dtype) / 1048576.0;
  options_.timeline()->span(fmt::format("{} {} ({:.2f} MiB{})", what, label_, mib, more), start, end,
                            forward_epoch_now(), track);
}

void FullyShardedUnit::record_instant(const std::string& what) const {
  if (options_.timeline())
    options_.timeline()->instant(what + " " + label_, Timeline::Clock::now(), forward_epoch_now());
}

std::pair<std::shared_ptr<comm::Work>, Tensor> FullyShardedUnit::start_gather() {
  NoGradGuard no_grad;
  const auto options = tensor::TensorOptions(compute_dtype_).device(slots_.front().shard.device());
  // One all-gather: every parameter's block packed in one buffer (cast to the dtype the module
  // computes in), a row of it per rank.
  const Tensor packed = tensor::empty({shard_numel_}, options);
  for (const Slot& slot : slots_) packed.narrow(0, slot.offset, slot.block_numel()).copy_(slot.shard.reshape({-1}));
  const Tensor gathered = tensor::empty({pg_->size(), shard_numel_}, options);
  std::vector<Tensor> rows;
  for (int64_t r = 0; r < pg_->size(); ++r) rows.push_back(gathered.select(0, r));
  ++stats_.gathers;
  return {pg_->allgather(rows, packed), gathered};
}

Tensor FullyShardedUnit::gather_blocks() {
  if (prefetch_) {
    const Prefetch p = std::move(*prefetch_);
    prefetch_.reset();
    wait_for(p.work, name_, "gathering the parameters (prefetched)");
    record_collective("all-gather", p.issued, finished(*p.work), kGatherTrack, compute_dtype_, ", prefetched");
    if (p.epoch == forward_epoch) return p.gathered;
    // Issued in an earlier forward that did not reach this unit: the shards changed since.
  }
  const auto issued = Timeline::Clock::now();
  auto [work, gathered] = start_gather();
  wait_for(work, name_, "gathering the parameters");
  record_collective("all-gather", issued, finished(*work), kGatherTrack, compute_dtype_);
  return gathered;
}

void FullyShardedUnit::prefetch(bool for_backward) {
  const State wanted = for_backward ? State::kFreedAfterForward : State::kSharded;
  if (slots_.empty() || state_ != wanted || prefetch_) return;
  const auto issued = Timeline::Clock::now();
  auto [work, gathered] = start_gather();
  prefetch_ = Prefetch{std::move(work), gathered, forward_epoch, issued};
  ++stats_.prefetches;
}

void FullyShardedUnit::fill(const Slot& slot, const Tensor& gathered, const Tensor& full) {
  const Tensor by_rows = full.reshape(with_rows(slot.full_shape, slot.rows));
  for (int64_t r = 0; r < pg_->size(); ++r) {
    const int64_t first = r * slot.block_rows;
    const int64_t count = std::max<int64_t>(0, std::min(slot.rows, first + slot.block_rows) - first);
    if (count == 0) continue;
    by_rows.narrow(0, first, count)
        .copy_(gathered.select(0, r)
                   .narrow(0, slot.offset, slot.block_numel())
                   .view(with_rows(slot.full_shape, slot.block_rows))
                   .narrow(0, 0, count));
  }
}

void FullyShardedUnit::unshard() {
  if (slots_.empty() || state_ == State::kGathered) return;
  NoGradGuard no_grad;
  const Tensor gathered = gather_blocks();
  for (Slot& slot : slots_) {
    if (state_ == State::kFreedAfterForward) {
      // The forward's saved tensors still refer to this storage: its bytes again, the same
      // values, and the version they recorded.
      const tensor::Storage& storage = slot.param.storage();
      storage.restore_bytes(static_cast<size_t>(slot.param.numel()) * slot.param.element_size());
      fill(slot, gathered, slot.param);
      storage.restore_version(slot.version);
      continue;
    }
    // A storage of its own from the allocator, whose bytes can be freed after the forward.
    const size_t nbytes =
        static_cast<size_t>(tensor::shape_numel(slot.full_shape)) * tensor::element_size(compute_dtype_);
    const Tensor full = Tensor::make(tensor::Storage(nbytes, tensor::allocator_for(slot.shard.device())),
                                     slot.full_shape, tensor::contiguous_strides(slot.full_shape), 0, compute_dtype_);
    fill(slot, gathered, full);
    slot.param.set_data(full);
    slot.version = full.storage().version();
  }
  state_ = State::kGathered;
  stats_.gathered = true;
}

void FullyShardedUnit::free_after_forward() {
  if (state_ != State::kGathered || !options_.reshard_after_forward()) return;
  for (const Slot& slot : slots_) slot.param.storage().free_bytes();
  state_ = State::kFreedAfterForward;
  stats_.gathered = false;
  record_instant("free");
}

void FullyShardedUnit::arm() {
  if (armed_ || slots_.empty()) return;
  armed_ = true;
  pending_ = slots_.size();
  ready_.assign(slots_.size(), false);
}

void FullyShardedUnit::check_unchanged() const {
  if (state_ != State::kGathered) return;
  for (const Slot& slot : slots_) {
    TDDP_CHECK(slot.param.storage().version() == slot.version,
               "fully_shard({}): a parameter of shape {} was changed in place while gathered; the next gather would "
               "overwrite it from the shards: change the shard instead (ddp::sharded_parameters), or the module "
               "before fully_shard",
               name_, tensor::format_shape(slot.full_shape));
  }
}

void FullyShardedUnit::reshard() {
  check_unchanged();
  for (const Slot& slot : slots_) slot.param.set_data(nothing_like(slot.shard, compute_dtype_));
  state_ = State::kSharded;
  stats_.gathered = false;
}

void FullyShardedUnit::on_gradient(size_t slot) {
  TDDP_CHECK(armed_,
             "fully_shard({}): a gradient arrived after this unit's backward was over: a second backward through one "
             "forward is not supported (retain the graph and call backward once on the sum)",
             name_);
  if (pending_ == slots_.size()) {
    // The first gradient of this backward: whatever the backward does not reach is reduced as
    // zeros when it ends (or, without gradient sync, nothing is reduced).
    autograd::Engine::queue_callback([this] {
      if (armed_) end_backward();
      finish_reduce();
    });
  }
  if (!ready_[slot]) {
    ready_[slot] = true;
    if (--pending_ == 0) end_backward();
  }
}

void FullyShardedUnit::end_backward() {
  record("backward", compute_start_, Timeline::Clock::now());
  if (requires_gradient_sync_) {
    reduce_gradients();
    return;
  }
  // No sync (gradient accumulation): the full gradients stay and add up over the backward
  // passes until one that syncs reduces their sum; the parameters are freed as usual.
  reshard();
  armed_ = false;
}

void FullyShardedUnit::reduce_gradients() {
  check_unchanged();  // before the collective: every rank throws alike
  NoGradGuard no_grad;
  const int64_t world = pg_->size();
  const auto options = tensor::TensorOptions(reduce_dtype_).device(slots_.front().shard.device());
  // Row r holds every parameter's block r of its gradient (zeros where it has none, and in
  // the padding), in the reduce dtype.
  const Tensor packed = tensor::empty({world, shard_numel_}, options);
  for (const Slot& slot : slots_) {
    const Tensor grad = slot.param.grad();
    const Tensor by_rows = grad.defined() ? grad.reshape(with_rows(slot.full_shape, slot.rows)) : Tensor();
    for (int64_t r = 0; r < world; ++r) {
      const int64_t first = r * slot.block_rows;
      const int64_t count =
          by_rows.defined() ? std::max<int64_t>(0, std::min(slot.rows, first + slot.block_rows) - first) : 0;
      const Tensor block = packed.select(0, r)
                               .narrow(0, slot.offset, slot.block_numel())
                               .view(with_rows(slot.full_shape, slot.block_rows));
      if (count > 0) block.narrow(0, 0, count).copy_(by_rows.narrow(0, first, count));
      if (count < slot.block_rows) block.narrow(0, count, slot.block_rows - count).zero_();
    }
  }
  // float16 sums overflow early (65504): divided by W first, as FSDP's pre-divide; any other
  // dtype is divided after the sum, on this rank's 1/W of the elements (finish_reduce).
  if (reduce_dtype_ == tensor::kFloat16) packed.mul_(1.0 / static_cast<double>(world));
  const Tensor mine = tensor::empty({shard_numel_}, options);
  std::vector<Tensor> inputs;
  for (int64_t r = 0; r < world; ++r) inputs.push_back(packed.select(0, r));
  // Launched, not waited for: it travels while the backward goes on; finish_reduce, at the
  // backward's end, waits and writes the shards' gradients.
  const auto launched = Timeline::Clock::now();
  pending_reduce_ = PendingReduce{pg_->reduce_scatter(mine, inputs, comm::ReduceOp::kSum), mine, launched};
  for (const Slot& slot : slots_) slot.param.mutable_grad() = Tensor();  // copied into `packed`
  reshard();
  record_instant("free");
  armed_ = false;
  ++stats_.reduce_scatters;
}

void FullyShardedUnit::finish_reduce() {
  if (!pending_reduce_) return;
  const PendingReduce done = std::move(*pending_reduce_);
  pending_reduce_.reset();
  wait_for(done.work, name_, "reduce-scattering the gradients");
  record_collective("reduce-scatter", done.launched, finished(*done.work), kReduceTrack, reduce_dtype_);
  NoGradGuard no_grad;
  // The average, as DDP's: the sum over the ranks divided by W (DDP divides each bucket before
  // its allreduce: the same numbers when W is a power of two, within a rounding otherwise).
  if (reduce_dtype_ != tensor::kFloat16) done.mine.mul_(1.0 / static_cast<double>(pg_->size()));
  for (const Slot& slot : slots_) {
    Tensor grad = done.mine.narrow(0, slot.offset, slot.block_numel()).view(slot.shard.sizes());
    if (grad.dtype() != slot.shard.dtype()) grad = grad.to(slot.shard.dtype());  // mixed precision
    Tensor& into = slot.shard.mutable_grad();
    if (into.defined()) {
      into.add_(grad);
    } else {
      into = grad;
    }
  }
}

void FullyShardedUnit::begin_forward(bool root) {
  TDDP_CHECK(!root || !options_.deterministic() || !tensor::GradMode::is_enabled() || (exact_ && exact_->in_step()),
             "fully_shard({}): with the deterministic option, training forwards run inside "
             "ddp::deterministic_step(module, inputs, targets, chunk_loss) (with grad mode off, e.g. for evaluation, "
             "they run anywhere)",
             name_);
  is_root_ = root;
  if (root) {
    ++forward_epoch;
    forward_order.clear();
    // The root broadcasts every buffer of its module (running statistics) from rank 0 when
    // the previous forward trained, as DDP's broadcast_buffers does.
    if (options_.broadcast_buffers() && pg_->size() > 1 && buffers_need_sync_) {
      if (const std::shared_ptr<nn::Module> module = module_.lock()) {
        NoGradGuard no_grad;
        for (const Tensor& b : module->buffers()) wait_for(pg_->broadcast(b, 0), name_, "broadcasting the buffers");
      }
    }
    buffers_need_sync_ = tensor::GradMode::is_enabled();
  }
  const bool first_call = std::none_of(forward_order.begin(), forward_order.end(),
                                       [this](const auto& u) { return u.lock().get() == this; });
  if (first_call) forward_order.push_back(weak_from_this());
  unshard();
  compute_start_ = Timeline::Clock::now();
  if (tensor::GradMode::is_enabled()) arm();
  // The next unit's gather, issued now so that it travels while this unit computes (the order
  // is the previous forward's).
  if (const std::shared_ptr<FullyShardedUnit> next = next_forward_.lock()) next->prefetch(/*for_backward=*/false);
}

void FullyShardedUnit::end_forward() {
  record("forward", compute_start_, Timeline::Clock::now());
  if (!tensor::GradMode::is_enabled()) {
    reshard();
  } else if (!is_root_) {
    free_after_forward();
  }
  if (!is_root_) return;
  // The root's forward is over: each unit's successor in the forward and in the backward
  // (the reverse order, the root's own backward first), for the next prefetches.
  std::vector<std::shared_ptr<FullyShardedUnit>> order;
  for (const auto& u : forward_order) {
    if (std::shared_ptr<FullyShardedUnit> unit = u.lock()) order.push_back(std::move(unit));
  }
  for (size_t i = 0; i < order.size(); ++i) {
    order[i]->next_forward_ = i + 1 < order.size() ? order[i + 1] : nullptr;
    order[i]->next_backward_ = i == 0 ? order.back() : i >= 2 ? order[i - 1] : nullptr;
  }
  if (order.size() == 1) order[0]->next_backward_.reset();
}

void FullyShardedUnit::begin_backward() {
  unshard();
  compute_start_ = Timeline::Clock::now();
  if (const std::shared_ptr<FullyShardedUnit> next = next_backward_.lock()) next->prefetch(/*for_backward=*/true);
}

}  // namespace tinyddp::ddp
