// The tensor operations: elementwise math with NumPy broadcasting, comparisons, reductions,
// softmax, matmul, convolution, pooling, normalisation, embedding, and the out-variants behind
// the in-place methods (the fused ops: fused.h, included at the end). Each op validates its
// arguments (shape, dtype, device: errors name the op and the offending argument), records its
// backward, and calls the entry point of the same name on its device's backend (the one
// interface of tensor/internal/backend.h, which the CPU and CUDA backends implement); the ops
// live in native/, a file per family.
//
// dtype rules, as PyTorch's (docs/tensor.md, "dtypes"): arithmetic and comparisons promote
// their operands to result_type(a, b); matrix products, convolutions and normalisations take
// one dtype; a scalar keeps the tensor's dtype but for the exceptions PyTorch makes (a
// non-integral scalar with integers, 16-bit floats rounding once); integers wrap, and their
// sums, products and cumulative sums are int64; bool tensors do not do arithmetic.
#pragma once

#include <functional>
#include <optional>
#include <string_view>
#include <tuple>

#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/internal/kernel_ops.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::tensor {

// As torch.result_type: promote_types of the two, except that a 0-dim tensor joins in only when
// of a higher kind (bool < integer < floating): float32 [3] with float64 [] is float32.
DType result_type(const Tensor& a, const Tensor& b);

// ---- elementwise, binary (broadcasting) -----------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a + alpha * b
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a - alpha * b
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, const Tensor& b);  // true division
Tensor div(const Tensor& a, double b);
// As torch.lerp: start + weight (end - start), computed back from end for |weight| >= 0.5 as
// PyTorch does; addcmul / addcdiv: input + value tensor1 * tensor2 (/ tensor2).
Tensor lerp(const Tensor& start, const Tensor& end, double weight);
Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight);
Tensor addcmul(const Tensor& input, const Tensor& tensor1, const Tensor& tensor2, double value = 1.0);
Tensor addcdiv(const Tensor& input, const Tensor& tensor1, const Tensor& tensor2, double value = 1.0);
Tensor maximum(const Tensor& a, const Tensor& b);  // NaN wins, as in PyTorch
Tensor minimum(const Tensor& a, const Tensor& b);

// ---- comparisons: bool masks ------------------------------------------------------------------
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);
// As torch.logical_and / or / xor / not: bool results, any dtype taken as true where nonzero.
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& a);

// ---- elementwise, unary -------------------------------------------------------------------------
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
// As torch.nn.functional.gelu: approximate "none" (x Phi(x), with erf) or "tanh"; floating
// inputs only.
Tensor gelu(const Tensor& x, std::string_view approximate = "none");
// As torch.nn.functional.celu: max(0, x) + min(0, alpha (exp(x / alpha) - 1)) (composed from
// where and exp, tensor/native/select.cc).
Tensor celu(const Tensor& x, double alpha = 1.0);
// As torch.nn.functional.leaky_relu: x where x > 0, negative_slope x elsewhere (composed from
// where and mul, tensor/native/select.cc).
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor pow(const Tensor& x, double exponent);
// As torch.pow(self: Scalar, exponent: Tensor): base ** exponent elementwise, in the exponent's
// floating dtype (an int64 exponent computes in float32; an integral base with an int64
// exponent, an integer result in PyTorch, is refused). Its gradient is out * log(base) (0
// where base is 0 and the exponent >= 0). Adam's capturable bias correction, 1 - beta^step.
Tensor pow(double base, const Tensor& exponent);
// As torch.pow(Tensor, Tensor): x ** exponent elementwise, broadcasting, floating dtypes
// promoting as in add (an integer tensor with a floating one computes in the floating dtype);
// two int64 tensors give int64 (a negative exponent refused, as PyTorch refuses it). The
// gradients are exponent x^(exponent - 1) (0 where the exponent is 0) and out log(x) (0 where
// x is 0 and the exponent >= 0), as PyTorch's.
Tensor pow(const Tensor& x, const Tensor& exponent);
// The trigonometric and special functions (native/unary.cc); integers compute in float32.
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor log1p(const Tensor& x);       // log(1 + x), accurate near 0
Tensor expm1(const Tensor& x);       // exp(x) - 1, accurate near 0
Tensor rsqrt(const Tensor& x);       // 1 / sqrt(x)
Tensor reciprocal(const Tensor& x);  // 1 / x
Tensor square(const Tensor& x);      // pow(x, 2): integers stay integers
// The roundings and sign keep the dtype and have zero gradients, as PyTorch's. round rounds
// half to even (torch.round), at `decimals` digits after the point (before it if negative;
// floating inputs) as round(x * 10^decimals) / 10^decimals. sign(NaN) is 0.
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
Tensor trunc(const Tensor& x);
Tensor round(const Tensor& x, int64_t decimals = 0);
Tensor sign(const Tensor& x);
// bool masks of NaN, of +-inf and of neither (integer tensors: all false, false, true).
Tensor isnan(const Tensor& x);
Tensor isinf(const Tensor& x);
Tensor isfinite(const Tensor& x);
// As torch.nan_to_num: NaN replaced by `nan`, +inf by `posinf` and -inf by `neginf` (by
// default the dtype's largest and lowest finite values); the gradient passes where x is
// finite. Integer tensors come back as a copy.
Tensor nan_to_num(const Tensor& x, double nan = 0.0, std::optional<double> posinf = std::nullopt,
                  std::optional<double> neginf = std::nullopt);

