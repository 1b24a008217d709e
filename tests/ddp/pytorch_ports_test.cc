// PyTorch 1.13's own DDP tests (torch/testing/_internal/distributed/distributed_test.py),
// ported one by one where they test something no other test here covers, on 2 rank threads.
//
// test_ddp_forward_backward_hook: a Linear(2, 2) with a forward pre-hook (relu of the input),
// a forward hook (gelu of the output) and a backward hook (celu of the gradient), once plain and
// once under DDP: the outputs and the gradients must be equal. PyTorch's test registers the
// backward hook with the deprecated register_backward_hook, whose gradients depend on the last
// op inside the module; the port uses the two hooks that replaced it: a full backward pre-hook
// (celu of grad_output, so the weights' gradients see it) and a full backward hook (celu of
// grad_input, so the input's gradient sees it).
//
// test_ddp_static_graph_nested_types: a module returning a tuple, a list or a dict of
// tensors, some nested, by DDP and by DDP with static_graph, 6 steps each (param += grad): the
// structures come back as they were returned and the parameters stay equal. (PyTorch's test
// wraps the DDP model a second time for static_graph; the port wraps a copy of the module.)
//
// test_DistributedDataParallel_SyncBatchNorm_Channels_Last: a SyncBatchNorm(2, momentum 0.99)
// under DDP on each rank's half of a channels-last batch, against the same layer on the whole
// batch (PyTorch's reference is a SyncBatchNorm outside DDP that gathers the same whole batch
// from every rank: a BatchNorm2d of it), 5 steps of param += grad, the batch reshuffled by
// input[randperm] after each: the outputs stay channels last and the parameters equal.
//
// test_ddp_create_graph: a module whose forward (no inputs) returns p^2 for a scalar parameter
// p = 1; six backward(create_graph=true) calls under DDP must not throw and the parameters must
// still require grad. The port also checks what PyTorch 1.13 gives (run by hand on 2 gloo
// ranks): .grad accumulates 2, 4, 6, ... (no zero_grad in the test) and keeps a graph, and
// DDP warns once that higher-order gradients are not synchronised.
#include <mutex>

#include "tinyddp/ddp/sync_batchnorm.h"

#include "tests/comm/comm_test_util.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp;
using nn::Module;
using nn::Tensors;
using tensor::Tensor;
using testing::Expectations;

namespace {

// The test's DummyTestModel (fc = Linear(2, 2) after manual_seed(0)) with its hooks.
std::shared_ptr<nn::Linear> hooked_linear() {
  static std::mutex mutex;  // rank threads share the default generator
  std::lock_guard<std::mutex> lock(mutex);
  tensor::manual_seed(0);
  auto fc = std::make_shared<nn::Linear>(2, 2);
  fc->register_forward_pre_hook(
      [](Module&, const Tensors& in) -> std::optional<Tensors> { return Tensors{tensor::relu(in[0])}; });
  fc->register_forward_hook([](Module&, const Tensors&, const Tensors& out) -> std::optional<Tensors> {
    return Tensors{tensor::gelu(out[0])};
  });
  fc->register_full_backward_pre_hook(
      [](Module&, const Tensors& grad_out) -> std::optional<Tensors> { return Tensors{tensor::celu(grad_out[0])}; });
  fc->register_full_backward_hook([](Module&, const Tensors& grad_in, const Tensors&) -> std::optional<Tensors> {
    return Tensors{tensor::celu(grad_in[0])};
  });
  return fc;
}

// The test's NestedOutputModule: lin = Linear(100, 1, bias=False), its outputs nested as
// output_type says.
struct NestedOutputModule : Module {
  std::shared_ptr<nn::Linear> lin;
  std::string output_type = "tuple";
  NestedOutputModule() : Module("NestedOutputModule") {
    lin = register_module("lin", std::make_shared<nn::Linear>(100, 1, false));
  }
  nn::Value forward_nested(const std::vector<Tensor>& inputs) override {
    const Tensor& inp = inputs.at(0);
    using nn::Value;
    if (output_type == "dict") {
      return Value::dict({{"a", (*lin)(inp)}, {"b", Value::dict({{"c", (*lin)(inp)}})}});
    }
    return Value::list({(*lin)(inp), Value::list({(*lin)(inp), (*lin)(inp)})});  // a tuple or a list
  }
};

// get_loss: the sum of every tensor in the output.
Tensor loss_of(const nn::Value& out) {
  Tensor loss = tensor::zeros({});
  for (const Tensor& t : out.tensors()) loss = loss + tensor::sum(t);
  return loss;
}

// _model_step: param += grad, then no grad.
void model_step(Module& model) {
  tensor::NoGradGuard no_grad;
  for (const Tensor& p : model.parameters()) {
    if (!p.grad().defined()) continue;
    p.add_(p.grad());
    p.mutable_grad() = Tensor();
  }
}

// The test's Model: p = 1, forward() = p^2.
struct SquareModel : Module {
  Tensor p;
  SquareModel() : Module("Model") { p = register_parameter("p", tensor::ones({})); }
  std::vector<Tensor> forward_many(const std::vector<Tensor>&) override { return {tensor::pow(p, 2.0)}; }
};

}  // namespace

