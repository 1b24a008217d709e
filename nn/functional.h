// torch.nn.functional, as libtorch's torch::nn::functional: `namespace F =
// tinyddp::nn::functional;` then F::relu(x), F::silu(x), F::pad(x, {1, 1}), F::cross_entropy(...).
// The ops that live in the tensor layer (relu, gelu, softmax, conv2d, dropout, ...) and the
// losses (loss.h) are named here too; the activations and helpers below are composites of
// tensor ops (functional.cc), so they run on every device and their gradients are their
// parts' (each written so that it equals PyTorch's, boundaries included).
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "tinyddp/nn/loss.h"
#include "tinyddp/nn/options.h"
#include "tinyddp/tensor/ops.h"
#include "tinyddp/tensor/random.h"

namespace tinyddp::nn::functional {

using tensor::Tensor;

using tensor::adaptive_avg_pool2d;
using tensor::avg_pool2d;
using tensor::batch_norm;
using tensor::celu;
using tensor::conv1d;
using tensor::conv2d;
using tensor::dropout;
using tensor::embedding;
using tensor::gelu;
using tensor::group_norm;
using tensor::layer_norm;
using tensor::leaky_relu;
using tensor::linear;
using tensor::log_softmax;
using tensor::max_pool2d;
using tensor::one_hot;
using tensor::relu;
using tensor::sigmoid;
using tensor::softmax;
using tensor::tanh;
using tensor::unfold;

using nn::binary_cross_entropy;
using nn::binary_cross_entropy_with_logits;
using nn::cross_entropy;
using nn::huber_loss;
using nn::InterpolateFuncOptions;  // libtorch spells it F::InterpolateFuncOptions
using nn::kl_div;
using nn::l1_loss;
using nn::mse_loss;
using nn::nll_loss;
using nn::smooth_l1_loss;

// x for x > 0, alpha (exp(x) - 1) otherwise (expm1: accurate near 0).
Tensor elu(const Tensor& x, double alpha = 1.0);
// scale * elu(x, alpha) with the self-normalising constants.
Tensor selu(const Tensor& x);
// x sigmoid(x) (swish).
Tensor silu(const Tensor& x);
// log(1 + exp(beta x)) / beta, x itself where beta x > threshold.
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
// x tanh(softplus(x)).
Tensor mish(const Tensor& x);
// x clamped to [min_val, max_val]; the gradient passes strictly inside (0 on the bounds, as
// PyTorch's hardtanh, where clamp's passes on them).
Tensor hardtanh(const Tensor& x, double min_val = -1.0, double max_val = 1.0);
Tensor relu6(const Tensor& x);        // hardtanh(x, 0, 6)
Tensor hardsigmoid(const Tensor& x);  // relu6(x + 3) / 6
Tensor hardswish(const Tensor& x);    // x relu6(x + 3) / 6
// The first half of x along dim times the sigmoid of the second (dim's size must be even).
Tensor glu(const Tensor& x, int64_t dim = -1);
// x where positive, weight x elsewhere; weight has one element or one per channel (dim 1).
Tensor prelu(const Tensor& x, const Tensor& weight);
// x / max(||x||_p, eps) along dim (p = 1 or 2).
Tensor normalize(const Tensor& x, double p = 2.0, int64_t dim = 1, double eps = 1e-12);
// sum(x1 x2) / (max(||x1||, eps) max(||x2||, eps)) along dim, the two broadcast.
Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim = 1, double eps = 1e-8);
// As F.pad: `pad` lists (left, right) amounts for the last dim, then the one before, ...;
// mode "constant" (with `value`; negative amounts crop), "reflect", "replicate" or "circular".
Tensor pad(const Tensor& x, const std::vector<int64_t>& pad, std::string_view mode = "constant", double value = 0.0);
// Whole channels zeroed with probability p in training, the others scaled by 1 / (1 - p):
// x [N, C, H, W], or [C, H, W] unbatched (PyTorch 2's reading); the identity outside training.
Tensor dropout2d(const Tensor& x, double p = 0.5, bool training = true, tensor::Generator* generator = nullptr);
// max_pool2d and avg_pool2d over the last dim of x [N, C, L] or [C, L] (stride unset: the
// kernel size).
Tensor max_pool1d(const Tensor& x, int64_t kernel_size, std::optional<int64_t> stride = {}, int64_t padding = 0,
                  int64_t dilation = 1);
Tensor avg_pool1d(const Tensor& x, int64_t kernel_size, std::optional<int64_t> stride = {}, int64_t padding = 0,
                  bool count_include_pad = true);

// As torch.nn.functional.embedding(input, weight, padding_idx): the rows of weight, the
// padding_idx row (negative: from the end) taking no gradient from the positions that read it.
Tensor embedding(const Tensor& input, const Tensor& weight, int64_t padding_idx);
// F.embedding's keyword arguments, as libtorch's F::EmbeddingFuncOptions: padding_idx as
// above; max_norm renormalises the rows looked up in place first (norm_type 1 or 2);
// scale_grad_by_freq divides each id's gradient by its count in input. sparse is refused
// (tinyddp has no sparse gradients).
struct EmbeddingFuncOptions {
  TINYDDP_ARG(std::optional<int64_t>, padding_idx);
  TINYDDP_ARG(std::optional<double>, max_norm);
  TINYDDP_ARG(double, norm_type) = 2.0;
  TINYDDP_ARG(bool, scale_grad_by_freq) = false;
  TINYDDP_ARG(bool, sparse) = false;
};
Tensor embedding(const Tensor& input, const Tensor& weight, const EmbeddingFuncOptions& options);

