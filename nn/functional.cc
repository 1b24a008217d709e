// The composites of functional.h: activations and helpers written with tensor ops.
#include "tinyddp/nn/functional.h"

#include <cmath>
#include <functional>

#include "tinyddp/nn/embedding_bag.h"
#include "tinyddp/tensor/all.h"
#include "tinyddp/tensor/graph.h"

namespace tinyddp::nn::functional {

using namespace tensor;

namespace {
void check_floating(const Tensor& x, const char* op) {
  TDDP_CHECK(x.defined(), "{}: the input is an undefined tensor", op);
  TDDP_CHECK(x.is_floating_point(), "{}: expected a floating-point input, got dtype {}", op, dtype_name(x.dtype()));
}
}  // namespace

Tensor elu(const Tensor& x, double alpha) {
  check_floating(x, "elu");
  // the gradient: 1 for x > 0, alpha exp(x) otherwise (at 0 too), as PyTorch's
  return where(gt(x, 0.0), x, mul(expm1(x), alpha));
}

Tensor selu(const Tensor& x) {
  constexpr double kAlpha = 1.6732632423543772848170429916717;
  constexpr double kScale = 1.0507009873554804934193349852946;
  return mul(elu(x, kAlpha), kScale);
}

Tensor silu(const Tensor& x) {
  check_floating(x, "silu");
  return mul(x, sigmoid(x));
}

Tensor softplus(const Tensor& x, double beta, double threshold) {
  check_floating(x, "softplus");
  const Tensor bx = mul(x, beta);
  // The soft branch sees beta x capped at the threshold, so that exp never overflows where
  // the linear branch is taken (an inf there would make the untaken branch's zero gradient NaN).
  const Tensor soft = div(log1p(exp(clamp(bx, std::nullopt, threshold))), beta);
  return where(gt(bx, threshold), x, soft);
}

Tensor mish(const Tensor& x) { return mul(x, tanh(softplus(x))); }

Tensor hardtanh(const Tensor& x, double min_val, double max_val) {
  check_floating(x, "hardtanh");
  TDDP_CHECK(min_val <= max_val, "hardtanh: min_val ({}) cannot be greater than max_val ({})", min_val, max_val);
  const Tensor inside = logical_and(gt(x, min_val), lt(x, max_val));
  return where(inside, x, clamp(x.detach(), min_val, max_val));
}

Tensor relu6(const Tensor& x) { return hardtanh(x, 0.0, 6.0); }

namespace {
// relu6(x + 3) / 6, PyTorch's hardsigmoid and (times x) hardswish, computed without recording;
// their gradients are recorded below as PyTorch's kernels compute them.
Tensor hard_sigmoid_value(const Tensor& x) {
  NoGradGuard no_grad;
  return div(clamp(add(x, 3.0), 0.0, 6.0), 6.0);
}
}  // namespace

Tensor hardsigmoid(const Tensor& x) {
  check_floating(x, "hardsigmoid");
  const Tensor out = hard_sigmoid_value(x);
  // grad_x = grad_out / 6 strictly inside (-3, 3), else 0; PyTorch's kernel multiplies by
  // 1/6 rounded to float32 in every dtype, so float64 gradients carry that rounding too.
  if (needs_grad(x)) {
    record_op("HardsigmoidBackward", out, {x}, [sx = SavedTensor(x)](const Tensor& g) {
      const Tensor& v = sx.get("HardsigmoidBackward");
      const Tensor inside = logical_and(gt(v, -3.0), lt(v, 3.0)).to(g.dtype());
      return std::vector<Tensor>{mul(mul(g, static_cast<double>(1.0f / 6.0f)), inside)};
    });
  }
  return out;
}

Tensor hardswish(const Tensor& x) {
  check_floating(x, "hardswish");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = mul(x, hard_sigmoid_value(x));
  }
  // grad_x = 0 below -3, grad_out (x / 3 + 1/2) on [-3, 3), grad_out from 3 on, as PyTorch's
  // (vectorised) hardswish_backward
  if (needs_grad(x)) {
    record_op("HardswishBackward", out, {x}, [sx = SavedTensor(x)](const Tensor& g) {
      const Tensor& v = sx.get("HardswishBackward");
      const Tensor slope = where(ge(v, 3.0), ones_like(v), add(div(v, 3.0), 0.5));
      return std::vector<Tensor>{mul(g, masked_fill(slope, lt(v, -3.0), 0.0))};
    });
  }
  return out;
}

