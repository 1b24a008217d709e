// In-place ops under autograd (write_in_place), as PyTorch's: the op's out-of-place result is
// written into the tensor, which takes the result's history. On a view, the view's base takes
// "the base with the view's elements replaced" into its history (PyTorch's CopySlices), and
// the view becomes that, viewed again; views taken before rebuild their history from the
// base's when next used (graph.cc).
#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/graph.h"
#include "tinyddp/tensor/native/checks.h"
#include "tinyddp/tensor/native/graph_formulas.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::tensor {

using namespace detail;

namespace {

// The elements a geometry reaches past its offset, plus one (0 when it has none).
int64_t extent(const Geometry& g) {
  int64_t last = g.offset;
  for (size_t d = 0; d < g.sizes.size(); ++d) {
    if (g.sizes[d] == 0) return 0;
    last += (g.sizes[d] - 1) * g.strides[d];
  }
  return last + 1;
}

void check_view_writable(const Tensor& self, const Tensor& base, const char* op) {
  const TensorImpl& view = *self.impl();
  TDDP_CHECK(!base.requires_grad() || base.autograd_meta()->has_grad_fn(),
             "{}: a view of a leaf tensor that requires grad is used in an in-place operation (as in PyTorch); write "
             "into a copy of the leaf, or use NoGradGuard for an update such as an optimizer's",
             op);
  TDDP_CHECK(view.view_of_several == nullptr,
             "{}: the view ({} {}) is one of several views that {} returned and is being modified in place; such "
             "views do not allow in-place ops under autograd, as PyTorch's: use the out-of-place op",
             op, dtype_name(view.dtype), format_shape(view.sizes), view.view_of_several ? view.view_of_several : "");
  TDDP_CHECK(!view.view_made_without_grad,
             "{}: a view ({} {}) taken in no_grad mode is being modified in place with grad mode on, which PyTorch "
             "forbids too: take the view and write it both inside the no_grad block or both outside",
             op, dtype_name(view.dtype), format_shape(view.sizes));
}

// base's history becomes "base with the view's elements replaced by `result`": the gradient
// reaches base's earlier history everywhere but there, and `result` from there. The view is
// then that, viewed again.
void record_copy_slices(const Tensor& self, const Tensor& base, const Tensor& result) {
  const Geometry whole{base.sizes(), base.strides(), 0};
  const Geometry part{self.sizes(), self.strides(), self.storage_offset() - base.storage_offset()};
  const int64_t span = std::max(extent(whole), extent(part));
  TDDP_CHECK(part.offset >= 0, "in-place op on a view: the view starts before its base in their storage");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->sizes = base.sizes();
  impl->strides = base.strides();
  impl->storage_offset = base.storage_offset();
  impl->dtype = base.dtype();
  const Tensor written(std::move(impl));
  record_op("CopySlices", written, {base, result}, [whole, part, span](const Tensor& g) {
    Tensor inside;
    {
      NoGradGuard no_grad;
      const Tensor ones_there = ones(part.sizes, TensorOptions().dtype(g.dtype()).device(g.device()));
      inside = ne(restride(ones_there, part, whole, span), 0.0);
    }
    return std::vector<Tensor>{masked_fill(g, inside, 0.0), restride(g, whole, part, span)};
  });
  base.set_autograd_meta(written.impl()->autograd_meta);
  const Tensor again = base.as_strided(self.sizes(), self.strides(), self.storage_offset());
  self.set_autograd_meta(again.impl()->autograd_meta);
  self.impl()->view_version = self.storage().version();
}

}  // namespace

const Tensor& write_in_place(const Tensor& self, const char* op, const std::function<Tensor()>& compute) {
  check_defined(self, op, "self");
  Tensor result;
  {
    SaveCopiesGuard copies(self.storage());
    result = compute();
  }
  TDDP_CHECK(can_cast(result.dtype(), self.dtype()), "{}: result type {} can't be cast to the desired output type {}",
             op, dtype_name(result.dtype()), dtype_name(self.dtype()));
  const Tensor base = GradMode::is_enabled() ? live_view_base(self) : Tensor();
  const bool tracked = result.requires_grad() || self.requires_grad() || (base.defined() && base.requires_grad());
  if (!GradMode::is_enabled() || !tracked) {
    copy_into(self, result);
    return self;
  }
  if (base.defined()) {
    check_view_writable(self, base, op);
  } else {
    TDDP_CHECK(!self.requires_grad() || self.autograd_meta()->has_grad_fn(),
               "{}: a leaf tensor that requires grad is used in an in-place operation (as in PyTorch); write into a "
               "copy, or use NoGradGuard for an update such as an optimizer's",
               op);
  }
  TDDP_CHECK(result.sizes() == self.sizes(), "{}: the result's shape {} does not fit the tensor written into, {}", op,
             format_shape(result.sizes()), format_shape(self.sizes()));
  if (result.dtype() != self.dtype()) result = result.to(self.dtype());  // differentiably, as PyTorch's casts
  {
    NoGradGuard no_grad;
    copy_into(self, result);
  }
  if (base.defined()) {
    record_copy_slices(self, base, result);
  } else if (result.requires_grad()) {
    self.set_autograd_meta(result.impl()->autograd_meta);  // self's grad_fn: what computed the result
  } else {
    // A constant written over a tensor with a history (fill_, a copy of a constant): no
    // gradient reaches that history, as PyTorch's (its gradient there is zeros).
    const Tensor written = result.detach();
    record_op(op, written, {self}, [](const Tensor& g) { return std::vector<Tensor>{zeros_like(g)}; });
    self.set_autograd_meta(written.impl()->autograd_meta);
  }
  self.impl()->view_version = self.storage().version();  // its history holds the write now
  return self;
}

}  // namespace tinyddp::tensor