// As torch.nn.functional.adaptive_max_pool2d: input [N, C, H, W] (or [C, H, W]) into an
// output_size grid, cell (i, j) the maximum over rows [floor(i H / oh), ceil((i + 1) H / oh))
// and the columns likewise, its gradient to the first maximum (row-major), as PyTorch's. One
// max_pool2d when the sizes divide, else one per cell. With indices (return_indices=True, as
// torch.adaptive_max_pool2d returns them): also each maximum's position h * W + w in its
// plane (int64, the output's shape).
Tensor adaptive_max_pool2d(const Tensor& input, tensor::Size2d output_size);
std::tuple<Tensor, Tensor> adaptive_max_pool2d_with_indices(const Tensor& input, tensor::Size2d output_size);

// As torch.nn.functional.conv_transpose2d: input [N, C_in, H, W] (or [C_in, H, W]), weight
// [C_in, C_out / groups, kh, kw], bias [C_out] -> [N, C_out, (H - 1) stride - 2 padding +
// dilation (kh - 1) + output_padding + 1, ...]: conv2d's gradient with respect to its input,
// computed as a conv2d of the input with stride - 1 zeros between its elements, padded by
// dilation (k - 1) - padding (output_padding more at the end), with the weight's in and out
// channels swapped and its kernel flipped. Gradients are those ops'.
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
                        tensor::Size2d stride = 1, tensor::Size2d padding = 0, tensor::Size2d output_padding = 0,
                        int64_t groups = 1, tensor::Size2d dilation = 1);

// As torch.nn.functional.conv_transpose1d: input [N, C_in, L] (or [C_in, L]), weight [C_in,
// C_out / groups, k] -> conv_transpose2d over a height of 1.
Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), int64_t stride = 1,
                        int64_t padding = 0, int64_t output_padding = 0, int64_t groups = 1, int64_t dilation = 1);

// As torch.nn.functional.instance_norm: input [N, C, ...], each (sample, channel) normalised
// over its positions with its own mean and biased variance (use_input_stats), or with the
// running statistics [C] (use_input_stats false: eval with tracked statistics); with both,
// the running statistics move by momentum towards the samples' unbiased variances' average.
// weight and bias [C] may be undefined. (nn/instancenorm.cc)
Tensor instance_norm(const Tensor& input, const Tensor& running_mean = Tensor(), const Tensor& running_var = Tensor(),
                     const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), bool use_input_stats = true,
                     double momentum = 0.1, double eps = 1e-5);
// As torch.nn.functional.interpolate over the spatial dims of input [N, C, d1, ...] (one to
// three): to options.size(), or to floor(d scale_factor) per dim; mode "nearest" (source
// floor(j in / out), PyTorch's legacy rule, in float32 as its kernels), "nearest-exact"
// (floor((j + 1/2) in / out)), "linear" (3-D), "bilinear" (4-D), "bicubic" (4-D: four
// neighbours, clamped at the edges, weighted by the cubic convolution with A = -0.75),
// "trilinear" (5-D): each spatial dim interpolated in turn, the last first, as PyTorch's
// kernels nest their weights, pixel centres aligned unless align_corners; or "area" (4-D:
// adaptive_avg_pool2d). The gradient is index_select's (what PyTorch's backward kernels add
// up). antialias=True (bilinear, bicubic): PyTorch's (and Pillow's) separable resize, each output a
// normalised sum under the triangle or the cubic (A = -0.5) filter, stretched by the scale when
// shrinking so that every input in reach counts; a product with an [out, in] weight matrix per
// resized dim (a dim whose size stays is skipped), its gradient the transposed product. (nn/upsample.cc)
Tensor interpolate(const Tensor& input, const InterpolateFuncOptions& options);
// As torch.nn.functional.scaled_dot_product_attention (PyTorch 2's math path): query [..., L, E],
// key [..., S, E], value [..., S, Ev] (batch dims broadcast) -> [..., L, Ev],
// softmax(query key^T scale + mask) value with scale 1 / sqrt(E) unless given. attn_mask: bool
// (true: attend) or floating (added), broadcastable to [..., L, S]; is_causal masks key j from
// query i where j > i (top-left aligned; not with attn_mask). A query whose keys are all masked
// gets zeros (PyTorch's safe softmax), its gradients zeros. dropout_p drops attention weights
// always, as PyTorch's function does (pass 0 in eval). With no mask, no dropout and the same
// leading dims (a square mask where causal) it is one op, tensor::flash_attention (a fused
// kernel, no [L, S] matrix in memory, where the backend has one).
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask = Tensor(), double dropout_p = 0.0, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt, tensor::Generator* generator = nullptr);

}  // namespace tinyddp::nn::functional
