// tensor/internal/reduce_plan.h.
#include "tinyddp/tensor/internal/reduce_plan.h"

#include <algorithm>

namespace tinyddp::tensor {

RowPlan plan_rows(Backend& backend, const Tensor& x, const Shape& dims, bool keepdim, const Shape& sizes) {
  const int64_t ndim = static_cast<int64_t>(sizes.size());
  std::vector<bool> reduced(static_cast<size_t>(ndim), dims.empty());
  for (int64_t d : dims) {
    if (d < ndim) reduced[d] = true;  // a 0-d tensor's dim 0 is its only element
  }
  RowPlan plan;
  Shape perm;
  for (int64_t d = 0; d < ndim; ++d) {
    if (reduced[d]) {
      if (keepdim) plan.out_shape.push_back(1);
      continue;
    }
    perm.push_back(d);
    plan.out_shape.push_back(sizes[d]);
    plan.outer *= sizes[d];
  }
  for (int64_t d = 0; d < ndim; ++d) {
    if (!reduced[d]) continue;
    perm.push_back(d);
    plan.inner *= sizes[d];
  }
  if (x.defined()) plan.rows = backend.contiguous(x.permute(perm));
  return plan;
}

int64_t leading_rows(const Tensor& x, const Shape& dims, int64_t* inner) {
  if (dims.empty() || !x.is_contiguous() || static_cast<int64_t>(dims.size()) >= x.dim()) return 0;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (std::find(dims.begin(), dims.end(), static_cast<int64_t>(i)) == dims.end()) return 0;
  }
  int64_t rows = 1;
  *inner = 1;
  for (int64_t d = 0; d < x.dim(); ++d) (d < static_cast<int64_t>(dims.size()) ? rows : *inner) *= x.sizes()[d];
  return rows;
}

}  // namespace tinyddp::tensor
