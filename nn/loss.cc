// mse_loss, cross_entropy and nll_loss: see loss.h. mse_loss is one graph node, its backward
// formula right below its forward; cross_entropy's rows are one fused op (tensor/fused.h).
#include "tinyddp/nn/loss.h"

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "tinyddp/tensor/autocast.h"
#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/graph.h"

namespace tinyddp::nn {

using tensor::NoGradGuard;
using tensor::SavedTensor;
using tensor::Shape;

namespace {

// A class weight, where given: one value per class, in the scores' dtype and on their device.
void check_class_weight(const Tensor& weight, const Tensor& scores, int64_t classes, const char* op) {
  if (!weight.defined()) return;
  TDDP_CHECK(weight.dim() == 1 && weight.size(0) == classes,
             "{}: weight should be defined for all {} classes or no classes, got a weight of shape {}", op, classes,
             tensor::format_shape(weight.sizes()));
  TDDP_CHECK(weight.dtype() == scores.dtype() && weight.device() == scores.device(),
             "{}: weight ({}, {}) must have the input's dtype and device ({}, {})", op,
             tensor::dtype_name(weight.dtype()), weight.device().str(), tensor::dtype_name(scores.dtype()),
             scores.device().str());
}

enum class Reduction { kMean, kSum, kNone };

Reduction parse_reduction(std::string_view reduction, const char* op) {
  if (reduction == "mean") return Reduction::kMean;
  if (reduction == "sum") return Reduction::kSum;
  TDDP_CHECK(reduction == "none", "{}: '{}' is not a valid value for reduction (use 'mean', 'sum' or 'none')", op,
             reduction);
  return Reduction::kNone;
}

// A loss of class scores per position (cross_entropy, nll_loss) on an input [C] (one sample,
// a 0-d target) or [N, C, d1, ...] (targets [N, d1, ...]: a language model's [B, C, T]): the
// class dim moved last, one row per position, `rows_loss` of the rows [positions, C] and the
// flat targets, as torch.nn.functional's; "none" keeps the targets' shape. Errors name `op`
// and the scores as `noun` and `possessive` ("logits", "logits'"; "an input", "input's").
Tensor over_positions(const Tensor& scores, const Tensor& targets, std::string_view reduction, const char* op,
                      const char* noun, const char* possessive,
                      const std::function<Tensor(const Tensor&, const Tensor&)>& rows_loss) {
  TDDP_CHECK(scores.dim() >= 1, "{}: expected {} with a class dim, got a 0-d tensor", op, noun);
  const int64_t class_dim = scores.dim() == 1 ? 0 : 1;
  Shape want;  // the targets' shape: the scores' without the class dim
  for (int64_t d = 0; d < scores.dim(); ++d) {
    if (d != class_dim) want.push_back(scores.size(d));
  }
  TDDP_CHECK(targets.sizes() == want,
             "{}: expected targets of shape {} (the {} shape {} without the class dim {}), got {}", op,
             tensor::format_shape(want), possessive, tensor::format_shape(scores.sizes()), class_dim,
             tensor::format_shape(targets.sizes()));
  const int64_t classes = scores.size(class_dim);
  Shape order{0};
  for (int64_t d = 2; d < scores.dim(); ++d) order.push_back(d);
  order.push_back(1);
  const Tensor rows = scores.dim() == 1 ? scores.unsqueeze(0) : scores.permute(order).reshape({-1, classes});
  const Tensor out = rows_loss(rows, targets.reshape({-1}));
  return reduction == "none" ? out.reshape(targets.sizes()) : out;
}

// The class indices 0 .. classes - 1 on `device` ([1, classes], int64), made once per device
// and count: on a GPU, making them copies from the host, which a CUDA graph's capture cannot.
Tensor class_indices(int64_t classes, const tensor::Device& device) {
  static std::mutex mutex;
  static auto* cache = new std::map<std::pair<std::string, int64_t>, Tensor>();  // never destroyed
  std::lock_guard<std::mutex> lock(mutex);
  Tensor& entry = (*cache)[{device.str(), classes}];
  if (!entry.defined()) entry = tensor::arange(classes, tensor::TensorOptions().device(device)).unsqueeze(0);
  return entry;
}

// cross_entropy's marks of the targets: one_hot [batch, classes] (each row's target class,
// times weight[target] with a class weight; a zero row where the target is ignored: it is
// outside [0, classes), or masked when ignore_index is a class), kept [batch, 1], and what
// the mean divides by: the kept rows, or the sum of their targets' weights (PyTorch's). On a
// GPU that count stays a tensor (the same float32 quotient: an integer count is exact in
// float), so the host reads nothing back but the targets' range, and not that while a CUDA
// graph is captured (check_range false: the warm-up steps before it checked them).
struct TargetMarks {
  Tensor one_hot, kept, count_on_gpu;
  double count = 0;
};

TargetMarks target_marks(const Tensor& logits, const Tensor& targets, int64_t ignore_index, const Tensor& weight,
                         bool check_range) {
  const int64_t classes = logits.size(1);
  TargetMarks m;
  const Tensor ignored = tensor::eq(targets, static_cast<double>(ignore_index));
  m.kept = tensor::ne(targets, static_cast<double>(ignore_index)).to(logits.dtype()).unsqueeze(1);
  if (check_range) tensor::check_class_targets(targets, ignore_index, classes, "cross_entropy");
  m.one_hot =
      tensor::masked_fill(tensor::eq(targets.unsqueeze(1), class_indices(classes, logits.device())).to(logits.dtype()),
                          ignored.unsqueeze(1), 0.0);
  if (weight.defined()) m.one_hot = tensor::mul(m.one_hot, weight.unsqueeze(0));
  const Tensor total = weight.defined() ? tensor::sum(m.one_hot) : tensor::sum(m.kept);
  if (logits.is_cuda()) {
    m.count_on_gpu = total;
  } else {
    m.count = weight.defined() ? total.item<double>()
                               : static_cast<double>(targets.numel() - tensor::sum(ignored).item<int64_t>());
  }
  return m;
}

// cross_entropy of 16-bit logits, composed as before the fused op, in the logits' dtype:
// log_softmax, the targets' one-hot marks, products and sums, and a backward of
// (softmax mass - distribution) / count op by op, each step rounded to the dtype (as close to
// PyTorch's 16-bit log_softmax and nll_loss as the fused kernel's float arithmetic, and the
// numbers the mixed-precision tests were written against).
Tensor cross_entropy_16bit(const Tensor& logits, const Tensor& targets, int64_t ignore_index, Reduction reduction,
                           double label_smoothing, const Tensor& weight) {
  const int64_t classes = logits.size(1);
  check_class_weight(weight, logits, classes, "cross_entropy");
  const bool on_gpu = logits.is_cuda();  // (target_marks: what a GPU reads back)
  const bool check_range = !(on_gpu && tensor::cuda::is_capturing(logits.device().index));
  // log_probs is recorded (saved, it keeps its history for a double backward); the rest is not.
  const Tensor log_probs = tensor::log_softmax(logits, 1);
  Tensor dist, mass, out;
  TargetMarks marks;
  {
    NoGradGuard no_grad;
    marks = target_marks(logits, targets, ignore_index, weight, check_range);
    const Tensor &one_hot = marks.one_hot, &kept = marks.kept;
    const double count = marks.count;
    const Tensor& count_on_gpu = marks.count_on_gpu;
    // Sums of rows as the reduction asks: the mean over the kept rows, the sum, or per row.
    const auto reduce = [&](const Tensor& weighted) {
      if (reduction == Reduction::kNone) return tensor::neg(tensor::sum(weighted, {1}));
      const Tensor total = tensor::sum(weighted);
      if (reduction == Reduction::kSum) return tensor::neg(total);
      return tensor::neg(on_gpu ? tensor::div(total, count_on_gpu) : tensor::div(total, count));
    };
    out = reduce(tensor::mul(log_probs, one_hot));
    dist = one_hot;
    // Each row's weight, what its softmax is scaled by in the gradient: weight[targets[i]]
    // (without a class weight, kept itself).
    if (weight.defined()) mass = tensor::sum(one_hot, {1}, /*keepdim=*/true);
    if (label_smoothing > 0) {
      // PyTorch: (1 - s) nll + (s / classes) smooth, smooth = -sum_c weight[c] log_probs over
      // kept rows; the gradient's target distribution is (1 - s) one_hot + s / classes weight.
      const double share = label_smoothing / static_cast<double>(classes);
      const Tensor spread = weight.defined() ? tensor::mul(kept, weight.unsqueeze(0)) : kept;
      out = tensor::add(tensor::mul(out, 1 - label_smoothing),
                        tensor::mul(reduce(tensor::mul(log_probs, spread)), share));
      dist = tensor::add(tensor::mul(one_hot, 1 - label_smoothing), tensor::mul(spread, share));
      if (weight.defined()) {
        mass = tensor::add(tensor::mul(mass, 1 - label_smoothing),
                           tensor::mul(kept, tensor::mul(tensor::sum(weight), share)));
      }
    }
  }
  // grad_logits [batch, classes] = grad_out * (softmax(logits) mass - dist), mass = 1 on kept
  // rows without a class weight; / count for the mean, row by row for "none"
  if (tensor::needs_grad(logits)) {
    tensor::record_op("CrossEntropyBackward", out, {logits, targets},
                      [sl = SavedTensor(log_probs), sd = SavedTensor(dist), kept = marks.kept, mass,
                       count = marks.count, count_on_gpu = marks.count_on_gpu, reduction](const Tensor& g) {
                        const Tensor probs = tensor::exp(sl.get("CrossEntropyBackward"));
                        const Tensor diff = mass.defined()
                                                ? tensor::sub(tensor::mul(probs, mass), sd.get("CrossEntropyBackward"))
                                                : tensor::mul(tensor::sub(probs, sd.get("CrossEntropyBackward")), kept);
                        Tensor scale = g.unsqueeze(-1);  // "none": each row's own; "sum": one number
                        if (reduction == Reduction::kMean)
                          scale = count_on_gpu.defined() ? tensor::div(g, count_on_gpu) : tensor::div(g, count);
                        return std::vector<Tensor>{tensor::mul(diff, scale), Tensor()};
                      });
  }
  return out;
}

}  // namespace

Tensor mse_loss(const Tensor& input_in, const Tensor& target_in, std::string_view reduction_name) {
  Tensor input = input_in, target = target_in;  // float32 under autocast
  if (tensor::detail::autocast_args(tensor::detail::CastPolicy::kFloat32, {&input, &target})) {
    return mse_loss(input, target, reduction_name);
  }
  const Reduction reduction = parse_reduction(reduction_name, "mse_loss");
  TDDP_CHECK(input.defined() && target.defined(), "mse_loss: undefined input or target");
  TDDP_CHECK(input.sizes() == target.sizes(), "mse_loss: input shape {} and target shape {} differ",
             tensor::format_shape(input.sizes()), tensor::format_shape(target.sizes()));
  // diff is recorded (saved, it keeps its history for a double backward); the rest is not.
  const Tensor diff = tensor::sub(input, target);
  Tensor out;
  {
    NoGradGuard no_grad;
    const Tensor squares = tensor::mul(diff, diff);
    out = reduction == Reduction::kMean  ? tensor::mean(squares)
          : reduction == Reduction::kSum ? tensor::sum(squares)
                                         : squares;
  }
  // grad_input = grad_out * 2 (input - target) (/ n for the mean), grad_target = -grad_input
  if (tensor::needs_grad(input, target)) {
    const bool need_input = input.requires_grad(), need_target = target.requires_grad();
    const double factor = reduction == Reduction::kMean ? 2.0 / static_cast<double>(input.numel()) : 2.0;
    tensor::record_op(
        "MseLossBackward", out, {input, target},
        [sd = SavedTensor(diff), factor, need_input, need_target](const Tensor& g) {
          const Tensor grad = tensor::mul(sd.get("MseLossBackward"), tensor::mul(g, factor));
          return std::vector<Tensor>{need_input ? grad : Tensor(), need_target ? tensor::neg(grad) : Tensor()};
        });
  }
  return out;
}

namespace {
// cross_entropy with class probabilities for targets (the logits' shape, floating): each
// position's -sum_c weight[c] q[c] log_softmax(logits)[c], q the targets mixed with the uniform
// distribution by label_smoothing; "mean" divides by the positions (numel / classes), as
// PyTorch's, whatever the weights. Composed of tensor ops, so its gradient is theirs.
Tensor cross_entropy_probabilities(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                   Reduction reduction, double label_smoothing, const Tensor& weight) {
  TDDP_CHECK(ignore_index < 0, "cross_entropy: ignore_index is not supported for floating point target");
  TDDP_CHECK(label_smoothing >= 0 && label_smoothing <= 1,
             "cross_entropy: label_smoothing must be between 0.0 and 1.0, got {}", label_smoothing);
  TDDP_CHECK(logits.defined() && logits.dim() >= 1, "cross_entropy: expected logits with a class dim");
  TDDP_CHECK(targets.sizes() == logits.sizes(),
             "cross_entropy: expected int64 class targets, or class probabilities of the logits' shape {}; got {} "
             "targets of shape {}",
             tensor::format_shape(logits.sizes()), tensor::dtype_name(targets.dtype()),
             tensor::format_shape(targets.sizes()));
  const int64_t class_dim = logits.dim() == 1 ? 0 : 1, classes = logits.size(class_dim);
  check_class_weight(weight, logits, classes, "cross_entropy");
  Tensor q = targets.to(logits.dtype());
  if (label_smoothing > 0) q = tensor::add(tensor::mul(q, 1 - label_smoothing), label_smoothing / classes);
  Tensor terms = tensor::mul(tensor::log_softmax(logits, class_dim), q);
  if (weight.defined()) {
    Shape shape(static_cast<size_t>(logits.dim() - class_dim), 1);  // [C, 1, ...] against [N, C, ...]
    shape[0] = classes;
    terms = tensor::mul(terms, weight.reshape(shape));
  }
  const Tensor losses = tensor::neg(tensor::sum(terms, {class_dim}));
  if (reduction == Reduction::kNone) return losses;
  const Tensor total = tensor::sum(losses);
  return reduction == Reduction::kSum ? total : tensor::div(total, static_cast<double>(logits.numel() / classes));
}
}  // namespace

Tensor cross_entropy(const Tensor& logits_in, const Tensor& targets, int64_t ignore_index,
                     std::string_view reduction_name, double label_smoothing, const Tensor& weight_in) {
  Tensor logits = logits_in, weight = weight_in;  // float32 under autocast
  if (tensor::detail::autocast_args(tensor::detail::CastPolicy::kFloat32, {&logits, &weight})) {
    return cross_entropy(logits, targets, ignore_index, reduction_name, label_smoothing, weight);
  }
  const Reduction reduction = parse_reduction(reduction_name, "cross_entropy");
  if (targets.defined() && targets.is_floating_point())
    return cross_entropy_probabilities(logits, targets, ignore_index, reduction, label_smoothing, weight);
  if (logits.defined() && targets.defined() && logits.dim() != 2) {
    return over_positions(logits, targets, reduction_name, "cross_entropy", "logits", "logits'",
                          [&](const Tensor& rows, const Tensor& flat) {
                            return cross_entropy(rows, flat, ignore_index, reduction_name, label_smoothing, weight);
                          });
  }
  TDDP_CHECK(label_smoothing >= 0 && label_smoothing <= 1,
             "cross_entropy: label_smoothing must be between 0.0 and 1.0, got {}", label_smoothing);
  TDDP_CHECK(logits.defined() && targets.defined(), "cross_entropy: undefined logits or targets");
  TDDP_CHECK(logits.dim() == 2, "cross_entropy: expected logits of shape [batch, classes], got {}",
             tensor::format_shape(logits.sizes()));
  TDDP_CHECK(targets.dtype() == tensor::kInt64, "cross_entropy: expected int64 class targets, got {}",
             tensor::dtype_name(targets.dtype()));
  TDDP_CHECK(targets.dim() == 1 && targets.size(0) == logits.size(0),
             "cross_entropy: expected targets of shape [{}] for logits of shape {}, got {}", logits.size(0),
             tensor::format_shape(logits.sizes()), tensor::format_shape(targets.sizes()));
  check_class_weight(weight, logits, logits.size(1), "cross_entropy");
  if (tensor::is_16bit_float(logits.dtype())) {
    return cross_entropy_16bit(logits, targets, ignore_index, reduction, label_smoothing, weight);
  }
  // The rows' losses in one kernel each way (tensor/fused.h), then the reduction: "mean" divides
  // by the kept rows, or the sum of their targets' weights (PyTorch's), as a tensor (NaN when
  // every row is ignored, as PyTorch; on a GPU nothing is read back).
  const Tensor losses = tensor::cross_entropy_rows(logits, targets, weight, ignore_index, label_smoothing);
  if (reduction == Reduction::kNone) return losses;
  const Tensor total = tensor::sum(losses);
  if (reduction == Reduction::kSum) return total;
  Tensor count;
  if (!weight.defined() && targets.is_cpu()) {  // the kept rows, counted on the host
    const Tensor t = targets.contiguous();
    const int64_t* v = t.data_ptr<int64_t>();
    const int64_t kept = t.numel() - std::count(v, v + t.numel(), ignore_index);
    return tensor::div(total, tensor::full({}, static_cast<double>(kept), tensor::TensorOptions(logits.dtype())));
  }
  {
    NoGradGuard no_grad;
    const Tensor ignored = tensor::eq(targets, static_cast<double>(ignore_index));
    const Tensor kept = tensor::logical_not(ignored).to(logits.dtype());
    count = weight.defined() ? tensor::sum(tensor::mul(
                                   tensor::index_select(weight, 0, tensor::masked_fill(targets, ignored, 0.0)), kept))
                             : tensor::sum(kept);
  }
  return tensor::div(total, count);
}

Tensor nll_loss(const Tensor& input_in, const Tensor& target, int64_t ignore_index, std::string_view reduction_name,
                const Tensor& weight_in) {
  Tensor input = input_in, weight = weight_in;  // float32 under autocast
  if (tensor::detail::autocast_args(tensor::detail::CastPolicy::kFloat32, {&input, &weight})) {
    return nll_loss(input, target, ignore_index, reduction_name, weight);
  }
  const Reduction reduction = parse_reduction(reduction_name, "nll_loss");
  TDDP_CHECK(input.defined() && target.defined(), "nll_loss: undefined input or target");
  TDDP_CHECK(target.dtype() == tensor::kInt64, "nll_loss: expected int64 class targets, got {}",
             tensor::dtype_name(target.dtype()));
  if (input.dim() != 2) {
    return over_positions(input, target, reduction_name, "nll_loss", "an input", "input's",
                          [&](const Tensor& rows, const Tensor& flat) {
                            return nll_loss(rows, flat, ignore_index, reduction_name, weight);
                          });
  }
  TDDP_CHECK(target.dim() == 1 && target.size(0) == input.size(0),
             "nll_loss: expected targets of shape [{}] for an input of shape {}, got {}", input.size(0),
             tensor::format_shape(input.sizes()), tensor::format_shape(target.sizes()));
  check_class_weight(weight, input, input.size(1), "nll_loss");
  const Tensor ignored = tensor::eq(target, static_cast<double>(ignore_index));
  tensor::check_class_targets(target, ignore_index, input.size(1), "nll_loss");
  // -input[i, target[i]] (times weight[target[i]]), 0 where ignored (such a row reads class
  // 0, then drops it).
  const Tensor classes = tensor::masked_fill(target, ignored, 0.0);
  Tensor losses = tensor::neg(tensor::gather(input, 1, classes.unsqueeze(1)).squeeze(1));
  Tensor row_weights;
  if (weight.defined()) {
    row_weights = tensor::masked_fill(tensor::index_select(weight, 0, classes), ignored, 0.0);
    losses = tensor::mul(losses, row_weights);
  }
  losses = tensor::masked_fill(losses, ignored, 0.0);
  if (reduction == Reduction::kNone) return losses;
  if (reduction == Reduction::kSum) return tensor::sum(losses);
  // The mean over the kept rows, or over their targets' weights (PyTorch's); NaN when every
  // row is ignored, as PyTorch.
  const double kept = weight.defined() ? tensor::sum(row_weights).item<double>()
                                       : static_cast<double>(target.numel() - tensor::sum(ignored).item<int64_t>());
  return tensor::div(tensor::sum(losses), kept);
}

}  // namespace tinyddp::nn
