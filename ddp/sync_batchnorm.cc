// SyncBatchNorm: see sync_batchnorm.h. The forward and backward below are written beside each
// other as one autograd::Function, from batch normalisation's steps (tensor/ops.h:
// batch_norm_mean_var, _elemt, _backward_reduce, _backward_elemt) with the collectives
// between them; shapes: x [N, C, ...], statistics [C].
#include "tinyddp/ddp/sync_batchnorm.h"

#include "tinyddp/autograd/function.h"
#include "tinyddp/comm/init.h"

namespace tinyddp::ddp {

namespace t = tinyddp::tensor;
using autograd::FunctionCtx;

namespace {

// [a (C), b (C)] -> one [2C] tensor, for one collective.
Tensor concat(const Tensor& a, const Tensor& b) {
  const int64_t c = a.size(0);
  const Tensor out = t::empty({2 * c}, t::TensorOptions(a.dtype()).device(a.device()));
  out.narrow(0, 0, c).copy_(a);
  out.narrow(0, c, c).copy_(b);
  return out;
}

// Runs `collective` (which waits for its work) and tells the module's observer how long it took.
template <typename F>
void timed(SyncBatchNorm* module, const char* name, F&& collective) {
  const auto start = SyncBatchNorm::Clock::now();
  collective();
  if (module->on_collective) module->on_collective(name, start, SyncBatchNorm::Clock::now());
}

struct SyncBatchNormFunction : autograd::Function<SyncBatchNormFunction> {
  // Statistics of the global batch: out = (x - mean) * invstd * weight + bias, running
  // statistics updated with `momentum` (the unbiased variance of the global batch).
  static Tensor forward(FunctionCtx* ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Tensor& running_mean, const Tensor& running_var, double momentum, double eps,
                        SyncBatchNorm* module, comm::ProcessGroup* group) {
    const int64_t channels = x.size(1), count = x.numel() / channels;
    // This rank's [mean (C), biased variance (C), count]; zeros for an empty batch.
    const Tensor local = t::zeros({2 * channels + 1}, t::TensorOptions(x.dtype()).device(x.device()));
    if (count > 0) {
      const auto [mean, var] = t::batch_norm_mean_var(x);
      local.narrow(0, 0, channels).copy_(mean);
      local.narrow(0, channels, channels).copy_(var);
      local.narrow(0, 2 * channels, 1).fill_(static_cast<double>(count));
    }
    const Tensor gathered = t::empty({group->size(), 2 * channels + 1}, t::TensorOptions(x.dtype()).device(x.device()));
    std::vector<Tensor> rows;
    for (int r = 0; r < group->size(); ++r) rows.push_back(gathered[r]);
    timed(module, "SyncBatchNorm allgather (statistics)", [&] { group->allgather(rows, local)->wait(); });
    // Combined over ranks: mean = sum n_r mean_r / n, var = sum n_r (var_r + (mean_r - mean)^2) / n.
    const Tensor counts = gathered.narrow(1, 2 * channels, 1);  // [W, 1]
    const Tensor means = gathered.narrow(1, 0, channels), vars = gathered.narrow(1, channels, channels);
    const double total = t::sum(counts).item<double>();
    TDDP_CHECK(total > 1,
               "SyncBatchNorm: expected more than 1 value per channel when training, got {} over all {} ranks (input "
               "shape {} on rank {})",
               total, group->size(), t::format_shape(x.sizes()), group->rank());
    const Tensor mean = t::div(t::sum(t::mul(means, counts), {0}), total);
    const Tensor spread = t::sub(means, mean);
    const Tensor var = t::div(t::sum(t::mul(t::add(vars, t::mul(spread, spread)), counts), {0}), total);
    const Tensor invstd = 1.0 / t::sqrt(t::add(var, eps));
    if (running_mean.defined()) running_mean.mul_(1.0 - momentum).add_(mean, momentum);
    if (running_var.defined()) running_var.mul_(1.0 - momentum).add_(var, momentum * total / (total - 1));
    ctx->save_for_backward({x, weight});
    ctx->saved_data["mean"] = mean;
    ctx->saved_data["invstd"] = invstd;
    ctx->saved_data["total"] = total;
    ctx->saved_data["group"] = group;
    ctx->saved_data["module"] = module;
    return t::batch_norm_elemt(x, weight, bias, mean, invstd);
  }

