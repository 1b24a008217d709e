// bfloat16 convolutions on oneDNN (onednn.h: onednn_conv2d and its two backward passes, which
// the CPU backend's conv2d entry points call, conv.cc), the library PyTorch's CPU bfloat16
// convolution calls here, under the same rule as the bfloat16 products in onednn.cc: only
// where onednn_used().
// Products exact, sums in float32, each result rounded once to bfloat16 (the forward's bias
// added before that rounding).
//
// Tensors stay NCHW / OIHW. Each primitive is created with the layouts oneDNN prefers for
// its kernels (format_tag::any: blocked, e.g. nChw16c); the operands are reordered into them
// and the result back, as PyTorch's mkldnn path does. The forward, backward-data and
// backward-weights primitives of a geometry are made together and kept per thread, with the
// reorders they need. On a machine of 2 CPUs or more a batch of 32 images or more is cut into
// blocks of images, one oneDNN call each on the intra-op threads (for_image_blocks: by the
// batch and the machine, the same bits at any thread count); the weights' gradient is each
// block's float32 sum, added in block order and rounded once. A geometry oneDNN has no
// kernels for is not served (conv2d_bf16_served), and native/conv.cc convolves it in float32
// instead (conv2d_native says so).
#include <map>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "tinyddp/tensor/backends/cpu/algorithms.h"
#include "tinyddp/tensor/backends/cpu/backend.h"
#include "tinyddp/tensor/backends/cpu/onednn.h"

namespace tinyddp::tensor::cpu {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;

// The convolution's geometry: input, weight (with groups), output, and whether a bias is added.
struct Geometry {
  memory::dims src, weights, dst, strides, dilates, pad_l, pad_r;
  bool bias = false;
  auto key() const { return std::tie(src, weights, dst, strides, dilates, pad_l, pad_r, bias); }
  bool operator<(const Geometry& other) const { return key() < other.key(); }
};

Geometry geometry_of(const Window2d& w, int64_t out_channels, int64_t groups, bool bias) {
  Geometry g;
  g.src = {w.n, w.c, w.h, w.w};
  g.weights = groups == 1 ? memory::dims{out_channels, w.c, w.kh, w.kw}
                          : memory::dims{groups, out_channels / groups, w.c / groups, w.kh, w.kw};
  g.dst = {w.n, out_channels, w.oh, w.ow};
  g.bias = bias;
  g.strides = {w.sh, w.sw};
  g.dilates = {w.dh - 1, w.dw - 1};  // oneDNN counts the gaps
  g.pad_l = {w.ph, w.pw};
  // The bottom/right padding that makes the output exactly oh x ow (PyTorch's floor division
  // leaves the rest of the input unread).
  g.pad_r = {(w.oh - 1) * w.sh + (w.kh - 1) * w.dh + 1 - w.h - w.ph,
             (w.ow - 1) * w.sw + (w.kw - 1) * w.dw + 1 - w.w - w.pw};
  return g;
}

memory::desc any(const memory::dims& dims) { return memory::desc(dims, memory::data_type::bf16, Tag::any); }
// NCHW, OIHW, GOIHW, or a bias vector.
memory::desc plain(const memory::dims& dims, memory::data_type type = memory::data_type::bf16) {
  return memory::desc(dims, type, dims.size() == 1 ? Tag::a : dims.size() == 4 ? Tag::nchw : Tag::goihw);
}

// The three passes of one geometry: their primitive descriptors (all made at once, so that a
// geometry is served both ways or not at all) and primitives. The weights' gradient is made in
// float32 (a block of images' share, added to the other blocks' before the one rounding).
struct Convolution {
  dnnl::convolution_forward::primitive_desc forward;
  dnnl::convolution_backward_data::primitive_desc backward_data;
  dnnl::convolution_backward_weights::primitive_desc backward_weights;
  dnnl::convolution_forward forward_primitive{forward};
  dnnl::convolution_backward_data backward_data_primitive{backward_data};
  dnnl::convolution_backward_weights backward_weights_primitive{backward_weights};
  // The reorders between the plain layouts and the ones a pass wants, by pass and argument
  // (made once: making one, even from oneDNN's cache, costs about as much as running it here).
  std::map<std::pair<const dnnl::primitive*, int>, dnnl::reorder> reorders{};
};

std::unique_ptr<Convolution> make_convolution(const Geometry& g) {
  const auto alg = dnnl::algorithm::convolution_direct;
  const memory::desc bias = g.bias ? memory::desc({g.dst[1]}, memory::data_type::bf16, Tag::a) : memory::desc();
  const dnnl::convolution_forward::primitive_desc forward(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, any(g.src), any(g.weights), bias,
                                      any(g.dst), g.strides, g.dilates, g.pad_l, g.pad_r),
      onednn_engine());
  const dnnl::convolution_backward_data::primitive_desc backward_data(
      dnnl::convolution_backward_data::desc(alg, any(g.src), any(g.weights), any(g.dst), g.strides, g.dilates, g.pad_l,
                                            g.pad_r),
      onednn_engine(), forward);
  const memory::desc weights_f32(g.weights, memory::data_type::f32, Tag::any);
  const dnnl::convolution_backward_weights::primitive_desc backward_weights(
      dnnl::convolution_backward_weights::desc(alg, any(g.src), weights_f32, any(g.dst), g.strides, g.dilates, g.pad_l,
                                               g.pad_r),
      onednn_engine(), forward);
  return std::make_unique<Convolution>(Convolution{forward, backward_data, backward_weights});
}

