// Parameters without gradients: find_unused_parameters with different subgraphs per rank and
// iteration; the error naming the parameter when it is off; static_graph (unused parameters
// found once, the used-parameter map allreduced in the first iteration only, a graph that
// changes afterwards refused, a hook that fires twice per backward).

#include <fmt/ranges.h>

#include "tests/comm/comm_test_util.h"
#include "tests/ddp/ddp_test_util.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp;
using namespace tinyddp::ddp;
using comm::ProcessGroup;
using testing::borrow;
using testing::Expectations;
using testing::RecordingGroup;
using testing::require_no_failures;
using testing::run_threads;
using testing::TwoHeads;

TEST_CASE("find_unused_parameters: different subgraphs per rank and iteration", "[ddp][unused]") {
  require_no_failures(run_threads(2, [](ProcessGroup& pg, Expectations& e) {
    tensor::manual_seed(3);
    auto model = std::make_shared<TwoHeads>();
    DistributedDataParallel ddp(model, borrow(pg), DDPOptions().find_unused_parameters(true));
    const Tensor marker = tensor::full({2, 4}, 7.0);
    model->never->weight.mutable_grad() = marker.clone();  // unused everywhere: must stay as it is
    for (int it = 0; it < 3; ++it) {
      // Rank 0 uses head a, rank 1 head b; in iteration 2 both use both.
      model->use_a = pg.rank() == 0 || it == 2;
      model->use_b = pg.rank() == 1 || it == 2;
      model->a->weight.mutable_grad() = Tensor();
      model->b->weight.mutable_grad() = Tensor();
      nn::mse_loss(ddp(tensor::ones({3, 4})), tensor::zeros({3, 2})).backward();
      // Heads used on one rank get the average (half of the user's gradient), on both ranks.
      e.expect(model->a->weight.grad().defined() && model->b->weight.grad().defined(),
               fmt::format("iteration {}: a head used by some rank has no gradient", it));
      e.expect_close(model->never->weight.grad(), marker, "the .grad of a parameter unused everywhere");
      // Every rank ends with the same gradients.
      std::vector<Tensor> all{tensor::zeros({2, 4}), tensor::zeros({2, 4})};
      pg.allgather(all, model->a->weight.grad())->wait();
      e.expect_close(all[1], all[0], "rank 1's gradient of head a against rank 0's");
    }
  }));
}

TEST_CASE("without find_unused_parameters, a parameter without gradient is a clear error naming it",
          "[ddp][unused][errors]") {
  require_no_failures(run_threads(2, [](ProcessGroup& pg, Expectations& e) {
    tensor::manual_seed(3);
    auto model = std::make_shared<TwoHeads>();
    DistributedDataParallel ddp(model, borrow(pg), DDPOptions());
    model->use_b = false;
    // As in PyTorch, backward itself returns (the missing gradients could still come from
    // another backward pass of the same forward); the next forward reports them.
    nn::mse_loss(ddp(tensor::ones({3, 4})), tensor::zeros({3, 2})).backward();
    for (int attempt = 0; attempt < 2; ++attempt) {  // and keeps refusing
      try {
        ddp(tensor::ones({3, 4}));
        e.failures.push_back("forward after an incomplete reduction did not fail");
      } catch (const Error& ex) {
        const std::string m = ex.what();
        e.expect_contains(m, "without gradients for parameter(s) [b.weight, b.bias, never.weight, never.bias]",
                          "message does not name the parameters");
        e.expect_contains(m, "find_unused_parameters = true", "message does not suggest the fix");
      }
    }
  }));
}

