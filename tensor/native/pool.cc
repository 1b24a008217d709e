// Pooling over NCHW tensors (max, average, adaptive average) and unfold, each forward beside
// its backward formula, on the window helpers of native/window.h (conv.cc): max pooling has a
// kernel of its own, average pooling sums each window's column of im2col. Results are stored
// channels last when the input is (keep_layout).
#include <limits>
#include <vector>

#include "tinyddp/tensor/graph.h"
#include "tinyddp/tensor/native/checks.h"
#include "tinyddp/tensor/native/composite.h"
#include "tinyddp/tensor/native/window.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::tensor {

using namespace detail;

namespace {

using Window = Window2d;

Size2d stride_or_kernel(const std::optional<Size2d>& stride, Size2d kernel) { return stride ? *stride : kernel; }

void check_pool_padding(const Window& win, const char* op) {
  TDDP_CHECK(win.ph <= win.kh / 2 && win.pw <= win.kw / 2, "{}: padding {} must be at most half of the kernel size {}",
             op, pair_str(win.ph, win.pw), pair_str(win.kh, win.kw));
}

// The values of t [N, C, H, W] at the place of each pooling window's maximum in x (the first
// of equal maxima, row-major, as the pooling kernels choose).
Tensor at_window_maxima(const Tensor& t, const Tensor& x, const Window& win) {
  const Shape rows = {win.n, win.c, win.kh * win.kw, win.oh, win.ow};
  Tensor taps;
  {
    NoGradGuard no_grad;
    taps = argmax(patches(x, win, -std::numeric_limits<double>::infinity()).view(rows), 2, true);
  }
  return gather(patches(t, win, 0.0).view(rows), 2, taps).squeeze(2);
}

}  // namespace

Tensor unfold(const Tensor& input, Size2d kernel_size, Size2d dilation, Size2d padding, Size2d stride) {
  check_defined(input, "unfold", "input");
  TDDP_CHECK(input.dim() == 4, "unfold: expected a 4-D [N, C, H, W] input, got shape {}", format_shape(input.sizes()));
  const Tensor x = as_batch(input, "unfold");
  const Window win = make_window(x.sizes(), kernel_size, stride, padding, dilation, "unfold");
  return patches(x, win, 0.0).view({win.n, win.c * win.kh * win.kw, win.oh * win.ow});
}

Tensor max_pool2d(const Tensor& input, Size2d kernel_size, std::optional<Size2d> stride, Size2d padding,
                  Size2d dilation) {
  const Tensor x = as_batch(input, "max_pool2d");
  const Window win =
      make_window(x.sizes(), kernel_size, stride_or_kernel(stride, kernel_size), padding, dilation, "max_pool2d");
  check_pool_padding(win, "max_pool2d");
  // The output in the input's layout, as PyTorch's (a channels-last map's pooled in place by the
  // CPU's kernel); the indices row-major.
  const MemoryFormat format = input.dim() == 4 ? input.suggest_memory_format() : MemoryFormat::kContiguous;
  const Tensor out = new_output({win.n, win.c, win.oh, win.ow}, x.dtype(), x.device(), format);
  const Tensor indices = new_output(out.sizes(), kInt64, x.device());  // where each maximum came from
  {
    NoGradGuard no_grad;
    if (!backend_for(x.device(), "max_pool2d").max_pool2d(out, indices, x, win)) {
      composite::max_pool2d(out, indices, x, win);
    }
  }
  // grad_out [N, C, OH, OW] -> grad_x [N, C, H, W]: each output's gradient added at its maximum.
  if (needs_grad(x)) {
    record_op("MaxPool2DWithIndicesBackward", out, {x}, [indices, win, format, sx = SavedTensor(x)](const Tensor& g) {
      // The input's gradient in the input's layout, from the output's gradient in that layout.
      const Tensor grad_x = new_output({win.n, win.c, win.h, win.w}, g.dtype(), g.device(), format);
      {
        NoGradGuard no_grad;
        const Tensor gc = g.contiguous(format);
        if (!backend_for(g.device(), "max_pool2d backward").max_pool2d_backward(grad_x, gc, indices, win)) {
          composite::max_pool2d_backward(grad_x, gc, indices, win);
        }
      }
      // create_graph: linear in g (the maxima's places are fixed), so its own gradient picks
      // each window's maximum place out of the incoming one
      if (needs_grad(g)) {
        record_op("MaxPool2DWithIndicesBackwardBackward", grad_x, {g}, [win, sx](const Tensor& gg) {
          return std::vector<Tensor>{at_window_maxima(gg, sx.get("MaxPool2D"), win)};
        });
      }
      return std::vector<Tensor>{grad_x};
    });
  }
  return keep_layout(unbatch_like(out, input), input);
}