// This thread's convolutions, null for a geometry oneDNN does not serve. Bounded like
// onednn.cc's products.
constexpr size_t kMaxConvolutions = 256;
Convolution* convolution_for(const Geometry& g) {
  thread_local std::map<Geometry, std::unique_ptr<Convolution>> convolutions;
  if (const auto it = convolutions.find(g); it != convolutions.end()) return it->second.get();
  if (convolutions.size() >= kMaxConvolutions) convolutions.clear();
  std::unique_ptr<Convolution> made;
  try {
    onednn_stream();  // this thread set up for oneDNN
    made = make_convolution(g);
  } catch (const dnnl::error&) {
    // none: not served
  }
  return convolutions.emplace(g, std::move(made)).first->second.get();
}

// One operand of a pass: its oneDNN argument, its elements (plain layout, dims `dims`, of
// `type`) and the layout the primitive wants it in.
struct Operand {
  int arg;
  void* data;
  memory::dims dims;
  memory::desc want;
  memory::data_type type = memory::data_type::bf16;
};

// The reorder between `from` and `to` for `pass`'s argument `arg`, made on first use.
dnnl::reorder& reorder_for(Convolution& conv, const dnnl::primitive& pass, int arg, const memory& from,
                           const memory& to) {
  const auto key = std::make_pair(&pass, arg);
  if (const auto it = conv.reorders.find(key); it != conv.reorders.end()) return it->second;
  return conv.reorders.emplace(key, dnnl::reorder(from, to)).first->second;
}

// The operand's elements in the layout `pass` wants: in place when that is the plain one, else
// a reordered copy.
memory as_wanted(Convolution& conv, const dnnl::primitive& pass, const Operand& o) {
  memory given(plain(o.dims, o.type), onednn_engine(), o.data);
  if (o.want == given.get_desc()) return given;
  memory reordered(o.want, onednn_engine());
  reorder_for(conv, pass, o.arg, given, reordered).execute(onednn_stream(), given, reordered);
  return reordered;
}

// Runs `pass` (one of conv's primitives) on `inputs` into `result` (through a buffer in the
// layout it wants when that is not the plain one); false where oneDNN throws.
bool run_pass(Convolution& conv, const dnnl::primitive& pass, const std::vector<Operand>& inputs,
              const Operand& result) {
  try {
    std::unordered_map<int, memory> args;
    for (const Operand& o : inputs) args.emplace(o.arg, as_wanted(conv, pass, o));
    memory target(plain(result.dims, result.type), onednn_engine(), result.data);
    const bool in_place = result.want == target.get_desc();
    memory written = in_place ? target : memory(result.want, onednn_engine());
    args.emplace(result.arg, written);
    pass.execute(onednn_stream(), args);
    if (!in_place) reorder_for(conv, pass, result.arg, written, target).execute(onednn_stream(), written, target);
    onednn_stream().wait();
  } catch (const dnnl::error&) {
    return false;
  }
  return true;
}

// How a convolution's images are cut for the intra-op threads: blocks of at least
// kBlockMinImages images, at most one per CPU of the machine. As for products (matmul.cc's
// gemm_split), the cut depends on the batch and the machine, never on the thread count: any
// number of threads gives the same bits. oneDNN's time for the digits CNN's small maps is
// about proportional to the images (a pass over 32 takes about half the time of one over 64,
// bench/README.md), so a block of 16 images pays for its call.
constexpr int64_t kBlockMinImages = 16;

int64_t images_per_block(int64_t n) {
  const int64_t wanted = std::min(machine_cpus(), n / kBlockMinImages);
  return wanted <= 1 ? std::max<int64_t>(n, 1) : (n + wanted - 1) / wanted;
}
int64_t image_blocks(int64_t n) { return std::max<int64_t>(1, (n + images_per_block(n) - 1) / images_per_block(n)); }