TEST_CASE("PyTorch's test_ddp_create_graph: backward(create_graph) under DDP", "[ddp][double_backward][port]") {
  testing::require_no_failures(testing::run_threads(2, [](comm::ProcessGroup& pg, Expectations& e) {
    auto model = std::make_shared<SquareModel>();
    ddp::DistributedDataParallel ddp_model(model, testing::borrow(pg));
    for (int i = 0; i < 6; ++i) {
      ddp_model.forward_many({})[0].backward({}, std::nullopt, /*create_graph=*/true);
      for (const auto& [name, p] : ddp_model.named_parameters())
        e.expect(p.requires_grad(), name + " lost requires_grad");
      const Tensor& grad = model->p.grad();
      e.expect(grad.defined() && grad.item<double>() == 2.0 * (i + 1),
               fmt::format("step {}: p.grad is {} (PyTorch: {})", i, grad.defined() ? grad.item<double>() : -1.0,
                           2.0 * (i + 1)));
      e.expect(grad.requires_grad(), fmt::format("step {}: p.grad has no graph", i));
    }
    e.expect(ddp_model.stats().create_graph, "DDP did not note (and warn about) create_graph");
  }));
}

TEST_CASE("PyTorch's test_ddp_static_graph_nested_types: nested outputs under DDP and static_graph",
          "[ddp][nested][port]") {
  testing::require_no_failures(testing::run_threads(2, [](comm::ProcessGroup& pg, Expectations& e) {
    auto plain = std::make_shared<NestedOutputModule>(), copy = std::make_shared<NestedOutputModule>();
    copy->load_state_dict(plain->state_dict());
    ddp::DistributedDataParallel model(plain, testing::borrow(pg));
    ddp::DistributedDataParallel static_model(copy, testing::borrow(pg), ddp::DDPOptions().static_graph(true));
    tensor::Generator gen(10 + pg.rank());
    const Tensor inp = tensor::randn({10, 100}, {}, &gen);
    for (const std::string type : {"list", "tuple", "dict"}) {
      plain->output_type = copy->output_type = type;
      for (int i = 0; i < 6; ++i) {
        const nn::Value out = model.call_nested({inp});
        loss_of(out).backward();
        model_step(*plain);
        const nn::Value out_static = static_model.call_nested({inp});
        e.expect(type == "dict" ? out_static.is_dict() : out_static.is_list(),
                 fmt::format("{}: the structure came back as {}", type, out_static.describe()));
        loss_of(out_static).backward();
        model_step(*copy);
        e.expect(tensor::equal(plain->lin->weight, copy->lin->weight),
                 fmt::format("{} step {}: the parameters differ", type, i));
      }
    }
  }));
}

