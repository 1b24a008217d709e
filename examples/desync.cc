// Two ranks that disagree on the next collective: rank 0 broadcasts 8 numbers, rank 1
// allreduces them. Every collective of a process group is checked before its data moves
// (docs/comm.md, "Desync detection"): both ranks get the same CollectiveMismatchError at once,
// naming both calls, no tensor changes, and the next collective they agree on works. Without the
// check (TINYDDP_DESYNC_CHECK=0, or plain Gloo) such a pair waits for the timeout, aborts inside
// Gloo or, worst, returns wrong numbers; this example does not try that.
//   bazel run //examples:desync
//   launch --nproc_per_node 2 -- bazel-bin/examples/desync
#include "examples/example_util.h"
#include "tinyddp/comm/comm.h"
#include "tinyddp/comm/desync_check.h"

namespace t = tinyddp::tensor;
using namespace tinyddp;

namespace {

std::string values(const t::Tensor& x) { return fmt::format("[{}]", fmt::join(x.to_vector<float>(), ", ")); }

int worker(int rank) {
  auto pg = comm::init_from_env();
  const t::Tensor x = t::full({8}, static_cast<double>(rank + 1));
  try {
    if (rank == 0) {
      pg->broadcast(x, 0)->wait();
    } else {
      pg->allreduce(x)->wait();
    }
    fmt::print("the mismatched calls went through: is TINYDDP_DESYNC_CHECK=0 set?\n");
  } catch (const comm::CollectiveMismatchError& e) {
    fmt::print("caught CollectiveMismatchError: {}\n", e.what());
  }
  fmt::print("its tensor after the refused call: {}\n", values(x));
  pg->allreduce(x)->wait();  // both ranks call it: 1 + 2 everywhere
  fmt::print("then an allreduce both ranks call: {}\n", values(x));
  std::fflush(stdout);
  comm::destroy_process_group();
  return 0;
}

}  // namespace

int main() { return examples::run_ranks("desync", 2, worker); }