Tensor glu(const Tensor& x, int64_t dim) {
  check_floating(x, "glu");
  TDDP_CHECK(x.dim() > 0, "glu: glu does not support scalars because halving size must be even");
  const int64_t d = wrap_dim(dim, x.dim(), "glu");
  TDDP_CHECK(x.size(d) % 2 == 0, "glu: Halving dimension must be even, but dimension {} is size {}", d, x.size(d));
  const auto halves = chunk(x, 2, d);
  return mul(halves[0], sigmoid(halves[1]));
}

Tensor prelu(const Tensor& x, const Tensor& weight) {
  check_floating(x, "prelu");
  TDDP_CHECK(weight.defined() && weight.dim() <= 1, "prelu: weight must be a 0-d or 1-d tensor");
  const int64_t channels = x.dim() >= 2 ? x.size(1) : 1;
  TDDP_CHECK(weight.numel() == 1 || weight.numel() == channels,
             "prelu: Mismatch of parameter numbers and input channel size. Found parameter numbers = {} and channel "
             "size = {}.",
             weight.numel(), channels);
  Tensor w = weight.reshape({-1});
  if (weight.numel() > 1) {  // one per channel: [C, 1, ...] against x's [N, C, ...]
    tensor::Shape shape(static_cast<size_t>(x.dim() - 1), 1);
    shape[0] = channels;
    w = w.reshape(shape);
  }
  return where(gt(x, 0.0), x, mul(w, x));
}

Tensor normalize(const Tensor& x, double p, int64_t dim, double eps) {
  check_floating(x, "normalize");
  return div(x, clamp(norm(x, p, dim, true), eps, std::nullopt));
}

Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim, double eps) {
  check_floating(x1, "cosine_similarity");
  check_floating(x2, "cosine_similarity");
  const tensor::Shape shape = broadcast_shapes(x1.sizes(), x2.sizes(), "cosine_similarity");
  const Tensor a = x1.expand(shape), b = x2.expand(shape);
  const Tensor na = clamp(norm(a, 2.0, dim, true), eps, std::nullopt);
  const Tensor nb = clamp(norm(b, 2.0, dim, true), eps, std::nullopt);
  return sum(mul(div(a, na), div(b, nb)), dim);
}

namespace {
// The source positions of one padded dim of size n with `left` and `right` added (each >= 0).
Tensor padded_positions(int64_t n, int64_t left, int64_t right, std::string_view mode) {
  std::vector<int64_t> index;
  for (int64_t i = -left; i < n + right; ++i) {
    int64_t j = i;
    if (mode == "reflect") {
      j = i < 0 ? -i : i >= n ? 2 * (n - 1) - i : i;
    } else if (mode == "replicate") {
      j = i < 0 ? 0 : i >= n ? n - 1 : i;
    } else {  // circular
      j = ((i % n) + n) % n;
    }
    index.push_back(j);
  }
  return from_vector(index);
}

Tensor pad_constant(Tensor out, int64_t d, int64_t left, int64_t right, double value) {
  if (left < 0) out = out.narrow(d, -left, out.size(d) + left);
  if (right < 0) out = out.narrow(d, 0, out.size(d) + right);
  std::vector<Tensor> parts;
  const auto filler = [&](int64_t size) {
    tensor::Shape shape = out.sizes();
    shape[static_cast<size_t>(d)] = size;
    return full(shape, value, TensorOptions(out.dtype()).device(out.device()));
  };
  if (left > 0) parts.push_back(filler(left));
  parts.push_back(out);
  if (right > 0) parts.push_back(filler(right));
  return parts.size() == 1 ? out : cat(parts, d);
}
}  // namespace

