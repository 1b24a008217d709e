// The kernels of one instruction set's build that live beside kernels.cc, declared once for
// kernels.cc's table and the files that define them (so each definition is checked against
// the declaration the table uses). In the build's own namespace (isa_avx2 or isa_avx512).
#pragma once

#include <cstdint>

#include "tinyddp/tensor/backends/cpu/isa/isa_macros.h"
#include "tinyddp/tensor/backends/cpu/isa/kernels.h"

namespace tinyddp::tensor::cpu {
namespace TINYDDP_ISA_NAMESPACE {

// gemm_kernels.cc: IsaKernels::narrow_gemm_f32.
bool narrow_gemm(const GemmArgs<float>& g);
// optim_kernels.cc.
template <typename T>
void sgd(const SgdArgs<T>& s);
template <typename T>
void adam(const AdamArgs<T>& s);
// transpose_kernels.cc.
void transpose_32(int64_t rows, int64_t cols, float* dst, int64_t ld_dst, const float* src, int64_t ld_src);
void transpose_rows_32(int64_t rows, int64_t cols, float* dst, int64_t ld_dst, const float* src, int64_t ld_src);
void pack_pairs_16(const PairPackArgs& p);
// conv_kernels.cc and conv_grad_kernels.cc.
void conv2d_direct(const DirectConvArgs& a);
void conv2d_direct_weight_grad(const DirectConvArgs& a);
int64_t conv2d_direct_weight_grad_scratch(const DirectConvArgs& a);

}  // namespace TINYDDP_ISA_NAMESPACE
}  // namespace tinyddp::tensor::cpu
