// What onednn.cc (products) and onednn_conv.cc (convolutions) share: oneDNN's CPU engine, this
// thread's stream, and the one-thread setting of its OpenMP (internal to the CPU backend).
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

namespace tinyddp::tensor::cpu {

// Whether tinyddp hands bfloat16 work to oneDNN now: only where cpu_isa() chose AVX-512.
bool onednn_used();
dnnl::engine& onednn_engine();
// This thread's stream; the first call on a thread also sets its OpenMP regions (oneDNN's
// included) to one thread, as every tinyddp CPU kernel runs.
dnnl::stream& onednn_stream();

}  // namespace tinyddp::tensor::cpu
