// The launcher's watch on the other nodes' failures (internal to launcher.cc).
//
// In a multi-node job, what one node's launcher learns about the others' failures: a
// thread of its own, with a store connection of its own (so that a slow or cut network never
// stalls the poll loop), publishes this node's failure under launch/attempt_<k>/failed and
// watches that key for another node's; when one appears it wakes the poll loop (it writes
// `wake_byte` to `wake_fd`), which stops this node's workers. That covers a peer that hangs
// instead of failing (a rank frozen by SIGSTOP): the node whose rank timed out reports it, and
// the frozen rank's node stops it.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "tinyddp/comm/tcp_store.h"
#include "tinyddp/launcher/launcher.h"
#include "tinyddp/launcher/worker_group.h"

namespace tinyddp::launcher {

class FailureWatch final : public PeerWatch {
 public:
  FailureWatch(const LaunchConfig& options, int attempt, int wake_fd, unsigned char wake_byte);
  ~FailureWatch();
  // This node's failure, for the other nodes (sent by the watch thread).
  void report(const std::string& message) override;
  // "another node failed (<its failure>)", once one is seen.
  std::string stop_reason() const override;
  // Another node's failure, once seen ("node 1: rank 1 exited with status 3").
  std::string remote_failure() const;

 private:
  void watch(const comm::TCPStoreOptions& options);

  const std::string key_;
  const int node_;
  const int wake_fd_;
  const unsigned char wake_byte_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false, reported_ = false;
  std::string to_report_, remote_;
  std::thread thread_;
};

}  // namespace tinyddp::launcher
