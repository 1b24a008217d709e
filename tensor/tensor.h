// Tensor: a cheap, shared handle to a TensorImpl (storage + sizes, strides, offset, dtype).
// Views (view, narrow, transpose, ...) make new impls over the same Storage, so writing
// through a view changes the base: DDP's bucket views rely on this.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "tinyddp/base/error.h"
#include "tinyddp/tensor/device.h"
#include "tinyddp/tensor/dtype.h"
#include "tinyddp/tensor/grad_mode.h"
#include "tinyddp/tensor/shape.h"
#include "tinyddp/tensor/storage.h"

// Tensor's autograd methods (the "autograd" section of the class below) name these types and
// are defined in //autograd (autograd/tensor_methods.cc), one layer up: a program that calls
// them links //autograd, as libtorch's Tensor does with its autograd library.
namespace tinyddp::autograd {
class Node;
class AccumulateGrad;
class RemovableHandle;
}  // namespace tinyddp::autograd

namespace tinyddp::tensor {

class Tensor;
struct AutogradMetaInterface;
class Generator;
class TensorOptions;
// Results of the methods that give several tensors (max(dim), topk; chunk, split, unbind).
using TensorPair = std::tuple<Tensor, Tensor>;
using TensorTriple = std::tuple<Tensor, Tensor, Tensor>;
using TensorList = std::vector<Tensor>;

// A backward formula: gradient of the op's output -> one gradient per input (see graph.h).
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;
// The formula of an op with several outputs: one gradient per output (undefined where none
// arrived) -> one gradient per input.
using MultiBackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs)>;

// The shared state behind a Tensor handle. Element (not byte) strides and offset.
struct TensorImpl {
  Storage storage;
  Shape sizes;
  Shape strides;
  int64_t storage_offset = 0;
  DType dtype = kFloat32;
  std::shared_ptr<AutogradMetaInterface> autograd_meta;
  // Made by a view op (view, narrow, select, transpose, expand, as_strided, detach, ...) from
  // another tensor, when the storage was at `view_version`.
  bool is_view = false;
  uint64_t view_version = 0;
  // The tensor the view was taken from (the first in the chain that is not itself a view), as
  // PyTorch's _base, held weakly: under autograd an in-place op on the view writes the change
  // into the base's history too (CopySlices, native/inplace.cc), and a view whose storage
  // changed since it was taken rebuilds its history from the base's (graph.cc). Empty for
  // detach()'s alias, which starts a history of its own.
  std::weak_ptr<TensorImpl> view_base;
  // What makes autograd refuse an in-place op on the view, as PyTorch does: it was taken with
  // grad mode off, or it is one of several views one op returned (chunk, split, unbind: that
  // op's name).
  bool view_made_without_grad = false;
  const char* view_of_several = nullptr;
};

// How a 4-D tensor's elements are ordered in memory, as torch.memory_format: kContiguous
// (row-major: N, C, H, W), kChannelsLast (N, H, W, C, the shape staying [N, C, H, W]), and
// kPreserve (as the tensor is).
enum class MemoryFormat { kContiguous, kChannelsLast, kPreserve };

