// The elastic agent (elastic_agent.h): the store at the rendezvous endpoint, the watch that
// beats and listens while the workers run, the loop of rounds, and the exits (the barrier
// when the workers finished, the job closed when restarts are spent).
#include "tinyddp/launcher/elastic_agent.h"

#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tinyddp/base/error.h"
#include "tinyddp/base/exit_status.h"
#include "tinyddp/comm/tcp_store.h"
#include "tinyddp/launcher/elastic.h"
#include "tinyddp/launcher/processes.h"
#include "tinyddp/launcher/worker_group.h"

namespace tinyddp::launcher {

namespace {

using Clock = std::chrono::steady_clock;

// The reason close_job is given when every node's workers finished: a node that arrives
// afterwards has nothing to join, and that is no failure.
constexpr const char* kFinished = "its workers finished";

ElasticOptions elastic_options(const LaunchConfig& o) {
  ElasticOptions e;
  e.min_nodes = o.min_nodes;
  e.max_nodes = o.max_nodes;
  e.run_id = o.rdzv_id;
  e.last_call = o.rdzv_last_call;
  e.timeout = o.rdzv_timeout;
  e.heartbeat = o.monitor_interval;
  return e;
}

comm::TCPStoreOptions store_options(const LaunchConfig& o, bool server) {
  const auto [host, port] = parse_endpoint(o.rdzv_endpoint);
  return comm::TCPStoreOptions().host(host).port(static_cast<uint16_t>(port)).is_server(server).timeout(o.rdzv_timeout);
}

// The node whose address the endpoint is hosts the store (on a machine running several nodes,
// the first to bind it); the others connect to it within the rendezvous timeout.
std::shared_ptr<comm::TCPStore> open_elastic_store(const LaunchConfig& o, bool& hosting) {
  try {
    auto store = std::make_shared<comm::TCPStore>(store_options(o, true));
    hosting = true;
    return store;
  } catch (const std::exception&) {
    hosting = false;  // not this machine's address, or another node here hosts it
  }
  try {
    return std::make_shared<comm::TCPStore>(store_options(o, false));
  } catch (const std::exception& e) {
    throw Error(
        fmt::format("launch: cannot reach the rendezvous endpoint {} within {} ms (is the node at that address running "
                    "launch, and is --rdzv_endpoint right?): {}",
                    o.rdzv_endpoint, o.rdzv_timeout.count(), e.what()));
  }
}

// What the launcher says when the job's store stops answering.
std::string lost_store_message(const std::string& endpoint, const std::string& why) {
  return fmt::format("lost the job's store at {} (the node at --rdzv_endpoint hosts it): {}", endpoint, why);
}

std::string node_name() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return fmt::format("{}:{}", host, ::getpid());
}

// While a round's workers run (and until the node leaves): beats this node's heartbeat, turns
// this node's failure into a request for a new round, and wakes the launcher when a new round
// is due or the store is lost; on a thread and a store connection of its own, so that a slow
// or cut network never stalls the workers' output.
class ElasticWatch final : public PeerWatch {
 public:
  ElasticWatch(const LaunchConfig& o, const std::string& node, Round round)
      : endpoint_(o.rdzv_endpoint), interval_(o.monitor_interval), round_(std::move(round)) {
    thread_ =
        std::thread([this, store = store_options(o, false), node, e = elastic_options(o)] { run(store, node, e); });
  }
  ~ElasticWatch() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  void report(const std::string& failure) override {
    std::lock_guard<std::mutex> lock(mutex_);
    to_report_ = failure;
    wake_.notify_all();
  }
  std::string stop_reason() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return reason_;
  }
  bool store_lost() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return store_lost_;
  }

 private:
  void run(const comm::TCPStoreOptions& store, const std::string& node, const ElasticOptions& options) {
    std::unique_ptr<ElasticRendezvous> rdzv;
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_ && !store_lost_) {
      const std::string failure = std::move(to_report_);
      to_report_.clear();
      lock.unlock();
      std::string reason;
      bool lost_store = false;
      try {
        if (!rdzv) rdzv = std::make_unique<ElasticRendezvous>(std::make_shared<comm::TCPStore>(store), node, options);
        if (!failure.empty()) rdzv->request_new_round(round_, failure);
        rdzv->beat(round_);
        if (const std::vector<std::string> lost = rdzv->lost(round_); !lost.empty()) {
          rdzv->request_new_round(round_, fmt::format("node(s) {} lost (no heartbeat for {} ms)", fmt::join(lost, ", "),
                                                      2 * interval_.count()));
        }
        if (const std::string due = rdzv->new_round_due(round_); !due.empty()) reason = "a new round is due: " + due;
      } catch (const std::exception& e) {
        reason = lost_store_message(endpoint_, e.what());
        lost_store = true;
      }
      lock.lock();
      if (!reason.empty() && reason_.empty()) {
        reason_ = reason;
        store_lost_ = lost_store;
        [[maybe_unused]] const ssize_t n = ::write(wake_fd(), &kPeerWoke, 1);
      }
      wake_.wait_for(lock, interval_, [this] { return stopping_ || !to_report_.empty(); });
    }
  }

  const std::string endpoint_;
  const std::chrono::milliseconds interval_;
  const Round round_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false, store_lost_ = false;
  std::string to_report_, reason_;
  std::thread thread_;
};

