// The elastic rendezvous of torchrun's c10d backend, on the job's store: the nodes of a job
// whose size may change (--nnodes MIN:MAX) form numbered rounds. A node joins the round being
// formed and gets its place in join order; once MIN nodes are in, the round waits `last_call`
// for more (at most MAX) and closes. While a round runs, each node beats a heartbeat counter;
// a node whose counter stops for longer than the heartbeat timeout is lost, and any node may
// ask for a new round (a worker failed, a node was lost, or a newcomer waits in the next
// round): every node then stops its workers and joins the next round with the nodes alive.
//
// Keys, under "elastic/": run_id (the job's --rdzv_id, set by the first node; another id is
// refused), and per round k: k/joined (a counter: the join order), k/node/<i> (the i-th node's
// name), k/closed (the round's size, written once by the node that closes it), k/beat/<i>
// (node i's heartbeat counter), k/restart (why a new round was asked for), k/done/<i> and
// k/left/<i> (node i's workers finished; node i is done with the store), k/<what>/<i> (a
// number node i shares with the others: its workers), k/failed (a failure
// ended round k); and restarts (the rounds that failures ended), job_closed (why the job ended:
// no node joins a round after it).
//
// The launcher's elastic agent (elastic_agent.cc) runs on this; tests/launcher/elastic_test.cc
// holds the protocol with nodes as threads.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "tinyddp/base/error.h"
#include "tinyddp/comm/store.h"

namespace tinyddp::launcher {

struct ElasticOptions {
  int min_nodes = 1;
  int max_nodes = 1;
  std::string run_id = "none";
  std::chrono::milliseconds last_call{1000};  // once min_nodes are in, how long to wait for more
  std::chrono::milliseconds timeout{60000};   // for a round to reach min_nodes
  std::chrono::milliseconds heartbeat{500};   // a node is lost after 2 x this without a beat
};

// Throws tinyddp::Error naming the bad value (min < 1, min > max, ...).
void validate(const ElasticOptions& options);

struct Round {
  int64_t number = 0;
  int node_rank = 0;               // this node's place in the round (join order)
  std::vector<std::string> nodes;  // every node's name, by node rank
  int size() const { return static_cast<int>(nodes.size()); }
};

// next_round's error once the job has ended (close_job): what() says why, and reason() is the
// reason close_job was given.
class RendezvousClosed : public Error {
 public:
  RendezvousClosed(const std::string& run_id, std::string reason)
      : Error(fmt::format("launch: job '{}' has ended: {}", run_id, reason)), reason_(std::move(reason)) {}
  const std::string& reason() const { return reason_; }

 private:
  std::string reason_;
};

class ElasticRendezvous {
 public:
  // `node` names this node in messages and in the round's list (its host and pid, say).
  ElasticRendezvous(std::shared_ptr<comm::Store> store, std::string node, ElasticOptions options);

  // Joins the round being formed and returns it once closed. A node that arrives after a round
  // closed, or finds it full, joins the next one. Throws, naming the round, the nodes in it and
  // the minimum, when it has not reached min_nodes within the timeout; and when the job's store
  // serves another --rdzv_id. Throws RendezvousClosed once the job has ended.
  Round next_round();

  // Ends the job: every node's next_round throws RendezvousClosed with `why`. The first call
  // wins; job_closed() returns its reason, or empty while the job is open.
  void close_job(const std::string& why);
  std::string job_closed();

  // Every node of `round` says a number (its --nproc_per_node, say) and gets all of them, in
  // node-rank order; throws, naming the nodes that did not say theirs, after the timeout.
  std::vector<int64_t> share(const Round& round, const std::string& what, int64_t mine);

  // A failure ended `round`: the job's restarts, counted once per round whatever the number
  // of nodes that failed in it, after this one. restarts(): the count so far.
  int64_t count_failure(const Round& round);
  int64_t restarts();

  // Per-node flags of a round ("done": this node's workers finished; "left": this node no
  // longer needs the store): set this node's, and name the nodes that have not set theirs.
  void set_flag(const Round& round, const std::string& flag);
  std::vector<std::string> without_flag(const Round& round, const std::string& flag);

  // This node's heartbeat in `round` (call it every options.heartbeat or more often).
  void beat(const Round& round);
  // The nodes of `round` whose heartbeat has not moved for longer than 2 x options.heartbeat
  // since this node first looked (so call it as often as beat).
  std::vector<std::string> lost(const Round& round);
  // Asks every node of `round` for a new round; `why` is kept for their messages.
  void request_new_round(const Round& round, const std::string& why);
  // Why a new round is due: a request, or a node waiting in the next round while this one has
  // room for it (node_waiting); empty when none.
  std::string new_round_due(const Round& round);
  bool node_waiting(const Round& round);

 private:
  std::string key(int64_t round, const std::string& rest) const;
  void check_run_id();
  void close(int64_t round, int64_t size);  // the first size written wins
  void throw_if_closed();                   // RendezvousClosed once the job has ended
  std::string lost_since(int64_t round, const std::vector<std::string>& names);

  std::shared_ptr<comm::Store> store_;
  std::string node_;
  ElasticOptions options_;
  int64_t next_ = 0;  // the round this node joins next
  struct Seen {
    int64_t count = -1;
    std::chrono::steady_clock::time_point since;
  };
  std::map<std::pair<int64_t, int>, Seen> beats_;  // (round, node rank) -> last counter seen
};

}  // namespace tinyddp::launcher