Tensor pad(const Tensor& x, const std::vector<int64_t>& pad, std::string_view mode, double value) {
  TDDP_CHECK(x.defined(), "pad: the input is an undefined tensor");
  TDDP_CHECK(pad.size() % 2 == 0 && static_cast<int64_t>(pad.size()) / 2 <= x.dim(),
             "pad: padding length must be even and at most twice the number of dims ({}), got {}", x.dim(), pad.size());
  TDDP_CHECK(mode == "constant" || mode == "reflect" || mode == "replicate" || mode == "circular",
             "pad: mode must be 'constant', 'reflect', 'replicate' or 'circular', got '{}'", mode);
  Tensor out = x;
  for (size_t k = 0; k < pad.size() / 2; ++k) {
    const int64_t d = x.dim() - 1 - static_cast<int64_t>(k);
    const int64_t left = pad[2 * k], right = pad[2 * k + 1], n = out.size(d);
    if (mode == "constant") {
      out = pad_constant(out, d, left, right, value);
      continue;
    }
    TDDP_CHECK(left >= 0 && right >= 0, "pad: negative padding is only supported in constant mode, got {} and {}", left,
               right);
    if (mode == "reflect") {
      TDDP_CHECK(left < n && right < n,
                 "pad: padding size should be less than the corresponding input dimension, but got: padding ({}, {}) "
                 "at dimension {} of input {}",
                 left, right, d, format_shape(x.sizes()));
    }
    TDDP_CHECK(n > 0 || (left == 0 && right == 0), "pad: cannot pad an empty dim {} in mode '{}'", d, mode);
    if (mode == "circular") TDDP_CHECK(left <= n && right <= n, "pad: circular padding wraps at most once");
    out = index_select(out, d, padded_positions(n, left, right, mode).to(x.device()));
  }
  // Constant padding keeps a channels-last input's layout, as PyTorch's (its other modes do not).
  return mode == "constant" && out.dim() == 4 ? out.contiguous(x.suggest_memory_format()) : out;
}

Tensor dropout2d(const Tensor& x, double p, bool training, tensor::Generator* generator) {
  TDDP_CHECK(p >= 0.0 && p <= 1.0, "dropout2d: probability has to be between 0 and 1, but got {}", p);
  TDDP_CHECK(x.dim() == 3 || x.dim() == 4,
             "dropout2d: expected a 4-D input [N, C, H, W] or a 3-D one [C, H, W], got {}",
             tensor::format_shape(x.sizes()));
  if (!training || p == 0.0) return x;
  if (x.dim() == 3) return dropout2d(x.unsqueeze(0), p, training, generator).squeeze(0);
  // One draw per channel (PyTorch's feature dropout): a [N, C, 1, 1] mask of 1 / (1 - p) or 0.
  Tensor mask = tensor::empty({x.size(0), x.size(1), 1, 1}, tensor::TensorOptions(x.dtype()).device(x.device()));
  {
    tensor::NoGradGuard no_grad;
    tensor::bernoulli_(mask, 1.0 - p, generator);
    if (p < 1.0) mask.div_(1.0 - p);
  }
  return x * mask;
}

namespace {
// The 1-d pools as 2-d ones over [N, C, 1, L] (an unbatched [C, L] gains N).
Tensor pool1d(const Tensor& x, const char* name, const std::function<Tensor(const Tensor&)>& pool2d) {
  TDDP_CHECK(x.dim() == 2 || x.dim() == 3, "{}: expected a 2-D [C, L] or 3-D [N, C, L] input, got {}", name,
             tensor::format_shape(x.sizes()));
  return pool2d(x.unsqueeze(-2)).squeeze(-2);
}
}  // namespace

Tensor max_pool1d(const Tensor& x, int64_t kernel_size, std::optional<int64_t> stride, int64_t padding,
                  int64_t dilation) {
  const int64_t s = stride.value_or(kernel_size);
  return pool1d(x, "max_pool1d", [&](const Tensor& y) {
    return tensor::max_pool2d(y, {1, kernel_size}, tensor::Size2d{1, s}, {0, padding}, {1, dilation});
  });
}

Tensor avg_pool1d(const Tensor& x, int64_t kernel_size, std::optional<int64_t> stride, int64_t padding,
                  bool count_include_pad) {
  const int64_t s = stride.value_or(kernel_size);
  return pool1d(x, "avg_pool1d", [&](const Tensor& y) {
    return tensor::avg_pool2d(y, {1, kernel_size}, tensor::Size2d{1, s}, {0, padding}, count_include_pad);
  });
}

Tensor embedding(const Tensor& input, const Tensor& weight, int64_t padding_idx) {
  return embedding(input, weight, EmbeddingFuncOptions().padding_idx(padding_idx));
}