Tensor avg_pool2d(const Tensor& input, Size2d kernel_size, std::optional<Size2d> stride, Size2d padding,
                  bool count_include_pad) {
  const Tensor x = as_batch(input, "avg_pool2d");
  const Window win =
      make_window(x.sizes(), kernel_size, stride_or_kernel(stride, kernel_size), padding, 1, "avg_pool2d");
  check_pool_padding(win, "avg_pool2d");
  const Shape window_rows = {win.n, win.c, win.kh * win.kw, win.oh, win.ow};
  const Tensor sums = sum(patches(x, win, 0.0).view(window_rows), {2});
  if (count_include_pad || (win.ph == 0 && win.pw == 0)) {
    return keep_layout(unbatch_like(div(sums, static_cast<double>(win.kh * win.kw)), input), input);
  }
  // How many real (unpadded) input elements each window covers: the windows of a ones image.
  Tensor counts;
  {
    NoGradGuard no_grad;
    Window one = win;
    one.n = one.c = 1;
    const Tensor ones_image = ones({1, 1, win.h, win.w}, TensorOptions(x.dtype()).device(x.device()));
    counts = sum(patches(ones_image, one, 0.0).view({1, 1, win.kh * win.kw, win.oh, win.ow}), {2});
  }
  return keep_layout(unbatch_like(div(sums, counts), input), input);
}

namespace {
// PyTorch's adaptive cells along one dim of `in`: cell i covers [floor(i in / out),
// ceil((i + 1) in / out)), so neighbouring cells overlap when out does not divide in. Each
// cell's mean, the cells joined along `dim`.
Tensor adaptive_means(const Tensor& x, int64_t dim, int64_t out) {
  const int64_t in = x.size(dim);
  std::vector<Tensor> cells;
  for (int64_t i = 0; i < out; ++i) {
    const int64_t start = i * in / out, end = ((i + 1) * in + out - 1) / out;
    cells.push_back(mean(x.narrow(dim, start, end - start), {dim}, true));
  }
  return cat(cells, dim);
}
}  // namespace

Tensor adaptive_avg_pool2d(const Tensor& input, Size2d output_size) {
  const Tensor x = as_batch(input, "adaptive_avg_pool2d");
  const int64_t h = x.size(2), w = x.size(3);
  TDDP_CHECK(output_size.h > 0 && output_size.w > 0, "adaptive_avg_pool2d: output_size must be positive, got {}",
             pair_str(output_size.h, output_size.w));
  TDDP_CHECK(h > 0 && w > 0, "adaptive_avg_pool2d: input height and width must be positive, got shape {}",
             format_shape(input.sizes()));
  if (output_size.h == 1 && output_size.w == 1) return mean(input, {-2, -1}, true);
  if (h % output_size.h == 0 && w % output_size.w == 0) {  // equal, disjoint windows: average pooling
    const Size2d kernel{h / output_size.h, w / output_size.w};
    return avg_pool2d(input, kernel, kernel);
  }
  // A rectangle's mean is the mean over its rows of each row's mean: the rows' cells, then the
  // columns' (overlapping cells where the sizes do not divide).
  const int64_t dims = input.dim();
  return keep_layout(adaptive_means(adaptive_means(input, dims - 2, output_size.h), dims - 1, output_size.w), input);
}

}  // namespace tinyddp::tensor