TEST_CASE("static_graph: unused parameters found once, results as with find_unused_parameters", "[ddp][static_graph]") {
  require_no_failures(run_threads(2, [](ProcessGroup& pg, Expectations& e) {
    std::vector<std::vector<Tensor>> results;
    for (const DDPOptions& options : {DDPOptions().find_unused_parameters(true), DDPOptions().static_graph(true)}) {
      auto model = std::make_shared<TwoHeads>();
      {
        // Thread-local initialisation: the global generator is shared by the rank threads.
        tensor::NoGradGuard no_grad;
        tensor::Generator g(21);
        for (const Tensor& p : model->parameters()) tensor::uniform_(p, -0.5, 0.5, &g);
      }
      model->use_a = true;
      model->use_b = pg.rank() == 1;  // the same graph every iteration on each rank
      DistributedDataParallel ddp(model, borrow(pg), options);
      nn::SGD opt(model->parameters(), nn::SGDOptions(0.1));
      for (int it = 0; it < 3; ++it) {
        opt.zero_grad();
        nn::mse_loss(ddp(tensor::full({3, 4}, it + 1.0)), tensor::zeros({3, 2})).backward();
        opt.step();
      }
      e.expect(!model->never->weight.grad().defined(), "a parameter unused everywhere got a gradient");
      std::vector<Tensor> params;
      for (const Tensor& p : model->parameters()) params.push_back(p.clone());
      results.push_back(params);
    }
    for (size_t i = 0; i < results[0].size(); ++i) {
      e.expect_close(results[1][i], results[0][i],
                     fmt::format("parameter {} with static_graph against find_unused_parameters", i));
    }
  }));
}

TEST_CASE("static_graph: the used-parameter map is allreduced in the first iteration only", "[ddp][static_graph]") {
  require_no_failures(run_threads(2, [](ProcessGroup& pg, Expectations& e) {
    for (const bool static_graph : {false, true}) {
      RecordingGroup recording(borrow(pg));
      tensor::manual_seed(4);
      auto model = std::make_shared<TwoHeads>();
      model->use_b = pg.rank() == 1;
      DDPOptions options = static_graph ? DDPOptions().static_graph(true) : DDPOptions().find_unused_parameters(true);
      DistributedDataParallel ddp(model, borrow(recording), options);
      for (int it = 0; it < 3; ++it) {
        const Tensor out = ddp(tensor::ones({3, 4}));
        const size_t buckets = ddp.reducer().snapshot().bucket_contents.size();
        recording.clear();
        nn::mse_loss(out, tensor::zeros({3, 2})).backward();
        // Every bucket is reduced; find_unused_parameters adds the map every iteration,
        // static_graph in its first iteration only.
        const size_t expected = buckets + ((!static_graph || it == 0) ? 1 : 0);
        e.expect_eq(recording.count("allreduce"), expected,
                    fmt::format("static_graph {} iteration {}: allreduces", static_graph, it));
      }
    }
  }));
}

TEST_CASE("static_graph: a graph that changes after the first iteration is a clear error",
          "[ddp][static_graph][errors]") {
  // A parameter unused in the first iteration that gets a gradient later.
  require_no_failures(run_threads(2, [](ProcessGroup& pg, Expectations& e) {
    tensor::manual_seed(4);
    auto model = std::make_shared<TwoHeads>();
    model->use_b = false;
    DistributedDataParallel ddp(model, borrow(pg), DDPOptions().static_graph(true));
    nn::mse_loss(ddp(tensor::ones({3, 4})), tensor::zeros({3, 2})).backward();
    model->use_b = true;
    try {
      nn::mse_loss(ddp(tensor::ones({3, 4})), tensor::zeros({3, 2})).backward();
      e.failures.push_back("a newly used parameter was accepted");
    } catch (const Error& ex) {
      e.expect_contains(ex.what(), "'b.");
      e.expect_contains(ex.what(), "got none in the first iteration");
    }
  }));
  // A parameter used in the first iteration that gets none later: the next forward says so.
  require_no_failures(run_threads(2, [](ProcessGroup& pg, Expectations& e) {
    tensor::manual_seed(4);
    auto model = std::make_shared<TwoHeads>();
    DistributedDataParallel ddp(model, borrow(pg), DDPOptions().static_graph(true));
    nn::mse_loss(ddp(tensor::ones({3, 4})), tensor::zeros({3, 2})).backward();
    model->use_b = false;
    nn::mse_loss(ddp(tensor::ones({3, 4})), tensor::zeros({3, 2})).backward();
    try {
      ddp(tensor::ones({3, 4}));
      e.failures.push_back("a parameter that stopped getting gradients was accepted");
    } catch (const Error& ex) {
      const std::string m = ex.what();
      e.expect_contains(m, "[b.weight, b.bias]");
      e.expect_contains(m, "static_graph");
    }
  }));
}