// Runs pass(geometry, first, block) for each block of images of `whole` (the block's geometry,
// its first image, its index), on the intra-op threads when there are several; false if any
// pass returned false.
template <typename F>
bool for_image_blocks(const Geometry& whole, F&& pass) {
  const int64_t n = whole.src[0], size = images_per_block(n);
  if (size >= n) return pass(whole, int64_t{0}, int64_t{0});
  return all_blocks_ran(image_blocks(n), [&](int64_t block) {
    Geometry g = whole;
    const int64_t first = block * size;
    g.src[0] = g.dst[0] = std::min(size, n - first);
    return pass(g, first, block);
  });
}

// The elements of image `first` of a contiguous NCHW tensor.
void* image(const Tensor& t, int64_t first) {
  return static_cast<char*>(t.raw_data_ptr()) + first * t.stride(0) * static_cast<int64_t>(t.element_size());
}

bool served(const Tensor& t) { return t.dtype() == kBFloat16 && onednn_used(); }

}  // namespace

bool conv2d_bf16_served(const Window2d& window, int64_t out_channels, int64_t groups, bool bias) {
  // The backward passes look their geometry up without the bias.
  return onednn_used() && convolution_for(geometry_of(window, out_channels, groups, bias)) != nullptr &&
         convolution_for(geometry_of(window, out_channels, groups, false)) != nullptr;
}

bool onednn_conv2d(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, const Window2d& window,
                   int64_t groups) {
  if (!served(x)) return false;
  return for_image_blocks(
      geometry_of(window, out.size(1), groups, bias.defined()), [&](const Geometry& g, int64_t first, int64_t) {
        Convolution* conv = convolution_for(g);
        if (conv == nullptr) return false;
        const auto& pd = conv->forward;
        std::vector<Operand> in{{DNNL_ARG_SRC, image(x, first), g.src, pd.src_desc()},
                                {DNNL_ARG_WEIGHTS, weight.raw_data_ptr(), g.weights, pd.weights_desc()}};
        if (bias.defined()) in.push_back({DNNL_ARG_BIAS, bias.raw_data_ptr(), {g.dst[1]}, pd.bias_desc()});
        return run_pass(*conv, conv->forward_primitive, in, {DNNL_ARG_DST, image(out, first), g.dst, pd.dst_desc()});
      });
}

bool onednn_conv2d_backward_input(const Tensor& grad_x, const Tensor& grad_out, const Tensor& weight,
                                  const Window2d& window, int64_t groups) {
  if (!served(grad_out)) return false;
  return for_image_blocks(geometry_of(window, grad_out.size(1), groups, false),
                          [&](const Geometry& g, int64_t first, int64_t) {
                            Convolution* conv = convolution_for(g);
                            if (conv == nullptr) return false;
                            const auto& pd = conv->backward_data;
                            return run_pass(*conv, conv->backward_data_primitive,
                                            {{DNNL_ARG_DIFF_DST, image(grad_out, first), g.dst, pd.diff_dst_desc()},
                                             {DNNL_ARG_WEIGHTS, weight.raw_data_ptr(), g.weights, pd.weights_desc()}},
                                            {DNNL_ARG_DIFF_SRC, image(grad_x, first), g.src, pd.diff_src_desc()});
                          });
}

// Each block of images sums its share of the weights' gradient in float32; the shares are
// added in block order and the sum rounded once.
bool onednn_conv2d_backward_weight(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& x,
                                   const Window2d& window, int64_t groups) {
  if (!served(grad_out)) return false;
  const Geometry whole = geometry_of(window, grad_out.size(1), groups, false);
  const size_t count = static_cast<size_t>(grad_weight.numel());
  std::vector<float> shares(static_cast<size_t>(image_blocks(whole.src[0])) * count);
  const bool ran = for_image_blocks(whole, [&](const Geometry& g, int64_t first, int64_t block) {
    Convolution* conv = convolution_for(g);
    if (conv == nullptr) return false;
    const auto& pd = conv->backward_weights;
    return run_pass(*conv, conv->backward_weights_primitive,
                    {{DNNL_ARG_SRC, image(x, first), g.src, pd.src_desc()},
                     {DNNL_ARG_DIFF_DST, image(grad_out, first), g.dst, pd.diff_dst_desc()}},
                    {DNNL_ARG_DIFF_WEIGHTS, shares.data() + static_cast<size_t>(block) * count, g.weights,
                     pd.diff_weights_desc(), memory::data_type::f32});
  });
  if (!ran) return false;
  BFloat16* out = grad_weight.data_ptr<BFloat16>();
  for (size_t k = 0; k < count; ++k) {
    float sum = shares[k];
    for (size_t b = count + k; b < shares.size(); b += count) sum += shares[b];
    out[k] = static_cast<BFloat16>(sum);
  }
  return true;
}

}  // namespace tinyddp::tensor::cpu