// ---- joining, splitting, triangles ------------------------------------------------------------
// As torch.cat: tensors of one dtype and device whose shapes agree outside `dim`.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
// As torch.stack: tensors of one shape, dtype and device joined along a new dim `dim`
// (0 <= dim <= their dim(), or negative from the end).
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// As torch.split: views of consecutive pieces of `split_size` along dim (the last may be
// shorter), or of the given sizes (which must sum to the dim's size).
std::vector<Tensor> split(const Tensor& t, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& t, const std::vector<int64_t>& sizes, int64_t dim = 0);
// As torch.chunk: split into pieces of ceil(size / chunks) (fewer pieces when that runs out).
std::vector<Tensor> chunk(const Tensor& t, int64_t chunks, int64_t dim = 0);
// As torch.unbind: the slices along dim (views, select's), dim removed.
std::vector<Tensor> unbind(const Tensor& t, int64_t dim = 0);
// As torch.Tensor.repeat: the tensor tiled repeats[i] times along dim i (repeats may have more
// entries than t has dims: t gains leading dims of 1 first); a new tensor (expand, then a
// contiguous copy), differentiable.
Tensor repeat(const Tensor& t, const Shape& repeats);
// As torch.repeat_interleave: each slice along dim (of the flattened tensor without a dim)
// repeated `repeats` times in place (an int64 tensor: a count per slice); differentiable.
Tensor repeat_interleave(const Tensor& t, int64_t repeats, std::optional<int64_t> dim = std::nullopt);
Tensor repeat_interleave(const Tensor& t, const Tensor& repeats, std::optional<int64_t> dim = std::nullopt);
// As torch.flip: the order along each of `dims` reversed (a copy).
Tensor flip(const Tensor& t, DimList dims);
// As torch.roll: elements shifted along dims by shifts (wrapping around); without dims the
// tensor is rolled flattened and reshaped back.
Tensor roll(const Tensor& t, DimList shifts, DimList dims = {});
// As torch.broadcast_to: an expanded view.
Tensor broadcast_to(const Tensor& t, const Shape& shape);
// As torch.meshgrid: 1-D inputs of sizes n0, n1, ... expanded to [n0, n1, ...] views ("ij");
// with "xy" the first two dims are swapped, as numpy's.
std::vector<Tensor> meshgrid(const std::vector<Tensor>& tensors, std::string_view indexing = "ij");
// As torch.diag: a 2-D input's `diagonal`-th diagonal as a 1-D view, or a 1-D input placed on
// that diagonal of a square matrix of zeros.
Tensor diag(const Tensor& t, int64_t diagonal = 0);
// As torch.tril / torch.triu over the last two dims: the elements on and below (above) the
// `diagonal`-th diagonal kept, the rest zero.
Tensor tril(const Tensor& input, int64_t diagonal = 0);
Tensor triu(const Tensor& input, int64_t diagonal = 0);
// As torch.Tensor.masked_fill: input where mask (bool, broadcastable to input) is false, value
// where it is true (nanoGPT's causal mask: masked_fill(att, causal == 0, -inf)).
Tensor masked_fill(const Tensor& input, const Tensor& mask, double value);

