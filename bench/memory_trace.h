// MemoryTrace: the bytes of live CPU tensors (tensor::cpu_memory_stats) over one training
// step, sampled on a thread of its own every 100 µs, with the instants the step's phases
// began, for bench/train_step's --memory_trace and the picture of per-rank memory that
// scripts/plot_memory.py draws from it (docs/ddp.md, "From DDP to ZeRO to FSDP").
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tinyddp/base/error.h"
#include "tinyddp/tensor/storage.h"

namespace tinyddp::bench {

class MemoryTrace {
 public:
  using Clock = std::chrono::steady_clock;

  MemoryTrace() : start_(Clock::now()) {
    samples_.reserve(1 << 16);
    sampler_ = std::thread([this] {
      while (running_.load(std::memory_order_relaxed) && samples_.size() < samples_.capacity()) {
        samples_.emplace_back(ms(), tensor::cpu_memory_stats().allocated_bytes);
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    });
  }
  ~MemoryTrace() { stop(); }
  MemoryTrace(const MemoryTrace&) = delete;
  MemoryTrace& operator=(const MemoryTrace&) = delete;

  // The phase `name` begins now ("forward", "backward", "optimizer", "end").
  void mark(const std::string& name) { marks_.emplace_back(name, ms()); }

  void stop() {
    running_ = false;
    if (sampler_.joinable()) sampler_.join();
  }

  // "# phase <name> <t_ms>" lines, then "t_ms,allocated_mib" lines.
  void write(const std::string& path) {
    stop();
    std::FILE* f = std::fopen(path.c_str(), "w");
    TDDP_CHECK(f != nullptr, "--memory_trace: cannot write {}", path);
    for (const auto& [name, at] : marks_) std::fprintf(f, "# phase %s %.3f\n", name.c_str(), at);
    std::fprintf(f, "t_ms,allocated_mib\n");
    for (const auto& [at, bytes] : samples_) std::fprintf(f, "%.3f,%.3f\n", at, bytes / 1048576.0);
    std::fclose(f);
  }

 private:
  double ms() const { return std::chrono::duration<double, std::milli>(Clock::now() - start_).count(); }

  Clock::time_point start_;
  std::atomic<bool> running_{true};
  std::vector<std::pair<double, size_t>> samples_;  // written by the sampler only, read after stop
  std::vector<std::pair<std::string, double>> marks_;
  std::thread sampler_;
};

}  // namespace tinyddp::bench
