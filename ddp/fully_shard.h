// Fully sharded data parallelism (ZeRO-3), as PyTorch 2.x's composable fully_shard: each
// rank keeps 1/W of every parameter, of its gradient and of the optimizer's state for it.
//
//   for (auto& block : model->blocks) ddp::fully_shard(block, pg);   // the units, inside out
//   ddp::fully_shard(model, pg);                                      // then the root
//   nn::AdamW optimizer(model->parameters(), ...);                    // steps the shards only
//
// From fully_shard on, the module's parameters() and named_parameters() list the shards under
// the parameters' names (as FSDP2's DTensor parameters), so the optimizer is built as usual;
// the tensors the module computes with (its members, named_registered_parameters()) are
// placeholders between uses, which an optimizer refuses.
//
// A unit is a module's own parameters (those no sub-module's unit took). Each parameter is
// split along its first dimension into W equal row blocks (the last padded with zeros), rank r
// keeping block r as its *shard*: a tensor of the parameter's rank (dim() as the parameter's,
// so weight-decay groups by dim still work), which the optimizer updates. Around the unit:
//
//   forward pre-hook:   all-gather the unit's shards (one collective, every parameter's block
//                       packed in one buffer) and point each parameter at its full value
//                       (Tensor::set_data): forward runs on ordinary leaf parameters
//   forward hook:       free the full values' bytes (reshard_after_forward; the forward's
//                       saved tensors keep referring to them)
//   backward pre-hook:  all-gather again into the same bytes (the values the forward saved)
//   backward:           each parameter's gradient accumulates as usual; when the unit's last
//                       one arrives (AccumulateGrad post-hooks, as DDP's Reducer counts), the
//                       gradients are reduce-scattered (one collective) and divided by W:
//                       rank r's shard.grad receives the average of block r; the full
//                       gradients and parameters are freed (the parameters then hold no
//                       elements until the next forward gathers them again)
//
// So one or two units' full parameters live at a time (with a prefetched one), besides the
// root's. Parameters a backward does not reach count as zero gradients, reduced when the
// backward ends. At fully_shard every parameter and buffer is broadcast from rank 0 first (as
// DDP's construction), so every rank starts from the same model. Each collective goes through
// the process group's desync check, so ranks that wrap differently get an error, not a hang.
//
// Overlap: each forward records the order in which the units begin; from then on a unit's
// forward issues the next unit's all-gather (prefetch), its backward pre-hook the all-gather
// of the unit whose backward comes next, and each reduce-scatter is waited for only when the
// backward ends.
//
// Mixed precision (options.mp_policy): the all-gather casts the shards to param_dtype, the
// module computes in it, and the reduce-scatter runs in reduce_dtype, its result cast back to
// the shards' dtype: the optimizer never sees a bfloat16.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tinyddp/base/arg.h"
#include "tinyddp/comm/process_group.h"
#include "tinyddp/ddp/exact_step.h"
#include "tinyddp/ddp/timeline.h"
#include "tinyddp/nn/checkpoint.h"
#include "tinyddp/nn/module.h"
#include "tinyddp/nn/optim.h"