// ---- sorting and data-dependent selections (native/sort.cc) -----------------------------------
// As torch.sort: (values, indices) along dim, ascending (NaN last) or descending (NaN first);
// ties keep their order (a stable sort, which `stable = false` permits too). Differentiable
// through the values (gather's gradient).
std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
// As torch.unique: over all elements, (the distinct values sorted, each element's position in
// them shaped as x, each value's count); with `dim`, the distinct slices along it in
// lexicographic order, each slice's position in them ([x.size(dim)]) and each one's count. All
// three are always computed. NaNs are distinct. Not differentiable, as PyTorch's.
std::tuple<Tensor, Tensor, Tensor> unique(const Tensor& x, bool sorted = true, bool return_inverse = false,
                                          bool return_counts = false, std::optional<int64_t> dim = std::nullopt);
// As torch.nonzero: the [count, x.dim()] int64 coordinates of the nonzero elements, row-major.
Tensor nonzero(const Tensor& x);
// As torch.masked_select: the elements of x where mask (bool; the two broadcast) is true, 1-D
// in row-major order; differentiable.
Tensor masked_select(const Tensor& x, const Tensor& mask);
// As torch.bincount: counts (int64) or summed weights (their dtype) of each value of a 1-D
// non-negative int64 x, max(x) + 1 bins at least, minlength at least.
Tensor bincount(const Tensor& x, const Tensor& weights = Tensor(), int64_t minlength = 0);

// ---- reductions -------------------------------------------------------------------------------
// Over all elements (a 0-d result), or over `dims` (an empty list also means all).
Tensor sum(const Tensor& x);
// `dims` as libtorch's: one dim (sum(x, 1)), a braced list (sum(x, {0, 2})) or a Shape.
Tensor sum(const Tensor& x, DimList dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, DimList dims, bool keepdim = false);
// As torch.norm / Tensor.norm(p, dim, keepdim) for p = 2 (sqrt of the sum of squares; its
// gradient x / norm is 0 where the norm is 0, as PyTorch's) and p = 1 (sum of |x|), over all
// elements or `dims`; floating inputs. Other p are refused.
Tensor norm(const Tensor& x, double p = 2.0, DimList dims = {}, bool keepdim = false);
// max over all elements; max along a dim gives (values, indices) with the first index of the
// maximum (NaN counts as the maximum, as in PyTorch).
Tensor max(const Tensor& x);
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x);  // index into the flattened tensor
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
// min as max: over all elements (the gradient shared among equal minima), or along a dim
// (values, first index of the minimum; NaN counts as the minimum, as in PyTorch).
Tensor min(const Tensor& x);
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);

// As torch.var / torch.std over `dims` (all when empty): the sum of squared deviations from
// the mean divided by N - correction (correction 1, Bessel's, by default; 0 for the
// population's). std's gradient is 0 where std is 0, as PyTorch's. Floating inputs. Under
// `using namespace`, call std qualified (tensor::std(x), as libtorch's torch::std) or as x.std().
Tensor var(const Tensor& x, DimList dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, DimList dims = {}, int64_t correction = 1, bool keepdim = false);
// As torch.amax / amin: the maximum (minimum) over `dims` (all when empty); the gradient is
// shared evenly among the elements equal to it.
Tensor amax(const Tensor& x, DimList dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, DimList dims = {}, bool keepdim = false);
// As torch.logsumexp: log(sum(exp(x))) over `dims`, computed around the maximum so that it
// neither overflows nor underflows; integers compute in float32.
Tensor logsumexp(const Tensor& x, DimList dims, bool keepdim = false);
// As torch.all / torch.any: bool, whether every (some) element is nonzero, over all elements
// or `dims`.
Tensor all(const Tensor& x);
Tensor all(const Tensor& x, DimList dims, bool keepdim = false);
Tensor any(const Tensor& x);
Tensor any(const Tensor& x, DimList dims, bool keepdim = false);