Tensor embedding(const Tensor& input, const Tensor& weight, const EmbeddingFuncOptions& options) {
  TDDP_CHECK(weight.defined() && weight.dim() == 2, "embedding: expected a 2-D weight");
  TDDP_CHECK(!options.sparse(), "embedding: sparse=true is not supported in tinyddp (no sparse gradients)");
  const int64_t rows = weight.size(0);
  std::optional<int64_t> pad = options.padding_idx();
  if (pad) {
    TDDP_CHECK(*pad < rows && *pad >= -rows, "embedding: Padding_idx must be within num_embeddings, got {} for {}",
               *pad, rows);
    pad = *pad < 0 ? *pad + rows : *pad;
  }
  if (options.max_norm()) embedding_renorm_(weight, input, *options.max_norm(), options.norm_type());
  return tensor::embedding(input, weight, pad, options.scale_grad_by_freq());
}

namespace {
// Cell i of `out` cells over `in` positions: [floor(i in / out), ceil((i + 1) in / out)), as
// (start, length).
std::pair<int64_t, int64_t> adaptive_cell(int64_t i, int64_t in, int64_t out) {
  const int64_t start = i * in / out, end = ((i + 1) * in + out - 1) / out;
  return {start, end - start};
}
}  // namespace

Tensor adaptive_max_pool2d(const Tensor& input, tensor::Size2d output_size) {
  check_floating(input, "adaptive_max_pool2d");
  TDDP_CHECK(input.dim() == 3 || input.dim() == 4, "adaptive_max_pool2d: expected a 3-D or 4-D input, got {}",
             format_shape(input.sizes()));
  if (input.dim() == 3) return adaptive_max_pool2d(input.unsqueeze(0), output_size).squeeze(0);
  const int64_t h = input.size(2), w = input.size(3), oh = output_size.h, ow = output_size.w;
  TDDP_CHECK(oh > 0 && ow > 0 && h > 0 && w > 0,
             "adaptive_max_pool2d: output_size ({}, {}) and the input's height and width {} must be positive", oh, ow,
             format_shape(input.sizes()));
  if (h % oh == 0 && w % ow == 0) return max_pool2d(input, {h / oh, w / ow});
  std::vector<Tensor> rows;
  for (int64_t i = 0; i < oh; ++i) {
    const auto [r0, rows_in] = adaptive_cell(i, h, oh);
    const Tensor band = input.narrow(2, r0, rows_in);
    std::vector<Tensor> cells;
    for (int64_t j = 0; j < ow; ++j) {
      const auto [c0, cols_in] = adaptive_cell(j, w, ow);
      cells.push_back(max_pool2d(band.narrow(3, c0, cols_in), {rows_in, cols_in}));
    }
    rows.push_back(cat(cells, 3));
  }
  return cat(rows, 2);
}

namespace {
// Each cell's first maximum (NaN counting as the largest) in input [N, C, H, W], as a position
// h * W + w of its plane.
Tensor adaptive_max_indices(const Tensor& input, tensor::Size2d output_size) {
  tensor::NoGradGuard no_grad;
  const int64_t h = input.size(2), w = input.size(3), oh = output_size.h, ow = output_size.w;
  const Tensor positions = tensor::arange(h * w, TensorOptions(tensor::kInt64).device(input.device())).view({h, w});
  std::vector<Tensor> rows;
  for (int64_t i = 0; i < oh; ++i) {
    const auto [r0, rows_in] = adaptive_cell(i, h, oh);
    std::vector<Tensor> cells;
    for (int64_t j = 0; j < ow; ++j) {
      const auto [c0, cols_in] = adaptive_cell(j, w, ow);
      const Tensor cell = input.narrow(2, r0, rows_in).narrow(3, c0, cols_in).flatten(2);  // [N, C, cells]
      const Tensor local = tensor::argmax(cell, 2, /*keepdim=*/true);
      const Tensor global = positions.narrow(0, r0, rows_in).narrow(1, c0, cols_in).reshape({rows_in * cols_in});
      cells.push_back(tensor::index_select(global, 0, local.reshape({local.numel()})).view(local.sizes()).unsqueeze(3));
    }
    rows.push_back(cat(cells, 3));
  }
  return cat(rows, 2);
}
}  // namespace

