// Gradient sums whose bits do not depend on the world size: the global batch is cut into fixed
// chunks, each chunk's gradient is rounded once onto a fixed-point grid, and the chunks are
// added as integers, which is exact, so the sum is the same whatever ranks hold which chunks,
// in whatever order they are added and however the allreduce adds them (docs/ddp.md,
// "The same bits at any world size").
//
// The grid of parameter p is 2^-(B - E_p - H): E_p bounds its gradients (every chunk's
// |g| < 2^E_p, agreed by a max-allreduce of the ranks' exponents), H = headroom_bits lets the
// gradients grow by 2^H before the grid must move, and B = 62 - guard bits, where the guard bits
// are enough for the sum of every chunk of the step not to overflow an int64. E_p comes from the
// last step that gave p a gradient; a step whose gradients outgrow it (or one before which no
// step gave p a gradient: the first) is refused by finish() on every rank alike, and the caller
// runs its chunks again: the same parameters and data give the same gradients, which the
// agreed E_p now bounds.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <unordered_map>

#include "tinyddp/autograd/node.h"
#include "tinyddp/comm/process_group.h"
#include "tinyddp/ddp/exact_fold.h"
#include "tinyddp/tensor/graph.h"

namespace tinyddp::ddp {

using tensor::Tensor;

// fully_shard's form of the sum: parameter p's integer sums are reduce-scattered over its W
// blocks of block_rows[p] rows (the rows past the parameter's own padded with zeros), and this
// rank's block of the mean goes to shards[p].grad, in the shard's dtype: each shard receives
// its rows of the mean the unsharded sum gives, the same bits.
struct ShardedGradients {
  std::vector<Tensor> shards;              // each this rank's block [block_rows, ...]
  std::vector<tensor::Shape> full_shapes;  // the parameters' shapes (a freed one has no elements)
  std::vector<int64_t> block_rows;         // rows per rank
};

class ExactGradientSum : public tensor::WeightGradientSink {
 public:
  // `params`: float32 or float64 tensors (any device: the sums are made on the CPU). `pg`: the
  // ranks (null: one process). `total_chunks`: the chunks of one step over all ranks, the
  // divisor of the mean. Throws when total_chunks leaves too few bits for the grid.
  ExactGradientSum(std::vector<Tensor> params, std::vector<std::string> names, std::shared_ptr<comm::ProcessGroup> pg,
                   int64_t total_chunks, int headroom_bits = 4);
  // fully_shard's: `params` are the full parameters, whose .grad each chunk's backward fills
  // (float32 or float64, or float16 and bfloat16 gradients, which are exact in float32); the
  // means go to `sharded`'s shards (float32 or float64).
  ExactGradientSum(std::vector<Tensor> params, std::vector<std::string> names, std::shared_ptr<comm::ProcessGroup> pg,
                   int64_t total_chunks, ShardedGradients sharded, int headroom_bits = 4);

  ExactGradientSum(const ExactGradientSum&) = delete;
  ExactGradientSum& operator=(const ExactGradientSum&) = delete;
  ~ExactGradientSum() override;

  // After one chunk's backward (.grad held zeros or nothing before it): adds each parameter's
  // .grad to its integer sum and sets .grad to None (the next chunk's backward then gives it
  // a gradient of its own: no pass to zero it, none to add into it). A NaN or an infinity
  // throws, naming the parameter.
  void add_chunk();
  // Keeps up to `count` chunks' gradients (count - 1 more copies of the parameters' size) and
  // folds them into the sums together, reading and writing the int64 sums once for all of
  // them (DDP's deterministic option keeps 8): the same integers, less memory traffic. A NaN
  // or an infinity then throws when its chunk is folded: at the latest in finish(). 1, the
  // default: each chunk folded (and checked) in add_chunk.
  void keep_chunks(size_t count);

  // While installed as this thread's WeightGradientSink (tensor/graph.h) around a chunk's
  // backward (ExactSteps does), a float32 CPU weight's product from linear()'s backward is kept
  // instead of computed, and folded with the parameter's other kept chunks from registers into
  // the sums (exact::fold_products; as many at once as keep_chunks keeps): no float32 gradient
  // is written and read back. Such a product is rounded onto the grid by itself (a weight that
  // also gets a gradient elsewhere in the chunk has that rounded apart), on every world size
  // alike. Declined (computed as usual): products of more than 128 rows (whose multiply-adds
  // the GEMM runs faster than the fold, and outweigh one write and read of the gradient), the
  // sharded form, other dtypes or devices, a weight with a tensor hook, a pass nested in the
  // backward, create_graph.
  bool take(const tensor::TensorImpl* weight, const Tensor& grad_out, const Tensor& input) override;

  // Before the backward of this rank's last chunk of the step: each parameter's gradient is
  // added as soon as its AccumulateGrad has run (a post-hook, as DDP's), and the allreduce of
  // its sums starts at once, while backward computes the earlier layers, as DDP overlaps its
  // buckets (a step finish() refuses drops them). Then add_chunk() and finish() as always.
  // The parameters must be leaves that require grad.
  void overlap_next_chunk();

