// DistributedDataParallel (distributed.h): construction (the parameters to synchronise, the
// same model on every rank, rank 0's weights broadcast, the Reducer, the timeline's clock) and
// the forward's steps (prepare_for_forward, the bucket rebuild, the buffers' broadcast,
// prepare_for_backward). Its side of Join: distributed_join.cc.
#include "tinyddp/ddp/distributed.h"

#include "tinyddp/ddp/layer_collectives.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <unordered_set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tinyddp/comm/flatten.h"
#include "tinyddp/comm/init.h"
#include "tinyddp/comm/objects.h"
#include "tinyddp/tensor/ops.h"

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
  const nn::OrderedDict<Tensor> named_params = module_->named_parameters();
  const nn::OrderedDict<Tensor> named_buffers = module_->named_buffers();
  for (const std::string& name : options_.params_and_buffers_to_ignore()) {
    TDDP_CHECK(named_params.contains(name) || named_buffers.contains(name),
               "DistributedDataParallel: params_and_buffers_to_ignore names '{}', which is neither a parameter nor a "
               "buffer of the module",
               name);
    ignored_.insert(name);
  }
  // Parameters that require grad, each once even if shared between layers.
  std::unordered_set<const tensor::TensorImpl*> seen;
  for (const auto& [name, p] : named_params) {
    if (ignored_.count(name) != 0 || !p.requires_grad() || !seen.insert(p.impl()).second) continue;
    params_.push_back(p);
    param_names_.push_back(name);
  }
  TDDP_CHECK(
      !params_.empty(),
      "DistributedDataParallel: the module has no parameter that requires a gradient (apart from those in "
      "params_and_buffers_to_ignore), so there is nothing to synchronise; DistributedDataParallel is not needed");
  for (size_t i = 0; i < params_.size(); ++i) {
    TDDP_CHECK(
        params_[i].device() == params_.front().device(),
        "DistributedDataParallel: parameters are on several devices ('{}' on {}, '{}' on {}); move the module to "
        "one device (module->to(device)) before wrapping it",
        param_names_.front(), params_.front().device().str(), param_names_[i], params_[i].device().str());
    const bool on_gpu = params_[i].is_cuda();
    TDDP_CHECK(pg_->tensor_rules().accepts(params_[i].device()),
               "DistributedDataParallel: the {} backend needs the module on {}, but parameter '{}' is on {} ({}); {}",
               pg_->backend(), on_gpu ? "the CPU" : "this rank's GPU", param_names_[i], params_[i].device().str(),
               pg_->tensor_rules().takes,
               on_gpu ? "call module->to(kCPU) first"
                      : "call module->to(Device(kCUDA, local_rank)) first, or use the gloo backend");
  }
  control_device_ = control_device(*pg_, params_);
  if (options_.deterministic()) check_deterministic();
  if (options_.timeline().empty()) {
    if (const char* env = std::getenv("TINYDDP_DDP_TIMELINE"); env != nullptr && *env != '\0') options_.timeline(env);
  }
  const bool any_timeline = verify_same_parameters(param_names_).any_timeline;
  // Every parameter (frozen ones too) and buffer starts as rank 0's.
  broadcast_coalesced(module_states());
  if (options_.deterministic()) {
    // No Reducer and no gradient hooks: deterministic_step sums the gradients. The timeline
    // gets a recorder of its own (the step's user spans).
    start_exact_steps();
    deterministic_recorder_ = std::make_unique<Recorder>(-1);
  } else {
    ReducerOptions reducer_options;
    reducer_options.first_bucket_cap_bytes(static_cast<size_t>(options_.first_bucket_cap_mb() * (1 << 20)));
    reducer_options.bucket_cap_bytes(static_cast<size_t>(options_.bucket_cap_mb() * (1 << 20)));
    reducer_options.find_unused_parameters(options_.find_unused_parameters());
    reducer_options.gradient_as_bucket_view(options_.gradient_as_bucket_view());
    reducer_options.static_graph(options_.static_graph());
    reducer_ = std::make_unique<Reducer>(params_, param_names_, pg_, reducer_options);
  }
  if (!options_.timeline().empty()) {
    recorder().enable_timeline();
    observe_layer_collectives(true);
  }
  // One clock for every rank's timeline (agree_on_time_zero), when any rank records one:
  // every rank takes part then, whether its own timeline is on or not, so ranks that disagree
  // on the option still make the same collectives.
  if (any_timeline) recorder().align_timeline(agree_on_time_zero(*pg_, control_device_));
}

Recorder& DistributedDataParallel::recorder() const {
  return reducer_ ? reducer_->recorder() : *deterministic_recorder_;
}

DDPStats DistributedDataParallel::stats() const {
  return reducer_ ? reducer_->stats() : deterministic_recorder_->stats({}, false);
}

