// Fused optimizer steps (tensor/fused.h): the checks that decide whether a parameter qualifies
// (contiguous, with a gradient and momentum buffer of its shape and dtype), the backend's
// fused kernel where it has one (Backend::sgd_step, adam_steps), and the version counters the
// update bumps; the list ops foreach_norm and foreach_mul_.
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
  return fused_adam_steps_({param}, {grad}, {exp_avg}, {exp_avg_sq}, step);
}

namespace {

// A one-element tensor of param's dtype on its device (capturable Adam's numbers).
bool device_number(const Tensor& t, const Tensor& param) {
  return t.defined() && t.numel() == 1 && t.device() == param.device() && t.dtype() == param.dtype();
}

// The device numbers' entries for n parameters, each as device_number, keep where defined.
bool device_numbers_fit(const AdamDeviceNumbers& numbers, const std::vector<Tensor>& params) {
  const size_t n = params.size();
  if (numbers.denom_scale.size() != n || numbers.eps_term.size() != n) return false;
  if (numbers.keep.defined() && !device_number(numbers.keep, params[0])) return false;
  for (size_t i = 0; i < n; ++i) {
    if (!device_number(numbers.denom_scale[i], params[i]) || !device_number(numbers.eps_term[i], params[i])) {
      return false;
    }
  }
  return true;
}

}  // namespace

bool fused_adam_steps_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                       const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                       const AdamStep& step, const AdamDeviceNumbers* device_numbers) {
  const size_t n = params.size();
  if (n == 0 || grads.size() != n || exp_avgs.size() != n || exp_avg_sqs.size() != n) return false;
  std::vector<Backend::AdamTensors> list;
  list.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const Tensor& p = params[i];
    if (!p.defined() || !grads[i].defined() || !exp_avgs[i].defined() || !exp_avg_sqs[i].defined()) return false;
    if (p.device() != params[0].device() || p.dtype() != params[0].dtype() || !p.is_contiguous()) return false;
    if (!fusable(grads[i], p) || !fusable(exp_avgs[i], p) || !fusable(exp_avg_sqs[i], p)) return false;
    list.push_back({p, grads[i], exp_avgs[i], exp_avg_sqs[i], {}, {}, {}});
  }
  if (device_numbers != nullptr) {
    if (!device_numbers_fit(*device_numbers, params)) return false;
    for (size_t i = 0; i < n; ++i) {
      list[i].denom_scale = device_numbers->denom_scale[i];
      list[i].eps_term = device_numbers->eps_term[i];
      list[i].keep = device_numbers->keep;
    }
  }
  if (!backend_for(params[0].device(), "fused_adam_steps_").adam_steps(list, step)) return false;
  for (const Backend::AdamTensors& t : list) {
    for (const Tensor* u : {&t.param, &t.exp_avg, &t.exp_avg_sq}) u->storage().bump_version();
  }
  return true;
}

bool fused_sgd_steps_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                      std::vector<Tensor>* momentum_buffers, const SgdStep& step) {
  const size_t n = params.size();
  const bool momentum = step.momentum != 0;
  if (n == 0 || grads.size() != n) return false;
  if (momentum && (momentum_buffers == nullptr || momentum_buffers->size() != n)) return false;
  std::vector<Backend::SgdTensors> list;
  list.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const Tensor& p = params[i];
    const Tensor buf = momentum ? (*momentum_buffers)[i] : Tensor();
    if (!p.defined() || !grads[i].defined()) return false;
    if (p.device() != params[0].device() || p.dtype() != params[0].dtype() || !p.is_contiguous()) return false;
    if (!fusable(grads[i], p) || (buf.defined() && !fusable(buf, p))) return false;
    list.push_back({p, grads[i], buf});
  }
  if (!backend_for(params[0].device(), "fused_sgd_steps_").sgd_steps(list, step)) return false;
  for (size_t i = 0; i < n; ++i) {
    params[i].storage().bump_version();
    if (!momentum) continue;
    (*momentum_buffers)[i] = list[i].momentum_buffer;
    list[i].momentum_buffer.storage().bump_version();
  }
  return true;
}

namespace {

// Every tensor defined, floating, contiguous, of the first's dtype and device (`op` in errors);
// whether the backend's list kernels may take them (else each is composed).
bool check_list(const std::vector<Tensor>& tensors, const char* op) {
  bool listable = true;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    TDDP_CHECK(t.defined(), "{}: tensor {} is undefined", op, i);
    TDDP_CHECK(t.is_floating_point(), "{}: expected floating-point tensors, tensor {} is {}", op, i,
               dtype_name(t.dtype()));
    TDDP_CHECK(t.dtype() == tensors[0].dtype() && t.device() == tensors[0].device(),
               "{}: expected tensors of one dtype and device, tensor {} is {} on {}, tensor 0 {} on {}", op, i,
               dtype_name(t.dtype()), t.device().str(), dtype_name(tensors[0].dtype()), tensors[0].device().str());
    listable = listable && t.is_contiguous();
  }
  return listable;
}

}  // namespace

Tensor foreach_norm(const std::vector<Tensor>& tensors) {
  TDDP_CHECK(!tensors.empty(), "foreach_norm: expected at least one tensor");
  NoGradGuard no_grad;
  const bool listable = check_list(tensors, "foreach_norm");
  const Tensor out =
      detail::new_output({static_cast<int64_t>(tensors.size())}, tensors[0].dtype(), tensors[0].device());
  if (listable && backend_for(out.device(), "foreach_norm").foreach_norm(out, tensors)) return out;
  std::vector<Tensor> norms;
  for (const Tensor& x : tensors) {
    const Tensor wide = is_16bit_float(x.dtype()) ? x.to(kFloat32) : x;
    norms.push_back(sqrt(sum(mul(wide, wide))).to(x.dtype()).reshape({1}));
  }
  return cat(norms, 0);
}

void foreach_mul_(const std::vector<Tensor>& tensors, const Tensor& scale) {
  if (tensors.empty()) return;
  NoGradGuard no_grad;
  const bool listable = check_list(tensors, "foreach_mul_");
  TDDP_CHECK(scale.defined() && scale.numel() == 1 && scale.device() == tensors[0].device(),
             "foreach_mul_: expected a one-element scale on the tensors' device ({})", tensors[0].device().str());
  const Tensor factor = scale.to(tensors[0].dtype()).reshape({});
  if (listable && backend_for(factor.device(), "foreach_mul_").foreach_mul_(tensors, factor)) {
    for (const Tensor& t : tensors) t.storage().bump_version();
    return;
  }
  for (const Tensor& t : tensors) t.mul_(factor);
}

}  // namespace tinyddp::tensor
