// FailureWatch (failure_watch.h): publishing this node's failure in the store and polling for
// the other nodes', on a thread and a store connection of its own.
#include "tinyddp/launcher/failure_watch.h"

#include <unistd.h>

#include <fmt/format.h>

namespace tinyddp::launcher {

FailureWatch::FailureWatch(const LaunchConfig& options, int attempt, int wake_fd, unsigned char wake_byte)
    : key_(fmt::format("launch/attempt_{}/failed", attempt)), node_(options.node_rank), wake_fd_(wake_fd),
      wake_byte_(wake_byte) {
  const auto o = comm::TCPStoreOptions()
                     .host(options.master_addr)
                     .port(static_cast<uint16_t>(options.master_port))
                     .timeout(std::chrono::milliseconds(2000));
  thread_ = std::thread([this, o] { watch(o); });
}

FailureWatch::~FailureWatch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void FailureWatch::report(const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!reported_) to_report_ = fmt::format("node {}: {}", node_, message);
  reported_ = true;
  wake_.notify_all();
}

std::string FailureWatch::stop_reason() const {
  const std::string remote = remote_failure();
  return remote.empty() ? remote : fmt::format("another node failed ({})", remote);
}

std::string FailureWatch::remote_failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return remote_;
}

void FailureWatch::watch(const comm::TCPStoreOptions& options) {
  std::unique_ptr<comm::TCPStore> store;
  bool seen_remote = false;  // another node's failure, once seen, is not looked for again
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    std::string message = std::move(to_report_);
    to_report_.clear();
    lock.unlock();
    try {
      if (!store) store = std::make_unique<comm::TCPStore>(options);
      if (!message.empty()) {
        store->set(key_, comm::Bytes(message.begin(), message.end()));
      } else if (!seen_remote && store->check({key_})) {
        const std::string seen = store->get_string(key_);
        if (seen.rfind(fmt::format("node {}:", node_), 0) != 0) {
          seen_remote = true;
          std::lock_guard<std::mutex> relock(mutex_);
          remote_ = seen;
          [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &wake_byte_, 1);
        }
      }
    } catch (const std::exception&) {
      store.reset();  // the store is unreachable for now: try again next round
      if (!message.empty()) {
        std::lock_guard<std::mutex> relock(mutex_);
        if (to_report_.empty()) to_report_ = message;
      }
    }
    lock.lock();
    wake_.wait_for(lock, std::chrono::milliseconds(300), [this] { return stopping_ || !to_report_.empty(); });
  }
}

}  // namespace tinyddp::launcher
