// What every training example sets up the same way: where this rank computes (the device and
// the process group's backend, from --device and --backend and the launcher's variables), the
// group of all ranks, and DDP's communication hook by name. Used by train_lib and
// train_gpt_lib.
#pragma once

#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "tinyddp/comm/process_group.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/ddp/powersgd.h"

namespace tinyddp::examples {

struct Placement {
  bool on_gpu = false;
  tensor::Device device{tensor::kCPU};
  std::string backend;
};

// device: auto | cpu | cuda; backend: auto | gloo | nccl (auto: nccl on GPUs when each local
// rank has one, else gloo). Selects this process's GPU (LOCAL_RANK) before anything touches
// CUDA. Throws naming what is missing (no GPU, NCCL without one GPU per rank).
Placement choose_placement(const std::string& device, const std::string& backend);

// --threads: sets the intra-op threads when `threads` > 0, and in any case resolves the count
// now (TINYDDP_NUM_THREADS or OMP_NUM_THREADS), so that a bad value stops the example before
// any work. Returns the count.
int use_threads(int threads);

// The variable that set the world size, for messages: WORLD_SIZE (launch, torchrun),
// SLURM_NTASKS (srun) or OMPI_COMM_WORLD_SIZE (mpirun).
std::string world_size_variable();

// For an option that captures a CUDA graph (train_gpt's --cuda_graph, nanoGPT mode's
// cuda_graph=True, named by `option`, capturing its `what`): throws unless the run is on a GPU,
// and, under a launcher, on the nccl backend (whose collectives a graph holds) and, unless
// `collectives`, in one process. Called before joining the ranks.
void check_graph_placement(const Placement& placement, const std::string& option, const std::string& what,
                           bool collectives);

// The group of all ranks when run under a launcher (WORLD_SIZE set, 1 included), else null.
std::shared_ptr<comm::ProcessGroup> join_ranks(const std::string& backend, double timeout_s);

// Registers the hook named `name` on `ddp`: allreduce (DDP's default: nothing to register),
// fp16, bf16, sum, none or powersgd (rank `powersgd_rank`, plain allreduce for the first
// `powersgd_start_iter` iterations). Returns PowerSGD's state for its figures, else null.
std::shared_ptr<ddp::PowerSGDState> register_comm_hook(ddp::DistributedDataParallel& ddp,
                                                       const std::shared_ptr<comm::ProcessGroup>& pg,
                                                       const std::string& name, int powersgd_rank,
                                                       int64_t powersgd_start_iter);

// The names register_comm_hook knows, for the options' checks, and their list for messages.
// Two are wrong on purpose, to show what DDP's averaging does (docs/ddp.md's loss picture):
// "sum" adds the ranks' gradients without dividing by the world size, and "none" sends nothing,
// so each rank follows the gradients of its own share of the data and the replicas drift apart.
bool known_comm_hook(const std::string& name);
std::string comm_hook_choices();

// Prints how many of `micro_steps` micro-steps reduced their gradients (with gradient
// accumulation, the last of each step's; the others ran under no_sync) and in how many buckets.
void report_reductions(const ddp::DistributedDataParallel& ddp, int64_t micro_steps, std::ostream& out);

// A metrics CSV with `header`, whose first column is the step. Resuming after `first_step`
// steps keeps the rows of the steps the checkpoint holds and drops those of steps it lost.
std::ofstream open_metrics_csv(const std::string& path, const std::string& header, int64_t first_step);

// --fail_at_step: exits with status 3 before step `fail_at_step` on the first attempt
// (TINYDDP_RESTART_COUNT unset or 0), to try launch --max_restarts with --resume.
void fail_on_purpose_if_asked(int64_t fail_at_step, int64_t step, int rank, const char* program);

// Per-rank randomness, as nanoGPT's seed_offset: every rank builds the model from the same
// seed (the same initial weights; DDP would broadcast rank 0's anyway), then seed_training
// seeds the default generator with seed + rank for what training draws (Dropout's masks), so
// that the ranks draw different masks, not one mask W times.
void seed_training(uint64_t seed, int rank);
// Each rank's default-generator state, for rank 0's checkpoint metadata ("rng.cpu.rank<r>");
// a collective over `pg` (W broadcasts on `device`); empty without a group.
std::map<std::string, std::string> generator_states(comm::ProcessGroup* pg, tensor::Device device);
// After a checkpoint loaded (which sets every rank's generator to rank 0's): this rank's own
// state from the metadata generator_states wrote. A checkpoint saved at another world size
// (its entries are not one per rank of `world`) cannot give each rank its stream: every rank
// then starts a fresh one, seed_training(seed + step, rank), and the run goes on, no longer
// bit for bit the run that saved it.
void restore_generator(const std::map<std::string, std::string>& metadata, int rank, int world, uint64_t seed,
                       int64_t step);

// This process's peak resident memory so far (Linux's VmHWM) in MiB, or -1 where /proc cannot
// say; reset_peak_rss() starts the count again from the memory held now (Linux: "5" written
// to /proc/self/clear_refs), so a peak read later is that of what ran in between.
int64_t peak_rss_mib();
void reset_peak_rss();

}  // namespace tinyddp::examples
