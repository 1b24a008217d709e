// bfloat16 convolutions on oneDNN (cpu/backend.h: conv2d, conv2d_backward_input,
// conv2d_backward_weight), the library PyTorch's CPU bfloat16 convolution calls here, under
// the same rule as the bfloat16 products in onednn.cc: only where cpu_isa() chose AVX-512.
// Products exact, sums in float32, each result rounded once to bfloat16 (the forward's bias
// added before that rounding).
//
// Tensors stay NCHW / OIHW. Each primitive is created with the layouts oneDNN prefers for
// its kernels (format_tag::any: blocked, e.g. nChw16c); the operands are reordered into them
// and the result back, as PyTorch's mkldnn path does. The forward, backward-data and
// backward-weights primitives of a geometry are made together and kept per thread; a geometry
// oneDNN has no kernels for is not served (conv2d_bf16_served), and ops/conv.cc convolves it
// in float32 instead.
#include <map>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>

#include "tinyddp/tensor/cpu/backend.h"
#include "tinyddp/tensor/cpu/onednn.h"
#include "tinyddp/tensor/cpu_isa.h"

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
memory::desc plain(const memory::dims& dims) {
  return memory::desc(dims, memory::data_type::bf16, dims.size() == 4 ? Tag::nchw : Tag::goihw);
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

// `t`'s elements (plain layout `dims`) in the layout `want`: t itself when they match, else a
// reordered copy.
memory as_layout(const Tensor& t, const memory::dims& dims, const memory::desc& want) {
  memory given(plain(dims), onednn_engine(), t.raw_data_ptr());
  if (want == given.get_desc()) return given;
  memory reordered(want, onednn_engine());
  dnnl::reorder(given, reordered).execute(onednn_stream(), given, reordered);
  return reordered;
}

// Runs `pass` writing `result` (plain layout `dims`) through a buffer in the layout `got`
// when that is not the plain one.
template <typename Pass>
void into_plain(const Tensor& result, const memory::dims& dims, const memory::desc& got, Pass&& pass) {
  memory target(plain(dims), onednn_engine(), result.raw_data_ptr());
  if (got == target.get_desc()) {
    pass(target);
    return;
  }
  memory staged(got, onednn_engine());
  pass(staged);
  dnnl::reorder(staged, target).execute(onednn_stream(), staged, target);
}

bool served(const Tensor& t) { return t.dtype() == kBFloat16 && cpu_isa() == CpuIsa::kAvx512; }

// Runs `body` (oneDNN calls), false where oneDNN throws.
template <typename Body>
bool attempt(Body&& body) {
  try {
    body();
  } catch (const dnnl::error&) {
    return false;
  }
  onednn_stream().wait();
  return true;
}

}  // namespace

bool conv2d_bf16_served(const Window2d& window, int64_t out_channels, int64_t groups, bool bias) {
  // The backward passes look their geometry up without the bias.
  return cpu_isa() == CpuIsa::kAvx512 && convolution_for(geometry_of(window, out_channels, groups, bias)) != nullptr &&
         convolution_for(geometry_of(window, out_channels, groups, false)) != nullptr;
}

bool conv2d(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, const Window2d& window,
            int64_t groups) {
  if (!served(x)) return false;
  const Geometry g = geometry_of(window, out.size(1), groups, bias.defined());
  Convolution* conv = convolution_for(g);
  return conv != nullptr && attempt([&] {
           const auto& pd = conv->forward;
           std::unordered_map<int, memory> args{{DNNL_ARG_SRC, as_layout(x, g.src, pd.src_desc())},
                                                {DNNL_ARG_WEIGHTS, as_layout(weight, g.weights, pd.weights_desc())}};
           if (bias.defined())
             args.emplace(DNNL_ARG_BIAS, memory(pd.bias_desc(), onednn_engine(), bias.raw_data_ptr()));
           into_plain(out, g.dst, pd.dst_desc(), [&](const memory& dst) {
             args.insert_or_assign(DNNL_ARG_DST, dst);
             conv->forward_primitive.execute(onednn_stream(), args);
           });
         });
}

bool conv2d_backward_input(const Tensor& grad_x, const Tensor& grad_out, const Tensor& weight, const Window2d& window,
                           int64_t groups) {
  if (!served(grad_out)) return false;
  const Geometry g = geometry_of(window, grad_out.size(1), groups, false);
  Convolution* conv = convolution_for(g);
  return conv != nullptr && attempt([&] {
           const auto& pd = conv->backward_data;
           std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, as_layout(grad_out, g.dst, pd.diff_dst_desc())},
                                                {DNNL_ARG_WEIGHTS, as_layout(weight, g.weights, pd.weights_desc())}};
           into_plain(grad_x, g.src, pd.diff_src_desc(), [&](const memory& diff_src) {
             args.insert_or_assign(DNNL_ARG_DIFF_SRC, diff_src);
             conv->backward_data_primitive.execute(onednn_stream(), args);
           });
         });
}

bool conv2d_backward_weight(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& x, const Window2d& window,
                            int64_t groups) {
  if (!served(grad_out)) return false;
  const Geometry g = geometry_of(window, grad_out.size(1), groups, false);
  Convolution* conv = convolution_for(g);
  return conv != nullptr && attempt([&] {
           const auto& pd = conv->backward_weights;
           std::unordered_map<int, memory> args{{DNNL_ARG_SRC, as_layout(x, g.src, pd.src_desc())},
                                                {DNNL_ARG_DIFF_DST, as_layout(grad_out, g.dst, pd.diff_dst_desc())}};
           into_plain(grad_weight, g.weights, pd.diff_weights_desc(), [&](const memory& diff_weights) {
             args.insert_or_assign(DNNL_ARG_DIFF_WEIGHTS, diff_weights);
             conv->backward_weights_primitive.execute(onednn_stream(), args);
           });
         });
}

}  // namespace tinyddp::tensor::cpu
