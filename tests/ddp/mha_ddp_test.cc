// MultiheadAttention under DDP against PyTorch's DDP (fixtures/make_mha_ddp_fixture.py): an
// attention classifier (Embedding, self-attention with a key_padding_mask, a masked mean, a
// Linear) called as ddp(ids, padding), two inputs of which one is bool, with a loss on the
// logits and on the returned attention weights, trained 4 SGD-momentum steps on 2 rank
// threads; every gradient after each backward and every weight after each step equal PyTorch's
// (1e-6), in_proj_weight included (one packed parameter for q, k and v).
#include <cmath>

#include "tests/comm/comm_test_util.h"
#include "tests/ddp/fixture_records.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp;
using json = nlohmann::json;
using tensor::Tensor;
using testing::Expectations;

namespace {

// (ids [N, T], padding bool [N, T]) -> (logits [N, 3], attention weights [N, T, T]).
struct AttentionClassifier : nn::Module {
  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::MultiheadAttention> attn;
  std::shared_ptr<nn::Linear> head;
  AttentionClassifier() : Module("AttentionClassifier") {
    nn::SkipInitGuard no_draws;  // the weights come from the fixture; rank threads share the generator
    embed = register_module("embed", std::make_shared<nn::Embedding>(9, 8));
    attn = register_module("attn", std::make_shared<nn::MultiheadAttention>(8, 2, 0.0, true, /*batch_first=*/true));
    head = register_module("head", std::make_shared<nn::Linear>(8, 3));
  }
  std::vector<Tensor> forward_many(const std::vector<Tensor>& inputs) override {
    const Tensor x = embed->forward(inputs[0]), padding = inputs[1];
    const auto [y, weights] = attn->forward(x, x, x, padding);
    const Tensor keep = tensor::eq(padding, 0.0).unsqueeze(-1).to(y.dtype());
    return {head->forward(tensor::sum(y * keep, {1}) / tensor::sum(keep, {1})), weights};
  }
};

}  // namespace

TEST_CASE("DDP: MultiheadAttention with a key_padding_mask, two inputs, trains as PyTorch's DDP",
          "[ddp][attention][fixture]") {
  const json ref = testing::read_ddp_fixture("mha_ddp_reference.json");
  const int64_t batch = ref["batch"], length = ref["length"];
  testing::require_no_failures(testing::run_threads(2, [&](comm::ProcessGroup& pg, Expectations& e) {
    const int rank = pg.rank();
    const json& mine = ref["ranks"][rank];
    auto model = std::make_shared<AttentionClassifier>();
    testing::load_initial(*model, mine["initial"]);
    ddp::DistributedDataParallel ddp_model(model, testing::borrow(pg));
    nn::SGD optimizer(model->parameters(), nn::SGDOptions(ref["lr"].get<double>()).momentum(0.9));
    for (size_t step = 0; step < mine["batches"].size(); ++step) {
      const json& b = mine["batches"][step];
      const std::string where = fmt::format("rank {} step {}", rank, step);
      const Tensor ids = tensor::from_vector(b["ids"].get<std::vector<int64_t>>(), tensor::Shape{batch, length});
      const Tensor lengths = tensor::from_vector(b["lengths"].get<std::vector<int64_t>>(), tensor::Shape{batch, 1});
      const Tensor padding = tensor::ge(tensor::arange(length).unsqueeze(0), lengths);  // true: not attended
      const Tensor targets = tensor::from_vector(b["targets"].get<std::vector<int64_t>>(), tensor::Shape{batch});
      optimizer.zero_grad();
      const std::vector<Tensor> out = ddp_model(ids, padding);
      const Tensor loss = nn::cross_entropy(out[0], targets) + 0.1 * tensor::sum(out[1] * out[1]);
      loss.backward();
      const double want = mine["losses"][step].get<double>();
      e.expect(std::fabs(loss.item<double>() - want) < 1e-6,
               fmt::format("{}: loss {}, PyTorch {}", where, loss.item<double>(), want));
      testing::compare_records(ref["steps"][step]["grads"], testing::grads_of(*model), where + " gradients", e);
      optimizer.step();
      testing::compare_records(ref["steps"][step]["params"], model->named_parameters(), where + " weights", e);
    }
  }));
}
