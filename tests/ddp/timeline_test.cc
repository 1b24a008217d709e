// DDP's statistics and timeline: the Timeline's trace format (times on the aligned clock, a row
// per bucket, the iteration of every event), and on 2 ranks the statistics and the traces DDP
// writes, which share one clock: no rank's allreduce of a bucket ends before the other rank
// launched it.
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "tests/comm/comm_test_util.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/ddp/timeline.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp;
using namespace tinyddp::ddp;
using Catch::Contains;
using comm::ProcessGroup;
using testing::borrow;
using testing::Expectations;
using testing::require_no_failures;
using testing::run_threads;
using json = nlohmann::json;

namespace {

// The trace's row names by tid, from its thread_name metadata.
std::map<int, std::string> row_names(const json& trace) {
  std::map<int, std::string> rows;
  for (const json& e : trace["traceEvents"]) {
    if (e["name"] == "thread_name") rows[e["tid"].get<int>()] = e["args"]["name"];
  }
  return rows;
}

const json* find_event(const json& trace, const std::string& name) {
  for (const json& e : trace["traceEvents"]) {
    if (e["name"] == name) return &e;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("Timeline: microseconds since the aligned origin, a row per bucket, the iteration of each event",
          "[ddp][timeline]") {
  using namespace std::chrono_literals;
  Timeline timeline;
  CHECK(json::parse(timeline.json(0))["otherData"]["clock"].get<std::string>().rfind("this rank's own", 0) == 0);
  const auto origin = Timeline::Clock::now();
  timeline.align(origin);
  timeline.span("forward", origin + 1ms, origin + 3ms, 0);
  timeline.span("allreduce bucket 1 (4 KiB)", origin + 2ms, origin + 7ms, 4, Timeline::bucket_track(1));
  timeline.instant("bucket 1 launched", origin + 2ms, 4);
  const json trace = json::parse(timeline.json(3));
  CHECK(trace["otherData"]["rank"] == 3);
  CHECK(trace["otherData"]["clock"].get<std::string>().rfind("aligned", 0) == 0);
  CHECK(row_names(trace) ==
        std::map<int, std::string>{{0, "compute"}, {1, "bucket 0 allreduce"}, {2, "bucket 1 allreduce"}});
  const json* forward = find_event(trace, "forward");
  REQUIRE(forward != nullptr);
  CHECK((*forward)["ts"].get<double>() == Approx(1000));
  CHECK((*forward)["dur"].get<double>() == Approx(2000));
  CHECK((*forward)["pid"] == 3);
  CHECK((*forward)["args"]["iteration"] == 0);
  const json* allreduce = find_event(trace, "allreduce bucket 1 (4 KiB)");
  REQUIRE(allreduce != nullptr);
  CHECK((*allreduce)["tid"] == 2);
  CHECK((*allreduce)["ts"].get<double>() == Approx(2000));
  CHECK((*allreduce)["dur"].get<double>() == Approx(5000));
  CHECK((*allreduce)["args"]["iteration"] == 4);
  const json* launched = find_event(trace, "bucket 1 launched");
  REQUIRE(launched != nullptr);
  CHECK((*launched)["ph"] == "i");
  CHECK_THROWS_WITH(timeline.write("/nonexistent-dir/trace.json", 0),
                    Contains("cannot write /nonexistent-dir/trace.json"));
}

TEST_CASE("runtime statistics and the Chrome-trace timeline", "[ddp][stats][timeline]") {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  const std::string prefix = dir + "/ddp_timeline";
  require_no_failures(run_threads(2, [&](ProcessGroup& pg, Expectations& e) {
    {
      auto model = nn::mlp({16, 32, 32, 4});
      DistributedDataParallel ddp(model, borrow(pg), DDPOptions().first_bucket_cap_mb(1e-3).timeline(prefix));
      for (int it = 0; it < 3; ++it) nn::mse_loss(ddp(tensor::ones({8, 16})), tensor::zeros({8, 4})).backward();
      const DDPStats s = ddp.stats();
      size_t total = 0;
      for (size_t b : s.bucket_bytes) total += b;
      size_t params = 0;
      for (const Tensor& p : model->parameters()) params += p.nbytes();
      e.expect(s.iterations == 3, "iterations");
      e.expect(total == params, "bucket bytes do not add up to the parameters' bytes");
      e.expect(s.buckets_rebuilt, "rebuilt flag");
      e.expect(s.last_backward_compute_us > 0 && s.avg_backward_compute_us > 0, "backward compute time");
      e.expect(s.last_forward_compute_us > 0, "forward time");
      e.expect(s.last_backward_comm_us > 0, "communication time");
      e.expect(s.last_overlap_us >= 0 && s.last_overlap_us <= s.last_backward_comm_us,
               "overlap within communication time");
    }  // destruction writes the trace
    std::ifstream in(prefix + ".rank" + std::to_string(pg.rank()) + ".json");
    e.expect(in.good(), "no timeline file");
    std::stringstream text;
    text << in.rdbuf();
    const std::string json = text.str();
    for (const char* needle :
         {"\"traceEvents\"", "allreduce bucket 0", "grad ready: 2.weight", "finalize", "forward"}) {
      e.expect(json.find(needle) != std::string::npos, std::string("timeline lacks ") + needle);
    }
  }));
}

TEST_CASE("DDP's timelines of 2 ranks share one clock: a bucket's allreduce never ends before another rank launched it",
          "[ddp][timeline]") {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  std::vector<json> traces(2);
  constexpr int kIterations = 4;
  require_no_failures(run_threads(2, [&](ProcessGroup& pg, Expectations& e) {
    auto model = nn::mlp({16, 64, 64, 4});
    DistributedDataParallel ddp(model, borrow(pg),
                                DDPOptions().first_bucket_cap_mb(1e-3).bucket_cap_mb(1e-3).timeline(dir + "/aligned"));
    for (int it = 0; it < kIterations; ++it) nn::mse_loss(ddp(tensor::ones({8, 16})), tensor::zeros({8, 4})).backward();
    e.expect(ddp.stats().bucket_bytes.size() >= 3,
             fmt::format("expected several buckets, got {}", ddp.stats().bucket_bytes));
    traces[pg.rank()] = json::parse(ddp.reducer().recorder().timeline().json(pg.rank()));
  }));
  // (iteration, bucket) -> [launch, end] of the allreduce span, per rank.
  std::vector<std::map<std::pair<int64_t, int>, std::pair<double, double>>> spans(2);
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(traces[r]["otherData"]["clock"].get<std::string>().rfind("aligned", 0) == 0);
    for (const json& e : traces[r]["traceEvents"]) {
      const std::string name = e["name"];
      if (name.rfind("allreduce bucket ", 0) != 0) continue;
      const int bucket = std::stoi(name.substr(17));
      CHECK(e["tid"] == Timeline::bucket_track(bucket));  // its bucket's row
      const double start = e["ts"], end = start + e["dur"].get<double>();
      spans[r][{e["args"]["iteration"].get<int64_t>(), bucket}] = {start, end};
    }
    CHECK(row_names(traces[r]).size() == 1 + spans[r].size() / kIterations);
  }
  REQUIRE(spans[0].size() == spans[1].size());
  REQUIRE(spans[0].size() >= 3 * kIterations);
  // An allreduce completes only once every rank has launched it. The clocks agree to within
  // a barrier's release skew (the median of five rounds, so one delayed clock read does not
  // count); 5 ms leaves room for a busy machine.
  constexpr double kSlackUs = 5000;
  for (const auto& [key, span] : spans[0]) {
    INFO("iteration " << key.first << ", bucket " << key.second);
    const auto& other = spans[1].at(key);
    CHECK(span.second >= other.first - kSlackUs);
    CHECK(other.second >= span.first - kSlackUs);
  }
}

TEST_CASE("timeline_span marks the caller's work in the iteration of the last forward, before and after finalize",
          "[ddp][timeline]") {
  require_no_failures(run_threads(2, [&](ProcessGroup& pg, Expectations& e) {
    const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
    auto model = nn::mlp({16, 8, 4});
    DistributedDataParallel ddp(model, borrow(pg), DDPOptions().timeline(dir + "/spans"));
    nn::SGD optimizer(ddp.parameters(), nn::SGDOptions(0.1));
    for (int it = 0; it < 2; ++it) {
      const Tensor out = ddp(tensor::ones({8, 16}));
      Tensor loss;
      {
        const auto marked = ddp.timeline_span("loss");
        loss = nn::mse_loss(out, tensor::zeros({8, 4}));
      }
      loss.backward();
      const auto marked = ddp.timeline_span("optimizer step");  // after finalize ended iteration `it`
      optimizer.step();
    }
    const json trace = json::parse(ddp.reducer().recorder().timeline().json(pg.rank()));
    std::map<std::string, std::vector<int64_t>> iterations;
    for (const json& ev : trace["traceEvents"]) {
      if (ev["ph"] == "X" && ev["tid"] == 0) iterations[ev["name"]].push_back(ev["args"]["iteration"]);
    }
    e.expect(iterations["loss"] == std::vector<int64_t>{0, 1}, fmt::format("loss spans in {}", iterations["loss"]));
    e.expect(iterations["optimizer step"] == std::vector<int64_t>{0, 1},
             fmt::format("optimizer spans in {}", iterations["optimizer step"]));
    e.expect(iterations["finalize"] == std::vector<int64_t>{0, 1}, "finalize");
  }));
}

TEST_CASE("A timeline on one rank only: the ranks still agree on the collectives, and only that rank writes",
          "[ddp][timeline]") {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  const std::string prefix = dir + "/ddp_timeline_rank1";
  require_no_failures(run_threads(2, [&](ProcessGroup& pg, Expectations& e) {
    {
      auto model = nn::mlp({16, 32, 4});
      DDPOptions options = DDPOptions().first_bucket_cap_mb(1e-3);
      if (pg.rank() == 1) options.timeline(prefix);
      DistributedDataParallel ddp(model, borrow(pg), options);
      for (int it = 0; it < 2; ++it) nn::mse_loss(ddp(tensor::ones({8, 16})), tensor::zeros({8, 4})).backward();
      e.expect(ddp.stats().iterations == 2, "two iterations on both ranks");
    }
    e.expect(std::ifstream(prefix + ".rank" + std::to_string(pg.rank()) + ".json").good() == (pg.rank() == 1),
             "only rank 1 writes a timeline");
  }));
}
