// Python's indexing in C++, as libtorch's torch::indexing: x[:, :4] is
// x.index({Slice(), Slice(None, 4)}), x[..., 0] is x.index({Ellipsis, 0}) (or {"...", 0}),
// x[None] is x.index({None}), x[idx] and x[mask] take an int64 or bool tensor, and
// x[:, 0] = v is x.index_put_({Slice(), 0}, v).
//
//   using namespace tinyddp::tensor::indexing;
//   Tensor head = x.index({Slice(), Slice(None, 4)});       // a view, as PyTorch's
//   x.index_put_({Slice(), 0}, 0.0);                        // in place, under autograd too
//
// Integers select (the dim goes), slices narrow (views; a step > 1 strides), None inserts a dim
// of size 1, the ellipsis stands for the dims no other index names. An int64 tensor picks
// positions along its dim (a copy; its shape replaces the dim; negatives count from the end), a
// bool tensor the positions where it is true over as many dims as it has (a copy, 1-D there).
// Several tensor indices are taken together, as NumPy's and PyTorch's advanced indexing: they
// broadcast to one shape (a mask as its nonzero coordinates), which replaces the dims they index
// when those are adjacent and goes first when not (x.index({rows, cols}) is x[rows, cols]).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "tinyddp/tensor/tensor.h"

namespace tinyddp::tensor::indexing {

struct NoneType {};
inline constexpr NoneType None{};
struct EllipsisType {};
inline constexpr EllipsisType Ellipsis{};

// A slice bound: an integer (negative counts from the end) or None (the end on that side).
struct SliceBound {
  SliceBound(NoneType) {}                         // NOLINT: implicit by design
  SliceBound(int v) : value(v) {}                 // NOLINT
  SliceBound(long v) : value(v) {}                // NOLINT
  SliceBound(long long v) : value(int64_t(v)) {}  // NOLINT
  std::optional<int64_t> value;
};

// Python's start:stop:step (each None when not given: Slice() is ':').
struct Slice {
  Slice(SliceBound start = None, SliceBound stop = None, SliceBound step = None)  // NOLINT
      : start(start.value), stop(stop.value), step(step.value) {}
  std::optional<int64_t> start, stop, step;
};

// One entry of an index list.
class TensorIndex {
 public:
  TensorIndex(NoneType) : value_(None) {}           // NOLINT: implicit by design
  TensorIndex(EllipsisType) : value_(Ellipsis) {}   // NOLINT
  TensorIndex(const char* text);                    // NOLINT: "..." only
  TensorIndex(int v) : value_(int64_t(v)) {}        // NOLINT
  TensorIndex(long v) : value_(int64_t(v)) {}       // NOLINT
  TensorIndex(long long v) : value_(int64_t(v)) {}  // NOLINT
  TensorIndex(Slice s) : value_(s) {}               // NOLINT
  TensorIndex(Tensor t) : value_(std::move(t)) {}   // NOLINT
  const std::variant<NoneType, EllipsisType, int64_t, Slice, Tensor>& value() const { return value_; }

 private:
  std::variant<NoneType, EllipsisType, int64_t, Slice, Tensor> value_;
};

}  // namespace tinyddp::tensor::indexing

namespace tinyddp::tensor {

// x.index(indices) and x.index_put_(indices, values) as free functions.
Tensor index(const Tensor& x, const std::vector<indexing::TensorIndex>& indices);
// Writes `values` (broadcast to the indexed part, converted to x's dtype) there; with
// accumulate, adds them (repeated positions add up), else a repeated position keeps the last.
const Tensor& index_put_(const Tensor& x, const std::vector<indexing::TensorIndex>& indices, const Tensor& values,
                         bool accumulate = false);
const Tensor& index_put_(const Tensor& x, const std::vector<indexing::TensorIndex>& indices, double value);
// As Tensor.slice(dim, start, end, step) in libtorch: x[..., start:end:step] along dim, a view.
Tensor slice(const Tensor& x, int64_t dim, std::optional<int64_t> start = std::nullopt,
             std::optional<int64_t> end = std::nullopt, int64_t step = 1);

}  // namespace tinyddp::tensor
