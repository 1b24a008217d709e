// The op profiler (tensor/profiler.h): each kernel recorded once with its op, kernel, kind,
// bytes and FLOPs (against the operands' sizes), declined entries left out, ranges and steps,
// per-thread rows, key averages that add up the events, the Chrome trace, one Profile at a
// time, nothing recorded without one; with a GPU, device times from events on the stream.
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/test_util.h"
#include "tinyddp/tensor/all.h"
#include "tinyddp/tensor/fused.h"

using namespace tinyddp::tensor;
using Catch::Contains;
using profiler::Event;
using profiler::Kind;
using profiler::Profile;

namespace {

std::vector<Event> with_kernel(const std::vector<Event>& events, const std::string& kernel) {
  std::vector<Event> out;
  for (const Event& e : events) {
    if (e.kernel == kernel) out.push_back(e);
  }
  return out;
}

}  // namespace

TEST_CASE("the profiler records each kernel with its op, kind, bytes and FLOPs", "[profiler]") {
  manual_seed(1);
  const Tensor x = randn({64, 32}), w = randn({16, 32}), b = randn({16});
  const Tensor u = randn({1000}), v = randn({1000});
  Profile prof;
  for (int i = 0; i < 3; ++i) linear(x, w, b);
  const Tensor s = add(u, v);
  prof.stop();

  const std::vector<Event> gemms = with_kernel(prof.events(), "addmm");
  REQUIRE(gemms.size() == 3);
  for (const Event& e : gemms) {
    CHECK(e.name == "linear");
    CHECK(e.kind == Kind::kGemm);
    CHECK(e.device == kCPU);
    CHECK(e.flops == 2.0 * 64 * 32 * 16);
    CHECK(e.bytes == 4 * (64 * 16 + 16 + 64 * 32 + 16 * 32));  // out, bias, x, w: float32
    CHECK(e.host_end_us >= e.host_start_us);
    CHECK(e.device_start_us == -1);
    CHECK(e.device_us() == 0);
  }
  const std::vector<Event> adds = with_kernel(prof.events(), "binary");
  REQUIRE(adds.size() == 1);
  CHECK(adds[0].name == "add");
  CHECK(adds[0].kind == Kind::kElementwise);
  CHECK(adds[0].bytes == 3 * 4000);
  CHECK(adds[0].flops == 0);
  // In order of start, on the Profile's clock.
  for (size_t i = 1; i < prof.events().size(); ++i) {
    CHECK(prof.events()[i].host_start_us >= prof.events()[i - 1].host_start_us);
  }

  // key_averages adds up the events of each (op, kernel).
  const std::vector<profiler::OpStats> rows = prof.key_averages();
  const auto linear_row = std::find_if(rows.begin(), rows.end(), [](const auto& r) { return r.name == "linear"; });
  REQUIRE(linear_row != rows.end());
  CHECK(linear_row->count == 3);
  CHECK(linear_row->flops == 3 * gemms[0].flops);
  CHECK(linear_row->host_us == Approx(gemms[0].host_us() + gemms[1].host_us() + gemms[2].host_us()));
  for (size_t i = 1; i < rows.size(); ++i) CHECK(rows[i].time_us() <= rows[i - 1].time_us());
  const std::string table = prof.table();
  CHECK_THAT(table, Contains("linear") && Contains("addmm") && Contains("GEMM") && Contains("time per kind"));
}

TEST_CASE("the profiler sees the backward's kernels, leaves out declined entries, and marks steps and ranges",
          "[profiler]") {
  manual_seed(2);
  const Tensor w = randn({8, 8}).requires_grad_(true);
  const Tensor x = randn({4, 8});
  const std::vector<Tensor> list = {randn({5}), randn({7})};
  Profile prof;
  for (int step = 0; step < 2; ++step) {
    {
      profiler::RecordFunction range("forward and backward");
      sum(mm(x, w)).backward();
    }
    prof.step();
  }
  const Tensor norms = foreach_norm(list);  // the CPU has no list kernel: composed from other kernels
  prof.stop();

  const std::vector<Event>& events = prof.events();
  // Each step: mm forward, the sum, and the backward's product for w (x has no gradient).
  const std::vector<Event> mms = with_kernel(events, "mm");
  REQUIRE(mms.size() == 4);
  CHECK(mms[0].step == 0);
  CHECK(mms[3].step == 1);
  CHECK(with_kernel(events, "foreach_norm").empty());
  CHECK(norms.sizes() == Shape{2});
  std::vector<Event> ranges;
  for (const Event& e : events) {
    if (e.kind == Kind::kUser) ranges.push_back(e);
  }
  REQUIRE(ranges.size() == 2);
  CHECK(ranges[0].name == "forward and backward");
  CHECK(ranges[0].kernel.empty());
  // The range holds the first step's products.
  CHECK(ranges[0].host_start_us <= mms[0].host_start_us);
  CHECK(ranges[0].host_end_us >= mms[1].host_end_us);
  const profiler::Summary summary = prof.summary();
  CHECK(summary.steps == 2);
  CHECK(summary.wall_us >= summary.host_in_kernels_us);
  CHECK(summary.device_busy_us == 0);
  CHECK_THAT(prof.table(), Contains("ms/step"));
}

