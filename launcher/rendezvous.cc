// The nodes' rendezvous (rendezvous.h): the store node 0 hosts, each node checking in at the
// start of an attempt (bounded by the rendezvous timeout, naming the nodes that never came)
// and out at its end.
#include "tinyddp/launcher/rendezvous.h"

#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tinyddp/base/error.h"

namespace tinyddp::launcher {

std::shared_ptr<comm::TCPStore> open_store(const LaunchConfig& o) {
  comm::TCPStoreOptions store_options;
  store_options.host(o.master_addr);
  store_options.port(static_cast<uint16_t>(o.master_port));
  store_options.is_server(o.node_rank == 0);
  store_options.timeout(o.rdzv_timeout);
  try {
    return std::make_shared<comm::TCPStore>(store_options);
  } catch (const std::exception& e) {
    if (o.node_rank == 0) {
      throw Error(
          fmt::format("launch: cannot host the job's store on {}:{}: {}", o.master_addr, o.master_port, e.what()));
    }
    throw Error(
        fmt::format("launch: node {} cannot reach the master at {}:{} within {} ms (is node 0's launch running, "
                    "and are --master_addr/--master_port right?): {}",
                    o.node_rank, o.master_addr, o.master_port, o.rdzv_timeout.count(), e.what()));
  }
}

void meet_nodes(const LaunchConfig& o, comm::Store& store, int attempt) {
  if (o.nnodes == 1) return;
  const std::string prefix = fmt::format("launch/attempt_{}/node_", attempt);
  // Node 0's launcher hosts the store: if it goes away, the others learn it from their
  // connection (refused or reset) at once, not at the end of the timeout.
  const auto store_lost = [&](const std::exception& e) {
    return Error(
        fmt::format("launch: node {} lost the job's store at {}:{} (hosted by node 0's launcher) while the nodes "
                    "were meeting for attempt {}: {}",
                    o.node_rank, o.master_addr, o.master_port, attempt, e.what()));
  };
  try {
    comm::store_barrier(store, prefix, o.node_rank, o.nnodes, o.rdzv_timeout);
  } catch (const comm::PartiesMissing& e) {
    throw Error(fmt::format("launch: nodes [{}] did not join within {} ms", fmt::join(e.missing(), ", "),
                            o.rdzv_timeout.count()));
  } catch (const std::exception& e) {
    throw store_lost(e);
  }
}

void leave_nodes(const LaunchConfig& o, comm::Store& store, int attempt, std::ostream& log) {
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
