// A GPT trained as nanoGPT trains it, against PyTorch: fixtures/make_gpt_fixture.py ran 20
// steps of AdamW (weight decay on weights of two or more dimensions only), clipping the total
// gradient norm at 1.0 and linear warmup + cosine decay, once in one process on the whole
// batch and once under DDP on 2 gloo ranks. This test does the same with nn::GPT, in one
// thread and on 2 rank threads, in float32 and in float64, and compares every step's loss
// (each rank's), gradient norm and learning rate, step 0's gradients and the final parameters
// with PyTorch's float64 run, within the float32 spread the fixture measured (float64: scaled
// to its rounding): rounding.h says why. It also checks that nn::GPT after manual_seed
// equals nanoGPT's initial model, value for value.
//
// The tied weight (lm_head.weight is transformer.wte.weight) is one parameter: DDP registers
// it once, its hook fires once with the sum of both uses, and clipping happens after the
// allreduce (the ranks' losses differ, their gradients may not).
#include <cmath>
#include <mutex>

#include "tests/comm/comm_test_util.h"
#include "tests/ddp/gpt_reference.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/ddp/zero_redundancy_optimizer.h"
#include "tinyddp/nn/nn.h"
#include "tinyddp/nn/transformer.h"

using namespace tinyddp;
using tensor::Tensor;
using testing::Expectations;

namespace {

constexpr double kLr = 3e-2, kMinLr = 3e-3, kWeightDecay = 0.1, kClip = 1.0;
constexpr int64_t kWarmup = 5, kWorld = 2;

const nn::OrderedDict<Tensor>& reference() { return testing::gpt_reference(); }

nn::GPTConfig config() { return testing::gpt_fixture_config(); }

// nanoGPT's initial state in `dtype` (ranks that are threads share the default generator: one
// at a time).
std::shared_ptr<nn::GPT> initial_model(tensor::DType dtype = tensor::kFloat32) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  auto model = std::make_shared<nn::GPT>(config());
  model->load_state_dict(testing::gpt_initial_state());  // with lm_head.weight, as PyTorch saves it
  model->to(dtype);
  return model;
}

nn::AdamOptions adam_options() { return nn::AdamOptions(kLr).betas(0.9, 0.95).eps(1e-8); }

// The fixture's 20 steps on rows [first, first + rows) of each batch, through `forward`
// (the model, or DDP around it), with `optimizer` (AdamW with nanoGPT's groups, or ZeRO
// around it); compares everything with the exact run "<run>.f64." within the tolerances of
// the model's dtype (rounding.h).
void train(nn::GPT& model, nn::Module& forward, nn::Optimizer& optimizer, int64_t first, int64_t rows,
           const std::string& run, int rank, Expectations& e) {
  const tensor::DType dtype = model.parameters()[0].dtype();
  const Tensor inputs = reference().at("inputs"), targets = reference().at("targets");
  const int64_t steps = inputs.size(0);
  nn::WarmupCosineLR schedule(optimizer, kWarmup, steps, kMinLr);
  const std::string exact = run + ".f64.";
  const Tensor losses = reference().at(exact + "loss"), norms = reference().at(exact + "grad_norm"),
               lrs = reference().at(exact + "lr");
  const auto fail_all = [&](const std::vector<std::string>& failures, const std::string& where) {
    for (const auto& f : failures) e.expect(false, where + ": " + f);
  };
  for (int64_t step = 0; step < steps; ++step) {
    const std::string where = fmt::format("{} {} rank {} step {}", run, tensor::dtype_name(dtype), rank, step);
    const double lr = optimizer.lr(0);
    e.expect(std::fabs(lr - lrs[step].item<double>()) <= 1e-12 && optimizer.lr(1) == lr,
             fmt::format("{}: lr {}, PyTorch {}", where, lr, lrs[step].item<double>()));
    optimizer.zero_grad();
    const Tensor loss = forward(inputs[step].narrow(0, first, rows), targets[step].narrow(0, first, rows))[1];
    loss.backward();
    const double want = (losses.dim() == 1 ? losses[step] : losses[step][rank]).item<double>();
    e.expect(std::fabs(loss.item<double>() - want) <= testing::gpt_run(run).tolerance("loss", step, want, dtype),
             fmt::format("{}: loss {}, exact {}", where, loss.item<double>(), want));
    if (step == 0) {
      for (const auto& [name, p] : model.named_parameters()) {
        fail_all(testing::gpt_run(run).check(p.grad(), "grad0." + name, dtype), where);
      }
    }
    const double norm = nn::clip_grad_norm_(model.parameters(), kClip).item<double>();
    const double want_norm = norms[step].item<double>();
    e.expect(std::fabs(norm - want_norm) <= testing::gpt_run(run).tolerance("grad_norm", step, want_norm, dtype),
             fmt::format("{}: gradient norm {}, exact {}", where, norm, want_norm));
    optimizer.step();
    schedule.step();
  }
  // Every parameter, the key's bias too: in float32 it is rounding noise that Adam amplifies
  // (its gradient is 0 up to rounding, and Adam divides by the gradient's own size), which the
  // fixture's spread for that part measures.
  for (const auto& [name, p] : model.named_parameters()) {
    fail_all(testing::gpt_run(run).check(p, "param." + name, dtype), fmt::format("rank {} final", rank));
  }
}

}  // namespace

