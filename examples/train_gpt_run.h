// The state of one //examples:train_gpt run, shared inside the train_gpt_lib target by its
// loop (train_gpt_lib.cc: set-up, steps, checkpoints) and what is printed and saved around the
// loop (train_gpt_report.cc). Not part of the library's interface (train_gpt_lib.h is).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "examples/gpt_data.h"
#include "examples/run_env.h"
#include "examples/step_phases.h"
#include "examples/train_gpt_lib.h"
#include "tinyddp/ddp/fully_shard.h"
#include "tinyddp/nn/nn.h"
#include "tinyddp/nn/transformer.h"
#include "tinyddp/tensor/cuda.h"

namespace tinyddp::examples {

// The corpus and its split, or the batches of --data.
struct GptText {
  std::unique_ptr<TextCorpus> corpus;  // where the split's reference expects it
  std::unique_ptr<TextSplit> split;
  std::unique_ptr<TokenBatches> file;
};

// Everything the loop uses.
struct GptRun {
  Placement placement;
  std::shared_ptr<comm::ProcessGroup> pg;
  int rank = 0, world = 1;
  GptText text;
  std::shared_ptr<nn::GPT> model;
  std::unique_ptr<nn::Optimizer> optimizer;
  std::unique_ptr<nn::LRScheduler> scheduler;
  std::shared_ptr<ddp::DistributedDataParallel> ddp;
  std::vector<std::shared_ptr<ddp::FullyShardedUnit>> units;  // --fsdp: each Block's, then the root's
  // Their group; --deterministic on one process shards over a world of one, so that it gives
  // the ranks' bits (clipping included).
  std::shared_ptr<comm::ProcessGroup> shard_pg;
  std::shared_ptr<ddp::PowerSGDState> powersgd;
  nn::Module* forward = nullptr;  // the model, or DDP around it
  int64_t first_step = 0;
  int64_t rows = 0;         // this rank's windows per step
  int64_t micro_steps = 1;  // this rank's share of --gradient_accumulation_steps
  // --deterministic: rows is the whole global batch (every rank reads it), summed exactly by
  // DDP's deterministic option (ddp, on one process too), or with --fsdp by fully_shard's.
  bool exact = false;
  int64_t global_rows() const { return exact ? rows : rows * world; }
  std::map<std::string, std::string> resumed_metadata;  // the checkpoint's, when resumed (its grids)
  // --cuda_graph: the captured step, the inputs it reads and the loss and norm it writes.
  struct Graphed {
    tensor::cuda::CudaGraph graph;
    tensor::Tensor x, y, loss, norm;
  };
  std::unique_ptr<Graphed> graphed;
};

// ---- Around the loop (train_gpt_report.cc) -----------------------------------------------------

// The model, the data, the optimizer and the ranks, as rank 0 prints them before the first step.
void describe(const GPTTrainConfig& config, const GptRun& run, std::ostream& out);

// The model's loss on the validation windows (every rank computes the same).
double validation_loss(const GPTTrainConfig& config, const GptRun& run);

// --sample_tokens characters generated from --prompt (every rank takes part under --fsdp).
std::string sample(const GPTTrainConfig& config, const GptRun& run);

// Every rank says how much optimizer state it holds (ZeRO's and fully_shard's differ by rank)
// and, with --report_memory, its peak resident memory and peak tensor memory over the steps.
// Returns the state's bytes.
int64_t report_memory(const GPTTrainConfig& config, const GptRun& run, std::ostream& log);

// --save: rank 0 writes the final state dict (--fsdp: gathered from the shards, every rank
// taking part).
void save_final_weights(const GPTTrainConfig& config, const GptRun& run, std::ostream& out);

// After the last step: the time, --profile_phases' table, the memory report, the validation
// loss and the sample (corpus only), --save, DDP's reductions. Fills `result`'s end figures;
// every rank takes part, rank 0 prints (to `log`; report_memory's lines come from every rank).
void report_end(const GPTTrainConfig& config, GptRun& run, const StepPhases& phases, GPTTrainResult& result,
                std::ostream& log);

}  // namespace tinyddp::examples
