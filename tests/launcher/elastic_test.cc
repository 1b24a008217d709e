// The elastic rendezvous (launcher/elastic.h) with nodes as threads on one in-process store:
// rounds formed in join order, the last call, a round that is full, heartbeats that stop, a
// new round with the nodes alive, a newcomer, and the errors (another job's id, a round that
// never reaches its minimum, bad MIN:MAX). Every wait is bounded by the options' timeouts.
#include <algorithm>
#include <atomic>
#include <thread>

#include "tests/test_util.h"
#include "tinyddp/base/error.h"
#include "tinyddp/launcher/elastic.h"

using namespace tinyddp;
using Catch::Contains;
using launcher::ElasticOptions;
using launcher::ElasticRendezvous;
using launcher::Round;
using std::chrono::milliseconds;

namespace {

ElasticOptions options(int min, int max) {
  ElasticOptions o;
  o.min_nodes = min;
  o.max_nodes = max;
  o.run_id = "job";
  o.last_call = milliseconds(150);
  o.timeout = milliseconds(3000);
  o.heartbeat = milliseconds(50);
  return o;
}

// Each of `names` joins one round from a thread of its own; the rounds they got, by name.
std::vector<Round> join_all(const std::shared_ptr<comm::Store>& store, const std::vector<std::string>& names,
                            const ElasticOptions& o) {
  std::vector<Round> rounds(names.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < names.size(); ++i) {
    threads.emplace_back([&, i] { rounds[i] = ElasticRendezvous(store, names[i], o).next_round(); });
  }
  for (std::thread& t : threads) t.join();
  return rounds;
}

}  // namespace

TEST_CASE("elastic rendezvous: a round in join order, closed after the last call, each node its place",
          "[launcher][elastic]") {
  auto store = std::make_shared<comm::HashStore>();
  ElasticOptions o = options(2, 4);
  o.last_call = milliseconds(1000);  // ample for the third thread to arrive, however loaded the machine
  const std::vector<Round> rounds = join_all(store, {"a", "b", "c"}, o);
  std::vector<int> places;
  for (const Round& r : rounds) {
    CHECK(r.number == 0);
    CHECK(r.size() == 3);  // the third arrived within the last call after the second
    CHECK(r.nodes == rounds[0].nodes);
    places.push_back(r.node_rank);
  }
  std::sort(places.begin(), places.end());
  CHECK(places == std::vector<int>{0, 1, 2});
  for (const Round& r : rounds) CHECK(r.nodes[static_cast<size_t>(r.node_rank)] != "");
}

TEST_CASE(
    "elastic rendezvous: a full round closes at MAX; the next node waits for the next round, which the "
    "round's nodes see",
    "[launcher][elastic]") {
  auto store = std::make_shared<comm::HashStore>();
  const ElasticOptions o = options(2, 2);
  const std::vector<Round> rounds = join_all(store, {"a", "b"}, o);
  CHECK(rounds[0].size() == 2);
  ElasticRendezvous a(store, "a", o);
  CHECK(a.new_round_due(rounds[0]).empty());
  // A third node joins round 1 and waits there (its minimum is 2): round 0 is full, so its
  // nodes are not told (a newcomer only ends a round that has room for it).
  std::thread late([&] {
    try {
      ElasticRendezvous(store, "c", options(2, 3)).next_round();
    } catch (const Error&) {
    }
  });
  std::this_thread::sleep_for(milliseconds(100));
  CHECK(a.new_round_due(rounds[0]).empty());
  // With room for it (MAX 3), the same wait is a reason for a new round.
  Round roomy = rounds[0];
  ElasticRendezvous wide(store, "a", options(2, 3));
  CHECK_THAT(wide.new_round_due(roomy), Contains("a node is waiting to join"));
  CHECK(wide.node_waiting(roomy));
  CHECK_FALSE(a.node_waiting(rounds[0]));
  // The two join round 1 with the newcomer: three nodes, the newcomer first.
  const std::vector<Round> next = join_all(store, {"a", "b"}, options(2, 3));
  late.join();
  CHECK(next[0].number == 1);
  CHECK(next[0].size() == 3);
  CHECK(next[0].nodes[0] == "c");
}

