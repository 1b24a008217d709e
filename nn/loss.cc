// mse_loss and cross_entropy: see loss.h.
#include "nn/loss.h"

namespace tinyddp::nn {

Tensor mse_loss(const Tensor& input, const Tensor& target) {
  TDDP_CHECK(input.defined() && target.defined(), "mse_loss: undefined input or target");
  TDDP_CHECK(input.sizes() == target.sizes(), "mse_loss: input shape {} and target shape {} differ",
             tensor::format_shape(input.sizes()), tensor::format_shape(target.sizes()));
  const Tensor diff = tensor::sub(input, target);
  return tensor::mean(tensor::mul(diff, diff));
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets) {
  TDDP_CHECK(logits.defined() && targets.defined(), "cross_entropy: undefined logits or targets");
  TDDP_CHECK(logits.dim() == 2, "cross_entropy: expected logits of shape [batch, classes], got {}",
             tensor::format_shape(logits.sizes()));
  TDDP_CHECK(targets.dtype() == tensor::kInt64, "cross_entropy: expected int64 class targets, got {}",
             tensor::dtype_name(targets.dtype()));
  TDDP_CHECK(targets.dim() == 1 && targets.size(0) == logits.size(0),
             "cross_entropy: expected targets of shape [{}] for logits of shape {}, got {}", logits.size(0),
             tensor::format_shape(logits.sizes()), tensor::format_shape(targets.sizes()));
  const int64_t classes = logits.size(1);
  if (targets.numel() > 0) {
    const int64_t low = -tensor::max(tensor::neg(targets)).item<int64_t>();
    const int64_t high = tensor::max(targets).item<int64_t>();
    TDDP_CHECK(low >= 0 && high < classes, "cross_entropy: target {} is out of bounds for {} classes",
               low < 0 ? low : high, classes);
  }
  // one_hot[i, c] = (targets[i] == c): picks each row's target log-probability.
  const Tensor one_hot = tensor::eq(targets.unsqueeze(1), tensor::arange(classes).unsqueeze(0)).to(logits.dtype());
  const Tensor picked = tensor::sum(tensor::mul(tensor::log_softmax(logits, 1), one_hot), {1});
  return tensor::neg(tensor::mean(picked));
}

}  // namespace tinyddp::nn
