// DistributedDataParallel: see distributed.h.
#include "ddp/distributed.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <unordered_set>

#include <fmt/format.h>

#include "comm/init.h"
#include "tensor/ops.h"

namespace tinyddp::ddp {

using tensor::NoGradGuard;

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<comm::ProcessGroup> pg, DDPOptions options)
    : Module("DistributedDataParallel"), module_(std::move(module)), pg_(pg ? std::move(pg) : comm::default_group()),
      options_(options) {
  TDDP_CHECK(module_ != nullptr, "DistributedDataParallel: the module is null");
  TDDP_CHECK(options_.bucket_cap_mb() > 0 && options_.first_bucket_cap_mb() > 0,
             "DistributedDataParallel: bucket caps must be positive");
  register_module("module", module_);  // parameters appear as "module.<name>", as in PyTorch
  // Parameters that require grad, each once even if shared between layers.
  std::vector<std::string> names;
  std::unordered_set<const tensor::TensorImpl*> seen;
  for (const auto& [name, p] : module_->named_parameters()) {
    if (!p.requires_grad() || !seen.insert(p.impl()).second) continue;
    params_.push_back(p);
    names.push_back(name);
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    TDDP_CHECK(params_[i].device() == params_.front().device(),
               "DistributedDataParallel: parameters are on several devices ('{}' on {}, '{}' on {}); move the module to "
               "one device (module->to(device)) before wrapping it",
               names.front(), params_.front().device().str(), names[i], params_[i].device().str());
    TDDP_CHECK(pg_->backend() != "nccl" || params_[i].is_cuda(),
               "DistributedDataParallel: the nccl backend needs the module on this rank's GPU, but parameter '{}' is on "
               "{} (call module->to(Device(kCUDA, local_rank)) first, or use the gloo backend)",
               names[i], params_[i].device().str());
  }
  control_device_ = control_device(*pg_, params_);
  verify_same_parameters(names);
  std::vector<Tensor> state = params_;
  for (const Tensor& b : module_->buffers()) state.push_back(b);
  broadcast_coalesced(state);
  ReducerOptions reducer_options;
  reducer_options.first_bucket_cap_bytes = static_cast<size_t>(options_.first_bucket_cap_mb() * (1 << 20));
  reducer_options.bucket_cap_bytes = static_cast<size_t>(options_.bucket_cap_mb() * (1 << 20));
  reducer_options.find_unused_parameters = options_.find_unused_parameters();
  reducer_options.gradient_as_bucket_view = options_.gradient_as_bucket_view();
  reducer_options.static_graph = options_.static_graph();
  reducer_ = std::make_unique<Reducer>(params_, names, pg_, reducer_options);
  if (options_.timeline().empty()) {
    if (const char* env = std::getenv("TINYDDP_DDP_TIMELINE"); env != nullptr && *env != '\0') options_.timeline(env);
  }
  if (!options_.timeline().empty()) reducer_->enable_timeline();
}

DistributedDataParallel::~DistributedDataParallel() {
  if (options_.timeline().empty()) return;
  try {
    write_timeline(fmt::format("{}.rank{}.json", options_.timeline(), pg_->rank()));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "DistributedDataParallel: %s\n", e.what());  // never throw from a destructor
  }
}

void DistributedDataParallel::write_timeline(const std::string& path) const {
  TDDP_CHECK(!options_.timeline().empty(), "write_timeline: the timeline option is off (DDPOptions().timeline(path))");
  reducer_->timeline().write(path, pg_->rank());
}

void DistributedDataParallel::verify_same_parameters(const std::vector<std::string>& names) const {
  // Each rank describes its parameters as int64s: count, then (dtype, ndim, sizes...) each.
  std::vector<int64_t> mine{static_cast<int64_t>(params_.size())};
  for (const Tensor& p : params_) {
    mine.push_back(static_cast<int64_t>(p.dtype()));
    mine.push_back(p.dim());
    mine.insert(mine.end(), p.sizes().begin(), p.sizes().end());
  }
  const int size = pg_->size();
  // Exchange the lengths, then the descriptions padded to the longest.
  const tensor::TensorOptions control = tensor::TensorOptions(tensor::kInt64).device(control_device_);
  const Tensor length = tensor::from_vector(std::vector<int64_t>{static_cast<int64_t>(mine.size())}, {}, control_device_);
  std::vector<Tensor> lengths;
  for (int r = 0; r < size; ++r) lengths.push_back(tensor::zeros({1}, control));
  pg_->allgather(lengths, length)->wait();
  int64_t longest = 0;
  for (const Tensor& l : lengths) longest = std::max(longest, l.item<int64_t>());
  std::vector<int64_t> padded = mine;
  padded.resize(static_cast<size_t>(longest), -1);
  std::vector<Tensor> all;
  for (int r = 0; r < size; ++r) all.push_back(tensor::zeros({longest}, control));
  pg_->allgather(all, tensor::from_vector(padded, {}, control_device_))->wait();
  const std::vector<int64_t> reference = all[0].to_vector<int64_t>();
  for (int r = 1; r < size; ++r) {
    const std::vector<int64_t> other = all[r].to_vector<int64_t>();
    if (other == reference) continue;
    if (other[0] != reference[0]) {
      throw Error(fmt::format("DistributedDataParallel: rank 0 has {} parameters that require grad but rank {} has {}; "
                              "every rank must wrap the same model",
                              reference[0], r, other[0]));
    }
    // Find the first parameter whose description differs.
    size_t pos = 1;
    for (int64_t k = 0; k < reference[0]; ++k) {
      const int64_t ndim = reference[pos + 1];
      const bool same = std::equal(reference.begin() + static_cast<int64_t>(pos), reference.begin() + static_cast<int64_t>(pos) + 2 + ndim,
                                   other.begin() + static_cast<int64_t>(pos));
      if (!same) {
        const auto describe = [](const std::vector<int64_t>& d, size_t at) {
          tensor::Shape shape(d.begin() + static_cast<int64_t>(at) + 2, d.begin() + static_cast<int64_t>(at) + 2 + std::max<int64_t>(d[at + 1], 0));
          return fmt::format("{} {}", tensor::dtype_name(static_cast<tensor::DType>(d[at])), tensor::format_shape(shape));
        };
        throw Error(fmt::format("DistributedDataParallel: parameter {} ('{}' on this rank) is {} on rank 0 but {} on rank {}; "
                                "every rank must wrap the same model",
                                k, names[k], describe(reference, pos), describe(other, pos), r));
      }
      pos += 2 + static_cast<size_t>(ndim);
    }
  }
}

