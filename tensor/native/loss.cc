// cross_entropy_rows (fused.h): cross-entropy's rows in one kernel each way where the backend has
// one (the forward keeps each row's maximum and log-sum, the backward writes the logits' gradient in one
// pass), else log_softmax and gathers. nn::cross_entropy reduces the rows.
#include <algorithm>
#include <tuple>

#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/graph.h"
#include "tinyddp/tensor/native/checks.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::tensor {

using namespace detail;

namespace {

constexpr const char* kOp = "cross_entropy";

void check_rows_inputs(const Tensor& logits, const Tensor& targets, const Tensor& weight, double label_smoothing) {
  check_defined(logits, kOp, "logits");
  check_defined(targets, kOp, "targets");
  TDDP_CHECK(logits.is_floating_point(), "cross_entropy: expected floating-point logits, got dtype {}",
             dtype_name(logits.dtype()));
  TDDP_CHECK(logits.dim() == 2, "cross_entropy: expected logits of shape [batch, classes], got {}",
             format_shape(logits.sizes()));
  TDDP_CHECK(targets.dtype() == kInt64, "cross_entropy: expected int64 class targets, got {}",
             dtype_name(targets.dtype()));
  TDDP_CHECK(targets.dim() == 1 && targets.size(0) == logits.size(0),
             "cross_entropy: expected targets of shape [{}] for logits of shape {}, got {}", logits.size(0),
             format_shape(logits.sizes()), format_shape(targets.sizes()));
  check_same_device(logits, targets, kOp, "logits", "targets");
  TDDP_CHECK(label_smoothing >= 0 && label_smoothing <= 1,
             "cross_entropy: label_smoothing must be between 0.0 and 1.0, got {}", label_smoothing);
  if (weight.defined()) {
    TDDP_CHECK(weight.dim() == 1 && weight.size(0) == logits.size(1),
               "cross_entropy: weight should be defined for all {} classes or no classes, got a weight of shape {}",
               logits.size(1), format_shape(weight.sizes()));
    check_same_dtype(weight, logits, kOp, "weight", "logits");
    check_same_device(weight, logits, kOp, "weight", "logits");
  }
  check_kernel_device(logits, kOp);
}

}  // namespace

// Ignored rows count as 0, which passes; a captured CUDA graph's warm-up steps checked its
// targets.
void check_class_targets(const Tensor& targets, int64_t ignore_index, int64_t classes, const char* op) {
  if (targets.numel() == 0) return;
  int64_t lowest = 0, highest = 0;
  if (targets.is_cpu()) {
    const Tensor t = targets.contiguous();
    const int64_t* v = t.data_ptr<int64_t>();
    lowest = highest = v[0] == ignore_index ? 0 : v[0];
    for (int64_t i = 1; i < t.numel(); ++i) {
      const int64_t value = v[i] == ignore_index ? 0 : v[i];
      lowest = std::min(lowest, value);
      highest = std::max(highest, value);
    }
  } else {
    if (targets.is_cuda() && cuda::is_capturing(targets.device().index)) return;
    std::tie(lowest, highest) =
        integer_extremes(masked_fill(targets, eq(targets, static_cast<double>(ignore_index)), 0.0));
  }
  TDDP_CHECK(lowest >= 0 && highest < classes, "{}: target {} is out of bounds for {} classes", op,
             lowest < 0 ? lowest : highest, classes);
}

