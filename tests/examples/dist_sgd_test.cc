// examples/dist_sgd, the torch.distributed tutorial's synchronous SGD with gradients averaged
// by hand, against the same training through DDP: on 2 ranks both end with the same
// parameters (bit for bit here: with 2 ranks, DDP's divide-then-sum and the tutorial's
// sum-then-divide round alike, as dividing by 2 is exact), and every rank holds them.
#include "tests/test_util.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp;
using Catch::Contains;
using testing::CommandResult;
using testing::run_command;
using testing::temp_path;

TEST_CASE("examples: dist_sgd averages gradients by hand and ends where DDP does", "[examples][ddp][dist_sgd]") {
  const std::string by_hand = temp_path("dist_sgd_hand.safetensors"), by_ddp = temp_path("dist_sgd_ddp.safetensors");
  const CommandResult hand = run_command("launcher/launch --nproc_per_node 2 -- examples/dist_sgd --save " + by_hand);
  INFO(hand.output);
  REQUIRE(hand.exit_code == 0);
  CHECK_THAT(hand.output, Contains("[rank 1] rank 1, epoch 2: "));
  const CommandResult ddp =
      run_command("launcher/launch --nproc_per_node 2 -- examples/dist_sgd --ddp --save " + by_ddp);
  INFO(ddp.output);
  REQUIRE(ddp.exit_code == 0);
  const auto a = nn::load_safetensors(by_hand).tensors, b = nn::load_safetensors(by_ddp).tensors;
  REQUIRE(a.keys() == b.keys());
  for (const auto& [name, t] : a) {
    INFO(name);
    CHECK(tensor::allclose(t, b.at(name), 0, 1e-6));
  }
  // Every rank ends with the same parameters (the checksum line of each rank).
  const auto checksum = [](const std::string& out, int rank) {
    const std::string key = "rank " + std::to_string(rank) + ": parameter checksum ";
    const size_t at = out.find(key);
    return at == std::string::npos ? std::string("missing") : out.substr(at + key.size(), 16);
  };
  CHECK(checksum(hand.output, 0) == checksum(hand.output, 1));
  CHECK(checksum(hand.output, 0) == checksum(ddp.output, 0));
  CHECK(checksum(hand.output, 0) != "missing");
}
