// Convolution over NCHW tensors, forward beside backward, and the window helpers pooling
// shares (native/window.h, pool.cc). Both rest on one pair of data movements: im2col gathers
// every kernel window of the input into columns, col2im adds columns back onto the input
// positions they came from (the gradient of im2col). A convolution is then one GEMM per
// group, a pooling layer a reduction over each window's column. On the CPU, float32
// convolutions take direct kernels where they fit; on a GPU, cuDNN where it applies.
#include <algorithm>
#include <cmath>
#include <limits>

#include "tinyddp/tensor/autocast.h"
#include "tinyddp/tensor/graph.h"
#include "tinyddp/tensor/native/checks.h"
#include "tinyddp/tensor/native/window.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::tensor {

using namespace detail;

namespace {

using Window = Window2d;

// The window's shape as im2col writes it: [N, C, kh, kw, OH, OW].
Shape col_shape(const Window& w) { return {w.n, w.c, w.kh, w.kw, w.oh, w.ow}; }

// col (shape [N, C, kh, kw, OH, OW], any strides) = the windows of x, padding reading as
// `pad_value`.
void im2col_into(const Tensor& col, const Tensor& x, const Window& win, double pad_value) {
  NoGradGuard no_grad;
  backend_for(x.device(), "im2col").im2col(col, x, win, pad_value);
}

// The gradient of im2col: a new [N, C, H, W] tensor where each input position holds the sum
// of the col entries that read it (padding's entries are dropped).
Tensor col2im(const Tensor& col, const Window& win) {
  NoGradGuard no_grad;
  const Tensor grad_x = new_output({win.n, win.c, win.h, win.w}, col.dtype(), col.device());
  backend_for(col.device(), "col2im").col2im(grad_x, col, win);
  return grad_x;
}

// col2im as an op: recorded when the columns have a graph (create_graph), its gradient being
// im2col again.
Tensor fold(const Tensor& col, const Window& win) {
  const Tensor x = col2im(col, win);
  if (needs_grad(col)) {
    record_op("Col2ImBackward", x, {col}, [win](const Tensor& g) { return std::vector<Tensor>{patches(g, win, 0.0)}; });
  }
  return x;
}

}  // namespace

namespace detail {

std::string pair_str(int64_t a, int64_t b) { return fmt::format("({}, {})", a, b); }

// Fills in the output size; `op` names the caller in errors.
Window make_window(const Shape& in, Size2d kernel, Size2d stride, Size2d padding, Size2d dilation, const char* op) {
  TDDP_CHECK(kernel.h > 0 && kernel.w > 0, "{}: kernel_size must be positive, got {}", op,
             pair_str(kernel.h, kernel.w));
  TDDP_CHECK(stride.h > 0 && stride.w > 0, "{}: stride must be positive, got {}", op, pair_str(stride.h, stride.w));
  TDDP_CHECK(padding.h >= 0 && padding.w >= 0, "{}: padding must be non-negative, got {}", op,
             pair_str(padding.h, padding.w));
  TDDP_CHECK(dilation.h > 0 && dilation.w > 0, "{}: dilation must be positive, got {}", op,
             pair_str(dilation.h, dilation.w));
  Window win{in[0],    in[1],    in[2],     in[3],     kernel.h,   kernel.w,
             stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w};
  const int64_t span_h = win.dh * (win.kh - 1) + 1, span_w = win.dw * (win.kw - 1) + 1;
  TDDP_CHECK(span_h <= win.padded_h() && span_w <= win.padded_w(),
             "{}: the kernel {} (dilated to {}) is larger than the padded input {} (input shape {}, padding {})", op,
             pair_str(win.kh, win.kw), pair_str(span_h, span_w), pair_str(win.padded_h(), win.padded_w()),
             format_shape(in), pair_str(win.ph, win.pw));
  win.oh = (win.padded_h() - span_h) / win.sh + 1;
  win.ow = (win.padded_w() - span_w) / win.sw + 1;
  return win;
}

// A 3-D [C, H, W] input is one image: run it as [1, C, H, W] and drop the batch dim after.
Tensor as_batch(const Tensor& input, const char* op) {
  check_defined(input, op, "input");
  TDDP_CHECK(input.dim() == 3 || input.dim() == 4,
             "{}: expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got shape {}", op, format_shape(input.sizes()));
  TDDP_CHECK(input.is_floating_point(), "{}: expected a floating-point input, got dtype {}", op,
             dtype_name(input.dtype()));
  check_kernel_device(input, op);
  return input.dim() == 3 ? input.unsqueeze(0) : input;
}

Tensor unbatch_like(const Tensor& out, const Tensor& input) { return input.dim() == 3 ? out.squeeze(0) : out; }

// im2col as a differentiable op: [N, C, kh, kw, OH, OW] patches of x (contiguous).
Tensor patches(const Tensor& x, const Window& win, double pad_value) {
  const Tensor col = new_output(col_shape(win), x.dtype(), x.device());
  im2col_into(col, x, win, pad_value);
  // grad_col: [N, C, kh, kw, OH, OW] -> grad_x: [N, C, H, W], summed over overlapping windows
  if (needs_grad(x)) {
    record_op("Im2ColBackward", col, {x}, [win](const Tensor& g) { return std::vector<Tensor>{fold(g, win)}; });
  }
  return col;
}

}  // namespace detail

