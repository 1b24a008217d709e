// fully_shard's timeline (FullyShardOptions::timeline): an MLP of three Linear units and the
// root on 2 ranks, two steps, its Chrome trace read back. Per unit and step it must hold the
// unit's forward and backward on the compute row, an all-gather before each (the forward's and,
// the parameters having been freed after the forward, the backward's) finished before that
// computation starts, the frees, and one reduce-scatter launched when the unit's backward ends;
// from the second step on, the next unit's all-gather is issued while the one before computes
// (prefetch).
#include <map>
#include <mutex>

#include <nlohmann/json.hpp>

#include "tests/comm/comm_test_util.h"
#include "tinyddp/ddp/fully_shard.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp;
using tensor::Tensor;
using testing::Expectations;
using json = nlohmann::json;

namespace {

struct Event {
  std::string name;
  double start = 0, end = 0;  // microseconds; an instant's are equal
};

// The trace's events of `iteration` whose names begin with `prefix`, in the order recorded.
std::vector<Event> events(const json& trace, int64_t iteration, const std::string& prefix) {
  std::vector<Event> out;
  for (const json& ev : trace["traceEvents"]) {
    if (ev["ph"] == "M" || ev["args"]["iteration"].get<int64_t>() != iteration) continue;
    const std::string name = ev["name"];
    if (name.rfind(prefix, 0) != 0) continue;
    const double ts = ev["ts"].get<double>();
    out.push_back({name, ts, ts + (ev["ph"] == "X" ? ev["dur"].get<double>() : 0.0)});
  }
  return out;
}

}  // namespace

TEST_CASE("fully_shard's timeline: each unit's gathers, forward, backward, frees and reduce-scatter, prefetched",
          "[ddp][fsdp][timeline]") {
  testing::require_no_failures(testing::run_threads(2, [](comm::ProcessGroup& pg, Expectations& e) {
    std::shared_ptr<nn::Sequential> model;
    {
      static std::mutex mutex;  // rank threads share the default generator
      std::lock_guard<std::mutex> lock(mutex);
      tensor::manual_seed(5);
      model = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Linear>(4, 64), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(64, 64),
          std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(64, 3)});
    }
    ddp::FullyShardOptions options;
    options.timeline(std::make_shared<ddp::Timeline>());
    const auto units = ddp::fully_shard_by_policy(model, testing::borrow(pg), ddp::is_a<nn::Linear>, options);
    e.expect_eq(units[2]->label(), std::string("0"), "the first layer's unit is named by its path");
    e.expect_eq(units[3]->label(), std::string("Sequential"), "the root keeps its type");
    nn::SGD optimizer(ddp::sharded_parameters(*model), nn::SGDOptions(0.1));
    for (int step = 0; step < 2; ++step) {
      tensor::Generator gen(step);
      nn::mse_loss((*model)(tensor::randn({8, 4}, {}, &gen)), tensor::randn({8, 3}, {}, &gen)).backward();
      optimizer.step();
      optimizer.zero_grad();
    }
    const json trace = json::parse(options.timeline()->json(pg.rank()));
    e.expect_contains(trace["otherData"]["clock"].get<std::string>(), "aligned", "the ranks' clocks agree");
    std::map<int, std::string> rows;
    for (const json& ev : trace["traceEvents"]) {
      if (ev["name"] == "thread_name") rows[ev["tid"].get<int>()] = ev["args"]["name"];
    }
    e.expect(rows == std::map<int, std::string>{{0, "compute"}, {1, "all-gather"}, {2, "reduce-scatter"}},
             "rows: compute, all-gather, reduce-scatter");
    for (int64_t iteration = 1; iteration <= 2; ++iteration) {
      const std::vector<std::string> order{"0", "2", "4"};
      for (size_t k = 0; k < order.size(); ++k) {
        const std::string& unit = order[k];
        const std::string where = fmt::format("rank {} iteration {} unit {}: ", pg.rank(), iteration, unit);
        const std::vector<Event> gathers = events(trace, iteration, "all-gather " + unit + " (");
        const std::vector<Event> forward = events(trace, iteration, "forward " + unit);
        const std::vector<Event> backward = events(trace, iteration, "backward " + unit);
        const std::vector<Event> reduces = events(trace, iteration, "reduce-scatter " + unit + " (");
        const std::vector<Event> frees = events(trace, iteration, "free " + unit);
        const bool complete = gathers.size() == 2 && forward.size() == 1 && backward.size() == 1 && reduces.size() == 1;
        e.expect(complete, where + "two all-gathers, a forward, a backward and a reduce-scatter");
        if (!complete) continue;
        e.expect_eq(frees.size(), size_t{2}, where + "freed after the forward and after the backward");
        e.expect(gathers[0].end <= forward[0].start && gathers[1].end <= backward[0].start,
                 where + "each all-gather finishes before the computation it serves");
        e.expect(forward[0].end <= frees[0].start && backward[0].end <= reduces[0].start,
                 where + "freed after the forward; the reduce-scatter launched when the backward ends");
        // The backward's gathers are issued while the unit after computes its backward, from the
        // first step; the forward's while the unit before computes, once the order is known.
        e.expect_contains(gathers[1].name, "prefetched", where + "the backward's gather is a prefetch");
        if (iteration == 2 && k > 0) {
          e.expect_contains(gathers[0].name, "prefetched", where + "the forward's gather is a prefetch");
          const Event before = events(trace, iteration, "forward " + order[k - 1])[0];
          e.expect(gathers[0].start <= before.end, where + "its gather was issued before the unit before it finished");
        }
      }
    }
  }));
}
