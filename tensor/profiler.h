// The op profiler, as torch.profiler: while a Profile is alive every kernel that the tensor
// library runs (every call through the one backend interface) is recorded with its op, its
// kind, the host time of its launch and, on a GPU, its device time between two CUDA events on
// the compute stream; key_averages() and table() add them up per op and per kind (GEMM,
// attention, norm, elementwise, ...), with bytes moved and FLOPs, and export_chrome_trace()
// writes the Chrome trace format of ddp/timeline.h (host threads and GPU streams as rows).
//
//   tensor::profiler::Profile prof;
//   for (int step = 0; step < 3; ++step) { train_step(); prof.step(); }
//   prof.stop();
//   std::cout << prof.table();
//   prof.export_chrome_trace("trace.json");  // open in ui.perfetto.dev
//
// Off (no Profile alive), the cost is one relaxed atomic load per kernel. On, each kernel costs
// a clock read or two and, on a GPU, two event records: small ops' host times grow by a few
// microseconds, as under torch.profiler; device times do not.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tinyddp/tensor/device.h"

namespace tinyddp::tensor::profiler {

// What a kernel does, for the per-kind totals.
enum class Kind {
  kGemm,
  kAttention,
  kNorm,
  kElementwise,
  kReduction,
  kLoss,
  kEmbedding,
  kConv,
  kOptimizer,
  kCopy,
  kUser
};
const char* kind_name(Kind kind);  // "GEMM", "attention", ..., "user" (a record_function)

// One kernel (or one record_function range).
struct Event {
  std::string name;    // the op that ran it ("linear", "add", "layer_norm backward") or the range's label
  std::string kernel;  // the backend entry point ("addmm", "binary", "flash_attention"); "" for a range
  Kind kind = Kind::kUser;
  Device device;
  int thread = 0;                             // host thread, numbered in order of first appearance in the process
  int64_t step = 0;                           // the number of Profile::step() calls before it started
  double host_start_us = 0, host_end_us = 0;  // on the host clock, since the Profile started
  // On the GPU, since the device's first recorded event (placed at that event's host time):
  // -1 for CPU kernels, ranges and kernels captured into a CUDA graph.
  double device_start_us = -1, device_end_us = -1;
  int64_t bytes = 0;  // bytes the kernel reads and writes at least (each tensor once; in-place ones twice)
  double flops = 0;   // floating-point operations of products and attention (a multiply-add is 2); else 0
  double host_us() const { return host_end_us - host_start_us; }
  double device_us() const { return device_start_us < 0 ? 0 : device_end_us - device_start_us; }
  // What the kernel's own time is: device time on a GPU (0 when captured), host time on the CPU.
  double time_us() const { return device.is_cuda() ? device_us() : host_us(); }
};

// key_averages' row: the events of one (name, kernel, device type).
struct OpStats {
  std::string name, kernel;
  Kind kind = Kind::kUser;
  DeviceType device_type = DeviceType::kCPU;
  int64_t count = 0;
  double host_us = 0, device_us = 0;
  int64_t bytes = 0;
  double flops = 0;
  // What the op's own time is: device time on a GPU, host time on the CPU.
  double time_us() const { return device_type == DeviceType::kCUDA ? device_us : host_us; }
};

// Where the profiled time went, all kernels together (ranges left out).
struct Summary {
  int64_t steps = 0;              // Profile::step() calls
  double wall_us = 0;             // from start to stop, host clock
  double host_in_kernels_us = 0;  // host time inside kernel calls (summed over threads)
  double device_busy_us = 0;      // GPU time inside kernels (summed over devices)
  // The device's idle time between its first and last kernel: the gaps where it waited for
  // the host to launch more work (launch overhead, host-side code, synchronisation).
  double device_idle_us = 0;
  std::vector<std::pair<Kind, double>> per_kind_us;  // each kind's time (device on a GPU, host on the CPU)
};

struct Options {
  bool device_timing = true;  // CUDA events around each GPU kernel (off: host times only)
};

class Profile {
 public:
  // Starts recording in this process. One Profile records at a time: a second is an Error.
  explicit Profile(Options options = {});
  ~Profile();  // stops, when stop() was not called
  Profile(const Profile&) = delete;
  Profile& operator=(const Profile&) = delete;

  // Ends recording; waits for the GPU to pass the last recorded event and reads the device
  // times. Calling it again does nothing.
  void stop();
  // Marks the end of a training step, as torch.profiler's prof.step().
  void step();

  // After stop() (an Error before): every event in order of start.
  const std::vector<Event>& events() const;
  // One row per (op, kernel, device type), the most time first.
  std::vector<OpStats> key_averages() const;
  Summary summary() const;
  // The key_averages as a text table (at most row_limit rows; 0: all), then the time per kind
  // and the summary's lines, with per-step figures when step() was called.
  std::string table(int row_limit = 25) const;
  // The Chrome trace (ddp/timeline.h's format): process `pid`, a row per host thread and a row
  // per GPU's compute stream.
  std::string chrome_trace_json(int pid = 0) const;
  void export_chrome_trace(const std::string& path, int pid = 0) const;

  struct State;

 private:
  std::shared_ptr<State> state_;
  std::vector<Event> events_;
  double wall_us_ = 0;
  int64_t steps_ = 0;
  bool stopped_ = false;
};

// A labelled range of host time in the profile (kind "user"), as torch.profiler's
// record_function: `RecordFunction scope("forward");`. Does nothing without a live Profile.
class RecordFunction {
 public:
  explicit RecordFunction(std::string name);
  ~RecordFunction();
  RecordFunction(const RecordFunction&) = delete;
  RecordFunction& operator=(const RecordFunction&) = delete;

 private:
  std::shared_ptr<Profile::State> state_;
  std::string name_;
  double start_us_ = 0;
};

// True while a Profile records (what the backend interface asks before each kernel).
bool is_enabled();

}  // namespace tinyddp::tensor::profiler