// This node is done with the store: it says so, and the node hosting the store waits (at
// most the rendezvous timeout) until every other node of `round` has said so too or is lost.
void leave(ElasticRendezvous& rdzv, const Round& round, bool hosting, std::chrono::milliseconds timeout,
           std::ostream& log) {
  try {
    rdzv.set_flag(round, "left");
    if (!hosting) return;
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      std::vector<std::string> waiting = rdzv.without_flag(round, "left");
      for (const std::string& lost : rdzv.lost(round)) std::erase(waiting, lost);
      if (waiting.empty()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    log << fmt::format("launch: nodes were still using the store {} ms after this node finished; closing it",
                       timeout.count())
        << std::endl;
  } catch (const std::exception&) {
    // The store is gone already: nobody is left to wait for.
  }
}

// This node's workers all finished: wait for the other nodes' (the exit barrier), then end the
// job for nodes that arrive later, and leave.
int finish(ElasticRendezvous& rdzv, const Round& round, const ElasticWatch& watch, bool hosting, const LaunchConfig& o,
           std::ostream& log) {
  rdzv.set_flag(round, "done");
  const auto deadline = Clock::now() + o.rdzv_timeout;
  while (true) {
    const std::vector<std::string> running = rdzv.without_flag(round, "done");
    if (running.empty()) break;
    if (const std::string reason = watch.stop_reason(); !reason.empty()) {
      log << fmt::format("launch: this node's workers finished; since then: {}", reason) << std::endl;
      break;
    }
    if (Clock::now() > deadline) {
      log << fmt::format("launch: this node's workers finished; nodes [{}] had not finished after {} ms",
                         fmt::join(running, ", "), o.rdzv_timeout.count())
          << std::endl;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (hosting) rdzv.close_job(kFinished);
  leave(rdzv, round, hosting, o.rdzv_timeout, log);
  return 0;
}

// The round's world: each node's workers (nodes may run different numbers, as under torchrun),
// this node's first rank (the workers of the nodes before it) and the total.
struct World {
  int first_rank = 0;
  int size = 0;
};

World round_world(ElasticRendezvous& rdzv, const Round& round, int nproc) {
  const std::vector<int64_t> workers = rdzv.share(round, "nproc", nproc);
  World w;
  for (int i = 0; i < round.size(); ++i) {
    if (i < round.node_rank) w.first_rank += static_cast<int>(workers[static_cast<size_t>(i)]);
    w.size += static_cast<int>(workers[static_cast<size_t>(i)]);
  }
  return w;
}

GroupSpec round_spec(const LaunchConfig& o, const Round& round, const World& world, int64_t restarts) {
  const auto [host, port] = parse_endpoint(o.rdzv_endpoint);
  GroupSpec spec;
  spec.attempt = static_cast<int>(round.number);
  spec.store_prefix = fmt::format("round_{}/", round.number);
  spec.first_rank = world.first_rank;
  spec.world_size = world.size;
  spec.group_rank = round.node_rank;
  spec.master_addr = host;
  spec.master_port = port;
  spec.restarts = restarts;
  spec.run_id = o.rdzv_id;
  return spec;
}

// The rounds, until the job ends for this node.
int run_rounds(const LaunchConfig& o, const CoreShare& share, ElasticRendezvous& rdzv, const std::string& node,
               bool hosting, std::ostream& log) {
  std::optional<Round> last;
  try {
    while (true) {
      const Round round = rdzv.next_round();
      last = round;
      const World world = round_world(rdzv, round, o.nproc_per_node);
      log << fmt::format("launch: round {} of job '{}': {} node(s) [{}]; this node is node {}, ranks {} to {} of {}",
                         round.number, o.rdzv_id, round.size(), fmt::join(round.nodes, ", "), round.node_rank,
                         world.first_rank, world.first_rank + o.nproc_per_node - 1, world.size)
          << std::endl;
      ElasticWatch watch(o, node, round);
      const GroupResult group = run_group(o, round_spec(o, round, world, rdzv.restarts()), share, &watch, log);
      if (group.interrupted_by != 0 || group.requeue) {
        // This node leaves; the others go on without it, unless it holds the store: then the
        // job ends for every node (at once, rather than when their store calls time out).
        // Workers that stopped for a requeue stopped on every node, at the same step.
        const std::string why =
            group.requeue ? fmt::format("node {}'s workers stopped for a requeue", node)
                          : fmt::format("node {}{} was stopped by {}", node, hosting ? " (hosting the store)" : "",
                                        ::strsignal(group.interrupted_by));
        if (hosting) rdzv.close_job(why);
        rdzv.request_new_round(round, why);
        leave(rdzv, round, hosting, o.rdzv_timeout, log);
        if (group.requeue) log << "launch: " << why << "; exit status " << kRequeueExitStatus << std::endl;
        return group.requeue ? kRequeueExitStatus : 128 + group.interrupted_by;
      }
      if (watch.store_lost()) throw Error("launch: failed: " + watch.stop_reason());
      if (group.succeeded()) return finish(rdzv, round, watch, hosting, o, log);
      if (group.failed_rank < 0) continue;  // the others asked for a new round: no restart spent
      // The watch may have stopped before it passed this failure on: the others must not take
      // the silence that follows for a lost node.
      const std::string failure = fmt::format("rank {} {}", group.failed_rank, describe(group.failed_status));
      rdzv.request_new_round(round, failure);
      if (rdzv.node_waiting(round)) {
        // The round was ending anyway, for a newcomer: the other nodes stop their workers for
        // it, and this node's may fail first on the links they close. No restart is spent.
        log << fmt::format("launch: {} while a node waits to join: a new round, no restart spent", failure)
            << std::endl;
        continue;
      }
      const int64_t restarts = rdzv.count_failure(round);
      if (restarts > o.max_restarts) {
        log << fmt::format("launch: failed: {} (after {} restarts)", failure, o.max_restarts) << std::endl;
        rdzv.close_job(fmt::format("{} on node {} after {} restarts", failure, node, o.max_restarts));
        leave(rdzv, round, hosting, o.rdzv_timeout, log);
        return exit_code(group.failed_status);
      }
      log << fmt::format("launch: restarting the workers in a new round (restart {} of {})", restarts, o.max_restarts)
          << std::endl;
    }
  } catch (const RendezvousClosed& closed) {
    if (last) leave(rdzv, *last, hosting, o.rdzv_timeout, log);
    log << closed.what() << std::endl;
    return closed.reason() == kFinished ? 0 : 1;
  }
}

}  // namespace

std::pair<std::string, int> parse_endpoint(const std::string& endpoint) {
  const size_t colon = endpoint.rfind(':');
  int port = -1;
  if (colon != std::string::npos && colon > 0 && colon + 1 < endpoint.size()) {
    try {
      size_t used = 0;
      port = std::stoi(endpoint.substr(colon + 1), &used);
      if (used != endpoint.size() - colon - 1) port = -1;
    } catch (const std::logic_error&) {
      port = -1;
    }
  }
  TDDP_CHECK(port >= 1 && port <= 65535, "launch: --rdzv_endpoint takes HOST:PORT (a port 1 to 65535), got '{}'",
             endpoint);
  return {endpoint.substr(0, colon), port};
}

void validate_elastic(const LaunchConfig& o) {
  validate(elastic_options(o));
  parse_endpoint(o.rdzv_endpoint);
  TDDP_CHECK(o.node_rank == 0,
             "launch: --node_rank is not used in an elastic job (--rdzv_endpoint): ranks come from the rendezvous");
  TDDP_CHECK(o.rdzv_timeout.count() > 0, "launch: --rdzv_timeout must be positive");
}

int run_elastic(const LaunchConfig& o, const CoreShare& share, std::ostream& log) {
  bool hosting = false;
  const std::shared_ptr<comm::TCPStore> store = open_elastic_store(o, hosting);
  const std::string node = node_name();
  try {
    ElasticRendezvous rdzv(store, node, elastic_options(o));  // claims the job's id, or is refused
    log << fmt::format("launch: elastic job '{}' of {} to {} node(s); this node is {}, {} the store at {}", o.rdzv_id,
                       o.min_nodes, o.max_nodes, node, hosting ? "hosting" : "using", o.rdzv_endpoint)
        << std::endl;
    return run_rounds(o, share, rdzv, node, hosting, log);
  } catch (const std::exception& e) {
    if (std::string(e.what()).rfind("launch:", 0) == 0) throw;  // the launcher's own words
    throw Error("launch: " + lost_store_message(o.rdzv_endpoint, e.what()));
  }
}

}  // namespace tinyddp::launcher