TEST_CASE("elastic rendezvous: a node whose heartbeat stops is lost; the others form a new round without it",
          "[launcher][elastic]") {
  auto store = std::make_shared<comm::HashStore>();
  const ElasticOptions o = options(2, 3);
  const std::vector<Round> rounds = join_all(store, {"a", "b", "c"}, o);
  std::vector<std::unique_ptr<ElasticRendezvous>> nodes;
  for (const std::string name : {"a", "b", "c"}) nodes.push_back(std::make_unique<ElasticRendezvous>(store, name, o));
  // All beat for a while: nobody is lost. Then "c" (whichever place it has) stops.
  const auto beat_all = [&](bool with_c, int times) {
    for (int t = 0; t < times; ++t) {
      for (size_t i = 0; i < 3; ++i) {
        if (with_c || rounds[i].nodes[static_cast<size_t>(rounds[i].node_rank)] != "c") nodes[i]->beat(rounds[i]);
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
  };
  beat_all(true, 3);
  for (size_t i = 0; i < 3; ++i) CHECK(nodes[i]->lost(rounds[i]).empty());
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> lost;
  size_t watcher = rounds[0].nodes[static_cast<size_t>(rounds[0].node_rank)] == "c" ? 1 : 0;
  while (lost.empty() && std::chrono::steady_clock::now() - start < milliseconds(2000)) {
    beat_all(false, 1);
    lost = nodes[watcher]->lost(rounds[watcher]);
  }
  CHECK(lost == std::vector<std::string>{"c"});
  CHECK(std::chrono::steady_clock::now() - start < milliseconds(1500));  // 2 x heartbeat, plus a loaded machine's slack
  nodes[watcher]->request_new_round(rounds[watcher], "node c lost");
  for (size_t i = 0; i < 3; ++i) CHECK_THAT(nodes[i]->new_round_due(rounds[i]), Contains("node c lost"));
  // The two left form round 1.
  std::vector<Round> next(2);
  std::vector<std::thread> threads;
  std::vector<size_t> alive;
  for (size_t i = 0; i < 3; ++i) {
    if (rounds[i].nodes[static_cast<size_t>(rounds[i].node_rank)] != "c") alive.push_back(i);
  }
  for (size_t k = 0; k < 2; ++k) threads.emplace_back([&, k] { next[k] = nodes[alive[k]]->next_round(); });
  for (std::thread& t : threads) t.join();
  CHECK(next[0].number == 1);
  CHECK(next[0].size() == 2);
  CHECK(std::count(next[0].nodes.begin(), next[0].nodes.end(), "c") == 0);
}

TEST_CASE("elastic rendezvous: clear errors within the timeout", "[launcher][elastic][errors]") {
  auto store = std::make_shared<comm::HashStore>();
  ElasticRendezvous first(store, "a", options(1, 2));
  ElasticOptions other = options(1, 2);
  other.run_id = "another";
  CHECK_THROWS_WITH(ElasticRendezvous(store, "b", other),
                    Contains("node b has --rdzv_id 'another', but the job at this rendezvous endpoint is 'job'"));
  // A round that never reaches its minimum: named, with the nodes it has, after the timeout.
  auto lonely = std::make_shared<comm::HashStore>();
  ElasticOptions three = options(3, 4);
  three.timeout = milliseconds(300);
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(ElasticRendezvous(lonely, "a", three).next_round(),
                    Contains("round 0 of job 'job' has 1 node(s) [a] after 300 ms, fewer than the 3"));
  CHECK(std::chrono::steady_clock::now() - start < milliseconds(2000));
  ElasticOptions bad = options(3, 2);
  CHECK_THROWS_WITH(launcher::validate(bad), Contains("--nnodes MIN:MAX needs MIN <= MAX, got 3:2"));
  bad = options(0, 2);
  CHECK_THROWS_WITH(launcher::validate(bad), Contains("needs MIN >= 1, got 0"));
}
