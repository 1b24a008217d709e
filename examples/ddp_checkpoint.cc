// PyTorch's DDP tutorial's checkpoint example with their ToyModel: rank 0 saves the DDP model's
// state (safetensors; names start with "module.", as PyTorch's DDP state_dict), a barrier
// makes the others wait for the file, every rank loads it and trains on, and a barrier
// precedes cleanup. Every rank prints the checksum of what it loaded and of its parameters
// after training: identical on all ranks.
//   bazel run //examples:ddp_checkpoint [-- CHECKPOINT_PATH]
//   launch --nproc_per_node 2 -- bazel-bin/examples/ddp_checkpoint [CHECKPOINT_PATH]
#include <filesystem>

#include "examples/example_util.h"
#include "tinyddp/comm/comm.h"
#include "tinyddp/ddp/distributed.h"

namespace t = tinyddp::tensor;
using namespace tinyddp;

int example(int rank, const std::string& path) {
  auto pg = comm::init_from_env();
  t::manual_seed(static_cast<uint64_t>(rank));
  auto model = std::make_shared<nn::ToyModel>();
  auto ddp_model = std::make_shared<ddp::DistributedDataParallel>(model, pg);
  nn::SGD optimizer(ddp_model->parameters(), nn::SGDOptions(0.001));

  // Every rank holds the same parameters (DDP broadcast rank 0's), so one file is enough.
  if (rank == 0) nn::save_state_dict(*ddp_model, path);
  pg->barrier()->wait();  // the others load only after rank 0 has written it
  nn::load_state_dict(*ddp_model, path);
  fmt::print("rank {}: loaded {} ({} tensors), checksum {}\n", rank, path, ddp_model->state_dict().size(),
             examples::parameter_checksum(*model));

  for (int step = 0; step < 3; ++step) {
    optimizer.zero_grad();
    const t::Tensor outputs = ddp_model->forward(t::randn({20, 10}));
    const t::Tensor labels = t::randn({20, 5});
    nn::mse_loss(outputs, labels).backward();
    optimizer.step();
  }
  fmt::print("rank {}: after 3 steps, checksum {}\n", rank, examples::parameter_checksum(*model));
  std::fflush(stdout);

  pg->barrier()->wait();  // nobody still reads the file when rank 0 removes it
  if (rank == 0) std::filesystem::remove(path);
  ddp_model.reset();
  comm::destroy_process_group();
  return 0;
}

int main(int argc, char** argv) {
  const std::string path =
      argc > 1 ? argv[1] : (std::filesystem::temp_directory_path() / "tinyddp_model.checkpoint").string();
  return examples::run_ranks("ddp_checkpoint", 2, [&](int rank) { return example(rank, path); });
}
