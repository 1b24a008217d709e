// spawn_local: runs a function as `nproc` local ranks, one forked process each, with RANK,
// WORLD_SIZE, MASTER_ADDR and MASTER_PORT set as the launcher (or torchrun) sets them, so
// that init_from_env() works in each (as torch.multiprocessing.spawn). For benchmarks, tests
// and quick single-machine runs; the launcher does the same with more care.
#pragma once

#include <functional>
#include <string>

namespace tinyddp::launcher {

// A TCP port on 127.0.0.1 that was free a moment ago (bound and released).
int free_loopback_port();

// Forks `nproc` processes; process r sets the variables (MASTER_ADDR 127.0.0.1, MASTER_PORT
// `port`, or a free one when 0) and exits with rank_main(r). Waits for all of them and
// returns how many did not exit with status 0.
int spawn_local(int nproc, const std::function<int(int rank)>& rank_main, int port = 0);

}  // namespace tinyddp::launcher