namespace tinyddp::ddp {

// fully_shard's mixed precision (PyTorch's MixedPrecisionPolicy, FSDP2's mp_policy). The
// shards, what the optimizer steps, stay in the parameters' own dtype (float32 master weights);
// with param_dtype set, each gather casts them to it, so the all-gather moves and the forward
// and backward compute in it, and the gradients come out in it.
//   options.mp_policy(ddp::MixedPrecisionPolicy().param_dtype(tensor::kBFloat16));  // bf16 gathers, compute,
//   reduce-scatter
struct MixedPrecisionPolicy {
  // the gathered parameters' dtype (unset: the shards')
  TINYDDP_ARG(std::optional<tensor::DType>, param_dtype);
  // the gradients' reduce-scatter (unset: param_dtype); its result is cast to the shards' dtype
  // for .grad
  TINYDDP_ARG(std::optional<tensor::DType>, reduce_dtype);
  // the forward's floating-point outputs cast to it
  TINYDDP_ARG(std::optional<tensor::DType>, output_dtype);
  // the forward's floating-point inputs cast to param_dtype
  TINYDDP_ARG(bool, cast_forward_inputs) = true;
};

// fully_shard's options (PyTorch's keyword arguments of the same names), with setters:
//   ddp::FullyShardOptions().reshard_after_forward(false).mp_policy(ddp::MixedPrecisionPolicy().param_dtype(tensor::kBFloat16))
struct FullyShardOptions {
  // Free the gathered parameters' bytes after the forward and gather them again before the
  // unit's backward (ZeRO-3's memory: one unit's full parameters at a time); false keeps them
  // from the forward to the backward (ZeRO-2's, one all-gather per step fewer). The root unit
  // (the one whose forward holds the others') never frees after the forward, since its
  // backward comes first.
  TINYDDP_ARG(bool, reshard_after_forward) = true;
  // The root's forward first broadcasts every buffer of its module from rank 0 (BatchNorm's
  // running statistics), after a forward that trained, as DDP's broadcast_buffers. Buffers are
  // never sharded.
  TINYDDP_ARG(bool, broadcast_buffers) = true;
  // Mixed precision: unset, everything happens in the parameters' own dtype.
  TINYDDP_ARG(MixedPrecisionPolicy, mp_policy);
  // Record each unit's forward and backward (compute row), all-gathers and reduce-scatters
  // (their rows, from issue to completion) and frees on this timeline, a Chrome trace per rank
  // as DDP's (ddp/timeline.h). Give every unit the same one (fully_shard_by_policy does); the
  // first unit to get it agrees with the other ranks on its time zero (a collective, so every
  // rank must set it). Write it with timeline->write(path, rank).
  TINYDDP_ARG(std::shared_ptr<Timeline>, timeline);
  // The deterministic option, as DDPOptions().deterministic: training steps go through
  // ddp::deterministic_step(module, inputs, targets, chunk_loss) (below), which cuts the global
  // batch into chunks of chunk_size rows and sums their gradients exactly, so that 1, 2, 3 or 8
  // ranks train to the same bits (docs/ddp.md, "The same bits at any world size"). Give every
  // unit the same options (fully_shard_by_policy does).
  TINYDDP_ARG(bool, deterministic) = false;
  TINYDDP_ARG(int64_t, chunk_size) = 16;
};

// What one unit holds, for tests and reports.
struct FullyShardStats {
  int64_t gathers = 0;          // all-gathers so far (before forwards and backwards)
  int64_t prefetches = 0;       // of them, issued early, while another unit computed
  int64_t reduce_scatters = 0;  // backward reduce-scatters so far
  bool gathered = false;        // whether the parameters hold their full values now
  int64_t shard_numel = 0;      // this rank's elements of the unit's parameters (padding included)
  int64_t full_numel = 0;       // the parameters' elements
};

class FullyShardedUnit;

// Shards `module`'s own parameters (not those of a sub-module already sharded) over `pg`.
// Call it on sub-modules first, then on the root. Returns the unit (kept alive by the module's
// hooks too). Throws, naming the module, when it was sharded already or has no parameters of
// its own left and is not meant as the root (a root with none is allowed).
std::shared_ptr<FullyShardedUnit> fully_shard(const std::shared_ptr<nn::Module>& module,
                                              std::shared_ptr<comm::ProcessGroup> pg, FullyShardOptions options = {});

// The wrapping policy for the common case (PyTorch FSDP's ModuleWrapPolicy): fully_shard on
// every sub-module of `module` for which `policy` says yes, innermost first, then on `module`
// itself (the root). Returns the units, the root's last.
//   ddp::fully_shard_by_policy(gpt, pg, ddp::is_a<nn::Block>);   // each transformer Block
std::vector<std::shared_ptr<FullyShardedUnit>> fully_shard_by_policy(
    const std::shared_ptr<nn::Module>& module, std::shared_ptr<comm::ProcessGroup> pg,
    const std::function<bool(const nn::Module&)>& policy, FullyShardOptions options = {});
template <typename M>
bool is_a(const nn::Module& m) {
  return dynamic_cast<const M*>(&m) != nullptr;
}

// Every parameter of `module` (named_parameters order), each replaced by its shard where a
// unit holds it: what an optimizer steps. The named form keeps the parameters' names. The
// same as module.parameters() and module.named_parameters(), which list the shards since
// fully_shard.
std::vector<tensor::Tensor> sharded_parameters(const nn::Module& module);
nn::OrderedDict<tensor::Tensor> sharded_named_parameters(const nn::Module& module);

// set_requires_gradient_sync on every unit inside `module` (itself included), as FSDP2's
// module.set_requires_gradient_sync(False) for the micro-steps of gradient accumulation.
void set_requires_gradient_sync(const nn::Module& module, bool sync);

// clip_grad_norm_ over shards (FSDP's clip_grad_norm_): the total 2-norm (or, with
// norm_type INFINITY, the largest magnitude) of the gradients whose shards `params` holds,
// reduced over `pg`, so that every rank scales its shards by the factor plain clipping of the
// full gradients would use. Parameters that are not shards (the same on every rank) count
// once. Summed in float64 on the host; when a shard's unit has the deterministic option, the
// squares are summed exactly (exact_square_sum), so the norm has the same bits on any world
// size. Returns the total norm, a 0-d tensor in the first gradient's dtype.
tensor::Tensor clip_sharded_grad_norm_(const std::vector<tensor::Tensor>& params, double max_norm,
                                       comm::ProcessGroup& pg, double norm_type = 2.0);

// The deterministic option's training step (FullyShardOptions().deterministic(true)) for a
// module fully_shard made the root of its units, as DistributedDataParallel::deterministic_step
// (distributed.h says what it does): `inputs` and `targets` hold the whole global batch on
// every rank, this rank runs its chunks through chunk_loss (the module's forward and the loss
// of those rows) and a backward, and each shard's .grad becomes its rows of the exact mean over
// all chunks (the integer sums reduce-scattered: DDP's bits, sharded). The units keep their
// full gradients only until each chunk's are added (the int64 sums of the full gradients live
// through the step: twice the float32 model's bytes). Returns the mean of the chunks' losses.
// BatchRows::kRank: `inputs` and `targets` hold only this rank's chunks, as DDP's.
double deterministic_step(nn::Module& module, const tensor::Tensor& inputs, const tensor::Tensor& targets,
                          const ChunkLoss& chunk_loss, BatchRows rows = BatchRows::kGlobal);
// The option's state (the steps done, then a grid bound per parameter, in the module's
// parameter order: DDP's layout), for a checkpoint, and back on any world size. Collectives the
// first time (the ranks agree on the chunks' seed).
std::vector<int64_t> deterministic_state(nn::Module& module);
void load_deterministic_state(nn::Module& module, std::vector<int64_t> state);

// The full parameters and buffers of `module`, gathered from the shards on every rank (a
// collective: every rank calls it), under the module's own names: loadable by a module that
// is not sharded.
nn::OrderedDict<tensor::Tensor> full_state_dict(const nn::Module& module);

// Sharded training checkpoints (FSDP's SHARDED_STATE_DICT): every rank writes its own file,
// "<path>.rank<r>-of-<W>" (atomically: a temporary renamed over it), with its shards
// ("shard.<name>"), what every rank holds whole (buffers, frozen parameters: "model.<name>"),
// its optimizer's state (the shards' moments: "optimizer.<key>"), `extra` ("extra.<name>": a
// scheduler's state), the step and its random generator's state; then every rank waits for the
// others. Loading reads this rank's file into the shards, the buffers, the optimizer and the
// generator, and returns the step and the extra state: the run goes on bit for bit. It needs
// the world size and the sharding that saved it; another world size is refused, naming the
// files there are. Both are collectives in the sense that every rank calls them.
void save_sharded_checkpoint(const std::string& path, const nn::Module& module, const nn::Optimizer& optimizer,
                             comm::ProcessGroup& pg, int64_t step, const nn::OrderedDict<tensor::Tensor>& extra = {});
nn::TrainingCheckpoint load_sharded_checkpoint(const std::string& path, nn::Module& module, nn::Optimizer& optimizer,
                                               comm::ProcessGroup& pg);
// The file rank `rank` of `world` writes for `path`: "<path>.rank<r>-of-<W>".
std::string sharded_checkpoint_file(const std::string& path, int rank, int world);

class FullyShardedUnit : public std::enable_shared_from_this<FullyShardedUnit> {
 public:
  FullyShardedUnit(std::shared_ptr<nn::Module> module, std::shared_ptr<comm::ProcessGroup> pg,
                   FullyShardOptions options);
  ~FullyShardedUnit();
  FullyShardedUnit(const FullyShardedUnit&) = delete;
  FullyShardedUnit& operator=(const FullyShardedUnit&) = delete;

