// A Joinable of one's own: the Counter of PyTorch's Join walk-through. Each call counts the
// inputs every rank processed in this iteration, by allreducing a 1 from each; rank r has
// 5 + r inputs, so the ranks with fewer run out first. Inside Join::run a rank that has run
// out answers the others' allreduces through the Counter's JoinHook (main_hook allreduces a
// 0), so no rank waits forever; once all have joined, post_hook (with sync_max_count) lets
// the last rank to join broadcast its count, the total over all ranks. What a Joinable needs:
// call Join::notify_join_context before its collectives of each iteration, say where its
// collectives run (join_device, join_process_group) and return the hook that mirrors them.
//   bazel run //examples:join_counter
//   launch --nproc_per_node 2 -- bazel-bin/examples/join_counter
#include "examples/example_util.h"
#include "tinyddp/comm/comm.h"
#include "tinyddp/ddp/join.h"

namespace t = tinyddp::tensor;
using namespace tinyddp;

namespace {

class Counter : public ddp::Joinable {
 public:
  Counter(std::shared_ptr<comm::ProcessGroup> pg, bool sync_max_count)
      : pg_(std::move(pg)), sync_max_count_(sync_max_count) {}

  // One iteration: every active rank adds 1, and each adds the sum to its count.
  void operator()() {
    ddp::Join::notify_join_context(*this);
    const t::Tensor one = t::ones({1});
    pg_->allreduce(one)->wait();
    count_ += one.item<double>();
  }

  std::unique_ptr<ddp::JoinHook> join_hook() override { return std::make_unique<Hook>(*this); }
  t::Device join_device() const override { return t::Device(t::kCPU); }
  comm::ProcessGroup& join_process_group() const override { return *pg_; }

  double count() const { return count_; }
  double max_count() const { return max_count_; }

 private:
  class Hook : public ddp::JoinHook {
   public:
    explicit Hook(Counter& counter) : counter_(counter) {}
    // A joined rank's part of the others' iteration: it adds nothing.
    void main_hook() override { counter_.pg_->allreduce(t::zeros({1}))->wait(); }
    // All have joined: the highest of the last ranks to join holds the total; it broadcasts it.
    void post_hook(bool is_last_joiner) override {
      if (!counter_.sync_max_count_) return;
      const int rank = counter_.pg_->rank();
      const t::Tensor common = t::from_vector(std::vector<int64_t>{is_last_joiner ? rank : -1}, {});
      counter_.pg_->allreduce(common, comm::ReduceOp::kMax)->wait();
      const t::Tensor total = t::full({1}, rank == common.item<int64_t>() ? counter_.count_ : 0.0);
      counter_.pg_->broadcast(total, static_cast<int>(common.item<int64_t>()))->wait();
      counter_.max_count_ = total.item<double>();
    }

   private:
    Counter& counter_;
  };

  std::shared_ptr<comm::ProcessGroup> pg_;
  bool sync_max_count_;
  double count_ = 0, max_count_ = 0;
};

int worker(int rank) {
  auto pg = comm::init_from_env();
  Counter counter(pg, /*sync_max_count=*/true);
  const int num_inputs = 5 + rank;
  ddp::Join::run({&counter}, [&] {
    for (int i = 0; i < num_inputs; ++i) counter();
  });
  fmt::print("{} inputs processed before rank {} joined!\n", counter.count(), rank);
  fmt::print("{} inputs processed across all ranks!\n", counter.max_count());
  std::fflush(stdout);
  comm::destroy_process_group();
  return 0;
}

}  // namespace

int main() { return examples::run_ranks("join_counter", 2, worker); }
