// Fused optimizer steps (tensor/fused.h): the checks that decide whether a parameter qualifies
// (contiguous, with a gradient and momentum buffer of its shape and dtype), the backend's
// fused kernel where it has one (Backend::sgd_step, adam_step), and the version counters the
// update bumps.
#include "tinyddp/tensor/native/checks.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::tensor {

namespace {

bool fusable(const Tensor& t, const Tensor& param) {
  return t.device() == param.device() && t.is_contiguous() && t.dtype() == param.dtype() && t.sizes() == param.sizes();
}

}  // namespace

bool fused_sgd_step_(const Tensor& param, const Tensor& grad, Tensor* momentum_buffer, const SgdStep& step) {
  if (!param.defined() || !grad.defined()) return false;
  if (!param.is_contiguous() || !fusable(grad, param)) return false;
  const bool momentum = step.momentum != 0;
  if (momentum && momentum_buffer->defined() && !fusable(*momentum_buffer, param)) return false;
  Tensor* buf = momentum ? momentum_buffer : nullptr;
  if (!backend_for(param.device(), "fused_sgd_step_").sgd_step(param, grad, buf, step)) return false;
  param.storage().bump_version();
  if (momentum) buf->storage().bump_version();
  return true;
}

bool fused_adam_step_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                      const AdamStep& step) {
  if (!param.defined() || !grad.defined() || !exp_avg.defined() || !exp_avg_sq.defined()) return false;
  if (!param.is_contiguous() || !fusable(grad, param) || !fusable(exp_avg, param) || !fusable(exp_avg_sq, param)) {
    return false;
  }
  if (!backend_for(param.device(), "fused_adam_step_").adam_step(param, grad, exp_avg, exp_avg_sq, step)) return false;
  for (const Tensor* t : {&param, &exp_avg, &exp_avg_sq}) t->storage().bump_version();
  return true;
}

bool fused_adam_steps_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                       const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                       const AdamStep& step) {
  const size_t n = params.size();
  if (n == 0 || grads.size() != n || exp_avgs.size() != n || exp_avg_sqs.size() != n) return false;
  std::vector<Backend::AdamTensors> list;
  list.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const Tensor& p = params[i];
    if (!p.defined() || !grads[i].defined() || !exp_avgs[i].defined() || !exp_avg_sqs[i].defined()) return false;
    if (p.device() != params[0].device() || p.dtype() != params[0].dtype() || !p.is_contiguous()) return false;
    if (!fusable(grads[i], p) || !fusable(exp_avgs[i], p) || !fusable(exp_avg_sqs[i], p)) return false;
    list.push_back({p, grads[i], exp_avgs[i], exp_avg_sqs[i]});
  }
  if (!backend_for(params[0].device(), "fused_adam_steps_").adam_steps(list, step)) return false;
  for (const Backend::AdamTensors& t : list) {
    for (const Tensor* u : {&t.param, &t.exp_avg, &t.exp_avg_sq}) u->storage().bump_version();
  }
  return true;
}

}  // namespace tinyddp::tensor
