// comm/objects.h on 3 rank threads over Gloo: integers reduced, ragged integer lists gathered
// in rank order, a root's integers and bytes (empty, and a length that is not a multiple of
// 8) broadcast; equal-length lists gathered and a root's lists of lists broadcast in one call.
#include "tinyddp/comm/objects.h"
#include "tests/comm/comm_test_util.h"

using namespace tinyddp;
using testing::Expectations;

TEST_CASE("comm objects: integers and bytes through a process group", "[comm][objects]") {
  const tensor::Device cpu(tensor::kCPU);
  const std::vector<std::string> failures = testing::run_threads(3, [&](comm::ProcessGroup& pg, Expectations& e) {
    const int rank = pg.rank();
    e.expect_eq(comm::allreduce_int(pg, cpu, rank + 1), int64_t{6}, "the sum of 1, 2, 3");
    e.expect_eq(comm::allreduce_int(pg, cpu, rank == 1 ? 7 : -1, comm::ReduceOp::kMax), int64_t{7}, "the max");
    // Rank r sends r values r*10, r*10+1, ...: rank 0 sends none.
    std::vector<int64_t> mine;
    for (int k = 0; k < rank; ++k) mine.push_back(rank * 10 + k);
    const std::vector<std::vector<int64_t>> all = comm::allgather_ints(pg, cpu, mine);
    e.expect_eq(all.size(), size_t{3}, "one list per rank");
    if (all.size() == 3) {
      e.expect(all[0].empty(), "rank 0's empty list");
      e.expect(all[1] == std::vector<int64_t>{10}, "rank 1's list");
      e.expect(all[2] == std::vector<int64_t>{20, 21}, "rank 2's list");
    }
    const std::vector<int64_t> agreed = comm::broadcast_ints(pg, cpu, {rank, rank * 2}, 2);
    e.expect(agreed == std::vector<int64_t>{2, 4}, "rank 2's integers everywhere");
    for (const std::string& text : {std::string(), std::string("thirteen byte"), std::string(1000, 'x')}) {
      const std::string got = comm::broadcast_bytes(pg, cpu, rank == 1 ? text : std::string("other"), 1);
      e.expect(got == text, "rank 1's " + std::to_string(text.size()) + " bytes everywhere");
    }
  });
  for (const auto& f : failures) UNSCOPED_INFO(f);
  CHECK(failures.empty());
}

TEST_CASE("comm objects: equal-length gathers and a root's lists of integers", "[comm][objects]") {
  const tensor::Device cpu(tensor::kCPU);
  const std::vector<std::string> failures = testing::run_threads(3, [&](comm::ProcessGroup& pg, Expectations& e) {
    const int64_t rank = pg.rank();
    const std::vector<std::vector<int64_t>> all = comm::allgather_equal_ints(pg, cpu, {rank, -rank, rank * 100});
    e.expect(all == std::vector<std::vector<int64_t>>{{0, 0, 0}, {1, -1, 100}, {2, -2, 200}}, "every rank's three");
    // Root 1's lists (one of them empty) reach every rank; the others' lists are ignored.
    const std::vector<std::vector<int64_t>> root_lists = {{5, 6, 7}, {}, {-3}};
    const std::vector<std::vector<int64_t>> lists =
        comm::broadcast_int_lists(pg, cpu, rank == 1 ? root_lists : std::vector<std::vector<int64_t>>{{9}}, 12, 1);
    e.expect(lists == root_lists, "rank 1's lists everywhere");
    // A bound the root's lists do not fit is an error on the root, before anything is sent; the
    // others then give up waiting, so only the root checks it here.
    if (rank == 1) {
      bool threw = false;
      try {
        comm::broadcast_int_lists(pg, cpu, root_lists, 4, 1);
      } catch (const std::exception& error) {
        threw = std::string(error.what()).find("more than the bound 4") != std::string::npos;
      }
      e.expect(threw, "a bound of 4 refused, named");
    }
  });
  for (const auto& f : failures) UNSCOPED_INFO(f);
  CHECK(failures.empty());
}