// ---- selecting elements (native/select.cc) -------------------------------------------------------
// As torch.clamp: each element limited to [min, max] (either bound may be absent, not both;
// NaN stays NaN; min > max gives max everywhere, as PyTorch). The gradient passes where the
// input is within the bounds, ends included, and is 0 where a bound replaced it.
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max = std::nullopt);
// As torch.where: a where condition (bool) is true, else b; the three broadcast together and
// a, b promote to one dtype. Gradients go to a where condition holds and to b elsewhere.
// (A -0.0 taken from either side comes out as +0.0.)
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
// As torch.index_select: the slices of x along dim at the int64 positions `index` (1-D or a
// scalar, each in [0, x.size(dim)): a negative one is refused, as PyTorch refuses it), in that
// order; repeats allowed (their gradients add up).
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// As torch.gather: out[i][j][k] = x[i][index[i][j][k]][k] for dim 1 (and so on): index is int64,
// of x's number of dims, no larger than x outside dim, each entry in [0, x.size(dim)). The
// gradient adds each output's gradient at the element it came from.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// As torch.cumsum: running sums along dim (integer and bool inputs sum in int64), by blocks of
// 128 summed with a triangular product and the blocks' totals carried over, so memory stays
// linear in the dim; differentiable (the gradient is the reversed running sum).
Tensor cumsum(const Tensor& x, int64_t dim);
// As torch.prod / torch.cumprod: the product over all elements or along dim, and the running
// products along dim (integer and bool inputs multiply in int64). Pairwise products (a halving
// tree; a doubling scan for cumprod), so the gradient, autograd's through the products, is
// exact where inputs are zero too; rounding may differ from PyTorch's sequential loop by ulps.
Tensor prod(const Tensor& x);
Tensor prod(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor cumprod(const Tensor& x, int64_t dim);
// As torch.topk: the k largest (largest = false: smallest) elements along dim, in order, and
// their indices; NaN counts as the largest, ties go to the first index. k passes of max over
// the dim; the values are gathered from x, so the gradient reaches it.
std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true);
// As torch.index_add: x with alpha * source's slices added at the positions `index` (int64
// [k], repeats add up) along dim; source is x's shape with k at dim. As torch.scatter_add: x
// with each src[i][j][k] added at x[i][index[i][j][k]][k] (dim 1, and so on): index is int64
// of x's number of dims, no larger than src, nor than x outside dim. Both are sums through a
// one-hot product (memory: the one-hot of the index against the dim), differentiable in x and
// the source; floating tensors (and int64 on the CPU).
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source, double alpha = 1.0);
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// As torch.scatter: x with src[i][j][k] (or `value`) written at x[i][index[i][j][k]][k] (dim
// 1, and so on), index and src as scatter_add's. Where an index repeats, the last write wins
// (as PyTorch's CPU loop; PyTorch leaves it undefined). Gradients: x's where nothing was
// written, src's gathered from the positions it was written to.
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, double value);
// As torch.nn.functional.one_hot: int64 class ids -> int64 [..., num_classes] with a 1 at each
// id; num_classes -1 takes max id + 1. Ids outside [0, num_classes) are refused.
Tensor one_hot(const Tensor& ids, int64_t num_classes = -1);
// Numerically stable (the row maximum is subtracted first).
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// ---- linear algebra ---------------------------------------------------------------------------
// 1-D/2-D/batched as torch.matmul: batch dims broadcast; transposed views are used in place.
Tensor matmul(const Tensor& a, const Tensor& b);
// The BLAS-named products, as torch's: bmm of [b, n, k] and [b, k, m] (no broadcasting), mv
// of a matrix and a vector, dot of two vectors (a 0-d result), outer of two vectors; addmm
// (beta input + alpha m1 m2) and baddbmm (beta input + alpha bmm(batch1, batch2)), the input
// broadcast to the product's shape and ignored when beta is 0.
Tensor bmm(const Tensor& a, const Tensor& b);
Tensor mv(const Tensor& a, const Tensor& v);
Tensor dot(const Tensor& a, const Tensor& b);
Tensor outer(const Tensor& a, const Tensor& b);
Tensor addmm(const Tensor& input, const Tensor& m1, const Tensor& m2, double beta = 1.0, double alpha = 1.0);
Tensor baddbmm(const Tensor& input, const Tensor& batch1, const Tensor& batch2, double beta = 1.0, double alpha = 1.0);
// As torch.einsum("bij,bjk->bik", {a, b}): labels summed early, operands contracted left to
// right by batched matmuls (native/einsum.cc); no ellipsis or repeated labels within an operand.
Tensor einsum(std::string_view equation, const std::vector<Tensor>& tensors);
Tensor mm(const Tensor& a, const Tensor& b);  // strictly 2-D x 2-D
// input [..., in] @ weight^T [in, out] + bias [out] (bias may be undefined), as
// torch.nn.functional.linear: one GEMM and one graph node, whose backward computes the
// weight gradient directly in the weight's layout.
Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor());

// Sums `grad` over the dims that broadcasting expanded, giving it `shape` (the gradient of a
// broadcast input; torch.Tensor.sum_to_size).
Tensor sum_to_size(const Tensor& grad, const Shape& shape);