namespace {

// Each row's target as a [N, 1] index, 0 where ignored (a row that reads class 0, then drops it).
Tensor safe_targets(const Tensor& targets, const Tensor& ignored) {
  return masked_fill(targets, ignored, 0.0).unsqueeze(1);
}

// The rows from recorded ops: -(1 - s) w[t] log_softmax[t] - s / C sum_c w[c] log_softmax[c].
Tensor composed_rows(const Tensor& logits, const Tensor& targets, const Tensor& ignored, const Tensor& weight,
                     double smoothing) {
  const Tensor log_probs = log_softmax(logits, 1), index = safe_targets(targets, ignored);
  Tensor loss = neg(gather(log_probs, 1, index).squeeze(1));
  if (weight.defined()) loss = mul(loss, index_select(weight, 0, index.squeeze(1)));
  if (smoothing > 0) {
    const Tensor spread = weight.defined() ? mul(log_probs, weight.unsqueeze(0)) : log_probs;
    const double share = smoothing / static_cast<double>(logits.size(1));
    loss = add(mul(loss, 1 - smoothing), mul(neg(sum(spread, {1})), share));
  }
  return masked_fill(loss, ignored, 0.0);
}

// The backward from recorded ops (create_graph): g (mass softmax(x) - dist), dist [N, C] the
// subtracted terms of fused.h's formula and mass [N, 1] their row sums, 0 on ignored rows.
Tensor composed_grad(const Tensor& logits, const Tensor& g, const Tensor& targets, const Tensor& weight,
                     int64_t ignore_index, double smoothing) {
  const int64_t classes = logits.size(1);
  const Tensor ignored = eq(targets, static_cast<double>(ignore_index));
  Tensor dist, mass;
  {
    NoGradGuard no_grad;
    const Tensor kept = ne(targets, static_cast<double>(ignore_index)).to(logits.dtype()).unsqueeze(1);
    const Tensor index = safe_targets(targets, ignored);
    const Tensor target_weight =
        weight.defined() ? mul(index_select(weight, 0, index.squeeze(1)).unsqueeze(1), kept) : kept;  // [N, 1]
    dist = mul(one_hot(index.squeeze(1), classes).to(logits.dtype()), mul(target_weight, 1 - smoothing));
    mass = mul(target_weight, 1 - smoothing);
    if (smoothing > 0) {
      const double share = smoothing / static_cast<double>(classes);
      const Tensor spread = weight.defined() ? mul(kept, weight.unsqueeze(0)) : kept.expand({-1, classes});
      dist = add(dist, mul(spread, share));
      mass = add(mass, mul(sum(spread, {1}, true), share));
    }
  }
  return mul(sub(mul(softmax(logits, 1), mass), dist), g.unsqueeze(1));
}

}  // namespace

Tensor cross_entropy_rows(const Tensor& logits, const Tensor& targets, const Tensor& weight, int64_t ignore_index,
                          double label_smoothing) {
  check_rows_inputs(logits, targets, weight, label_smoothing);
  const int64_t rows = logits.size(0), classes = logits.size(1);
  {
    NoGradGuard no_grad;
    check_class_targets(targets, ignore_index, classes, kOp);
  }
  const Tensor x = logits.contiguous(), t = targets.contiguous(), w = weight.defined() ? weight.contiguous() : weight;
  const Tensor loss = new_output({rows}, logits.dtype(), logits.device());
  const Tensor stats = new_output({rows, 2}, logits.dtype() == kFloat64 ? kFloat64 : kFloat32, logits.device());
  bool fused = false;
  if (rows * classes > 0) {
    NoGradGuard no_grad;
    fused = backend_for(logits.device(), kOp).cross_entropy(loss, stats, x, t, w, ignore_index, label_smoothing);
  }
  if (!fused) {
    Tensor ignored;
    {
      NoGradGuard no_grad;
      ignored = eq(targets, static_cast<double>(ignore_index));
    }
    return composed_rows(logits, targets, ignored, weight, label_smoothing);
  }
  if (!needs_grad(logits)) return loss;
  record_op("CrossEntropyBackward", loss, {logits},
            [sx = SavedTensor(x), stats, t, w, ignore_index, label_smoothing](const Tensor& g) {
              const Tensor& xs = sx.get("CrossEntropyBackward");
              if (GradMode::is_enabled()) {
                return std::vector<Tensor>{composed_grad(xs, g, t, w, ignore_index, label_smoothing)};
              }
              const Tensor grad = new_output(xs.sizes(), xs.dtype(), xs.device());
              const bool done =
                  backend_for(xs.device(), "cross_entropy backward")
                      .cross_entropy_backward(grad, g.contiguous(), xs, stats, t, w, ignore_index, label_smoothing);
              TDDP_CHECK(done, "cross_entropy: the backend ran the forward but declined the backward");
              return std::vector<Tensor>{grad};
            });
  return loss;
}

}  // namespace tinyddp::tensor