void DistributedDataParallel::broadcast_coalesced(const std::vector<Tensor>& tensors, int root) const {
  NoGradGuard no_grad;
  constexpr int64_t kChunkBytes = int64_t{256} << 20;
  std::map<std::pair<std::string, int>, std::vector<Tensor>> by_kind;  // (device, dtype)
  for (const Tensor& t : tensors) by_kind[{t.device().str(), static_cast<int>(t.dtype())}].push_back(t);
  for (const auto& [kind, group] : by_kind) {
    size_t start = 0;
    while (start < group.size()) {
      // One chunk: tensors up to about kChunkBytes, flattened into one buffer.
      size_t end = start;
      int64_t bytes = 0, numel = 0;
      while (end < group.size() && (end == start || bytes + static_cast<int64_t>(group[end].nbytes()) <= kChunkBytes)) {
        bytes += static_cast<int64_t>(group[end].nbytes());
        numel += group[end].numel();
        ++end;
      }
      const Tensor flat = tensor::empty({numel}, tensor::TensorOptions(group[start].dtype()).device(group[start].device()));
      int64_t offset = 0;
      for (size_t i = start; i < end; ++i) {
        flat.narrow(0, offset, group[i].numel()).view(group[i].sizes()).copy_(group[i]);
        offset += group[i].numel();
      }
      pg_->broadcast(flat, root)->wait();
      offset = 0;
      for (size_t i = start; i < end; ++i) {
        group[i].copy_(flat.narrow(0, offset, group[i].numel()).view(group[i].sizes()));
        offset += group[i].numel();
      }
      start = end;
    }
  }
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  reducer_->check_previous_iteration();
  if (joining_) {
    TDDP_CHECK(require_sync_, "DistributedDataParallel::join: no_sync is not supported inside join");
    // How many ranks still have inputs (the joined ones add 0 in their shadow loop).
    const Tensor active = tensor::ones({1}, tensor::TensorOptions(tensor::kInt64).device(control_device_));
    pg_->allreduce(active)->wait();
    const int64_t count = active.item<int64_t>();
    TDDP_CHECK(!(join_options_.throw_on_early_termination && count < pg_->size()),
               "DistributedDataParallel::join: {} of {} ranks ran out of inputs (throw_on_early_termination)",
               pg_->size() - count, pg_->size());
    reducer_->set_active_ranks(join_options_.divide_by_initial_world_size ? 0 : static_cast<int>(count));
    ++join_iterations_;
  }
  if (options_.broadcast_buffers() && require_sync_) {
    const std::vector<Tensor> buffers = module_->buffers();
    if (!buffers.empty()) broadcast_coalesced(buffers);
  }
  const auto start = Timeline::Clock::now();
  const Tensor out = module_->forward(input);
  reducer_->record_forward(start, Timeline::Clock::now());
  if (tensor::GradMode::is_enabled() && is_training()) reducer_->prepare_for_backward(require_sync_, {out});
  return out;
}

}  // namespace tinyddp::ddp

namespace tinyddp::ddp {

void DistributedDataParallel::join(const std::function<void()>& loop, JoinOptions options) {
  TDDP_CHECK(!joining_, "DistributedDataParallel::join: already joining");
  joining_ = true;
  join_options_ = options;
  join_iterations_ = 0;
  struct Reset {
    DistributedDataParallel& ddp;
    ~Reset() {
      ddp.joining_ = false;
      ddp.reducer_->set_active_ranks(0);
    }
  } reset{*this};
  loop();
  // Out of inputs: mirror the others' iterations until every rank is done.
  NoGradGuard no_grad;
  while (true) {
    const Tensor active = tensor::zeros({1}, tensor::TensorOptions(tensor::kInt64).device(control_device_));
    pg_->allreduce(active)->wait();
    const int64_t count = active.item<int64_t>();
    if (count == 0) break;
    TDDP_CHECK(!options.throw_on_early_termination,
               "DistributedDataParallel::join: rank {} ran out of inputs while {} rank(s) had more "
               "(throw_on_early_termination)",
               pg_->rank(), count);
    if (options_.broadcast_buffers()) {
      const std::vector<Tensor> buffers = module_->buffers();
      if (!buffers.empty()) broadcast_coalesced(buffers);
    }
    reducer_->shadow_iteration();
  }
  // Everyone is done: the rank with the most iterations (ties: the highest rank) holds the
  // model every rank agrees on.
  const Tensor key =
      tensor::from_vector(std::vector<int64_t>{join_iterations_ * pg_->size() + pg_->rank()}, {}, control_device_);
  pg_->allreduce(key, comm::ReduceOp::kMax)->wait();
  const int authority = static_cast<int>(key.item<int64_t>() % pg_->size());
  std::vector<Tensor> state = params_;
  for (const Tensor& b : module_->buffers()) state.push_back(b);
  broadcast_coalesced(state, authority);
}

}  // namespace tinyddp::ddp
