// Shape arithmetic shared by views and ops: element counts, contiguous strides, dimension
// wrapping, NumPy broadcasting, and the stride computation that decides whether a view exists.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "tinyddp/tensor/internal/small_vector.h"

namespace tinyddp::tensor {

// Sizes, strides and dim lists: up to 6 entries without a heap allocation.
using Shape = SmallVector<int64_t, 6>;

// The dims a reduction runs over, as libtorch's IntArrayRef in a dim argument: one dim
// (sum(x, 1)), a braced list (sum(x, {0, 2}); {}: none given), or a Shape.
class DimList {
 public:
  DimList() = default;
  DimList(int64_t dim) : dims_{dim} {}                           // NOLINT: implicit by design
  DimList(std::initializer_list<int64_t> dims) : dims_(dims) {}  // NOLINT: implicit by design
  DimList(const Shape& dims) : dims_(dims) {}                    // NOLINT: implicit by design
  operator const Shape&() const { return dims_; }                // NOLINT: implicit by design

 private:
  Shape dims_;
};

// "[2, 3]" (PyTorch's spelling of torch.Size in error messages); also what
// std::cout << x.sizes() prints, as libtorch's IntArrayRef.
std::string format_shape(const Shape& shape);
inline std::ostream& operator<<(std::ostream& os, const Shape& shape) { return os << format_shape(shape); }
// Product of sizes; throws if a size is negative or the product overflows int64.
int64_t shape_numel(const Shape& shape, const char* op = "shape");
// Row-major strides for `sizes` (in elements).
Shape contiguous_strides(const Shape& sizes);
// Maps dim in [-ndim, ndim) to [0, ndim); a 0-d tensor accepts 0 and -1 like PyTorch.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
// Result shape of broadcasting a and b (NumPy rules); throws naming `op` and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// True when a tensor of `shape` can be expanded (broadcast) to `target` without changing target.
bool is_expandable_to(const Shape& shape, const Shape& target);
// Replaces a single -1 in `requested` so that the product equals numel; throws otherwise.
Shape infer_size(const Shape& requested, int64_t numel, const char* op);
// Strides that let a tensor with (sizes, strides) be viewed as new_sizes without a copy,
// or nullopt when the memory layout does not allow it.
std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides, const Shape& new_sizes);

}  // namespace tinyddp::tensor
