// One synchronised iteration of DDP on 2 ranks, told from the Reducer's own state as it happens:
// docs/learn.md's walk, printed. A hook of this program runs after DDP's on every parameter's
// AccumulateGrad and reads Reducer::snapshot(): which gradient arrived, which bucket it went
// into (multiplied by 1/W on the way: the built-in hook then only sums), each bucket's count of
// pending gradients as it falls, which buckets are launched, and which allreduces have
// finished while backward still runs. After backward it follows one number, 4.bias[0], from
// this rank's gradient through the bucket to the average in .grad. Rank 0 prints.
//   bazel run //examples:ddp_walk
//   launch --nproc_per_node 2 -- bazel-bin/examples/ddp_walk
#include <algorithm>

#include "examples/example_util.h"
#include "tinyddp/comm/comm.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/tensor/random.h"

namespace t = tinyddp::tensor;
using namespace tinyddp;

namespace {

// About 1000 bytes: this MLP's six parameters (3,280 bytes) fall into two buckets (a bucket
// closes once it reaches the cap, so the first holds 2,576 bytes).
constexpr double kCapMb = 1000.0 / (1 << 20);

struct Walk {
  explicit Walk(const ddp::Reducer& r) : reducer(r) {}

  const ddp::Reducer& reducer;
  std::vector<std::string> names;
  std::vector<t::Tensor> params;
  std::vector<std::string> lines;
  size_t arrived = 0, launched = 0;
  std::vector<bool> told_finished;
  double local = 0, in_bucket = 0;  // 4.bias[0]: this rank's gradient, and its value in the bucket

  size_t bucket_of(const ddp::Reducer::Snapshot& s, size_t param) const {
    for (size_t b = 0; b < s.assignment.buckets.size(); ++b) {
      const std::vector<size_t>& held = s.assignment.buckets[b];
      if (std::find(held.begin(), held.end(), param) != held.end()) return b;
    }
    return s.assignment.buckets.size();
  }

  std::string contents(const ddp::Reducer::Snapshot& s, size_t b) const {
    std::vector<std::string> held;
    for (size_t i : s.assignment.buckets[b]) held.push_back(names[i]);
    return fmt::format("[{}], {} bytes", fmt::join(held, " "), s.assignment.bytes[b]);
  }

  // Runs after DDP's own hook for parameter i: the Reducer has counted its gradient.
  void gradient_arrived(size_t i) {
    const ddp::Reducer::Snapshot s = reducer.snapshot();
    const size_t b = bucket_of(s, i);
    ++arrived;
    lines.push_back(fmt::format("gradient {} of {}: {:<8} -> bucket {} (times 1/{} on the way in), pending {} -> {}",
                                arrived, params.size(), names[i], b, s.div_factor, s.pending[b] + 1, s.pending[b]));
    if (names[i] == "4.bias") {
      local = params[i].grad().to_vector<float>()[0];
      in_bucket = s.bucket_views[i].to_vector<float>()[0];
    }
    for (; launched < s.launched; ++launched) {
      lines.push_back(
          fmt::format("  bucket {} complete and next in order: launched; the hook allreduces (sums) it", launched));
    }
    told_finished.resize(s.reduced.size(), false);
    for (size_t k = 0; k < s.reduced.size(); ++k) {
      if (s.reduced[k] && !told_finished[k])
        lines.push_back(fmt::format("  bucket {}'s allreduce has finished (seen at this hook)", k));
      if (s.reduced[k]) told_finished[k] = true;
    }
  }
};

int worker(int rank) {
  auto pg = comm::init_from_env();
  t::manual_seed(0);  // the same model everywhere (DDP broadcasts rank 0's anyway)
  auto model = nn::mlp({8, 16, 32, 4});
  ddp::DistributedDataParallel ddp(model, pg, ddp::DDPOptions().bucket_cap_mb(kCapMb).first_bucket_cap_mb(kCapMb));
  t::manual_seed(1 + rank);  // each rank its own batch
  const auto forward = [&] {
    model->zero_grad();
    return t::mean(t::pow(ddp(t::randn({4, 8})), 2));
  };
  forward().backward();  // iteration 0: the next forward rebuilds the buckets in the order the gradients came

  Walk walk(ddp.reducer());
  for (const auto& [name, p] : model->named_parameters()) {
    walk.names.push_back(name);
    walk.params.push_back(p);
  }
  std::vector<autograd::RemovableHandle> hooks;
  for (size_t i = 0; i < walk.params.size(); ++i) {
    hooks.push_back(walk.params[i].grad_accumulator()->add_post_hook([&walk, i] { walk.gradient_arrived(i); }));
  }
  const t::Tensor loss = forward();
  const ddp::Reducer::Snapshot built = ddp.reducer().snapshot();
  std::vector<std::string> out{
      fmt::format("iteration 1 on rank {} of {}: its forward rebuilt the buckets in iteration 0's gradient order", rank,
                  pg->size())};
  for (size_t b = 0; b < built.assignment.buckets.size(); ++b)
    out.push_back(fmt::format("  bucket {}: {}, pending {}", b, walk.contents(built, b), built.pending[b]));
  out.push_back("backward (the pending counts set by prepare_for_backward at the end of the forward):");
  loss.backward();
  for (auto& hook : hooks) hook.remove();
  out.insert(out.end(), walk.lines.begin(), walk.lines.end());
  const ddp::Reducer::Snapshot done = ddp.reducer().snapshot();
  out.push_back(fmt::format(
      "finalize_backward: waited for buckets 0 to {} in order and copied each average to .grad (the hooks saw {} of "
      "the {} allreduces finish while backward ran)",
      done.launched - 1, std::count(walk.told_finished.begin(), walk.told_finished.end(), true), done.launched));
  // One number through the whole path: rank 1's gradient, for the sum.
  const t::Tensor theirs = t::full({1}, walk.local);
  pg->broadcast(theirs, 1)->wait();
  const double average = model->named_parameters().at("4.bias").grad().to_vector<float>()[0];
  out.push_back(fmt::format("4.bias[0]: gradient {:.6f} here, {:.6f} on rank 1; in the bucket {:.6f} (times 1/2);",
                            walk.local, theirs.item<float>(), walk.in_bucket));
  out.push_back(fmt::format("  the hook summed the ranks' halves: .grad = {:.6f}, the average", average));
  if (rank == 0) {
    for (const std::string& line : out) fmt::print("{}\n", line);
  }
  std::fflush(stdout);
  comm::destroy_process_group();
  return 0;
}

}  // namespace

int main() { return examples::run_ranks("ddp_walk", 2, worker); }