// ---- convolution and pooling (NCHW; an unbatched [C, H, W] input gives [C, OH, OW]) ------------
// A (height, width) pair that one number also converts to, like PyTorch's int-or-tuple
// arguments: conv2d(x, w, b, /*stride=*/2) or conv2d(x, w, b, {2, 1}).
struct Size2d {
  Size2d(int64_t both) : h(both), w(both) {}  // NOLINT: implicit by design
  Size2d(int64_t height, int64_t width) : h(height), w(width) {}
  int64_t h, w;
};
// torch.nn.functional.conv2d: input [N, C, H, W], weight [O, C / groups, kh, kw], bias [O]
// (may be undefined) -> [N, O, OH, OW], OH = (H + 2 padding - dilation (kh - 1) - 1) / stride + 1.
// The CPU computes it as one GEMM per group over the input's patches (im2col), so its speed
// follows matmul's.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), Size2d stride = 1,
              Size2d padding = 0, Size2d dilation = 1, int64_t groups = 1);
// torch.nn.functional.conv1d: input [N, C, L] (or [C, L]), weight [O, C / groups, k], bias [O]
// -> [N, O, OL]: conv2d over a height of 1 (so both backends' convolutions and gradients).
Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), int64_t stride = 1,
              int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1);
// torch.nn.functional.group_norm: input [N, C, ...] normalised over each group of C /
// num_groups channels and the other dims (biased variance, eps added), then scaled and
// shifted per channel by weight and bias [C] (either undefined).
Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// torch.nn.functional.unfold: the sliding kernel-sized patches of input [N, C, H, W] as columns
// [N, C * kh * kw, L] (L output positions, row-major; padding reads as 0).
Tensor unfold(const Tensor& input, Size2d kernel_size, Size2d dilation = 1, Size2d padding = 0, Size2d stride = 1);
// Pooling windows; stride defaults to the kernel size. Padding (at most half the kernel) reads
// as -inf for max and 0 for average. max_pool2d's gradient goes to the first maximum of each
// window (row-major), as in PyTorch. avg_pool2d divides by kh * kw, or, without
// count_include_pad, by the number of input elements the window covers.
Tensor max_pool2d(const Tensor& input, Size2d kernel_size, std::optional<Size2d> stride = {}, Size2d padding = 0,
                  Size2d dilation = 1);
Tensor avg_pool2d(const Tensor& input, Size2d kernel_size, std::optional<Size2d> stride = {}, Size2d padding = 0,
                  bool count_include_pad = true);
// Averages into an output_size grid of PyTorch's adaptive cells: cell (i, j) covers rows
// [floor(i H / oh), ceil((i + 1) H / oh)) and the columns alike (overlapping where the sizes
// do not divide; when they do, avg_pool2d's windows).
Tensor adaptive_avg_pool2d(const Tensor& input, Size2d output_size);

// ---- normalisation and dropout ------------------------------------------------------------------
// torch.nn.functional.batch_norm over dim 1 of input [N, C, ...]. training: normalise with the
// batch's mean and biased variance, and (when running_mean/running_var are defined) update
// them in place: running = (1 - momentum) running + momentum batch, with the unbiased variance.
// eval: normalise with the running statistics. weight/bias [C] may be undefined.
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), bool training = false,
                  double momentum = 0.1, double eps = 1e-5);
// Whether batch_norm (and SyncBatchNorm) normalise a 16-bit input in float32 and round the
// result back once: autocast's bfloat16 activations into a float32 BatchNorm, known by its
// running_mean or, without running statistics, its weight (batch_norm: mixed, no copy).
bool batch_norm_widens(const Tensor& input, const Tensor& running_mean, const Tensor& weight);
// Batch normalisation's steps, as PyTorch's torch.batch_norm_stats / batch_norm_elemt /
// batch_norm_backward_reduce / batch_norm_backward_elemt (not differentiable; batch_norm and
// SyncBatchNorm are built from them). Over dim 1 of input [N, C, ...], results [C]:
// the per-channel mean and biased variance (in the input's dtype, or float32 for a 16-bit input:
// the steps take float32 [C] vectors beside one, and give them);
std::tuple<Tensor, Tensor> batch_norm_mean_var(const Tensor& input, std::optional<DType> stats_dtype = std::nullopt);
// (input - mean) * invstd * weight + bias (weight, bias may be undefined);
Tensor batch_norm_elemt(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& mean,
                        const Tensor& invstd);
