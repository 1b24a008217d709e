// PyTorch's DDP tutorial's uneven-inputs example: rank r gets 5 + r inputs. Without Join the rank
// with more inputs would wait forever in its extra allreduce; inside ddp.join(...) the ranks
// that run out shadow the others' collectives until all are done. Every rank reports how many
// inputs it processed, and the checksum of its final model (the same everywhere).
//   bazel run //examples:ddp_join
//   launch --nproc_per_node 2 -- bazel-bin/examples/ddp_join
#include "examples/example_util.h"
#include "tinyddp/comm/comm.h"
#include "tinyddp/ddp/distributed.h"

namespace t = tinyddp::tensor;
using namespace tinyddp;

int worker(int rank) {
  auto pg = comm::init_from_env();
  auto model = std::make_shared<nn::Linear>(1, 1);
  ddp::DistributedDataParallel ddp_model(model, pg);
  nn::SGD optimizer(model->parameters(), nn::SGDOptions(0.01));
  const std::vector<t::Tensor> inputs(static_cast<size_t>(5 + rank), t::ones({1, 1}));

  int num_inputs = 0;
  ddp_model.join([&] {
    for (const t::Tensor& input : inputs) {
      ++num_inputs;
      optimizer.zero_grad();
      t::sum(ddp_model.forward(input)).backward();
      optimizer.step();
    }
  });

  fmt::print("Rank {} has exhausted all {} of its inputs! checksum {}\n", rank, num_inputs,
             examples::parameter_checksum(*model));
  std::fflush(stdout);
  pg->barrier()->wait();
  comm::destroy_process_group();
  return 0;
}

int main() { return examples::run_ranks("ddp_join", 2, worker); }
