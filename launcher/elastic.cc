// The elastic rendezvous (elastic.h): rounds formed in join order on the job's store, closed
// after the last call, and the heartbeats and requests that end a round.
#include "tinyddp/launcher/elastic.h"

#include <algorithm>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tinyddp/base/error.h"

namespace tinyddp::launcher {

using Clock = std::chrono::steady_clock;

namespace {
constexpr std::chrono::milliseconds kPoll{10};  // how often a waiting node looks at the store
}  // namespace

void validate(const ElasticOptions& o) {
  TDDP_CHECK(o.min_nodes >= 1, "launch: --nnodes MIN:MAX needs MIN >= 1, got {}", o.min_nodes);
  TDDP_CHECK(o.min_nodes <= o.max_nodes, "launch: --nnodes MIN:MAX needs MIN <= MAX, got {}:{}", o.min_nodes,
             o.max_nodes);
  TDDP_CHECK(!o.run_id.empty(), "launch: --rdzv_id must not be empty");
  TDDP_CHECK(o.last_call.count() >= 0 && o.timeout.count() > 0 && o.heartbeat.count() > 0,
             "launch: --rdzv_last_call must not be negative, --rdzv_timeout and --monitor_interval positive");
}

ElasticRendezvous::ElasticRendezvous(std::shared_ptr<comm::Store> store, std::string node, ElasticOptions options)
    : store_(std::move(store)), node_(std::move(node)), options_(std::move(options)) {
  validate(options_);
  TDDP_CHECK(store_ != nullptr, "ElasticRendezvous: the store is null");
  check_run_id();
}

std::string ElasticRendezvous::key(int64_t round, const std::string& rest) const {
  return fmt::format("elastic/{}/{}", round, rest);
}

void ElasticRendezvous::check_run_id() {
  const comm::Bytes mine(options_.run_id.begin(), options_.run_id.end());
  const comm::Bytes theirs = store_->compare_set("elastic/run_id", {}, mine);
  const std::string job(theirs.begin(), theirs.end());
  TDDP_CHECK(job == options_.run_id,
             "launch: node {} has --rdzv_id '{}', but the job at this rendezvous endpoint is '{}': a node of "
             "another job is refused",
             node_, options_.run_id, job);
}

void ElasticRendezvous::close(int64_t round, int64_t size) {
  const std::string value = std::to_string(size);
  store_->compare_set(key(round, "closed"), {}, comm::Bytes(value.begin(), value.end()));
}

// "; lost since round k: [a, b]": the nodes of round `k` (when it ran) missing from `names`.
std::string ElasticRendezvous::lost_since(int64_t k, const std::vector<std::string>& names) {
  if (k < 0 || !store_->check({key(k, "closed")})) return "";
  const int64_t size = std::stoll(store_->get_string(key(k, "closed")));
  std::vector<std::string> lost;
  for (int64_t i = 0; i < size; ++i) {
    const std::string name = store_->get_string(key(k, "node/" + std::to_string(i)));
    if (std::find(names.begin(), names.end(), name) == names.end()) lost.push_back(name);
  }
  return lost.empty() ? "" : fmt::format("; lost since round {}: [{}]", k, fmt::join(lost, ", "));
}

Round ElasticRendezvous::next_round() {
  // The first round not yet closed that this node can still join.
  int64_t k = next_;
  const auto deadline = Clock::now() + options_.timeout;
  while (true) {
    throw_if_closed();
    if (store_->check({key(k, "closed")})) {
      ++k;
      continue;
    }
    const int64_t place = store_->add(key(k, "joined"), 1) - 1;
    store_->set(key(k, "node/" + std::to_string(place)), node_);
    std::optional<Clock::time_point> minimum_since;  // when this node saw min_nodes joined
    while (!store_->check({key(k, "closed")})) {
      const int64_t joined = store_->add(key(k, "joined"), 0);
      if (joined >= options_.max_nodes) {
        close(k, options_.max_nodes);
      } else if (joined >= options_.min_nodes) {
        if (!minimum_since) minimum_since = Clock::now();
        if (Clock::now() - *minimum_since >= options_.last_call) close(k, joined);
      }
      if (store_->check({key(k, "closed")})) break;
      throw_if_closed();
      if (Clock::now() > deadline) {
        std::vector<std::string> names;
        for (int64_t i = 0; i < joined; ++i) {
          if (store_->check({key(k, "node/" + std::to_string(i))}))
            names.push_back(store_->get_string(key(k, "node/" + std::to_string(i))));
        }
        throw Error(
            fmt::format("launch: round {} of job '{}' has {} node(s) [{}] after {} ms, fewer than the {} "
                        "--nnodes asks for at least{}",
                        k, options_.run_id, joined, fmt::join(names, ", "), options_.timeout.count(),
                        options_.min_nodes, lost_since(k - 1, names)));
      }
      std::this_thread::sleep_for(kPoll);
    }
    const int64_t size = std::stoll(store_->get_string(key(k, "closed")));
    if (place >= size) {  // came after the round closed: the next one
      ++k;
      continue;
    }
    Round round;
    round.number = k;
    round.node_rank = static_cast<int>(place);
    for (int64_t i = 0; i < size; ++i) {
      store_->wait({key(k, "node/" + std::to_string(i))}, options_.timeout);
      round.nodes.push_back(store_->get_string(key(k, "node/" + std::to_string(i))));
    }
    next_ = k + 1;
    return round;
  }
}

void ElasticRendezvous::beat(const Round& round) {
  store_->add(key(round.number, "beat/" + std::to_string(round.node_rank)), 1);
}

std::vector<std::string> ElasticRendezvous::lost(const Round& round) {
  std::vector<std::string> out;
  const auto now = Clock::now();
  for (int i = 0; i < round.size(); ++i) {
    if (i == round.node_rank) continue;
    const int64_t count = store_->add(key(round.number, "beat/" + std::to_string(i)), 0);
    Seen& seen = beats_[{round.number, i}];
    if (count != seen.count) {
      seen = {count, now};
    } else if (now - seen.since > 2 * options_.heartbeat) {
      out.push_back(round.nodes[static_cast<size_t>(i)]);
    }
  }
  return out;
}

void ElasticRendezvous::request_new_round(const Round& round, const std::string& why) {
  const std::string value = fmt::format("{} (from {})", why, node_);
  store_->compare_set(key(round.number, "restart"), {}, comm::Bytes(value.begin(), value.end()));
}

std::string ElasticRendezvous::new_round_due(const Round& round) {
  if (store_->check({key(round.number, "restart")})) return store_->get_string(key(round.number, "restart"));
  return node_waiting(round) ? "a node is waiting to join" : "";
}

bool ElasticRendezvous::node_waiting(const Round& round) {
  return round.size() < options_.max_nodes && store_->add(key(round.number + 1, "joined"), 0) > 0;
}

void ElasticRendezvous::close_job(const std::string& why) {
  const std::string value = fmt::format("{} (from {})", why, node_);
  store_->compare_set("elastic/job_closed", {}, comm::Bytes(value.begin(), value.end()));
}

void ElasticRendezvous::throw_if_closed() {
  if (std::string why = job_closed(); !why.empty()) throw RendezvousClosed(options_.run_id, std::move(why));
}

std::string ElasticRendezvous::job_closed() {
  return store_->check({"elastic/job_closed"}) ? store_->get_string("elastic/job_closed") : "";
}

std::vector<int64_t> ElasticRendezvous::share(const Round& round, const std::string& what, int64_t mine) {
  std::vector<std::string> all;
  try {
    all = comm::store_allgather(*store_, key(round.number, what + "/"), round.node_rank, round.size(),
                                std::to_string(mine), options_.timeout);
  } catch (const comm::PartiesMissing& e) {
    std::vector<std::string> silent;
    for (int i : e.missing()) silent.push_back(round.nodes[static_cast<size_t>(i)]);
    throw Error(fmt::format("launch: nodes [{}] of round {} did not say their {} within {} ms", fmt::join(silent, ", "),
                            round.number, what, options_.timeout.count()));
  }
  std::vector<int64_t> values;
  for (const std::string& value : all) values.push_back(std::stoll(value));
  return values;
}

int64_t ElasticRendezvous::count_failure(const Round& round) {
  const comm::Bytes mine(node_.begin(), node_.end());
  const bool first = store_->compare_set(key(round.number, "failed"), {}, mine) == mine;
  return store_->add("elastic/restarts", first ? 1 : 0);
}

int64_t ElasticRendezvous::restarts() { return store_->add("elastic/restarts", 0); }

void ElasticRendezvous::set_flag(const Round& round, const std::string& flag) {
  store_->set(key(round.number, flag + "/" + std::to_string(round.node_rank)), std::string("1"));
}

std::vector<std::string> ElasticRendezvous::without_flag(const Round& round, const std::string& flag) {
  std::vector<std::string> out;
  for (int i = 0; i < round.size(); ++i) {
    if (!store_->check({key(round.number, flag + "/" + std::to_string(i))})) {
      out.push_back(round.nodes[static_cast<size_t>(i)]);
    }
  }
  return out;
}

}  // namespace tinyddp::launcher
