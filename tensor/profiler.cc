// The op profiler (profiler.h): the live Profile's state, the scopes that record kernels and
// ranges into it, and the device times read at stop() (the reports: profiler_report.cc).
#include "tinyddp/tensor/profiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <map>
#include <mutex>

#include "tinyddp/base/error.h"
#include "tinyddp/tensor/internal/profiling.h"

namespace tinyddp::tensor::profiler {

using Clock = std::chrono::steady_clock;

// A recorded event and, for a GPU kernel, its two events on the compute stream.
struct Record {
  Event event;
  cuda::StreamMark start, end;
};

struct Profile::State {
  Options options;
  Clock::time_point origin = Clock::now();
  std::atomic<int64_t> steps{0};
  std::mutex mutex;  // guards records
  std::vector<Record> records;

  double now_us() const { return std::chrono::duration<double, std::micro>(Clock::now() - origin).count(); }
  void add(Record record) {
    std::lock_guard<std::mutex> lock(mutex);
    records.push_back(std::move(record));
  }
};

namespace {

std::atomic<bool> g_enabled{false};
std::mutex g_live_mutex;  // guards g_live
std::shared_ptr<Profile::State> g_live;

std::shared_ptr<Profile::State> live_state() {
  if (!g_enabled.load(std::memory_order_relaxed)) return nullptr;
  std::lock_guard<std::mutex> lock(g_live_mutex);
  return g_live;
}

thread_local int t_kernel_depth = 0;  // KernelScopes open on this thread

int thread_number() {
  static std::atomic<int> next{0};
  thread_local const int number = next++;
  return number;
}

// The events' device times: each device's first mark sits at its own host time, the rest at
// their elapsed time after it (waiting for the GPU to reach each).
std::vector<Event> resolve(std::vector<Record>& records) {
  std::map<int, const Record*> first;  // per device, the first record with marks
  for (const Record& r : records) {
    if (r.start.defined()) first.emplace(r.start.device(), &r);
  }
  std::vector<Event> events;
  events.reserve(records.size());
  for (Record& r : records) {
    Event e = std::move(r.event);
    if (r.start.defined() && r.end.defined()) {
      const Record& base = *first.at(r.start.device());
      const double zero = base.event.host_start_us;
      e.device_start_us = zero + 1e3 * cuda::StreamMark::elapsed_ms(base.start, r.start);
      e.device_end_us = zero + 1e3 * cuda::StreamMark::elapsed_ms(base.start, r.end);
    }
    events.push_back(std::move(e));
  }
  std::stable_sort(events.begin(), events.end(),
                   [](const Event& a, const Event& b) { return a.host_start_us < b.host_start_us; });
  return events;
}

}  // namespace

bool is_enabled() { return g_enabled.load(std::memory_order_relaxed); }

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kGemm: return "GEMM";
    case Kind::kAttention: return "attention";
    case Kind::kNorm: return "norm";
    case Kind::kElementwise: return "elementwise";
    case Kind::kReduction: return "reduction";
    case Kind::kLoss: return "loss";
    case Kind::kEmbedding: return "embedding";
    case Kind::kConv: return "conv/pool";
    case Kind::kOptimizer: return "optimizer";
    case Kind::kCopy: return "copy";
    case Kind::kUser: return "user";
  }
  return "?";
}

Profile::Profile(Options options) : state_(std::make_shared<State>()) {
  state_->options = options;
  std::lock_guard<std::mutex> lock(g_live_mutex);
  TDDP_CHECK(g_live == nullptr, "profiler::Profile: another Profile is already recording in this process");
  g_live = state_;
  g_enabled.store(true);
}

Profile::~Profile() {
  try {
    stop();
  } catch (...) {  // a GPU error while reading the device times: the events are lost, nothing else
  }
}

void Profile::stop() {
  if (stopped_) return;
  stopped_ = true;
  const double wall = state_->now_us();
  {
    std::lock_guard<std::mutex> lock(g_live_mutex);
    g_enabled.store(false);
    g_live = nullptr;
  }
  std::vector<Record> records;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    records.swap(state_->records);
  }
  wall_us_ = wall;
  steps_ = state_->steps.load();
  events_ = resolve(records);
}

void Profile::step() { state_->steps++; }

const std::vector<Event>& Profile::events() const {
  TDDP_CHECK(stopped_, "profiler::Profile::events: call stop() first");
  return events_;
}

RecordFunction::RecordFunction(std::string name) : state_(live_state()), name_(std::move(name)) {
  if (state_) start_us_ = state_->now_us();
}

RecordFunction::~RecordFunction() {
  if (!state_ || std::uncaught_exceptions() > 0) return;
  Record r;
  r.event.name = std::move(name_);
  r.event.kind = Kind::kUser;
  r.event.thread = thread_number();
  r.event.step = state_->steps.load();
  r.event.host_start_us = start_us_;
  r.event.host_end_us = state_->now_us();
  state_->add(std::move(r));
}

namespace detail {

KernelScope::KernelScope(const char* op, const char* kernel, Kind kind, Device device, int64_t bytes, double flops)
    : state_(live_state()) {
  if (!state_) return;
  nested_ = t_kernel_depth++ > 0;
  if (nested_) return;
  exceptions_ = std::uncaught_exceptions();
  event_.name = op;
  event_.kernel = kernel;
  event_.kind = kind;
  event_.device = device;
  event_.thread = thread_number();
  event_.step = state_->steps.load();
  event_.bytes = bytes;
  event_.flops = flops;
  if (device.is_cuda() && state_->options.device_timing && !cuda::is_capturing(device.index)) {
    start_ = cuda::StreamMark::record(device.index, /*timing=*/true);
  }
  event_.host_start_us = state_->now_us();
}

KernelScope::~KernelScope() {
  if (!state_) return;
  --t_kernel_depth;
  if (nested_ || declined_ || std::uncaught_exceptions() > exceptions_) return;
  try {
    Record r{std::move(event_), std::move(start_), {}};
    r.event.host_end_us = state_->now_us();
    if (r.start.defined()) r.end = cuda::StreamMark::record(r.start.device(), /*timing=*/true);
    state_->add(std::move(r));
  } catch (...) {  // no event to record it with: the kernel itself ran
  }
}

}  // namespace detail

}  // namespace tinyddp::tensor::profiler
