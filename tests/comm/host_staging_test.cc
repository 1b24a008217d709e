// comm/host_staging.h on 3 rank threads over Gloo: every collective of a staging group (forced
// with stage_through onto the CPU, so that each tensor still goes to a copy of its own and
// back) leaves the caller's tensors as the plain group does, once wait() has returned and not
// before; host_staged leaves a group that takes CPU tensors as it is; new_group is refused.
#include "tinyddp/comm/host_staging.h"
#include "tests/comm/comm_test_util.h"
#include "tinyddp/tensor/all.h"

using namespace tinyddp;
using testing::Expectations;
namespace t = tinyddp::tensor;

namespace {

t::Tensor ints(std::vector<int64_t> v) { return t::from_vector<int64_t>(std::move(v)); }
std::vector<int64_t> values(const t::Tensor& x) { return x.to_vector<int64_t>(); }

}  // namespace

TEST_CASE("comm host staging: every collective through copies, results back at wait()", "[comm]") {
  const t::Device cpu(t::kCPU);
  const std::vector<std::string> failures = testing::run_threads(3, [&](comm::ProcessGroup& plain, Expectations& e) {
    const std::shared_ptr<comm::ProcessGroup> borrowed = testing::borrow(plain);
    e.expect(comm::host_staged(borrowed, cpu) == borrowed, "a Gloo group is its own host-staged group");
    const std::shared_ptr<comm::ProcessGroup> pg = comm::stage_through(borrowed, cpu);
    const int64_t r = pg->rank();
    e.expect_eq(pg->size(), 3, "the size");

    t::Tensor x = ints({r, 10 * r});
    std::shared_ptr<comm::Work> work = pg->allreduce(x);
    e.expect(values(x) == std::vector<int64_t>{r, 10 * r}, "allreduce: the caller's tensor untouched before wait()");
    work->wait();
    e.expect(values(x) == std::vector<int64_t>{3, 30}, "allreduce: the sum");
    t::Tensor m = ints({r});
    pg->allreduce(m, comm::ReduceOp::kMax)->wait();
    e.expect_eq(values(m)[0], int64_t{2}, "allreduce: the max");

    t::Tensor b = ints({r + 5});
    pg->broadcast(b, 1)->wait();
    e.expect_eq(values(b)[0], int64_t{6}, "broadcast from rank 1");

    std::vector<t::Tensor> all{ints({-1}), ints({-1}), ints({-1})};
    pg->allgather(all, ints({r * r}))->wait();
    e.expect(values(all[0])[0] == 0 && values(all[1])[0] == 1 && values(all[2])[0] == 4, "allgather in rank order");

    // The deterministic option's reduce-scatter: output is the rank's block of one buffer.
    t::Tensor buffer = ints({r, r + 1, r + 2});
    const std::vector<t::Tensor> blocks{buffer.narrow(0, 0, 1), buffer.narrow(0, 1, 1), buffer.narrow(0, 2, 1)};
    pg->reduce_scatter(blocks[static_cast<size_t>(r)], blocks)->wait();
    e.expect_eq(values(blocks[static_cast<size_t>(r)])[0], 3 + 3 * r, "reduce_scatter: the rank's block summed");

    std::vector<t::Tensor> gathered;
    if (r == 2) gathered = {ints({-1}), ints({-1}), ints({-1})};
    pg->gather(gathered, ints({7 * r}), 2)->wait();
    if (r == 2) e.expect(values(gathered[1])[0] == 7 && values(gathered[2])[0] == 14, "gather at rank 2");

    t::Tensor piece = ints({-1});
    std::vector<t::Tensor> pieces;
    if (r == 0) pieces = {ints({100}), ints({101}), ints({102})};
    pg->scatter(piece, pieces, 0)->wait();
    e.expect_eq(values(piece)[0], 100 + r, "scatter from rank 0");

    t::Tensor reduced = ints({r + 1});
    pg->reduce(reduced, 1)->wait();
    e.expect_eq(values(reduced)[0], r == 1 ? int64_t{6} : r + 1, "reduce to rank 1 (the others' left as they are)");

    pg->barrier()->wait();
    if (r == 0) pg->send(ints({42, 43}), 1, 9)->wait();
    if (r == 1) {
      t::Tensor got = ints({0, 0});
      pg->recv(got, 0, 9)->wait();
      e.expect(values(got) == std::vector<int64_t>{42, 43}, "send and recv");
    }
    e.expect_throws([&] { pg->new_group({0, 1, 2}); }, "makes no subgroups");
  });
  testing::require_no_failures(failures);
}