TEST_CASE("the profiler numbers host threads, writes a Chrome trace, and records only while one Profile lives",
          "[profiler]") {
  const Tensor a = randn({100}), c = randn({100});
  add(a, c);  // before: not recorded
  Profile prof;
  CHECK_THROWS_WITH(Profile(), Contains("another Profile is already recording"));
  CHECK_THROWS_WITH(prof.events(), Contains("call stop() first"));
  mul(a, c);
  std::thread other([&] { sub(a, c); });
  other.join();
  prof.stop();
  prof.stop();  // again: nothing
  add(a, c);    // after: not recorded
  CHECK_FALSE(profiler::is_enabled());

  const std::vector<Event>& events = prof.events();
  REQUIRE(events.size() == 2);
  CHECK(events[0].name == "mul");
  CHECK(events[1].name == "sub");
  CHECK(events[0].thread != events[1].thread);

  const nlohmann::json trace = nlohmann::json::parse(prof.chrome_trace_json(3));
  int spans = 0, row_names = 0;
  for (const auto& e : trace["traceEvents"]) {
    CHECK(e["pid"] == 3);
    if (e["ph"] == "X") {
      ++spans;
      CHECK(e["dur"].get<double>() >= 0);
      CHECK(e["args"]["kind"] == "elementwise");
    }
    if (e["name"] == "thread_name") ++row_names;
  }
  CHECK(spans == 2);
  CHECK(row_names == 2);
  CHECK_THROWS_WITH(prof.export_chrome_trace("/nonexistent-dir/trace.json"), Contains("cannot write"));

  Profile next;  // the first one stopped: a new one may record
  neg(a);
  next.stop();
  CHECK(next.events().size() == 1);
}

TEST_CASE("CUDA: the profiler times GPU kernels between events on the compute stream", "[profiler][cuda]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  const Device gpu = Device::cuda(0);
  manual_seed(3);
  const Tensor a = randn({1024, 1024}).to(gpu), b = randn({1024, 1024}).to(gpu);
  mm(a, b);  // cuBLAS sets itself up outside the profile
  cuda::synchronize(0);
  Profile prof;
  for (int i = 0; i < 4; ++i) mm(a, b);
  const Tensor sum_ab = add(a, b);
  const Tensor host = sum_ab.to(kCPU);  // a copy to the host, recorded on the GPU's side
  prof.stop();

  const std::vector<Event>& events = prof.events();
  REQUIRE(with_kernel(events, "mm").size() == 4);
  REQUIRE(with_kernel(events, "copy").size() == 1);
  double last_end = -1;
  for (const Event& e : events) {
    INFO(e.name << " " << e.kernel);
    CHECK(e.device == gpu);
    REQUIRE(e.device_start_us >= 0);
    CHECK(e.device_end_us >= e.device_start_us);
    CHECK(e.device_start_us >= last_end - 1);  // one stream: one after another (events' resolution ~0.5 us)
    last_end = e.device_end_us;
  }
  // 2 n^3 FLOPs in no less than 200 TFLOP/s would take (an H200's float32 peak is about 67).
  for (const Event& e : with_kernel(events, "mm")) CHECK(e.device_us() > 2.0 * 1024 * 1024 * 1024 / 200e6);
  const profiler::Summary summary = prof.summary();
  CHECK(summary.device_busy_us > 0);
  CHECK(summary.device_idle_us >= 0);
  CHECK_THAT(prof.table(), Contains("gpu") && Contains("GPU busy"));

  // Captured kernels run later, at replay: no device times for them.
  cuda::CudaGraph graph;
  Profile captured;
  graph.capture_begin(0);
  mm(a, b);
  graph.capture_end();
  captured.stop();
  REQUIRE(with_kernel(captured.events(), "mm").size() == 1);
  CHECK(captured.events()[0].device_start_us == -1);
}