namespace {

void check_conv_args(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t groups) {
  check_defined(weight, "conv2d", "weight");
  check_same_dtype(x, weight, "conv2d", "input", "weight");
  check_same_device(x, weight, "conv2d", "input", "weight");
  TDDP_CHECK(weight.dim() == 4,
             "conv2d: expected a 4-D weight [out_channels, in_channels / groups, kh, kw], got shape {}",
             format_shape(weight.sizes()));
  TDDP_CHECK(groups > 0, "conv2d: groups must be positive, got {}", groups);
  const int64_t channels = x.size(1), out_channels = weight.size(0);
  TDDP_CHECK(channels % groups == 0 && out_channels % groups == 0,
             "conv2d: groups={} must divide both the input's {} channels and the weight's {} output channels "
             "(input shape {}, weight shape {})",
             groups, channels, out_channels, format_shape(x.sizes()), format_shape(weight.sizes()));
  TDDP_CHECK(weight.size(1) * groups == channels,
             "conv2d: weight of shape {} with groups={} expects {} input channels, but the input of shape {} has {}",
             format_shape(weight.sizes()), groups, weight.size(1) * groups, format_shape(x.sizes()), channels);
  if (bias.defined()) {
    check_same_dtype(x, bias, "conv2d", "input", "bias");
    check_same_device(x, bias, "conv2d", "input", "bias");
    TDDP_CHECK(bias.dim() == 1 && bias.size(0) == out_channels, "conv2d: expected bias of shape [{}], got {}",
               out_channels, format_shape(bias.sizes()));
  }
}

// The im2col matrix of a convolution, [C * kh * kw, N * L]: row (c, i, j) holds kernel tap
// (i, j) of channel c at every output position of every image, so group g's rows are one
// contiguous block and out[g] = weight[g] [O/g, K] @ col[g] [K, N * L] is a single GEMM.
// Written into `col`, a matrix of that shape (its rows may be further apart: a block of
// columns of a larger matrix).
void conv_columns(const Tensor& col, const Tensor& x, const Window& win) {
  im2col_into(col.view({win.c, win.kh, win.kw, win.n, win.oh, win.ow}).permute({3, 0, 1, 2, 4, 5}), x, win, 0.0);
}

// The images are processed in chunks whose im2col matrix stays near this size, within the
// core's L2 cache: the GEMM that follows reads the matrix from there, and one buffer serves
// every chunk (a whole batch's matrix can be tens of MB).
constexpr int64_t kColumnChunkBytes = int64_t{256} << 10;
// The forward keeps the whole batch's im2col matrix for the backward (grad_weight reads it)
// when it is at most this size; a larger one is recomputed there, chunk by chunk.
constexpr int64_t kSavedColumnBytes = int64_t{8} << 20;

struct Chunks {
  int64_t size, count;
  bool save;  // the whole batch's matrix is kept
};
Chunks image_chunks(const Window& win, size_t element_size) {
  const int64_t per_image = win.c * win.kh * win.kw * win.oh * win.ow * static_cast<int64_t>(element_size);
  const int64_t size =
      std::clamp<int64_t>(kColumnChunkBytes / std::max<int64_t>(per_image, 1), 1, std::max<int64_t>(win.n, 1));
  return {size, (win.n + size - 1) / size, per_image * win.n <= kSavedColumnBytes};
}

// Chunk `first`'s columns of the im2col matrix: a block of the saved whole-batch matrix, or
// the start of the one-chunk buffer.
Tensor chunk_columns(const Tensor& whole, const Tensor& buffer, int64_t taps, int64_t first, int64_t count,
                     int64_t positions) {
  if (whole.defined()) return whole.narrow(1, first * positions, count * positions);
  return buffer.narrow(0, 0, taps * count * positions).view({taps, count * positions});
}

// out[g] = a[g] @ b[g] for each group's block of rows of out [G*r, m], a [G*r, k] and b.
// transpose_a/b: use a[g]^T / b[g]^T (blocks of rows of the stored matrix, transposed).
void grouped_mm(const Tensor& out, const Tensor& a, const Tensor& b, int64_t groups, bool transpose_a,
                bool transpose_b) {
  const int64_t out_rows = out.size(0) / groups, a_rows = a.size(0) / groups, b_rows = b.size(0) / groups;
  for (int64_t g = 0; g < groups; ++g) {
    const Tensor ag = a.narrow(0, g * a_rows, a_rows), bg = b.narrow(0, g * b_rows, b_rows);
    backend_for(out.device(), "conv2d")
        .mm(out.narrow(0, g * out_rows, out_rows), transpose_a ? ag.t() : ag, transpose_b ? bg.t() : bg);
  }
}

// Forward of conv2d on x [N, C, H, W] into out [N, O, OH, OW], chunk by chunk:
// out[chunk] = permute(weight [O, K] @ col(chunk) [K, n * L]) + bias. Returns the whole
// batch's im2col matrix when it is small enough to keep for the backward, else nothing.
Tensor conv_forward(const Tensor& out, const Tensor& x, const Tensor& w2, const Tensor& bias, const Window& win,
                    int64_t groups) {
  const Chunks chunks = image_chunks(win, x.element_size());
  const int64_t out_channels = w2.size(0), positions = win.oh * win.ow, taps = w2.size(1) * groups;
  const TensorOptions options = TensorOptions(x.dtype()).device(x.device());
  const Tensor whole = chunks.save ? empty({taps, win.n * positions}, options) : Tensor();
  const Tensor col_buffer = chunks.save ? Tensor() : empty({taps * chunks.size * positions}, options);
  // One image per chunk: its [O, L] product is out[first] itself (no reordering copy).
  const Tensor out_buffer = chunks.size > 1 ? empty({out_channels * chunks.size * positions}, options) : Tensor();
  for (int64_t first = 0; first < win.n; first += chunks.size) {
    Window part = win;
    part.n = std::min(chunks.size, win.n - first);
    const Tensor col = chunk_columns(whole, col_buffer, taps, first, part.n, positions);
    conv_columns(col, x.narrow(0, first, part.n), part);
    const Tensor out2 = chunks.size == 1
                            ? out.narrow(0, first, 1).view({out_channels, positions})
                            : out_buffer.narrow(0, 0, out_channels * part.n * positions).view({out_channels, -1});
    grouped_mm(out2, w2, col, groups, false, false);
    if (bias.defined()) {
      backend_for(out2.device(), "conv2d").binary(BinaryOp::kAdd, out2, out2, bias.view({out_channels, 1}), 1.0);
    }
    // [O, n, L] -> out[first : first + n] ([n, O, L])
    if (chunks.size > 1) {
      copy_into(out.narrow(0, first, part.n).view({part.n, out_channels, positions}),
                out2.view({out_channels, part.n, positions}).permute({1, 0, 2}));
    }
  }
  return whole;
}

// Backward of conv2d for the gradients asked for (undefined `grad_input` / `grad_weight`:
// not needed), chunk by chunk: g2 = permute(grad_out[chunk]) [O, n * L];
// grad_weight += g2 @ col(chunk)^T; grad_input[chunk] = col2im(weight^T @ g2); and, when
// `grad_bias` is given, *grad_bias = the row sums of g2 over all chunks (contiguous rows: a
// cheaper reduction than over dims 0, 2, 3 of grad_out). `saved_col`: the forward's
// whole-batch im2col matrix (else undefined: recomputed per chunk).
void conv_backward(const Tensor& g, const Tensor& x, const Tensor& saved_col, const Tensor& w2, const Window& win,
                   int64_t groups, const Tensor& grad_input, const Tensor& grad_weight, Tensor* grad_bias) {
  const Chunks chunks = image_chunks(win, g.element_size());
  const int64_t out_channels = w2.size(0), positions = win.oh * win.ow, taps = w2.size(1) * groups;
  const TensorOptions options = TensorOptions(g.dtype()).device(g.device());
  if (win.n == 0) {  // no images: the weight's and the bias's gradients are sums of nothing
    if (grad_weight.defined()) backend_for(g.device(), "conv2d").fill(grad_weight, 0.0);
    if (grad_bias != nullptr) *grad_bias = zeros({out_channels}, options);
    return;
  }
  const Tensor col_buffer = empty({taps * chunks.size * positions}, options);
  // One image per chunk of a contiguous g: g[first] is already [O, L] (no reordering copy).
  const bool in_place = chunks.size == 1 && g.is_contiguous();
  const Tensor g2_buffer = in_place ? Tensor() : empty({out_channels * chunks.size * positions}, options);
  const Tensor weight_part = grad_weight.defined() && chunks.count > 1 ? empty(grad_weight.sizes(), options) : Tensor();
  for (int64_t first = 0; first < win.n; first += chunks.size) {
    Window part = win;
    part.n = std::min(chunks.size, win.n - first);
    const Tensor g2 = in_place ? g.narrow(0, first, 1).view({out_channels, positions})
                               : g2_buffer.narrow(0, 0, out_channels * part.n * positions).view({out_channels, -1});
    if (!in_place) {
      copy_into(g2.view({out_channels, part.n, positions}),
                g.narrow(0, first, part.n).reshape({part.n, out_channels, positions}).permute({1, 0, 2}));
    }
    if (grad_bias != nullptr) *grad_bias = first == 0 ? sum(g2, {1}) : add(*grad_bias, sum(g2, {1}));
    if (grad_weight.defined()) {
      const Tensor col = chunk_columns(saved_col, col_buffer, taps, first, part.n, positions);
      if (!saved_col.defined()) conv_columns(col, x.narrow(0, first, part.n), part);
      const bool into_result = first == 0;
      grouped_mm(into_result ? grad_weight : weight_part, g2, col, groups, false, true);
      if (!into_result) backend_for(g.device(), "conv2d").accumulate(grad_weight, weight_part);
    }
    if (grad_input.defined()) {
      const Tensor grad_col = col_buffer.narrow(0, 0, taps * part.n * positions).view({taps, -1});
      grouped_mm(grad_col, w2, g2, groups, true, false);
      backend_for(g.device(), "col2im")
          .col2im(grad_input.narrow(0, first, part.n),
                  grad_col.view({win.c, win.kh, win.kw, part.n, win.oh, win.ow}).permute({3, 0, 1, 2, 4, 5}), part);
    }
  }
}

// The bias's gradient from a contiguous grad_out [N, O, OH, OW]: its rows' sums [N, O], then
// their sum over images (sum over dims 0, 2 and 3 at once would first reorder grad_out).
// float16/bfloat16 in one reduction all the same, rounded once (as PyTorch's oneDNN backward
// rounds it): their rows' sums would round on the way.
Tensor bias_grad(const Tensor& gc) {
  const Tensor g3 = gc.view({gc.size(0), gc.size(1), gc.size(2) * gc.size(3)});  // no -1: N may be 0
  if (is_16bit_float(gc.dtype())) return sum(g3, {0, 2});
  return sum(sum(g3, {2}), {0});
}

// The backend convolves where it has an algorithm of its own: cuDNN on a GPU
// (backends/cuda/dnn_conv.cc); on the CPU, oneDNN for bfloat16 under AVX-512 and the direct kernels
// for small float32 maps (backends/cpu/speed_rules.cc): the forward into out, the bias added per
// channel. false (nothing written) where it has none: the im2col route then.
bool library_forward(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, const Window& win,
                     int64_t groups) {
  return backend_for(out.device(), "conv2d")
      .conv2d(out, x.contiguous(), weight.contiguous(), bias.defined() ? bias.contiguous() : Tensor(), win, groups);
}

// The backward after library_forward: the backend's own backward-data and backward-weight
// passes, the im2col route (conv_backward) for a gradient they do not apply to; the bias's
// gradient is the sum of g over N, OH, OW.
void library_backward(const Tensor& g, const Tensor& x, const Tensor& w2, const Shape& weight_shape, const Window& win,
                      int64_t groups, const Tensor& grad_input, const Tensor& grad_weight, Tensor* grad_bias) {
  const Tensor gc = g.contiguous();
  const bool input_done =
      grad_input.defined() && backend_for(g.device(), "conv2d backward")
                                  .conv2d_backward_input(grad_input, gc, w2.view(weight_shape), win, groups);
  const bool weight_done = grad_weight.defined() &&
                           backend_for(g.device(), "conv2d backward")
                               .conv2d_backward_weight(grad_weight.view(weight_shape), gc, x.contiguous(), win, groups);
  if (grad_bias != nullptr) *grad_bias = bias_grad(gc);
  if ((grad_input.defined() && !input_done) || (grad_weight.defined() && !weight_done)) {
    conv_backward(gc, x, Tensor(), w2, win, groups, input_done ? Tensor() : grad_input,
                  weight_done ? Tensor() : grad_weight, nullptr);
  }
}

// The convolution's input and weight gradients from recorded ops (create_graph). Per image
// and group, out = w [O/g, K] @ col [K, L] with col = patches(x): grad_col = w^T @ grad_out,
// folded back onto the input, and grad_w = grad_out @ col^T summed over the images.
std::vector<Tensor> conv_backward_graph(const Tensor& g4, const Tensor& x, const Tensor& w2, const Window& win,
                                        int64_t groups, bool need_input, bool need_weight) {
  const int64_t per_group = w2.size(0) / groups, k = w2.size(1), l = win.oh * win.ow;
  const Tensor g = g4.reshape({win.n, groups, per_group, l});
  const Tensor w = w2.view({groups, per_group, k});
  Tensor grad_input, grad_weight;
  if (need_input) grad_input = fold(matmul(w.transpose(1, 2), g).reshape(col_shape(win)), win);
  if (need_weight) {
    const Tensor col = patches(x, win, 0.0).reshape({win.n, groups, k, l});
    grad_weight = sum(matmul(g, col.transpose(2, 3)), {0}).reshape(w2.sizes());
  }
  return {grad_input, grad_weight};
}

}  // namespace

