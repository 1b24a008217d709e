// train_gpt's nanoGPT mode, what it reports beside the losses: the MFU of its `iter` lines
// (nanoGPT's estimate_mfu against this device's peak) and, with report_memory=True, the
// iterations' peak tensor memory.
#pragma once

#include <ostream>
#include <string>

#include "examples/run_env.h"
#include "tinyddp/nn/transformer.h"

namespace tinyddp::examples {

// The FLOP/s this process could reach, for nanoGPT's MFU: on the CPU the measured core peak
// (tensor/cpu_peak.h) times the intra-op threads; on a GPU the datasheet's dense tensor-core
// figure for the precision (TF32 for float32, as nanoGPT turns it on), for the GPUs this
// project is run on; 0 (no MFU) for any other. Says which on `out`.
double peak_flops(const Placement& placement, const std::string& dtype, std::ostream& out);

// nanoGPT's estimate_mfu: 6 N + 12 L H Q T FLOPs per token (N without the position table),
// for `windows` windows of block_size tokens.
double flops_per_iteration(const nn::GPT& model, int64_t windows);

// report_memory=True: the peaks start again here (the CPU's tensors, and the GPU's caching
// allocator when the run is on one) ...
void reset_memory_peaks(const Placement& placement);
// ... and one line says the peak since then: on a GPU the caching allocator's, as
// torch.cuda.max_memory_allocated; on the CPU the tensors' bytes.
void report_memory_peak(const Placement& placement, std::ostream& out);

}  // namespace tinyddp::examples
