// The elastic agent (internal to the launcher): what `launch --nnodes MIN:MAX --rdzv_endpoint
// HOST:PORT` runs on each node, as torchrun's agent does. It joins a round of the elastic
// rendezvous (elastic.h), starts this node's workers with the round's world, beats its
// heartbeat and watches the others' while they run (ElasticWatch), and when a worker fails, a
// node is lost, a node is waiting to join or this node is stopped, every node stops its
// workers and joins the next round. A round ended by a failure counts as one restart of the
// job (--max_restarts; every node counts the same, in the store), a change of membership does
// not. Nodes may run different numbers of workers: a node's first rank is the workers of the
// nodes before it. When this node's workers have all finished it waits for the others' (an
// exit barrier), and the node hosting the store waits for the others to be done with it.
#pragma once

#include <ostream>
#include <string>
#include <utility>

#include "tinyddp/launcher/launcher.h"

namespace tinyddp::launcher {

// --rdzv_endpoint's host and port; throws naming a bad value.
std::pair<std::string, int> parse_endpoint(const std::string& endpoint);
// Throws tinyddp::Error naming the first bad option of an elastic job's own (validate checks
// what every job shares first).
void validate_elastic(const LaunchConfig& options);
// Runs this node's part of an elastic job (its options validated: launch() does); the exit status as launch() says, or
// 1 when the store is lost, the rendezvous times out or another node ended the job with a failure.
int run_elastic(const LaunchConfig& options, const CoreShare& share, std::ostream& log);

}  // namespace tinyddp::launcher
