// What onednn.cc (products) and onednn_conv.cc (convolutions) share: oneDNN's CPU engine, this
// thread's stream, and the one-thread setting of its OpenMP (internal to the CPU backend).
#pragma once

#include <functional>
#include <oneapi/dnnl/dnnl.hpp>

#include "tinyddp/tensor/backends/cpu/isa/kernels.h"
#include "tinyddp/tensor/internal/kernel_ops.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::tensor::cpu {

// Whether tinyddp hands bfloat16 work to oneDNN now: only where cpu_isa() chose AVX-512.
bool onednn_used();
dnnl::engine& onednn_engine();
// This thread's stream; the first call on a thread also sets its OpenMP regions (oneDNN's
// included) to one thread, as every tinyddp CPU kernel runs.
dnnl::stream& onednn_stream();

// Runs block(i) for each i < blocks on the intra-op threads (each thread with its own oneDNN
// stream and primitives); false if any block returned false (the caller then computes the whole
// result another way).
bool all_blocks_ran(int64_t blocks, const std::function<bool(int64_t)>& block);

// A float32 product c = a x b on this thread (oneDNN's sgemm, its kernels picked at run time
// for the CPU), as GemmArgs describe it; matmul.cc calls it on Intel CPUs under AVX-512.
void onednn_sgemm(const GemmArgs<float>& g);

// out [n, m] (contiguous) = a [n, k] x b [k, m] (+ bias [m], contiguous, in each row, when
// defined), all bfloat16, a and b with any strides, accumulated in float32 and rounded once, on
// oneDNN's kernels. false, with nothing written, where oneDNN is not used (cpu_isa() below
// AVX-512): the caller computes in float32.
bool bf16_mm_onednn(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias = Tensor());
// bf16_mm_onednn's product cut into blocks of `rows` rows of out and a (the last may have
// fewer), each block one call on the intra-op threads, with b packed once for all of them into
// the layout the blocks' kernel reads (each call would otherwise repack it: about 12% of a
// 1024-wide product at one thread on AMX), and a column-major a read from a dense copy of each
// block (oneDNN's AMX kernels take a transposed a only dense), except a column-major a with
// more terms than columns (k > m), whose blocks are read in place with b as it is. Packing and
// copying move values only.
bool bf16_mm_row_blocks_onednn(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias, int64_t rows);
// The same product cut into blocks of `columns` columns of out, b and the bias (the last may
// have fewer), each block one call on the intra-op threads that writes a dense buffer of its own,
// copied into out's columns after: oneDNN 2.6's AMX kernels take an output only with dense rows,
// and ran a block written in place (rows as long as out's) on its slower non-AMX gemm.
bool bf16_mm_column_blocks_onednn(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias,
                                  int64_t columns);
// The batched product out [..., n, m] (contiguous) = a [..., n, k] x b [..., k, m] in one call
// (the same batch dims, with any strides but 0 for a batch dim longer than 1, and a unit stride
// in each matrix), as bf16_mm_onednn computes each matrix; false where oneDNN is not used or
// these strides are not served.
bool bf16_bmm_onednn(const Tensor& out, const Tensor& a, const Tensor& b);

// onednn_conv.cc: bfloat16 convolutions, with the contracts of the conv2d entry points
// (internal/backend.h); false, with nothing written, for other dtypes, below AVX-512 or where oneDNN has
// no kernel.
bool onednn_conv2d(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, const Window2d& window,
                   int64_t groups);
bool onednn_conv2d_backward_input(const Tensor& grad_x, const Tensor& grad_out, const Tensor& weight,
                                  const Window2d& window, int64_t groups);
bool onednn_conv2d_backward_weight(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& x,
                                   const Window2d& window, int64_t groups);

}  // namespace tinyddp::tensor::cpu
