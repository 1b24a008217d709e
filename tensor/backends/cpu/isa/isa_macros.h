// The macros the per-instruction-set translation units share (kernels.cc, conv_kernels.cc,
// gemm_kernels.cc; see kernels.h). Macros only: no code a build could share with another.
// TINYDDP_ISA_NAMESPACE is isa_avx2 or isa_avx512, the namespace each build defines
// everything in.
#pragma once

#ifndef TINYDDP_ISA
#error "the per-ISA kernels are built by //tensor:cpu_kernels_<isa>, which defines TINYDDP_ISA"
#endif
#define TINYDDP_PASTE2(a, b) a##b
#define TINYDDP_PASTE(a, b) TINYDDP_PASTE2(a, b)
#define TINYDDP_ISA_NAMESPACE TINYDDP_PASTE(isa_, TINYDDP_ISA)