std::tuple<Tensor, Tensor> adaptive_max_pool2d_with_indices(const Tensor& input, tensor::Size2d output_size) {
  const Tensor values = adaptive_max_pool2d(input, output_size);  // (checks the arguments)
  if (input.dim() == 3) return {values, adaptive_max_indices(input.unsqueeze(0), output_size).squeeze(0)};
  return {values, adaptive_max_indices(input, output_size)};
}

namespace {
// x [N, C, H, W] with s - 1 zeros after each element but the last along `dim` (2 or 3).
Tensor spread(const Tensor& x, int64_t dim, int64_t s) {
  if (s == 1 || x.size(dim) == 0) return x;
  tensor::Shape zeros_shape = x.sizes();
  zeros_shape.insert(zeros_shape.begin() + dim + 1, s - 1);
  zeros_shape[static_cast<size_t>(dim)] = x.size(dim);
  const Tensor gaps = zeros(zeros_shape, TensorOptions(x.dtype()).device(x.device()));
  tensor::Shape merged = x.sizes();
  merged[static_cast<size_t>(dim)] *= s;
  return cat({x.unsqueeze(dim + 1), gaps}, dim + 1).reshape(merged).narrow(dim, 0, (x.size(dim) - 1) * s + 1);
}
}  // namespace

Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias, tensor::Size2d stride,
                        tensor::Size2d padding, tensor::Size2d output_padding, int64_t groups,
                        tensor::Size2d dilation) {
  check_floating(input, "conv_transpose2d");
  TDDP_CHECK(input.dim() == 3 || input.dim() == 4, "conv_transpose2d: expected a 3-D or 4-D input, got {}",
             format_shape(input.sizes()));
  if (input.dim() == 3) {
    return conv_transpose2d(input.unsqueeze(0), weight, bias, stride, padding, output_padding, groups, dilation)
        .squeeze(0);
  }
  TDDP_CHECK(weight.defined() && weight.dim() == 4 && groups > 0 && weight.size(0) == input.size(1) &&
                 input.size(1) % groups == 0,
             "conv_transpose2d: expected weight [{}, out / groups, kh, kw] for an input of {} channels in {} groups, "
             "got {}",
             input.size(1), input.size(1), groups, weight.defined() ? format_shape(weight.sizes()) : "undefined");
  TDDP_CHECK(stride.h > 0 && stride.w > 0 && dilation.h > 0 && dilation.w > 0 && padding.h >= 0 && padding.w >= 0,
             "conv_transpose2d: stride and dilation must be positive and padding non-negative");
  TDDP_CHECK((output_padding.h < stride.h || output_padding.h < dilation.h) &&
                 (output_padding.w < stride.w || output_padding.w < dilation.w) && output_padding.h >= 0 &&
                 output_padding.w >= 0,
             "conv_transpose2d: output padding must be smaller than either stride or dilation, but got "
             "output_padding=({}, {}), stride=({}, {}), dilation=({}, {})",
             output_padding.h, output_padding.w, stride.h, stride.w, dilation.h, dilation.w);
  const int64_t in = weight.size(0), out_per_group = weight.size(1), kh = weight.size(2), kw = weight.size(3);
  // [in, out / g, kh, kw] -> [g, in / g, out / g, ...] -> [out, in / g, kh, kw], kernel flipped
  const Tensor w = weight.reshape({groups, in / groups, out_per_group, kh, kw})
                       .transpose(1, 2)
                       .reshape({groups * out_per_group, in / groups, kh, kw})
                       .flip({2, 3});
  const int64_t ph = dilation.h * (kh - 1) - padding.h, pw = dilation.w * (kw - 1) - padding.w;
  const Tensor x = pad(spread(spread(input, 2, stride.h), 3, stride.w),
                       {pw, pw + output_padding.w, ph, ph + output_padding.h});  // negative: cropped
  // Row-major whatever the input's layout, as PyTorch's (1.13) CPU kernel gives it.
  return conv2d(x.contiguous(), w, bias, 1, 0, dilation, groups).contiguous();
}

Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding,
                        int64_t output_padding, int64_t groups, int64_t dilation) {
  check_floating(input, "conv_transpose1d");
  TDDP_CHECK(input.dim() == 2 || input.dim() == 3, "conv_transpose1d: expected a 2-D or 3-D input, got {}",
             format_shape(input.sizes()));
  TDDP_CHECK(weight.defined() && weight.dim() == 3, "conv_transpose1d: expected a weight [in, out / groups, k], got {}",
             weight.defined() ? format_shape(weight.sizes()) : "undefined");
  return conv_transpose2d(input.unsqueeze(-2), weight.unsqueeze(-2), bias, {1, stride}, {0, padding},
                          {0, output_padding}, groups, {1, dilation})
      .squeeze(-2);
}