Tensor conv2d(const Tensor& input_in, const Tensor& weight_in, const Tensor& bias_in, Size2d stride, Size2d padding,
              Size2d dilation, int64_t groups) {
  Tensor input = input_in, weight = weight_in, bias = bias_in;
  if (autocast_args(CastPolicy::kLowerPrecision, {&input, &weight, &bias})) {
    return conv2d(input, weight, bias, stride, padding, dilation, groups);
  }
  const Tensor x = as_batch(input, "conv2d");
  check_conv_args(x, weight, bias, groups);
  const Window win = make_window(x.sizes(), {weight.size(2), weight.size(3)}, stride, padding, dilation, "conv2d");
  const int64_t out_channels = weight.size(0);
  if (!backend_for(x.device(), "conv2d").conv2d_native(win, out_channels, groups, bias.defined(), x.dtype())) {
    // A dtype the backend does not convolve itself (today: bfloat16 on a CPU where oneDNN
    // does not): the float32 convolution of the same values, rounded once (exact products,
    // float32 sums, as oneDNN's bfloat16 convolution), its gradients likewise; col2im's sums
    // in bfloat16 would round at every tap.
    const auto wide = [](const Tensor& t) { return t.defined() && t.dtype() == kBFloat16 ? t.to(kFloat32) : t; };
    const Autocast float32(x.device().type, kBFloat16, false);  // not cast back down
    return conv2d(wide(input), wide(weight), wide(bias), stride, padding, dilation, groups).to(kBFloat16);
  }
  // [O, C/g * kh * kw], contiguous; a recorded view (saved, it keeps its history for a double backward)
  const Tensor w2 = weight.reshape({out_channels, -1});
  Tensor out, col;
  bool library = false;  // the backend convolved by its own algorithm (cuDNN; oneDNN or the direct kernels)
  {
    NoGradGuard no_grad;
    out = new_output({win.n, out_channels, win.oh, win.ow}, x.dtype(), x.device());
    library = library_forward(out, x, weight, bias, win, groups);
    if (!library) col = conv_forward(out, x, w2, bias, win, groups);
  }
  out = unbatch_like(out, input);
  // grad_out [N, O, OH, OW] -> grad_input [N, C, H, W], grad_weight [O, C/g, kh, kw] (conv_backward),
  // grad_bias = sum of grad_out over N, OH, OW (conv_backward, as row sums).
  if (needs_grad({&input, &weight, &bias})) {
    const bool need_input = input.requires_grad(), need_weight = weight.requires_grad();
    const bool need_bias = bias.defined() && bias.requires_grad();
    record_op("ConvolutionBackward", out, {input, weight, bias},
              [sx = SavedTensor(need_weight ? x : Tensor()), col = need_weight ? col : Tensor(), sw = SavedTensor(w2),
               win, groups, weight_shape = weight.sizes(), in_shape = input.sizes(), need_input, need_weight, need_bias,
               library](const Tensor& g) {
                const Tensor g4 = g.reshape({win.n, weight_shape[0], win.oh, win.ow});
                const Tensor w2 = sw.get("ConvolutionBackward");
                if (GradMode::is_enabled()) {  // create_graph: the same gradients from recorded ops
                  std::vector<Tensor> grads =
                      conv_backward_graph(g4, sx.get("ConvolutionBackward"), w2, win, groups, need_input, need_weight);
                  return std::vector<Tensor>{need_input ? grads[0].view(in_shape) : Tensor(),
                                             need_weight ? grads[1].view(weight_shape) : Tensor(),
                                             need_bias ? sum(g4, {0, 2, 3}) : Tensor()};
                }
                const Tensor x = need_weight && !col.defined() ? sx.get("ConvolutionBackward") : Tensor();
                const Tensor grad_input =
                    need_input ? new_output({win.n, win.c, win.h, win.w}, g.dtype(), g.device()) : Tensor();
                const Tensor grad_weight = need_weight ? new_output(w2.sizes(), g.dtype(), g.device()) : Tensor();
                Tensor grad_bias;
                if (library) {
                  library_backward(g4, x, w2, weight_shape, win, groups, grad_input, grad_weight,
                                   need_bias ? &grad_bias : nullptr);
                } else {
                  conv_backward(g4, x, col, w2, win, groups, grad_input, grad_weight, need_bias ? &grad_bias : nullptr);
                }
                return std::vector<Tensor>{need_input ? grad_input.view(in_shape) : Tensor(),
                                           need_weight ? grad_weight.view(weight_shape) : Tensor(), grad_bias};
              });
  }
  // A channels-last input or weight gives a channels-last output, as PyTorch's; the kernels
  // themselves take and give NCHW (on these CPUs channels last does not pay: docs/tensor.md).
  const bool channels_last = input.suggest_memory_format() == MemoryFormat::kChannelsLast ||
                             weight.suggest_memory_format() == MemoryFormat::kChannelsLast;
  return channels_last && out.dim() == 4 ? out.contiguous(MemoryFormat::kChannelsLast) : out;
}

Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding,
              int64_t dilation, int64_t groups) {
  check_defined(input, "conv1d", "input");
  check_defined(weight, "conv1d", "weight");
  TDDP_CHECK(input.dim() == 2 || input.dim() == 3, "conv1d: expected a 2-D [C, L] or 3-D [N, C, L] input, got shape {}",
             format_shape(input.sizes()));
  TDDP_CHECK(weight.dim() == 3, "conv1d: expected a 3-D weight [out_channels, in_channels / groups, k], got shape {}",
             format_shape(weight.sizes()));
  const Tensor out = conv2d(input.unsqueeze(-2), weight.unsqueeze(2), bias, Size2d(1, stride), Size2d(0, padding),
                            Size2d(1, dilation), groups);
  return out.squeeze(-2);
}

}  // namespace tinyddp::tensor