TEST_CASE("PyTorch's test_ddp_forward_backward_hook: module hooks run the same under DDP", "[ddp][hooks][port]") {
  testing::require_no_failures(testing::run_threads(2, [](comm::ProcessGroup& pg, Expectations& e) {
    auto local = hooked_linear(), wrapped = hooked_linear();
    ddp::DistributedDataParallel ddp_model(wrapped, testing::borrow(pg));
    tensor::Generator gen(7);  // the same input on both ranks, as the test's
    const Tensor input = tensor::rand({5, 2}, {}, &gen);
    const Tensor x_local = input.clone().requires_grad_(), x_ddp = input.clone().requires_grad_();
    const Tensor out_local = (*local)(x_local), out_ddp = ddp_model(x_ddp);
    e.expect(tensor::equal(out_local, out_ddp), "outputs differ");
    // The hooks did run: relu, then gelu.
    const Tensor expected = tensor::gelu(local->forward(tensor::relu(input)));
    e.expect(tensor::allclose(out_local, expected), "the forward hooks did not run");
    tensor::sum(out_local).backward();
    tensor::sum(out_ddp).backward();
    e.expect(tensor::allclose(wrapped->weight.grad(), local->weight.grad(), 1e-6, 1e-7), "weight gradients differ");
    e.expect(tensor::allclose(wrapped->bias.grad(), local->bias.grad(), 1e-6, 1e-7), "bias gradients differ");
    e.expect(tensor::allclose(x_ddp.grad(), x_local.grad(), 1e-6, 1e-7), "input gradients differ");
  }));
}

TEST_CASE("PyTorch's test_DistributedDataParallel_SyncBatchNorm_Channels_Last", "[ddp][sync_batchnorm][port]") {
  testing::require_no_failures(testing::run_threads(2, [](comm::ProcessGroup& pg, Expectations& e) {
    const int64_t local_bs = 2, global_bs = 2 * pg.size(), offset = 2 * pg.rank();
    auto base = std::make_shared<nn::BatchNorm2d>(2, 1e-5, 0.99);
    auto sync = std::make_shared<ddp::SyncBatchNorm>(2, 1e-5, 0.99, true, true, testing::borrow(pg));
    ddp::DistributedDataParallel model_ddp(sync, testing::borrow(pg));
    tensor::Generator gen(5);  // the same global batch and shuffles on every rank, as the test's
    const auto channels_last = tensor::MemoryFormat::kChannelsLast;
    Tensor input = tensor::randn({global_bs, 2, 4, 4}, {}, &gen).contiguous(channels_last);
    const Tensor target = tensor::randn({global_bs, 2, 4, 4}, {}, &gen).contiguous(channels_last);
    for (int iter = 0; iter < 5; ++iter) {
      const Tensor out = (*base)(input);
      nn::mse_loss(out, target).backward();
      const Tensor out_ddp = model_ddp(input.narrow(0, offset, local_bs));
      tensor::mul(nn::mse_loss(out_ddp, target.narrow(0, offset, local_bs)),
                  static_cast<double>(pg.size() * local_bs) / static_cast<double>(global_bs))
          .backward();
      e.expect(out.is_contiguous(channels_last) && out_ddp.is_contiguous(channels_last),
               fmt::format("iteration {}: an output is not channels last", iter));
      model_step(*base);
      model_step(*sync);
      e.expect(tensor::allclose(base->weight, sync->weight, 1e-5, 1e-6) &&
                   tensor::allclose(base->bias, sync->bias, 1e-5, 1e-6),
               fmt::format("iteration {}: the parameters differ", iter));
      // The test's reshuffle, input[torch.randperm(batch_size)]: still channels last after.
      input = input.index({tensor::randperm(global_bs, &gen)});
    }
  }));
}