  FullyShardStats stats() const;
  // Gathers the full parameters if they are not (collective); reshard() frees them.
  void unshard();
  void reshard();
  // Whether this unit's backward reduce-scatters its gradients (PyTorch's
  // set_requires_gradient_sync; true by default). With false the full gradients stay and
  // accumulate over the backward passes until one with true reduces their sum: gradient
  // accumulation as DDP's no_sync, at the cost of holding the full gradients meanwhile.
  void set_requires_gradient_sync(bool sync) { requires_gradient_sync_ = sync; }
  const FullyShardOptions& options() const { return options_; }
  // The deterministic option (fully_shard_exact.cc), on the root's unit: its steps (made on
  // first use, a collective), and one step with every unit inside the root keeping its full
  // gradients for the exact sum.
  ExactSteps& exact_steps(const nn::Module& root);
  double exact_step(nn::Module& root, const tensor::Tensor& inputs, const tensor::Tensor& targets,
                    const ChunkLoss& chunk_loss, BatchRows rows);
  // What the timeline calls this unit: its module's type until the root's fully_shard names
  // each unit inside it by its module's path ("transformer.h.0"; the root "(root)").
  void set_label(std::string label) { label_ = std::move(label); }
  const std::string& label() const { return label_; }

  // The module hooks' steps: before the forward (gather; with grad mode on, count this
  // backward's gradients) and after it (free, as the options and grad mode say).
  void begin_forward(bool root);
  void end_forward();
  // mp_policy's casts of the forward's floating-point inputs (to param_dtype, with
  // cast_forward_inputs) and outputs (to output_dtype); nullopt when nothing changes.
  std::optional<nn::Tensors> cast_inputs(const nn::Tensors& inputs) const;
  std::optional<nn::Tensors> cast_outputs(const nn::Tensors& outputs) const;
  // Before the unit's backward (a full backward pre-hook): gather if freed, and start the
  // gather of the unit whose backward comes next.
  void begin_backward();