  // After this rank's last chunk of the step (a collective: every rank calls it). Returns true
  // with every .grad set to the exact sum over all chunks divided by total_chunks, rounded once
  // to the parameter's dtype; or false on every rank when some chunk outgrew its grid (or on
  // the first step): the sums are dropped, the grids now bound this step's gradients, and the
  // caller runs the step's chunks again. `maxed` (optional): the caller's values, which ride
  // the step's control allreduce and come back as their maximum over the ranks (ExactSteps
  // sends its chunks' losses so: chunk_slots).
  bool finish(std::vector<int64_t>* maxed = nullptr);

  // Sets every .grad the sum writes (and, sharded, the full parameters' .grad) to None: a
  // step's gradients are its own.
  void clear_gradients();

  int64_t total_chunks() const { return total_chunks_; }
  // Bits of the grid below the agreed bound of the gradients (B - H): the sum's resolution is
  // 2^-(that) of the largest gradient.
  int precision_bits() const { return bits_ - headroom_; }
  // The same before a sum exists: for total_chunks chunks a step and headroom_bits.
  static int precision_bits_for(int64_t total_chunks, int headroom_bits = 4);
  // Steps finish() refused so far (the first step's, and any whose gradients outgrew the grid).
  int64_t reruns() const { return reruns_; }
  // Whether parameter p's chunk leaves this step as its float32 values, rounded by the rank
  // that sums them (exact_widened.cc): one chunk per rank, a reduce-scattered float32
  // parameter to which no rank's chunk ever gave two gradients (two products, a product and a
  // .grad) in a step so far. The same integers either way, half the bytes of int64 sums on 2 ranks.
  bool widened(size_t p) const { return widened_[p]; }

  // The grids, for checkpoints (as a GradScaler's scale is saved): each parameter's agreed
  // bound E_p, in parameter order (kUnknownBound before a step gave it a gradient). A run resumed with it
  // adds its next step on the grids the uninterrupted run used, so it gives the same bits;
  // without it the first step is refused and its grids come from its own gradients, which
  // round the chunks (far below float32's precision) differently.
  std::vector<int64_t> grid_state() const;
  // Takes what grid_state() returned (on any world size: the bounds are agreed by all ranks).
  // Throws when the count is not this sum's parameter count or a bound is out of range.
  void load_grid_state(const std::vector<int64_t>& bounds);
  static constexpr int64_t kUnknownBound = -100000;

 private:
  static constexpr int kUnknown = static_cast<int>(kUnknownBound);

  // Keeps parameter p's .grad of this chunk (and sets .grad to None); folds what is kept once
  // max_pending_ chunks wait.
  void add_gradient(size_t p);
  // Adds the kept chunks' gradients and products of p to its sums, in one pass over the sums.
  void fold_pending(size_t p);
  // The kept products of p into its sums (or only their bound: sums null); returns the bound.
  // With `values`, p's one kept product is written there as float32 instead (widened()).
  int fold_products(size_t p, int64_t* sums, int scale, exact::Into into, bool& finite, float* values = nullptr);
  // Parameter p's sums in sums_, zeroed first where no chunk of this step folded into them.
  Tensor step_sums(size_t p);
  // Starts the allreduce (scattered: the reduce-scatter) of parameter p's integer sums.
  void launch(size_t p);
  // widened(p): this rank's chunk's one gradient of p kept as float32 values (false, and the
  // step refused, when it gave p more than one); their reduce-scatter into the sums, each
  // rank rounding what it receives onto the grid; after a step, which parameters go so next.
  bool take_values(size_t p);
  void launch_widened(size_t p);
  void choose_widened(const std::vector<int64_t>& agreed);
  // In the overlapped chunk: p's sums are complete; launches those whose turn has come.
  void ready(size_t p);
  // Parameter p's means, from its sums over the ranks on the grid 2^-scale (scattered: this
  // rank's block of them, whose allgather it starts into `gather`). Unsharded and scattered, the
  // tensor holds W blocks, the parameter's elements first.
  Tensor means(size_t p, int scale, std::shared_ptr<comm::Work>& gather);
  // The constructors' common part: the checks, the sums' layout.
  void lay_out();
  // The runs of small parameters (runs_, run_of_), once offsets_ is laid out.
  void lay_out_runs();
  // Where parameter p's mean goes, and its elements there.
  bool sharded() const { return !sharded_.shards.empty(); }
  const Tensor& target(size_t p) const { return sharded() ? sharded_.shards[p] : params_[p]; }