TEST_CASE("static_graph: a parameter whose hook fires twice per backward is ready after the second firing",
          "[ddp][static_graph]") {
  // Reentrant checkpointing makes a parameter's accumulator fire more than once in one backward
  // pass (the test after this one does it with nn::checkpoint); here the second firing of the
  // first layer's weight hooks is made by hand, from the post-hook of its bias (which runs
  // later in the same pass).
  const auto run = [](ProcessGroup& pg, Expectations& e, bool static_graph) {
    tensor::manual_seed(6);
    auto model = nn::mlp({6, 8, 3});
    const Tensor weight = model->named_parameters().at("0.weight");
    const Tensor bias = model->named_parameters().at("0.bias");
    DistributedDataParallel ddp(model, borrow(pg), DDPOptions().static_graph(static_graph));
    bool fired_weight = false;
    auto note = weight.grad_accumulator()->add_post_hook([&] { fired_weight = true; });
    int second_firings = 0;
    auto again = bias.grad_accumulator()->add_post_hook([&] {
      if (!fired_weight) return;
      ++second_firings;
      weight.grad_accumulator()->run_post_hooks();  // the weight's gradient "arrives" again
    });
    nn::SGD opt(model->parameters(), nn::SGDOptions(0.1));
    tensor::Generator data(50 + pg.rank());
    for (int it = 0; it < 3; ++it) {
      fired_weight = false;
      opt.zero_grad();
      nn::mse_loss(ddp(tensor::randn({4, 6}, {}, &data)), tensor::randn({4, 3}, {}, &data)).backward();
      opt.step();
    }
    std::vector<Tensor> all{tensor::zeros_like(weight), tensor::zeros_like(weight)};
    pg.allgather(all, weight)->wait();
    e.expect_close(all[1], all[0], "rank 1's first-layer weight against rank 0's");
    e.expect_eq(second_firings, 3, "second firings in 3 iterations");
    note.remove();
    again.remove();
  };
  require_no_failures(run_threads(2, [&](ProcessGroup& pg, Expectations& e) { run(pg, e, true); }));
  // Without static_graph the second firing is the "marked twice" error, as in PyTorch.
  require_no_failures(run_threads(2, [&](ProcessGroup& pg, Expectations& e) {
    try {
      run(pg, e, false);
      e.failures.push_back("a second firing without static_graph was accepted");
    } catch (const Error& ex) {
      e.expect_contains(ex.what(), "marked ready twice");
    }
  }));
}

namespace {

// x -> out(checkpoint(shared, checkpoint(shared, x))): `shared`'s parameters are recomputed and
// reach their gradients from two backward passes nested inside the outer one, firing twice.
struct CheckpointedTwice : nn::Module {
  std::shared_ptr<nn::Linear> shared = register_module("shared", std::make_shared<nn::Linear>(6, 6));
  std::shared_ptr<nn::Linear> out = register_module("out", std::make_shared<nn::Linear>(6, 3));
  bool checkpointed = true;
  Tensor forward(const Tensor& x) override {
    const auto step = [this](const Tensor& v) { return tensor::tanh((*shared)(v)); };
    if (!checkpointed) return (*out)(step(step(x)));
    return (*out)(nn::checkpoint(step, nn::checkpoint(step, x)));
  }
};

}  // namespace