  struct Slot;  // one parameter: its full shape, its shard, its place in the packed buffers

 private:
  enum class State { kSharded, kGathered, kFreedAfterForward };
  // Enters the slots in the registry and puts each shard in its parameter's place in `module`'s
  // tree (nn::Module::set_parameter_stand_in).
  void register_shards(nn::Module& module);
  void arm();
  // Every rank's packed shards, a row each: start_gather issues the all-gather, gather_blocks
  // waits for it (or for the prefetched one); prefetch starts it early for a unit in the
  // given state (kSharded before a forward, kFreedAfterForward before a backward).
  std::pair<std::shared_ptr<comm::Work>, tensor::Tensor> start_gather();
  tensor::Tensor gather_blocks();
  void prefetch(bool for_backward);
  void finish_reduce();  // waits for the reduce-scatter and writes the shards' .grad
  // Writes `slot`'s full value into `full` from the gathered rows.
  void fill(const Slot& slot, const tensor::Tensor& gathered, const tensor::Tensor& full);
  void free_after_forward();
  // Throws when a gathered parameter was written in place (its storage's version moved).
  void check_unchanged() const;
  void on_gradient(size_t slot);  // a parameter's gradient is complete
  void end_backward();            // every gradient is in: reduce (or, without sync, keep)
  void reduce_gradients();        // the reduce-scatter into the shards' .grad
  // On options_.timeline (if any): a span "<what> <label>" from `start` to `end` on the compute
  // row; a collective's "<what> <label> (12.00 MiB<more>)" (the unit's gathered bytes in
  // `dtype`) on `track`; an instant "<what> <label>" now on the compute row.
  void record(const char* what, Timeline::Clock::time_point start, Timeline::Clock::time_point end) const;
  void record_collective(const char* what, Timeline::Clock::time_point start, Timeline::Clock::time_point end,
                         int track, tensor::DType dtype, const char* more = "") const;
  void record_instant(const std::string& what) const;

  std::weak_ptr<nn::Module> module_;
  const nn::Module* module_address_;  // its key in the registry of sharded modules
  std::string name_;
  std::string label_;  // on the timeline
  std::shared_ptr<comm::ProcessGroup> pg_;
  FullyShardOptions options_;
  State state_ = State::kSharded;
  bool is_root_ = false;
  std::vector<Slot> slots_;
  tensor::DType compute_dtype_ = tensor::kFloat32;  // the gathered parameters' (mp_policy.param_dtype)
  tensor::DType reduce_dtype_ = tensor::kFloat32;   // the reduce-scatter's (mp_policy.reduce_dtype)
  int64_t shard_numel_ = 0;                         // the packed shard buffer's length
  std::vector<bool> ready_;                         // per slot, this backward
  size_t pending_ = 0;                              // slots whose gradient has not arrived this backward
  bool armed_ = false;                              // a forward with grad mode on gathered: a backward will reduce
  bool requires_gradient_sync_ = true;
  bool buffers_need_sync_ = true;  // the root: the previous forward trained (as DDP's)
  struct Prefetch {
    std::shared_ptr<comm::Work> work;
    tensor::Tensor gathered;
    uint64_t epoch;  // the forward it was issued in
    Timeline::Clock::time_point issued;
  };
  std::optional<Prefetch> prefetch_;
  struct PendingReduce {
    std::shared_ptr<comm::Work> work;
    // This rank's result. Not the packed input: the collective keeps it until it has run, and
    // it goes then, so that the units' full-size gradient buffers do not pile up until the
    // backward ends.
    tensor::Tensor mine;
    Timeline::Clock::time_point launched;
  };
  Timeline::Clock::time_point compute_start_;  // this unit's forward or backward, once gathered
  std::optional<PendingReduce> pending_reduce_;
  std::weak_ptr<FullyShardedUnit> next_forward_, next_backward_;  // the previous forward's order
  FullyShardStats stats_;
  std::vector<autograd::RemovableHandle> handles_;
  std::unique_ptr<ExactSteps> exact_;  // the root's, under the deterministic option
};

}  // namespace tinyddp::ddp