const Reducer& DistributedDataParallel::reducer() const {
  TDDP_CHECK(reducer_ != nullptr,
             "DistributedDataParallel::reducer: the deterministic option has no Reducer (exact_sum() holds its sums)");
  return *reducer_;
}

std::vector<Tensor> DistributedDataParallel::module_states() const {
  std::vector<Tensor> states;
  std::unordered_set<const tensor::TensorImpl*> seen;
  for (const auto& [name, p] : module_->named_parameters()) {
    if (ignored_.count(name) == 0 && seen.insert(p.impl()).second) states.push_back(p);
  }
  for (const Tensor& b : synced_buffers()) states.push_back(b);
  return states;
}

std::vector<Tensor> DistributedDataParallel::synced_buffers() const {
  std::vector<Tensor> buffers;
  for (const auto& [name, b] : module_->named_buffers()) {
    if (ignored_.count(name) == 0) buffers.push_back(b);
  }
  return buffers;
}

// Layers with collectives of their own (the LayerCollectives role: SyncBatchNorm) report them
// to this DDP's timeline while it lives.
void DistributedDataParallel::observe_layer_collectives(bool on) {
  std::vector<std::shared_ptr<nn::Module>> pending{module_};
  while (!pending.empty()) {
    const std::shared_ptr<nn::Module> m = pending.back();
    pending.pop_back();
    if (auto* sync = dynamic_cast<LayerCollectives*>(m.get())) {
      sync->on_collective = nullptr;
      if (on) {
        sync->on_collective = [recorder = &recorder()](const std::string& name, Recorder::Clock::time_point start,
                                                       Recorder::Clock::time_point end) {
          recorder->layer_collective(name, start, end);
        };
      }
    }
    for (const auto& child : m->children()) pending.push_back(child);
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  if (options_.timeline().empty()) return;
  observe_layer_collectives(false);
  try {
    write_timeline(fmt::format("{}.rank{}.json", options_.timeline(), pg_->rank()));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "DistributedDataParallel: %s\n", e.what());  // never throw from a destructor
  }
}

void DistributedDataParallel::write_timeline(const std::string& path) const {
  TDDP_CHECK(!options_.timeline().empty(), "write_timeline: the timeline option is off (DDPOptions().timeline(path))");
  recorder().timeline().write(path, pg_->rank());
}

DistributedDataParallel::RanksAgreed DistributedDataParallel::verify_same_parameters(
    const std::vector<std::string>& names) const {
  // Each rank describes its parameters as int64s: count, then (dtype, ndim, sizes..., strides...)
  // each; and, last, whether its timeline is on (not compared: any rank's turns the clock
  // agreement on).
  std::vector<int64_t> mine{static_cast<int64_t>(params_.size())};
  for (const Tensor& p : params_) {
    mine.push_back(static_cast<int64_t>(p.dtype()));
    mine.push_back(p.dim());
    mine.insert(mine.end(), p.sizes().begin(), p.sizes().end());
    mine.insert(mine.end(), p.strides().begin(), p.strides().end());
  }
  mine.push_back(options_.timeline().empty() ? 0 : 1);
  std::vector<std::vector<int64_t>> all = comm::allgather_ints(*pg_, control_device_, mine);
  bool any_timeline = false;
  for (std::vector<int64_t>& description : all) {
    any_timeline = any_timeline || description.back() != 0;
    description.pop_back();
  }
  const std::vector<int64_t>& reference = all[0];
  for (int r = 1; r < pg_->size(); ++r) {
    std::vector<int64_t> other = all[r];
    if (other == reference) continue;
    other.resize(std::max(other.size(), reference.size()), -1);  // compared as padded to the longer
    if (other[0] != reference[0]) {
      throw Error(
          fmt::format("DistributedDataParallel: rank 0 has {} parameters that require grad but rank {} has {}; "
                      "every rank must wrap the same model",
                      reference[0], r, other[0]));
    }
    // Find the first parameter whose description differs.
    size_t pos = 1;
    for (int64_t k = 0; k < reference[0]; ++k) {
      const int64_t ndim = reference[pos + 1];
      const auto span = [&](const std::vector<int64_t>& d, size_t from, int64_t count) {
        return std::vector<int64_t>(d.begin() + static_cast<int64_t>(from),
                                    d.begin() + static_cast<int64_t>(from) + count);
      };
      const bool same_shape = span(reference, pos, 2 + ndim) == span(other, pos, 2 + ndim);
      const bool same_strides =
          same_shape && span(reference, pos + 2 + ndim, ndim) == span(other, pos + 2 + ndim, ndim);
      if (!same_strides) {
        const auto format_ints = [](const std::vector<int64_t>& v) { return fmt::format("[{}]", fmt::join(v, ", ")); };
        const auto describe = [&](const std::vector<int64_t>& d) {
          const int64_t n = std::max<int64_t>(d[pos + 1], 0);
          std::string text = fmt::format("{} {}", tensor::dtype_name(static_cast<tensor::DType>(d[pos])),
                                         format_ints(span(d, pos + 2, n)));
          if (same_shape) text += " with strides " + format_ints(span(d, pos + 2 + n, n));
          return text;
        };
        throw Error(
            fmt::format("DistributedDataParallel: parameter {} ('{}' on this rank) is {} on rank 0 but {} on rank {}; "
                        "every rank must wrap the same model",
                        k, names[k], describe(reference), describe(other), r));
      }
      pos += 2 + 2 * static_cast<size_t>(ndim);
    }
  }
  return RanksAgreed{any_timeline};
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
      int64_t bytes = 0;
      while (end < group.size() && (end == start || bytes + static_cast<int64_t>(group[end].nbytes()) <= kChunkBytes)) {
        bytes += static_cast<int64_t>(group[end].nbytes());
        ++end;
      }
      const std::vector<Tensor> chunk(group.begin() + static_cast<int64_t>(start),
                                      group.begin() + static_cast<int64_t>(end));
      const Tensor flat = comm::flatten(chunk);
      pg_->broadcast(flat, root)->wait();
      comm::unflatten_into(flat, chunk);
      start = end;
    }
  }
}