TEST_CASE("static_graph: reentrant checkpointing, a parameter's hook firing in two nested passes",
          "[ddp][static_graph][checkpoint]") {
  // The input requires grad (PyTorch's reentrant checkpoint passes gradients only when one
  // does); DDP with static_graph trains as the same model without checkpointing does.
  const auto train = [](ProcessGroup& pg, bool checkpointed) {
    auto model = std::make_shared<CheckpointedTwice>();
    model->checkpointed = checkpointed;
    tensor::Generator init(8);  // the rank threads share the default generator: a local one
    for (const Tensor& p : model->parameters()) {
      tensor::NoGradGuard no_grad;
      p.copy_(tensor::mul(tensor::randn(p.sizes(), {}, &init), 0.3));
    }
    DistributedDataParallel ddp(model, borrow(pg), DDPOptions().static_graph(true));
    nn::SGD opt(model->parameters(), nn::SGDOptions(0.1));
    tensor::Generator data(70 + pg.rank());
    for (int it = 0; it < 3; ++it) {
      opt.zero_grad();
      const Tensor x = tensor::randn({4, 6}, {}, &data).requires_grad_();
      nn::mse_loss(ddp(x), tensor::randn({4, 3}, {}, &data)).backward();
      opt.step();
    }
    return model->shared->weight.detach().clone();
  };
  require_no_failures(run_threads(2, [&](ProcessGroup& pg, Expectations& e) {
    const Tensor with = train(pg, true), without = train(pg, false);
    e.expect_close(with, without, "the shared layer's weight, checkpointed against not");
    std::vector<Tensor> all{tensor::zeros_like(with), tensor::zeros_like(with)};
    pg.allgather(all, with)->wait();
    e.expect_close(all[1], all[0], "rank 1's shared weight against rank 0's");
  }));
}

namespace {

// x -> {"a": a(x)} or, with use_b, {"a": a(x), "more": [{"b": b(x)}]}: b's output only nested.
struct NestedHeads : nn::Module {
  std::shared_ptr<nn::Linear> a, b;
  bool use_b = true;
  NestedHeads() : Module("NestedHeads") {
    a = register_module("a", std::make_shared<nn::Linear>(3, 2));
    b = register_module("b", std::make_shared<nn::Linear>(3, 2));
  }
  nn::Value forward_nested(const std::vector<Tensor>& in) override {
    using nn::Value;
    if (!use_b) return Value::dict({{"a", (*a)(in.at(0))}});
    return Value::dict({{"a", (*a)(in.at(0))}, {"more", Value::list({Value::dict({{"b", (*b)(in.at(0))}})})}});
  }
};

Tensor squares(const nn::Value& out) {
  Tensor loss = tensor::zeros({});
  for (const Tensor& t : out.tensors()) loss = loss + tensor::sum(t * t);
  return loss;
}

}  // namespace

TEST_CASE("find_unused_parameters finds the tensors nested in an output's dicts and lists", "[ddp][unused][nested]") {
  // use_b per step and rank: both, one, none.
  const std::vector<std::vector<bool>> use_b{{true, true}, {true, false}, {false, false}};
  require_no_failures(run_threads(2, [&](ProcessGroup& pg, Expectations& e) {
    auto model = std::make_shared<NestedHeads>(), local = std::make_shared<NestedHeads>();
    DistributedDataParallel ddp(model, borrow(pg), DDPOptions().find_unused_parameters(true));
    local->load_state_dict(model->state_dict());  // rank 0's weights, which DDP broadcast
    tensor::Generator gen(40 + pg.rank());
    for (size_t step = 0; step < use_b.size(); ++step) {
      model->use_b = local->use_b = use_b[step][pg.rank()];
      const Tensor x = tensor::randn({4, 3}, {}, &gen);
      model->zero_grad();
      local->zero_grad();
      squares(ddp.call_nested({x})).backward();
      squares(local->call_nested({x})).backward();
      // What DDP must give: the mean of the ranks' own gradients (zeros where a rank did not use
      // b), and no gradient at all when no rank did.
      Tensor mine = local->b->weight.grad().defined() ? local->b->weight.grad().clone() : tensor::zeros({2, 3});
      pg.allreduce({mine})->wait();
      const Tensor got = model->b->weight.grad();
      if (!use_b[step][0] && !use_b[step][1]) {
        e.expect(!got.defined(), fmt::format("step {}: b.weight.grad is defined though no rank used b", step));
        continue;
      }
      e.expect(got.defined() && tensor::allclose(got, tensor::div(mine, 2.0), 1e-6, 1e-7),
               fmt::format("step {}: b.weight.grad is not the mean of the ranks' gradients", step));
    }
  }));
}