// sum(grad_out) and sum(grad_out * (input - mean)) per channel;
std::tuple<Tensor, Tensor> batch_norm_backward_reduce(const Tensor& grad_out, const Tensor& input, const Tensor& mean);
// the input's gradient, (grad_out - sum_dy / count - (input - mean) invstd^2 sum_dy_xmu / count)
// invstd weight, for statistics taken over `count` elements per channel; with sum_dy and
// sum_dy_xmu undefined (fixed statistics, eval) it is grad_out * invstd * weight.
Tensor batch_norm_backward_elemt(const Tensor& grad_out, const Tensor& input, const Tensor& mean, const Tensor& invstd,
                                 const Tensor& weight, const Tensor& sum_dy, const Tensor& sum_dy_xmu, double count);

class Generator;
// torch.nn.functional.embedding: out[..., :] = weight[input[...], :] for int64 ids in
// [0, num_embeddings) (others are refused, naming one); weight [num_embeddings, embedding_dim].
// The weight's gradient sums the rows of repeated ids.
Tensor embedding(const Tensor& input, const Tensor& weight);
// As torch.embedding(weight, input, padding_idx, scale_grad_by_freq): the same lookup, whose
// gradient leaves row padding_idx (in [0, num_embeddings)) at zero and, with
// scale_grad_by_freq, divides the gradient each id's rows send by how often it occurs in input.
Tensor embedding(const Tensor& input, const Tensor& weight, std::optional<int64_t> padding_idx,
                 bool scale_grad_by_freq);
// torch.nn.functional.layer_norm: each slice over the trailing dims `normalized_shape` is
// normalised with its mean and biased variance (eps added), then scaled by weight and shifted
// by bias (either undefined, or of normalized_shape).
Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// torch.nn.functional.dropout: in training each element zeroed with probability p in [0, 1) (from
// `generator`, default the global one), the others scaled by 1 / (1 - p); else, or at p = 0, the input.
// On a GPU the mask is drawn there under one key from the generator (docs/tensor.md, "Dropout").
Tensor dropout(const Tensor& input, double p = 0.5, bool training = true, Generator* generator = nullptr);

// ---- comparing whole tensors ------------------------------------------------------------------
// |a - b| <= atol + rtol * |b| elementwise (a, b broadcast); dtypes must match.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
// Same shape and the same values (NaN != NaN).
bool equal(const Tensor& a, const Tensor& b);

// ---- out-variants and helpers (also used by the in-place methods) ---------------------------
// out = a + alpha * b, out = a * b, out = a / b, written into an existing tensor whose shape
// must be the broadcast shape; `op` names the caller in errors.
void add_out(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, const char* op);
void mul_out(const Tensor& out, const Tensor& a, const Tensor& b, const char* op);
void div_out(const Tensor& out, const Tensor& a, const Tensor& b, const char* op);
// dst = src (src broadcast to dst's shape, dtype converted, any strides on either side).
void copy_into(const Tensor& dst, const Tensor& src, bool non_blocking = false);
// An in-place op `op` (relu_, x += y, masked_fill_, ...): writes `compute()`, the out-of-place
// result computed from `self`, into self and returns self. When autograd records it (grad mode
// on and the result requires grad) self takes the result's history, as PyTorch's in-place
// ops do: the backward of what computed it runs where self's gradient arrives, and whatever
// that formula saves of self is a copy from before the write (SaveCopiesGuard). Refused: a
// leaf that requires grad (as PyTorch) and a view (its base would not see the change), each
// naming `op`. Saved tensors of self taken earlier see the storage's version move, so a
// backward that needs them says so.
const Tensor& write_in_place(const Tensor& self, const char* op, const std::function<Tensor()>& compute);
void fill_out(const Tensor& dst, double value);
// dst += src where elements of dst may share memory (a broadcast view): each write adds in
// turn, so shared slots receive the sum. Used by as_strided's backward.
void accumulate_into(const Tensor& dst, const Tensor& src);
// The scalar `value` as a 0-d tensor in the dtype it combines with `t` in (the rules above).
Tensor scalar_like(const Tensor& t, double value, const char* op);
}  // namespace tinyddp::tensor

// The fused ops (attention, cross-entropy, the optimizer steps: one kernel for what a model
// would otherwise compose).
#include "tinyddp/tensor/fused.h"  // IWYU pragma: export
// The operators (x + y, x > 0, x += y, mask & other), written with the functions above.
#include "tinyddp/tensor/operators.h"  // IWYU pragma: export
