// bfloat16 convolutions on oneDNN (onednn.h: onednn_conv2d and its two backward passes, which
// the CPU backend's conv2d entry points call, conv.cc), the library PyTorch's CPU bfloat16
// convolution calls here, under
// the same rule as the bfloat16 products in onednn.cc: only where onednn_used().
// Products exact, sums in float32, each result rounded once to bfloat16 (the forward's bias
// added before that rounding).
//
// Tensors stay NCHW / OIHW. Each primitive is created with the layouts oneDNN prefers for
// its kernels (format_tag::any: blocked, e.g. nChw16c); the operands are reordered into them
// and the result back, as PyTorch's mkldnn path does. The forward, backward-data and
// backward-weights primitives of a geometry are made together and kept per thread; a geometry
// oneDNN has no kernels for is not served (conv2d_bf16_served), and native/conv.cc convolves it
// in float32 instead (conv2d_native says so).
#include <map>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>

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
memory::desc plain(const memory::dims& dims) {  // NCHW, OIHW, GOIHW, or a bias vector
  return memory::desc(dims, memory::data_type::bf16,
                      dims.size() == 1   ? Tag::a
                      : dims.size() == 4 ? Tag::nchw
                                         : Tag::goihw);
}

// The three passes of one geometry: their primitive descriptors (all made at once, so that a
// geometry is served both ways or not at all) and primitives.
struct Convolution {
  dnnl::convolution_forward::primitive_desc forward;
  dnnl::convolution_backward_data::primitive_desc backward_data;
  dnnl::convolution_backward_weights::primitive_desc backward_weights;
  dnnl::convolution_forward forward_primitive{forward};
  dnnl::convolution_backward_data backward_data_primitive{backward_data};
  dnnl::convolution_backward_weights backward_weights_primitive{backward_weights};
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
  const dnnl::convolution_backward_weights::primitive_desc backward_weights(
      dnnl::convolution_backward_weights::desc(alg, any(g.src), any(g.weights), any(g.dst), g.strides, g.dilates,
                                               g.pad_l, g.pad_r),
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

// One operand of a pass: its oneDNN argument, its tensor (plain layout, dims `dims`) and the
// layout the primitive wants it in.
struct Operand {
  int arg;
  const Tensor& tensor;
  const memory::dims& dims;
  memory::desc want;
};

// The operand's elements in the layout it wants: in place when that is the plain one, else a
// reordered copy.
memory as_wanted(const Operand& o) {
  memory given(plain(o.dims), onednn_engine(), o.tensor.raw_data_ptr());
  if (o.want == given.get_desc()) return given;
  memory reordered(o.want, onednn_engine());
  dnnl::reorder(given, reordered).execute(onednn_stream(), given, reordered);
  return reordered;
}

// Runs `primitive` on `inputs` into `result` (through a buffer in the layout it wants when that
// is not the plain one); false where oneDNN throws.
bool run_pass(const dnnl::primitive& primitive, std::initializer_list<Operand> inputs, const Operand& result) {
  try {
    std::unordered_map<int, memory> args;
    for (const Operand& o : inputs) args.emplace(o.arg, as_wanted(o));
    memory target(plain(result.dims), onednn_engine(), result.tensor.raw_data_ptr());
    const bool in_place = result.want == target.get_desc();
    memory written = in_place ? target : memory(result.want, onednn_engine());
    args.emplace(result.arg, written);
    primitive.execute(onednn_stream(), args);
    if (!in_place) dnnl::reorder(written, target).execute(onednn_stream(), written, target);
    onednn_stream().wait();
  } catch (const dnnl::error&) {
    return false;
  }
  return true;
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
  const Geometry g = geometry_of(window, out.size(1), groups, bias.defined());
  const Convolution* conv = convolution_for(g);
  if (conv == nullptr) return false;
  const auto& pd = conv->forward;
  const Operand src{DNNL_ARG_SRC, x, g.src, pd.src_desc()}, wei{DNNL_ARG_WEIGHTS, weight, g.weights, pd.weights_desc()};
  const Operand dst{DNNL_ARG_DST, out, g.dst, pd.dst_desc()};
  if (!bias.defined()) return run_pass(conv->forward_primitive, {src, wei}, dst);
  const memory::dims bias_dims{g.dst[1]};
  return run_pass(conv->forward_primitive, {src, wei, {DNNL_ARG_BIAS, bias, bias_dims, pd.bias_desc()}}, dst);
}

bool onednn_conv2d_backward_input(const Tensor& grad_x, const Tensor& grad_out, const Tensor& weight,
                                  const Window2d& window, int64_t groups) {
  if (!served(grad_out)) return false;
  const Geometry g = geometry_of(window, grad_out.size(1), groups, false);
  const Convolution* conv = convolution_for(g);
  if (conv == nullptr) return false;
  const auto& pd = conv->backward_data;
  return run_pass(conv->backward_data_primitive,
                  {{DNNL_ARG_DIFF_DST, grad_out, g.dst, pd.diff_dst_desc()},
                   {DNNL_ARG_WEIGHTS, weight, g.weights, pd.weights_desc()}},
                  {DNNL_ARG_DIFF_SRC, grad_x, g.src, pd.diff_src_desc()});
}

bool onednn_conv2d_backward_weight(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& x,
                                   const Window2d& window, int64_t groups) {
  if (!served(grad_out)) return false;
  const Geometry g = geometry_of(window, grad_out.size(1), groups, false);
  const Convolution* conv = convolution_for(g);
  if (conv == nullptr) return false;
  const auto& pd = conv->backward_weights;
  return run_pass(conv->backward_weights_primitive,
                  {{DNNL_ARG_SRC, x, g.src, pd.src_desc()}, {DNNL_ARG_DIFF_DST, grad_out, g.dst, pd.diff_dst_desc()}},
                  {DNNL_ARG_DIFF_WEIGHTS, grad_weight, g.weights, pd.diff_weights_desc()});
}

}  // namespace tinyddp::tensor::cpu