  std::vector<Tensor> params_;
  std::vector<std::string> names_;
  std::shared_ptr<comm::ProcessGroup> pg_;
  int64_t total_chunks_;
  int headroom_;
  int bits_;                  // B: |q| < 2^B for every chunk's q
  ShardedGradients sharded_;  // empty unless fully_shard's
  // Where parameter p's sums start in sums_ and their elements (scattered: W blocks): the
  // scattered parameters first, then the others. Small parameters with no scattered one between
  // them (up to kScatterElements) form a run, whose sums lie side by side and leave in one
  // allreduce: run_of_[p] (-1 for a scattered parameter), members in launch order.
  std::vector<int64_t> offsets_, lengths_;
  struct SmallRun {
    int64_t offset = 0, length = 0;
    std::vector<size_t> members;
  };
  std::vector<SmallRun> runs_;
  std::vector<int> run_of_;
  Tensor sums_;              // int64: the sums of this rank's chunks
  std::vector<bool> holds_;  // sums_ of p hold this step's chunks (else last step's values)
  // Whether p's sums are reduce-scattered in place (sharded, or a large parameter: each rank
  // turns its block of the sums over the ranks into means, which an allgather shares), and the
  // elements of each of their W blocks.
  std::vector<bool> scattered_;
  std::vector<int64_t> block_;
  std::vector<int> bound_;       // E_p, agreed (kUnknown before the first step)
  std::vector<int> step_bound_;  // this rank's bound of this step's gradients so far
  bool outgrown_ = false;        // a chunk of this step did not fit its grid
  int64_t chunks_ = 0;           // chunks added on this rank this step
  int64_t reruns_ = 0;
  // overlap_next_chunk: the hooks, whether they add, what they added in this chunk, and the
  // allreduces they started.
  std::vector<autograd::RemovableHandle> hooks_;
  bool overlapping_ = false;
  std::vector<bool> added_;
  // Chunks' gradients not yet in the sums, per parameter (keep_chunks): folding several at
  // once reads and writes the int64 sums once for all of them.
  size_t max_pending_ = 1;
  std::vector<std::vector<Tensor>> pending_;
  std::vector<std::shared_ptr<comm::Work>> launched_;
  // widened(): the parameters whose values leave as they are, this rank's gradients of each in
  // this step, the values on their way and the buffers for products and padded copies.
  std::vector<bool> widened_, several_;  // several_: a chunk gave p two gradients once
  std::vector<int> contributions_;
  std::vector<Tensor> values_, buffers_;
  // take(): the parameters by their tensors, and p's products not yet in the sums, with the
  // versions of their factors' storage (an in-place change before the fold is refused).
  struct Taken {
    Tensor g, x;
    uint64_t g_version, x_version;
  };
  std::unordered_map<const tensor::TensorImpl*, size_t> by_impl_;
  std::vector<std::vector<Taken>> taken_;
  // This chunk: products taken of p, and whether p had a .grad too. A parameter whose last chunk
  // gave it one product and no .grad is "solo": in the overlapped chunk its sums leave at the
  // take (its accumulator will not run). Should more gradient of it come after that (the graph
  // changed), the step is refused (late_) and run again, and p is never solo again (mixed_).
  std::vector<int> taken_now_;
  std::vector<bool> got_grad_, solo_, mixed_;
  // The overlapped chunk launches the sums in a fixed order, the last parameter first, each when
  // it and those after it are ready: the same collectives in the same order on every rank,
  // whichever parameters each rank's graph made ready when.
  std::vector<bool> ready_;
  int64_t next_launch_ = -1;
  bool late_ = false;
};

// The mean of one value per chunk (a chunk's loss), the same bits on any world size: rank r
// holds the values of chunks first .. first + mine.size() - 1 of `total`; every rank returns
// their sum in chunk order divided by total. Exact exchange by a max-allreduce of chunk_slots.
double chunk_mean(comm::ProcessGroup* pg, const std::vector<double>& mine, int64_t first, int64_t total);
// A slot per chunk of the step holding this rank's values' bits (a double's, as an int64) and
// INT64_MIN where another rank's chunk goes: their maximum over the ranks is every chunk's
// value, exactly. slots_mean: the values' sum in chunk order divided by their count.
std::vector<int64_t> chunk_slots(const std::vector<double>& mine, int64_t first, int64_t total);
double slots_mean(const std::vector<int64_t>& slots);

// The sum over every rank of the squares of `values`' elements (float32, float64, float16 or
// bfloat16 tensors on any device), the same bits on any world size and however the elements
// are split over the ranks and threads: each square (exact in float64 for the 16- and 32-bit
// types) is rounded once onto a grid 2^-72 of the largest square, agreed by a max-allreduce,
// summed as 128-bit integers on each rank and over the ranks as 40-bit limbs in int64 (an
// allreduce), then turned back to a double once. The error is below 2^-72 of the largest
// square per element. A NaN or an infinity is returned as the largest value. `pg` null: one
// process. (fully_shard's clip_sharded_grad_norm_ under the deterministic option.)
double exact_square_sum(const std::vector<Tensor>& values, comm::ProcessGroup* pg);

}  // namespace tinyddp::ddp
