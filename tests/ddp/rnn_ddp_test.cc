// Recurrent layers under DDP against PyTorch's DDP (fixtures/make_rnn_ddp_fixture.py): a
// sequence classifier of Embedding, a 2-layer bidirectional LSTM read at the forward
// direction's last step, and a GRU branch that both ranks, one or none run, trained on 2 gloo
// ranks with find_unused_parameters. Two lessons in one model: the last layer's reverse weights
// are reachable from the loss, so DDP counts them as used and they get gradients that are
// exactly zero (as in PyTorch); the GRU, when a rank skips it, is unused on that rank, which
// only find_unused_parameters handles (without it the next forward names its weights).
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

const json& reference() {
  static const json data = testing::read_ddp_fixture("rnn_ddp_reference.json");
  return data;
}

// The fixture's model: ids [N, T] -> logits [N, 3].
struct SequenceClassifier : nn::Module {
  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::LSTM> lstm;
  std::shared_ptr<nn::GRU> gru;
  std::shared_ptr<nn::Linear> head;
  int64_t hidden;
  bool use_gru = true;
  explicit SequenceClassifier(int64_t hidden_) : Module("SequenceClassifier"), hidden(hidden_) {
    nn::SkipInitGuard no_draws;  // the weights come from the fixture; rank threads share the generator
    embed = register_module("embed", std::make_shared<nn::Embedding>(7, 4));
    lstm = register_module("lstm", std::make_shared<nn::LSTM>(4, hidden, 2, true, /*batch_first=*/true, 0.0,
                                                              /*bidirectional=*/true));
    gru = register_module("gru", std::make_shared<nn::GRU>(4, hidden, 1, true, /*batch_first=*/true));
    head = register_module("head", std::make_shared<nn::Linear>(hidden, 3));
  }
  Tensor forward(const Tensor& ids) override {
    const Tensor e = embed->forward(ids);
    const Tensor out = lstm->forward(e);                                   // [N, T, 2 * hidden]
    Tensor feature = out.select(1, out.size(1) - 1).narrow(1, 0, hidden);  // the forward direction only
    if (use_gru) feature = feature + std::get<1>(gru->forward(e, Tensor())).select(0, 0);
    return head->forward(feature);
  }
};

std::shared_ptr<SequenceClassifier> model_for(const json& ref, int rank) {
  auto model = std::make_shared<SequenceClassifier>(ref["hidden"].get<int64_t>());
  testing::load_initial(*model, ref["ranks"][rank]["initial"]);
  return model;
}

Tensor ids_of(const json& ref, const json& batch) {
  return tensor::from_vector(batch[0].get<std::vector<int64_t>>(),
                             tensor::Shape{ref["batch"].get<int64_t>(), ref["length"].get<int64_t>()});
}

}  // namespace

TEST_CASE("DDP: an LSTM and a GRU branch used by both, one or no rank train as PyTorch's DDP", "[ddp][rnn][fixture]") {
  const json& ref = reference();
  const std::vector<std::string> failures = testing::run_threads(2, [&](comm::ProcessGroup& pg, Expectations& e) {
    const int rank = pg.rank();
    const json& mine = ref["ranks"][rank];
    const auto model = model_for(ref, rank);
    ddp::DistributedDataParallel ddp_model(model, testing::borrow(pg), ddp::DDPOptions().find_unused_parameters(true));
    nn::SGD optimizer(model->parameters(), nn::SGDOptions(ref["lr"].get<double>()));
    for (size_t step = 0; step < mine["batches"].size(); ++step) {
      const json& batch = mine["batches"][step];
      const std::string where = fmt::format("rank {} step {}", rank, step);
      model->use_gru = ref["use_gru"][step][rank].get<bool>();
      optimizer.zero_grad();
      const Tensor targets = tensor::from_vector(batch[1].get<std::vector<int64_t>>(), tensor::Shape{3});
      const Tensor loss = nn::cross_entropy(ddp_model(ids_of(ref, batch)), targets);
      loss.backward();
      const double want_loss = mine["losses"][step].get<double>();
      e.expect(std::fabs(loss.item<double>() - want_loss) < 1e-6,
               fmt::format("{}: loss {}, PyTorch {}", where, loss.item<double>(), want_loss));
      testing::compare_records(ref["steps"][step]["grads"], testing::grads_of(*model), where + " gradients", e);
      // Reachable, so reduced: zeros, not "no gradient".
      const Tensor reverse = model->lstm->named_parameters().at("weight_hh_l1_reverse").grad();
      e.expect(reverse.defined() && tensor::equal(reverse, tensor::zeros_like(reverse)),
               where + ": weight_hh_l1_reverse.grad should be defined and exactly zero");
      optimizer.step();
      testing::compare_records(ref["steps"][step]["params"], model->named_parameters(), where + " weights", e);
    }
  });
  CHECK(failures.empty());
  if (!failures.empty()) FAIL_CHECK(failures.size() << " differences, the first: " << failures.front());
}

TEST_CASE("DDP: without find_unused_parameters, a skipped GRU branch is an error naming its weights",
          "[ddp][rnn][errors]") {
  const json& ref = reference();
  testing::require_no_failures(testing::run_threads(2, [&](comm::ProcessGroup& pg, Expectations& e) {
    const auto model = model_for(ref, pg.rank());
    ddp::DistributedDataParallel ddp_model(model, testing::borrow(pg), ddp::DDPOptions());
    const json& batch = ref["ranks"][pg.rank()]["batches"][0];
    model->use_gru = false;
    tensor::sum(ddp_model(ids_of(ref, batch))).backward();
    try {
      ddp_model(ids_of(ref, batch));
      e.failures.push_back("forward after an incomplete reduction did not fail");
    } catch (const Error& ex) {
      e.expect_contains(ex.what(), "[gru.weight_ih_l0, gru.weight_hh_l0, gru.bias_ih_l0, gru.bias_hh_l0]",
                        "message does not name the GRU's weights");
    }
  }));
}
