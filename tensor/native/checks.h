// The checks and helpers every family of tensor ops shares (internal to tensor/native/): argument
// checks whose errors name the op, the argument and the shapes, dtypes or devices involved;
// output allocation; overlap rules for written tensors. Every op file gets the backends'
// interface (internal/backend.h: backend_for) through this header.
#pragma once

#include <initializer_list>
#include <utility>

#include "tinyddp/tensor/internal/backend.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::tensor::detail {

void check_defined(const Tensor& t, const char* op, const char* arg);

void check_same_device(const Tensor& a, const Tensor& b, const char* op, const char* name_a, const char* name_b);

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op, const char* name_a, const char* name_b);

void check_not_bool(const Tensor& t, const char* op, const char* arg);

void check_pair(const Tensor& a, const Tensor& b, const char* op);

// a and b converted to the dtype they combine in (tensor::result_type), as PyTorch's binary
// ops promote their operands; the conversions are ops of their own, so each gradient returns
// in its input's dtype. Two bool tensors stay bool (arithmetic refuses them).
void promote_operands(Tensor& a, Tensor& b);

// True when some element of `t` is reachable through two different indices (a broadcast
// dim of stride 0). Writing into such a tensor would be order-dependent.
bool has_internal_overlap(const Tensor& t);

bool same_geometry(const Tensor& a, const Tensor& b);

// An input that overlaps the output in any way other than being exactly the output (the
// in-place case) is copied first, so the result never depends on loop order.
Tensor detach_from_output(const Tensor& input, const Tensor& out);

void check_writable(const Tensor& out, const char* op);

Tensor new_output(const Shape& shape, DType dtype, Device device);
Tensor new_output(const Shape& shape, DType dtype, Device device, MemoryFormat format);

// The strides of a tensor of `sizes` laid out in `format` (kContiguous or kChannelsLast).
Shape memory_format_strides(const Shape& sizes, MemoryFormat format);

// `format`, with kPreserve resolved for a tensor like `like`: its suggest_memory_format().
MemoryFormat resolve_format(const Tensor& like, MemoryFormat format);

// The layout of an elementwise result of `shape` computed from `inputs` (at most 3; undefined
// ones skipped), as PyTorch's TensorIterator lays its output out: inputs all of that shape and
// one layout give theirs, else the dims ordered by the inputs' strides, the first input that
// orders a pair deciding. kChannelsLast when that order is channels last, else kContiguous.
MemoryFormat result_format(const Shape& shape, std::initializer_list<const Tensor*> inputs);

// `out` (4-D) stored channels last when `input` suggests it, as PyTorch's kernels that work in
// either layout give it; for the ops whose kernels here compute row-major, a (differentiable)
// copy. Else `out` itself.
Tensor keep_layout(const Tensor& out, const Tensor& input);

// In-place writes are not differentiable in tinyddp: refuse them where a gradient would be
// lost or corrupted (the output or the source takes part in the graph) instead of giving
// silently wrong gradients. Outside grad mode (optimizer steps, DDP buckets) they are fine.
void check_in_place(const Tensor& self, const Tensor* source, const char* op);

// Before a kernel that exists for the CPU and, in CUDA builds, for GPUs.
void check_kernel_device(const Tensor& x, const char* op);

// The smallest and the largest value of a non-empty integer tensor (an index's range): one loop
// on the host, two reductions read back together from a device (which waits for them).
std::pair<int64_t, int64_t> integer_extremes(const Tensor& t);

// The key of a mask that `op`'s kernel draws on t's device (internal/philox.h): one 64-bit draw
// from `generator` (default: the global one), or, while a CUDA graph captures on t's device, a
// slot that every replay fills with a fresh draw of the default generator (tensor/cuda.h).
// Another generator is refused there, naming `op`.
RandomKey device_random_key(const Tensor& t, Generator* generator, const char* op);

// matmul for the ops that sum by a product with a one-hot or triangular matrix (index_add,
// scatter_add, cumsum): integer operands are multiplied on the CPU and the product moved back
// to their device, since a GPU's GEMM (cuBLAS) multiplies floating-point matrices only; the
// rest is matmul itself, differentiable.
Tensor summing_matmul(const Tensor& a, const Tensor& b);

// src [k, C] (floating point) with its rows added into `rows` rows of zeros, row i onto row
// ids[i] (int64 [k], each in [0, rows); repeats sum): embedding's backward kernel, O(k C).
// Differentiable in src (the gradient gathers the rows back: embedding). index_add and
// scatter_add sum through it.
Tensor add_rows(const Tensor& src, const Tensor& ids, int64_t rows);

}  // namespace tinyddp::tensor::detail
