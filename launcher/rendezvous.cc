// Node rendezvous: see rendezvous.h.
#include "launcher/rendezvous.h"

#include <string>
#include <vector>

#include <fmt/format.h>

#include "base/error.h"

namespace tinyddp::launcher {

std::shared_ptr<comm::TCPStore> open_store(const LaunchOptions& o) {
  comm::TCPStoreOptions store_options;
  store_options.host = o.master_addr;
  store_options.port = static_cast<uint16_t>(o.master_port);
  store_options.is_server = o.node_rank == 0;
  store_options.timeout = o.rdzv_timeout;
  try {
    return std::make_shared<comm::TCPStore>(store_options);
  } catch (const std::exception& e) {
    if (o.node_rank == 0) {
      throw Error(fmt::format("launch: cannot host the job's store on {}:{}: {}", o.master_addr, o.master_port, e.what()));
    }
    throw Error(fmt::format("launch: node {} cannot reach the master at {}:{} within {} ms (is node 0's launch running, "
                            "and are --master_addr/--master_port right?): {}",
                            o.node_rank, o.master_addr, o.master_port, o.rdzv_timeout.count(), e.what()));
  }
}

void meet_nodes(const LaunchOptions& o, comm::Store& store, int attempt) {
  if (o.nnodes == 1) return;
  const std::string prefix = fmt::format("launch/attempt_{}/node_", attempt);
  store.set(prefix + std::to_string(o.node_rank), std::string("1"));
  std::vector<std::string> keys;
  for (int n = 0; n < o.nnodes; ++n) keys.push_back(prefix + std::to_string(n));
  try {
    store.wait(keys, o.rdzv_timeout);
  } catch (const std::exception&) {
    std::string missing;
    for (int n = 0; n < o.nnodes; ++n) {
      if (!store.check({keys[static_cast<size_t>(n)]})) missing += (missing.empty() ? "" : ", ") + std::to_string(n);
    }
    throw Error(fmt::format("launch: nodes [{}] did not join within {} ms", missing, o.rdzv_timeout.count()));
  }
}

void leave_nodes(const LaunchOptions& o, comm::Store& store, int attempt, std::ostream& log) {
  if (o.nnodes == 1) return;
  const std::string prefix = fmt::format("launch/attempt_{}/done_", attempt);
  try {
    store.set(prefix + std::to_string(o.node_rank), std::string("1"));
  } catch (const std::exception&) {
    return;  // node 0 has gone already: nothing left to tell it
  }
  if (o.node_rank != 0) return;
  std::vector<std::string> keys;
  for (int n = 1; n < o.nnodes; ++n) keys.push_back(prefix + std::to_string(n));
  try {
    store.wait(keys, o.rdzv_timeout);
  } catch (const std::exception&) {
    log << fmt::format("launch: some nodes were still running {} ms after this one finished; closing the store",
                       o.rdzv_timeout.count())
        << std::endl;
  }
}

}  // namespace tinyddp::launcher