namespace indexing {
class TensorIndex;
}  // namespace indexing

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
  // A tensor over `storage` with the given geometry; checks that it stays inside the storage.
  static Tensor make(Storage storage, Shape sizes, Shape strides, int64_t storage_offset, DType dtype);

  // --- metadata -----------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& sizes() const { return checked()->sizes; }
  int64_t size(int64_t dim) const;
  const Shape& strides() const { return checked()->strides; }
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return static_cast<int64_t>(sizes().size()); }
  int64_t numel() const;
  int64_t storage_offset() const { return checked()->storage_offset; }
  DType dtype() const { return checked()->dtype; }
  Device device() const { return checked()->storage.device(); }
  size_t element_size() const { return tensor::element_size(dtype()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  bool is_cpu() const { return device().is_cpu(); }
  bool is_cuda() const { return device().is_cuda(); }
  bool is_floating_point() const { return tensor::is_floating_point(dtype()); }
  // True when elements are laid out row-major without gaps (size-1 dims are ignored).
  bool is_contiguous() const;
  // In `format`'s order (kChannelsLast: a 4-D [N, C, H, W] tensor stored as N, H, W, C, strides
  // [H W C, 1, W C, C], as PyTorch's torch.channels_last; size-1 dims ignored).
  bool is_contiguous(MemoryFormat format) const;
  // kChannelsLast when the tensor is 4-D with strides growing in C, W, H, N order (gaps
  // allowed; where plain row-major would fit as well, row-major wins), as PyTorch's
  // suggest_memory_format; else kContiguous.
  MemoryFormat suggest_memory_format() const;
  const Storage& storage() const { return checked()->storage; }
  // Same impl (the same tensor), or at least the same storage (a view of it).
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  bool shares_storage(const Tensor& other) const { return storage().is_same(other.storage()); }
  TensorImpl* impl() const { return impl_.get(); }
  long use_count() const { return impl_.use_count(); }

  // --- data -----------------------------------------------------------------------------
  // Pointer to the first element (storage + offset); throws unless T matches dtype().
  template <typename T>
  T* data_ptr() const;
  void* raw_data_ptr() const;
  // The single value of a one-element tensor, converted to T.
  template <typename T>
  T item() const;
  // All values in row-major (logical) order; T must match dtype().
  template <typename T>
  std::vector<T> to_vector() const;

  // --- views (share storage) -----------------------------------------------------------
  Tensor view(const Shape& sizes) const;     // throws when the strides do not allow a view
  Tensor reshape(const Shape& sizes) const;  // a view when possible, else a contiguous copy
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // 2-D transpose (0-D and 1-D tensors are returned as they are)
  Tensor permute(const Shape& dims) const;
  Tensor expand(const Shape& sizes) const;  // -1 keeps a size; new leading dims allowed
  Tensor expand_as(const Tensor& other) const { return expand(other.sizes()); }
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor as_strided(const Shape& sizes, const Shape& strides, std::optional<int64_t> storage_offset = {}) const;
  // Itself when already contiguous, else a contiguous copy.
  Tensor contiguous() const;
  // The same in `format`'s order (differentiable; kPreserve: itself).
  Tensor contiguous(MemoryFormat format) const;
  // A copy that shares nothing with this tensor, laid out in `format` (kPreserve: channels
  // last when suggest_memory_format() says so, else row-major; PyTorch keeps other dense
  // layouts too, which tinyddp's results never have).
  Tensor clone(MemoryFormat format = MemoryFormat::kPreserve) const;
  // Makes this handle (and every copy of it) refer to `other`'s data: storage, geometry and
  // dtype, keeping its own autograd metadata (torch's `t.data = other`). Used by
  // Module::to(); only for tensors without a grad_fn.
  void set_data(const Tensor& other) const;

  // --- conversion -----------------------------------------------------------------------
  Tensor to(DType dtype) const;  // itself when the dtype already matches; a copy keeps the layout
  // Itself when the device already matches. non_blocking (as in PyTorch): a copy between a
  // GPU and pinned host memory returns before it has run (see copy_).
  Tensor to(Device device, bool non_blocking = false) const;
  // A contiguous copy in page-locked host memory (itself when already pinned), from which
  // copies to a GPU are queued without the host waiting; needs a CUDA build and a GPU.
  Tensor pin_memory() const;
  bool is_pinned() const;

  // --- in place (the handle is const; the data is not) -----------------------------------
  const Tensor& add_(const Tensor& other, double alpha = 1.0) const;
  const Tensor& add_(double value) const;
  const Tensor& sub_(const Tensor& other) const;
  const Tensor& mul_(const Tensor& other) const;
  const Tensor& mul_(double value) const;
  const Tensor& div_(const Tensor& other) const;
  const Tensor& div_(double value) const;
  // Copies src into this tensor: src broadcasts to this shape, any strides, dtype converted.
  // Between the host and a GPU the copy has finished when copy_ returns (the host may then
  // write the source or read the destination), unless non_blocking is set and the host side
  // is pinned memory: then it is queued on the GPU's compute stream, as in PyTorch.
  const Tensor& copy_(const Tensor& src, bool non_blocking = false) const;
  const Tensor& fill_(double value) const;
  const Tensor& zero_() const;

  // PyTorch-style text: "tensor([[1., 2.],\n        [3., 4.]])".
  std::string str() const;

  // --- the ops as methods, as torch::Tensor's (defined in methods.cc) -------------------------
  // x.sum(1), x.softmax(-1), x.relu_(): each calls the free function of the same name (ops.h,
  // factory.h, random.h), listed once in methods.inc; an in-place one writes the function's
  // result into this tensor. The operators (x == y, x > 0, x += y) are at the end of ops.h.
#define TDDP_METHOD(result, name, params, def_params, call) result name params const;
#define TDDP_INPLACE(name, params, def_params, call) const Tensor& name params const;
#include "tinyddp/tensor/methods.inc"
#undef TDDP_METHOD
#undef TDDP_INPLACE
  // Python's indexing (indexing.h, which declares the index types): x.index({Slice(), 0}),
  // x.index_put_({mask}, 0.0), and libtorch's x.slice(dim, start, end, step).
  Tensor index(const std::vector<indexing::TensorIndex>& indices) const;
  const Tensor& index_put_(const std::vector<indexing::TensorIndex>& indices, const Tensor& values,
                           bool accumulate = false) const;
  const Tensor& index_put_(const std::vector<indexing::TensorIndex>& indices, double value) const;
  Tensor slice(int64_t dim, std::optional<int64_t> start = std::nullopt, std::optional<int64_t> end = std::nullopt,
               int64_t step = 1) const;
  // torch's spellings of what is above: x.size() (the sizes), x.T() (the dims reversed),
  // x.mT() (the last two swapped), x.cpu(), x.cuda(), x.type_as(other).
  const Shape& size() const { return sizes(); }
  Tensor T() const;
  Tensor mT() const { return transpose(-2, -1); }
  Tensor cpu() const { return to(Device(kCPU)); }
  Tensor cuda(bool non_blocking = false) const;
  Tensor type_as(const Tensor& other) const { return to(other.dtype()); }

  // ---- autograd -------------------------------------------------------------------------
  // True for a leaf created with requires_grad_() and for every result of an op recorded
  // from one. Answered here from the metadata; everything else below is defined in
  // autograd/tensor_methods.cc (link //autograd to use it), as libtorch does.
  bool requires_grad() const;
  // A tensor sharing this one's data with no autograd history (and requires_grad false).
  Tensor detach() const;
  // Makes this leaf require (or stop requiring) grad; only floating-point leaves may.
  const Tensor& requires_grad_(bool requires_grad = true) const;
  // The accumulated gradient: undefined until a backward pass reaches this tensor.
  const Tensor& grad() const;
  // Assignable gradient slot (DDP points it at a bucket view; zero_grad resets it).
  Tensor& mutable_grad() const;
  // The node that produced this tensor (null for leaves).
  std::shared_ptr<autograd::Node> grad_fn() const;
  bool is_leaf() const;
  // Makes a non-leaf keep its .grad after backward (leaves always do).
  void retain_grad() const;
  // Runs the backward pass from this tensor: `gradient` defaults to 1 for a one-element tensor.
  // retain_graph defaults to create_graph; create_graph records the backward pass itself, so
  // .grad has a graph of its own (double backward), as torch.Tensor.backward.
  void backward(const Tensor& gradient = Tensor(), std::optional<bool> retain_graph = std::nullopt,
                bool create_graph = false) const;
  // The leaf's gradient accumulator, created once and kept alive by the tensor (DDP hooks it).
  std::shared_ptr<autograd::AccumulateGrad> grad_accumulator() const;
  // A hook on this tensor's gradient; it may return a replacement (or an undefined tensor to
  // keep the gradient). The handle removes it.
  autograd::RemovableHandle register_hook(std::function<Tensor(const Tensor&)> hook) const;

  // The metadata seam itself (null for plain tensors); shared by copies of the handle.
  AutogradMetaInterface* autograd_meta() const { return checked()->autograd_meta.get(); }
  void set_autograd_meta(std::shared_ptr<AutogradMetaInterface> meta) const {
    checked()->autograd_meta = std::move(meta);
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  TensorImpl* checked() const {
    TDDP_CHECK(impl_ != nullptr, "tensor: operation on an undefined tensor");
    return impl_.get();
  }
  void check_dtype(DType expected, const char* op) const;

  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Autograd attaches its per-tensor state (requires_grad, grad, grad_fn) through this seam;
// the tensor layer never looks inside, it only asks the two questions below.
struct AutogradMetaInterface {
  virtual ~AutogradMetaInterface() = default;
  virtual bool requires_grad() const = 0;
  virtual bool has_grad_fn() const = 0;  // not a leaf (the tensor layer's view of is_leaf)
  // Builds the graph node for `output` = op(`inputs`[0..num_inputs)) with the given backward
  // formula.
  virtual void record_op(const char* name, const Tensor& output, const Tensor* inputs, size_t num_inputs,
                         BackwardFn backward) const = 0;
  // The same for an op with several outputs and one formula for all of them.
  virtual void record_multi_op(const char* name, const std::vector<Tensor>& outputs, const Tensor* inputs,
                               size_t num_inputs, MultiBackwardFn backward) const = 0;
};

inline bool Tensor::requires_grad() const {
  const AutogradMetaInterface* meta = autograd_meta();
  return meta != nullptr && meta->requires_grad();
}

// ---- template definitions ----------------------------------------------------------------

template <typename T>
T* Tensor::data_ptr() const {
  check_dtype(dtype_of<std::remove_const_t<T>>, "data_ptr");
  return static_cast<T*>(raw_data_ptr());
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  check_dtype(dtype_of<T>, "to_vector");
  NoGradGuard no_grad;
  const Tensor dense = to(kCPU).contiguous();
  std::vector<T> out(static_cast<size_t>(dense.numel()));
  if constexpr (std::is_same_v<T, bool>) {  // std::vector<bool> is packed: copy one by one
    const bool* data = static_cast<const bool*>(dense.raw_data_ptr());
    for (size_t i = 0; i < out.size(); ++i) out[i] = data[i];
  } else if (!out.empty()) {
    std::memcpy(static_cast<void*>(out.data()), dense.raw_data_ptr(), out.size() * sizeof(T));
  }
  return out;
}

namespace detail {
// The value of a one-element CPU tensor as a double (int64 values beyond 2^53 go through item_int64).
double item_as_double(const Tensor& t);
int64_t item_as_int64(const Tensor& t);
}  // namespace detail

template <typename T>
T Tensor::item() const {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return static_cast<T>(detail::item_as_int64(*this));
  } else {
    return static_cast<T>(detail::item_as_double(*this));
  }
}

}  // namespace tinyddp::tensor