  // grad_weight = sum(dy * (x - mean)) * invstd and grad_bias = sum(dy), over this rank's
  // batch; grad_x needs both sums over the global batch (one allreduce):
  // grad_x = (dy - sum_dy / n - (x - mean) * invstd^2 * sum_dy_xmu / n) * invstd * weight,
  // with n the global batch's count (batch_norm_backward_elemt).
  static std::vector<Tensor> backward(FunctionCtx* ctx, const std::vector<Tensor>& grad_outputs) {
    // Its backward reduces over the ranks and is not itself recorded (as PyTorch's).
    TDDP_CHECK(!tensor::GradMode::is_enabled(),
               "SyncBatchNorm: double backward (create_graph) is not supported: its backward's allreduce is not "
               "differentiable");
    const std::vector<Tensor> saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &weight = saved[1], &dy = grad_outputs[0];
    const auto mean = ctx->saved_data.get<Tensor>("mean");
    const auto invstd = ctx->saved_data.get<Tensor>("invstd");
    const auto total = ctx->saved_data.get<double>("total");
    const auto [sum_dy, sum_dy_xmu] = t::batch_norm_backward_reduce(dy, x, mean);
    std::vector<Tensor> grads(9);
    if (ctx->needs_input_grad[1]) grads[1] = t::mul(sum_dy_xmu, invstd);
    if (ctx->needs_input_grad[2]) grads[2] = sum_dy;
    if (ctx->needs_input_grad[0]) {
      const Tensor sums = concat(sum_dy, sum_dy_xmu);  // a copy: the local sums above stay
      comm::ProcessGroup* group = ctx->saved_data.get<comm::ProcessGroup*>("group");
      timed(ctx->saved_data.get<SyncBatchNorm*>("module"), "SyncBatchNorm allreduce (gradient sums)",
            [&] { group->allreduce(sums)->wait(); });
      const int64_t channels = x.size(1);
      grads[0] = t::batch_norm_backward_elemt(dy, x, mean, invstd, weight, sums.narrow(0, 0, channels),
                                              sums.narrow(0, channels, channels), total);
    }
    return grads;
  }
};

}  // namespace

SyncBatchNorm::SyncBatchNorm(int64_t num_features, double eps, std::optional<double> momentum, bool affine,
                             bool track_running_stats, std::shared_ptr<comm::ProcessGroup> group)
    : BatchNorm("SyncBatchNorm", num_features, eps, momentum, affine, track_running_stats),
      process_group(std::move(group)) {}

SyncBatchNorm::SyncBatchNorm(const nn::BatchNorm& bn, std::shared_ptr<comm::ProcessGroup> group)
    : BatchNorm("SyncBatchNorm", bn.num_features, bn.eps, bn.momentum, false, false), process_group(std::move(group)) {
  affine = bn.affine;
  track_running_stats = bn.track_running_stats;
  if (affine) {
    weight = register_parameter("weight", bn.weight, bn.weight.requires_grad());
    bias = register_parameter("bias", bn.bias, bn.bias.requires_grad());
  }
  if (track_running_stats) {
    running_mean = register_buffer("running_mean", bn.running_mean);
    running_var = register_buffer("running_var", bn.running_var);
    num_batches_tracked = register_buffer("num_batches_tracked", bn.num_batches_tracked);
  }
  train(bn.is_training());
}

void SyncBatchNorm::check_input_dim(const Tensor& input) const {
  TDDP_CHECK(input.dim() >= 2, "SyncBatchNorm: expected at least 2D input [N, C, ...], got shape {}",
             t::format_shape(input.sizes()));
}

Tensor SyncBatchNorm::forward(const Tensor& input) {
  check_input_dim(input);
  check_channels(input);
  const double factor = advance_running_stats();
  std::shared_ptr<comm::ProcessGroup> group = process_group;
  if (!group && comm::is_initialized()) group = comm::default_group();
  // Only training with batch statistics on more than one rank communicates.
  if (!(is_training() && uses_batch_stats() && group && group->size() > 1)) {
    return t::batch_norm(input, running_mean, running_var, weight, bias, uses_batch_stats(), factor, eps);
  }
  // A 16-bit input (autocast's bfloat16 activations) with float32 parameters or statistics:
  // normalised in float32, the result rounded back once, by t::batch_norm's own rule.
  const bool narrow = t::batch_norm_widens(input, running_mean, weight);
  const Tensor x = narrow ? input.to(t::kFloat32) : input;
  const Tensor out =
      SyncBatchNormFunction::apply(x, weight, bias, running_mean, running_var, factor, eps, this, group.get());
  // In the input's memory format, as PyTorch's (a channels-last input, a channels-last output).
  return (narrow ? out.to(input.dtype()) : out).contiguous(input.suggest_memory_format());
}

std::shared_ptr<nn::Module> SyncBatchNorm::convert_sync_batchnorm(const std::shared_ptr<nn::Module>& module,
                                                                  std::shared_ptr<comm::ProcessGroup> group) {
  TDDP_CHECK(module != nullptr, "convert_sync_batchnorm: the module is null");
  const auto bn = std::dynamic_pointer_cast<nn::BatchNorm>(module);
  if (bn && !std::dynamic_pointer_cast<SyncBatchNorm>(module)) return std::make_shared<SyncBatchNorm>(*bn, group);
  for (const std::string& name : module->named_children().keys()) {
    const std::shared_ptr<nn::Module> child = module->named_children().at(name);
    const std::shared_ptr<nn::Module> converted = convert_sync_batchnorm(child, group);
    if (converted != child) module->replace_module(name, converted);
  }
  return module;
}

}  // namespace tinyddp::ddp
