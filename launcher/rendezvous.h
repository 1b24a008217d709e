// The launchers of a multi-node job meeting through the job's TCP store (internal to the
// launcher): node 0 hosts the store, every node checks in at the start of each attempt and
// out at its end.
#pragma once

#include <memory>
#include <ostream>

#include "tinyddp/comm/store.h"
#include "tinyddp/comm/tcp_store.h"
#include "tinyddp/launcher/launcher.h"

namespace tinyddp::launcher {

// Node 0 hosts the store; the others connect to it, within the rendezvous timeout.
std::shared_ptr<comm::TCPStore> open_store(const LaunchConfig& o);
// Every node's launcher checks in for this attempt and waits for the others.
void meet_nodes(const LaunchConfig& o, comm::Store& store, int attempt);
// At the end of an attempt: node 0 hosts the store, so it stays until the other nodes are
// done with it too (at most the rendezvous timeout); the others only check out.
void leave_nodes(const LaunchConfig& o, comm::Store& store, int attempt, std::ostream& log);

}  // namespace tinyddp::launcher
