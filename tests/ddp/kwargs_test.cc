// Keyword arguments under DDP, as PyTorch's DDP forward(*inputs, **kwargs): ddp.call_kwargs
// passes them to the module's call_kwargs, so the module's kwargs hooks see and change them,
// and a bool among them may choose which parameters the forward uses (find_unused_parameters
// follows). The reference is the same module outside DDP run on both ranks' batches, its
// gradients averaged: what DDP's allreduce must give.
#include <mutex>

#include "tests/comm/comm_test_util.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp;
using nn::Module;
using nn::Tensors;
using nn::Value;
using tensor::Tensor;
using testing::Expectations;

namespace {

// forward(x, bias, scale=1.0, use_extra=False) = lin(x) * scale + bias (+ extra(x) if use_extra).
struct KwargNet : Module {
  std::shared_ptr<nn::Linear> lin, extra;
  KwargNet() : Module("KwargNet") {
    lin = register_module("lin", std::make_shared<nn::Linear>(3, 2));
    extra = register_module("extra", std::make_shared<nn::Linear>(3, 2));
  }
  Value forward_kwargs(const Tensors& args, const Value& kwargs) override {
    Tensor y = tensor::mul((*lin)(args.at(0)), kwargs.get("scale", 1.0).as_double()) + kwargs["bias"].tensor();
    if (kwargs.get("use_extra", false).as_bool()) y = y + (*extra)(args.at(0));
    return y;
  }
};

// The net with a kwargs pre-hook (bias' = 2 bias) and a kwargs forward hook (out + bias').
std::shared_ptr<KwargNet> hooked_net() {
  static std::mutex mutex;  // rank threads share the default generator
  std::lock_guard<std::mutex> lock(mutex);
  tensor::manual_seed(3);
  auto net = std::make_shared<KwargNet>();
  net->register_forward_pre_hook(
      [](Module&, const Tensors& args, const Value& kwargs) -> std::optional<std::pair<Tensors, Value>> {
        Value changed = kwargs;
        changed.set("bias", tensor::mul(kwargs["bias"].tensor(), 2.0));
        return std::make_pair(args, changed);
      });
  net->register_forward_hook(
      [](Module&, const Tensors&, const Value& kwargs, const Tensors& out) -> std::optional<Tensors> {
        return Tensors{out.at(0) + kwargs["bias"].tensor()};
      });
  return net;
}

Tensor loss_of(const Tensor& out) { return tensor::mean(tensor::mul(out, out)); }

void sgd_step(Module& model) {
  tensor::NoGradGuard no_grad;
  for (const Tensor& p : model.parameters()) {
    if (p.grad().defined()) p.sub_(tensor::mul(p.grad(), 0.1));
    p.mutable_grad() = Tensor();
  }
}

}  // namespace

TEST_CASE("DDP passes keyword arguments to the module: its kwargs hooks run, a kwarg picks the parameters used",
          "[ddp][kwargs][hooks]") {
  testing::require_no_failures(testing::run_threads(2, [](comm::ProcessGroup& pg, Expectations& e) {
    auto local = hooked_net(), wrapped = hooked_net();
    ddp::DistributedDataParallel model(wrapped, testing::borrow(pg), ddp::DDPOptions().find_unused_parameters(true));
    // DDP's own kwargs pre-hook: it sees the kwargs before DDP passes them on.
    std::string seen;
    model.register_forward_pre_hook(
        [&](Module&, const Tensors&, const Value& kwargs) -> std::optional<std::pair<Tensors, Value>> {
          seen = kwargs.describe();
          return std::nullopt;
        });
    const Tensor bias = tensor::full({2}, 0.25);
    for (int step = 0; step < 4; ++step) {
      const bool use_extra = step % 2 == 1;
      const Value kwargs = Value::dict({{"bias", bias}, {"scale", 0.5}, {"use_extra", use_extra}});
      tensor::Generator gen(100 + step);  // both ranks' batches, drawn alike on each rank
      const std::vector<Tensor> batches = {tensor::randn({4, 3}, {}, &gen), tensor::randn({4, 3}, {}, &gen)};
      loss_of(model.call_kwargs({batches[pg.rank()]}, kwargs).tensor()).backward();
      const Tensor local_loss = tensor::mul(loss_of(local->call_kwargs({batches[0]}, kwargs).tensor()) +
                                                loss_of(local->call_kwargs({batches[1]}, kwargs).tensor()),
                                            0.5);
      local_loss.backward();
      e.expect_eq(seen,
                  std::string(use_extra ? "dict{bias: tensor [2], scale: 0.5, use_extra: true}"
                                        : "dict{bias: tensor [2], scale: 0.5, use_extra: false}"),
                  "DDP's pre-hook saw");
      e.expect(wrapped->extra->weight.grad().defined() == use_extra,
               fmt::format("step {}: extra's gradient defined should be {}", step, use_extra));
      const auto got = wrapped->named_parameters(), want = local->named_parameters();
      for (const auto& [name, p] : want) {
        if (!p.grad().defined()) continue;
        e.expect_close(got.at(name).grad(), p.grad(), fmt::format("step {}: {}'s gradient", step, name), 1e-5, 1e-6);
      }
      sgd_step(*wrapped);
      sgd_step(*local);
    }
  }));
}