namespace {
void check_attention_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool is_causal) {
  constexpr const char* kOp = "scaled_dot_product_attention";
  for (const Tensor* t : {&q, &k, &v}) check_floating(*t, kOp);
  TDDP_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(),
             "{}: Expected query, key, and value to have the same dtype, but got query.dtype: {} key.dtype: {} and "
             "value.dtype: {} instead.",
             kOp, dtype_name(q.dtype()), dtype_name(k.dtype()), dtype_name(v.dtype()));
  TDDP_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2,
             "{}: expected query, key and value of at least 2 dims, got {}, {} and {}", kOp, format_shape(q.sizes()),
             format_shape(k.sizes()), format_shape(v.sizes()));
  TDDP_CHECK(q.size(-1) == k.size(-1) && k.size(-2) == v.size(-2),
             "{}: query [..., L, E], key [..., S, E] and value [..., S, Ev] do not fit: {}, {} and {}", kOp,
             format_shape(q.sizes()), format_shape(k.sizes()), format_shape(v.sizes()));
  TDDP_CHECK(!(mask.defined() && is_causal), "{}: Explicit attn_mask should not be set when is_causal=True", kOp);
  TDDP_CHECK(!mask.defined() || mask.dtype() == kBool || mask.dtype() == q.dtype(),
             "{}: Expected attn_mask dtype to be bool or float or to match query dtype, got {}", kOp,
             dtype_name(mask.defined() ? mask.dtype() : q.dtype()));
}
}  // namespace

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale, tensor::Generator* generator) {
  check_attention_inputs(query, key, value, attn_mask, is_causal);
  const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(query.size(-1))));
  const int64_t length = query.size(-2), source = key.size(-2);
  // Fused: no mask, causal only when square; dropout off the CPU only (the CPU's: PyTorch's stream).
  const auto lead = [](const Tensor& t) { return Shape(t.sizes().begin(), t.sizes().end() - 2); };
  if (!attn_mask.defined() && (dropout_p == 0.0 || query.device().type != tensor::DeviceType::kCPU) &&
      (!is_causal || length == source) && lead(key) == lead(query) && lead(value) == lead(query)) {
    return flash_attention(query, key, value, is_causal, s, dropout_p, generator);
  }
  const Tensor scores = matmul(query, key.transpose(-2, -1));
  Tensor weights;
  if (is_causal && length == source) {
    weights = causal_softmax(scores, s);  // one kernel; the square mask is tril's either way
  } else if (is_causal) {
    const Tensor future = eq(tril(ones({length, source}, TensorOptions(query.dtype()).device(query.device()))), 0.0);
    weights = softmax(masked_fill(mul(scores, s), future, -INFINITY), -1);  // no row is all masked
  } else if (attn_mask.defined()) {
    const Tensor bias =
        attn_mask.dtype() == kBool
            ? masked_fill(zeros_like(attn_mask, TensorOptions(query.dtype()).device(attn_mask.device())),
                          logical_not(attn_mask), -INFINITY)
            : attn_mask;
    const Tensor masked = add(mul(scores, s), bias);
    // Safe softmax: a row that is -inf throughout becomes zeros (before the softmax too, so that
    // neither the weights nor their gradient are NaN there).
    const Tensor empty_rows = all(eq(masked, -INFINITY), {-1}, true);
    weights = masked_fill(softmax(masked_fill(masked, empty_rows, 0.0), -1), empty_rows, 0.0);
  } else {
    weights = softmax(mul(scores, s), -1);
  }
  if (dropout_p > 0.0) weights = dropout(weights, dropout_p, true, generator);
  return matmul(weights, value);
}

}  // namespace tinyddp::nn::functional