int DistributedDataParallel::find_common_rank(bool candidate) const {
  const int64_t common = comm::allreduce_int(*pg_, control_device_, candidate ? pg_->rank() : -1, comm::ReduceOp::kMax);
  TDDP_CHECK(common >= 0, "DistributedDataParallel: internal error: no rank qualified as the source of the model");
  return static_cast<int>(common);
}

void DistributedDataParallel::sync_module_buffers(bool candidate) {
  // As PyTorch: only when the previous forward synchronised (require_forward_param_sync).
  if (!require_forward_param_sync_ || !options_.broadcast_buffers()) return;
  const std::vector<Tensor> buffers = synced_buffers();
  if (buffers.empty()) return;
  broadcast_coalesced(buffers, join_config().enable ? find_common_rank(candidate) : 0);
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  return run_forward([&] { return nn::Value((*module_)(input)); }).tensor();
}

std::vector<Tensor> DistributedDataParallel::forward_many(const std::vector<Tensor>& inputs) {
  return run_forward([&] {
           const std::vector<Tensor> outputs = module_->call(inputs);
           return nn::Value::list({outputs.begin(), outputs.end()});
         })
      .tensors();
}

nn::Value DistributedDataParallel::forward_nested(const std::vector<Tensor>& inputs) {
  return run_forward([&] { return module_->call_nested(inputs); });
}

nn::Value DistributedDataParallel::forward_kwargs(const std::vector<Tensor>& args, const nn::Value& kwargs) {
  return run_forward([&] { return module_->call_kwargs(args, kwargs); });
}

nn::Value DistributedDataParallel::run_forward(const std::function<nn::Value()>& module_forward) {
  const bool grad_enabled = tensor::GradMode::is_enabled();
  if (options_.deterministic()) {  // the module alone: deterministic_step sums the gradients
    TDDP_CHECK(!grad_enabled || exact_->in_step(),
               "DistributedDataParallel: with the deterministic option, training forwards run inside "
               "deterministic_step(inputs, targets, chunk_loss) (with grad mode off, e.g. for evaluation, they run "
               "anywhere)");
    return module_forward();
  }
  const bool synchronize = grad_enabled && require_sync_;
  if (synchronize) reducer_->prepare_for_forward();
  notify_join_context();
  if (grad_enabled) reducer_->rebuild_buckets();  // also reports an unfinished previous iteration
  sync_module_buffers(/*candidate=*/true);
  if (join_config().enable) {
    // Tell joined ranks whether this iteration's backward synchronises (no_sync: no).
    should_sync_flag_ = tensor::from_vector(std::vector<int64_t>{require_sync_ ? 1 : 0}, {}, control_device_);
    should_sync_work_ = pg_->allreduce(should_sync_flag_);
  }
  reducer_->recorder().forward_start();
  nn::Value outputs = module_forward();
  reducer_->recorder().forward_end();
  require_forward_param_sync_ = synchronize;
  if (synchronize) {
    // find_unused_parameters: what no output tensor reaches gets no gradient this iteration.
    reducer_->prepare_for_backward(
        options_.find_unused_parameters() && !options_.static_graph() ? outputs.tensors() : std::vector<Tensor>{});
  }
  return outputs;
}

}  // namespace tinyddp::ddp