TEST_CASE("nn::GPT after manual_seed equals nanoGPT's model after torch.manual_seed", "[gpt][init]") {
  tensor::manual_seed(1337);
  nn::GPT model(config());
  Expectations e;
  for (const auto& [name, t] : model.state_dict()) e.expect_close(t, reference().at("init." + name), name, 1e-6, 1e-7);
  for (const auto& f : e.failures) UNSCOPED_INFO(f);
  CHECK(e.failures.empty());
  // Every name of PyTorch's state dict, the tied head's as an alias only.
  size_t torch_names = 0;
  for (const auto& name : reference().keys()) torch_names += name.rfind("init.", 0) == 0;
  CHECK(model.state_dict().size() + 1 == torch_names);
  CHECK(model.tied_names() ==
        std::vector<std::pair<std::string, std::string>>{{"lm_head.weight", "transformer.wte.weight"}});
  CHECK(model.lm_head->weight.is_same(model.wte->weight));
}

TEST_CASE("GPT: 20 AdamW steps with decay groups, clipping and warmup + cosine equal PyTorch's, one process",
          "[gpt][train]") {
  for (const tensor::DType dtype : {tensor::kFloat32, tensor::kFloat64}) {
    auto model = initial_model(dtype);
    Expectations e;
    nn::AdamW optimizer(nn::weight_decay_groups(*model, kWeightDecay), adam_options());
    train(*model, *model, optimizer, 0, kWorld * 3, "single", 0, e);
    for (const auto& f : e.failures) UNSCOPED_INFO(f);
    CHECK(e.failures.empty());
  }
}

TEST_CASE("GPT under DDP on 2 ranks equals PyTorch's DDP: tied weight reduced once, clipping after the allreduce",
          "[gpt][train][ddp]") {
  for (const tensor::DType dtype : {tensor::kFloat32, tensor::kFloat64}) {
    const std::vector<std::string> failures =
        testing::run_threads(static_cast<int>(kWorld), [&](comm::ProcessGroup& pg, Expectations& e) {
          auto model = initial_model(dtype);
          ddp::DistributedDataParallel ddp_model(model, testing::borrow(pg));
          nn::AdamW optimizer(nn::weight_decay_groups(*model, kWeightDecay), adam_options());
          train(*model, ddp_model, optimizer, pg.rank() * 3, 3, "ddp", pg.rank(), e);
        });
    for (const auto& f : failures) UNSCOPED_INFO(f);
    CHECK(failures.empty());
  }
}

TEST_CASE("GPT under DDP with ZeroRedundancyOptimizer (groups, scheduler) equals PyTorch's DDP with AdamW",
          "[gpt][train][ddp][zero]") {
  const std::vector<std::string> failures =
      testing::run_threads(static_cast<int>(kWorld), [&](comm::ProcessGroup& pg, Expectations& e) {
        auto model = initial_model();
        ddp::DistributedDataParallel ddp_model(model, testing::borrow(pg));
        ddp::ZeroRedundancyOptimizer zero(nn::weight_decay_groups(*model, kWeightDecay),
                                          ddp::optimizer_class<nn::AdamW>(adam_options()), testing::borrow(pg));
        train(*model, ddp_model, zero, pg.rank() * 3, 3, "ddp", pg.rank(), e);
        // Each rank holds Adam's moments for its share of the parameters only.
        int64_t numel = 0;
        for (const Tensor& p : model->parameters()) numel += p.numel();
        e.expect(zero.local_state_bytes() < 2 * numel * 4 * 3 / 4,
                 fmt::format("rank {} holds {} bytes of Adam state for {} parameters", pg.rank(),
                             zero.local_state_bytes(), numel));
      });
  for (const auto& f : failures) UNSCOPED_INFO(f);
  CHECK(failures.empty());
}
