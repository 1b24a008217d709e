// train_gpt's nanoGPT mode, its MFU and memory lines (nanogpt_report.h).
#include "examples/nanogpt_report.h"

#include <fmt/format.h>

#include "tinyddp/tensor/cpu_peak.h"
#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/parallel.h"
#include "tinyddp/tensor/storage.h"

namespace tinyddp::examples {

namespace t = tinyddp::tensor;

double peak_flops(const Placement& placement, const std::string& dtype, std::ostream& out) {
  if (!placement.on_gpu) {
    const t::CpuPeak core = t::measure_cpu_peak(3, 0.02);
    const int threads = t::get_num_threads();
    out << fmt::format("mfu against this CPU's peak: {} x {} threads = {:.1f} GFLOP/s\n", core.formula, threads,
                       core.peak_gflops * threads);
    return core.peak_gflops * 1e9 * threads;
  }
  const std::string name = t::cuda::device_properties().at(static_cast<size_t>(placement.device.index)).name;
  const bool bf16 = dtype == "bfloat16";
  double tflops = 0;
  if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos) tflops = bf16 ? 989.4 : 494.7;
  if (name.find("A100") != std::string::npos) tflops = bf16 ? 312 : 156;
  out << (tflops > 0 ? fmt::format("mfu against the {}'s {} TFLOP/s ({})\n", name, tflops, bf16 ? "bfloat16" : "TF32")
                     : fmt::format("mfu: no datasheet peak known for {}; none printed\n", name));
  return tflops * 1e12;
}

double flops_per_iteration(const nn::GPT& model, int64_t windows) {
  const nn::GPTConfig& c = model.config;
  const double n = static_cast<double>(model.num_parameters(true));
  const double per_token =
      6 * n + 12.0 * static_cast<double>(c.n_layer * c.n_head * (c.n_embd / c.n_head) * c.block_size);
  return per_token * static_cast<double>(c.block_size) * static_cast<double>(windows);
}

void reset_memory_peaks(const Placement& placement) {
  t::reset_cpu_peak_memory();
  if (placement.on_gpu) t::cuda::reset_peak_memory_stats(placement.device.index);
}

void report_memory_peak(const Placement& placement, std::ostream& out) {
  const size_t peak = placement.on_gpu ? t::cuda::allocator_stats(placement.device.index).peak_allocated_bytes
                                       : t::cpu_memory_stats().peak_allocated_bytes;
  out << fmt::format("peak {} tensor memory on rank 0: {:.1f} MiB\n", placement.on_gpu ? "GPU" : "CPU",
                     static_cast<double>(peak) / 1048576.0);
}

}  // namespace tinyddp::examples
