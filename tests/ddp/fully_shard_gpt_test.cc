// fully_shard on nanoGPT's model against tinyddp's DDP (in float64, model.parameters() giving
// the shards to AdamW) and against PyTorch: the GPT fixture's 20 steps (fixtures/
// make_gpt_fixture.py: AdamW with nanoGPT's decay groups, clipping at 1.0, warmup + cosine, on
// 2 gloo ranks under PyTorch's DDP) run with each Block a unit and the root holding the rest,
// and the same run in bfloat16 mixed precision against fixtures/
// make_fsdp_mixed_precision_fixture.py, which writes out in plain PyTorch what FSDP2's
// MixedPrecisionPolicy(param_dtype=bfloat16) computes.
//
// Tolerances. float32: the fixture's float32 spread around its float64 run (rounding.h), as
// tests/ddp/gpt_test.cc holds DDP to. Mixed precision (at a tenth of the learning rate: the
// fixture says why): the two frameworks round different float32 sums to bfloat16 (2^-8
// relative each), so each lands about as far from the exact sums as PyTorch's bfloat16 run
// lands from its float32 run, which the fixture records ("mp" against "f32"), and the two
// about twice as far from each other. Step 0's reduced gradients (the same bfloat16 weights on
// both sides): twice that distance, per tensor, plus 1e-6 of its largest magnitude. Over the
// steps the differences compound as the drift does: each step's loss and gradient norm three
// times the drift (the largest so far) plus, for the loss, a bfloat16 unit in its last place
// (the loss is a bfloat16 number). The final parameters as one vector: their 2-norm distance
// from PyTorch's float32 run at most twice its bfloat16 run's. Not tensor by tensor: where a
// gradient component is rounding noise (near zero), Adam, which divides by the gradient's own
// size, moves it by about the learning rate each step in a direction the rounding picks, so a
// single element lands where it may (h.1.attn.c_proj.bias: one element 9e-4 from the float32
// run here, 6e-5 in PyTorch's bfloat16 run; the float32 tests meet the same in the keys' bias,
// rounding.h), while an error in the arithmetic moves every tensor.
#include <cmath>
#include <mutex>

#include "tests/comm/comm_test_util.h"
#include "tests/ddp/gpt_reference.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/ddp/fully_shard.h"
#include "tinyddp/nn/nn.h"
#include "tinyddp/nn/transformer.h"

using namespace tinyddp;
using tensor::Tensor;
using testing::Expectations;

namespace {

constexpr double kWeightDecay = 0.1, kClip = 1.0;
constexpr int64_t kWarmup = 5, kWorld = 2, kRows = 3;

const nn::OrderedDict<Tensor>& reference() { return testing::gpt_reference(); }

const nn::OrderedDict<Tensor>& mixed_reference() {
  static const nn::SafetensorsFile file = nn::load_safetensors("tests/ddp/fixtures/fsdp_mixed_precision.safetensors");
  return file.tensors;
}

// nanoGPT's initial state (the fixture's), sharded: each Block a unit, then the root.
std::shared_ptr<nn::GPT> sharded_model(comm::ProcessGroup& pg, const ddp::FullyShardOptions& options) {
  std::shared_ptr<nn::GPT> model;
  {
    static std::mutex mutex;  // rank threads share the default generator
    std::lock_guard<std::mutex> lock(mutex);
    model = std::make_shared<nn::GPT>(testing::gpt_fixture_config());
  }
  model->load_state_dict(testing::gpt_initial_state());
  ddp::fully_shard_by_policy(model, testing::borrow(pg), ddp::is_a<nn::Block>, options);
  return model;
}

struct Run {
  std::vector<double> losses, norms;  // this rank's loss and the gradient norm, per step
  nn::OrderedDict<Tensor> grad0;      // step 0's full gradients (before clipping)
  nn::OrderedDict<Tensor> final_state;
};

// Every parameter's full gradient, put together from the ranks' shards (a collective).
nn::OrderedDict<Tensor> full_gradients(const nn::GPT& model, comm::ProcessGroup& pg) {
  nn::OrderedDict<Tensor> out;
  for (const auto& [name, shard] : ddp::sharded_named_parameters(model)) {
    std::vector<Tensor> blocks;
    for (int r = 0; r < pg.size(); ++r) blocks.push_back(tensor::empty_like(shard.grad()));
    pg.allgather(blocks, shard.grad())->wait();
    out.insert(name, tensor::cat(blocks, 0).narrow(0, 0, reference().at("init." + name).size(0)));
  }
  return out;
}

// The fixture's 20 steps on this rank's rows, as train_gpt trains under --fsdp, at `lr`
// decaying to `min_lr`.
Run train(nn::GPT& model, comm::ProcessGroup& pg, Expectations& e, double lr, double min_lr) {
  nn::AdamW optimizer(nn::weight_decay_groups(ddp::sharded_parameters(model), kWeightDecay),
                      nn::AdamWOptions(lr).betas(0.9, 0.95).eps(1e-8));
  const Tensor inputs = reference().at("inputs"), targets = reference().at("targets");
  const int64_t steps = inputs.size(0);
  nn::WarmupCosineLR schedule(optimizer, kWarmup, steps, min_lr);
  Run run;
  for (int64_t step = 0; step < steps; ++step) {
    optimizer.zero_grad();
    const Tensor loss = model.call(
        {inputs[step].narrow(0, kRows * pg.rank(), kRows), targets[step].narrow(0, kRows * pg.rank(), kRows)})[1];
    loss.backward();
    if (step == 0) run.grad0 = full_gradients(model, pg);
    const Tensor norm = ddp::clip_sharded_grad_norm_(ddp::sharded_parameters(model), kClip, pg);
    for (const Tensor& shard : ddp::sharded_parameters(model)) {  // the optimizer sees float32 only
      e.expect(shard.dtype() == tensor::kFloat32 && shard.grad().dtype() == tensor::kFloat32,
               fmt::format("step {}: a shard or its gradient is not float32", step));
    }
    optimizer.step();
    schedule.step();
    run.losses.push_back(loss.to(tensor::kFloat64).item<double>());
    run.norms.push_back(norm.to(tensor::kFloat64).item<double>());
  }
  run.final_state = ddp::full_state_dict(model);
  return run;
}

}  // namespace

TEST_CASE("fully_shard: the GPT trained 20 steps on 2 ranks equals PyTorch's DDP run (float32)",
          "[ddp][fsdp][gpt][train]") {
  testing::require_no_failures(testing::run_threads(kWorld, [](comm::ProcessGroup& pg, Expectations& e) {
    auto model = sharded_model(pg, {});
    const Run run = train(*model, pg, e, 3e-2, 3e-3);  // the GPT fixture's rates
    const testing::ExactRun exact = testing::gpt_run("ddp");
    for (size_t step = 0; step < run.losses.size(); ++step) {
      const double loss = exact.exact("loss")[step][pg.rank()].item<double>();
      const double norm = exact.exact("grad_norm")[step].item<double>();
      e.expect(std::fabs(run.losses[step] - loss) <= exact.tolerance("loss", step, loss, tensor::kFloat32),
               fmt::format("step {}: loss {}, exact {}", step, run.losses[step], loss));
      e.expect(std::fabs(run.norms[step] - norm) <= exact.tolerance("grad_norm", step, norm, tensor::kFloat32),
               fmt::format("step {}: gradient norm {}, exact {}", step, run.norms[step], norm));
    }
    for (const auto& [name, value] : run.final_state) {
      for (const std::string& f : exact.check(value, "param." + name, tensor::kFloat32)) e.expect(false, f);
    }
    for (const auto& [name, value] : run.grad0) {
      for (const std::string& f : exact.check(value, "grad0." + name, tensor::kFloat32)) e.expect(false, f);
    }
  }));
}

TEST_CASE("fully_shard: bfloat16 mixed precision follows PyTorch's, within its bf16-vs-float32 distance",
          "[ddp][fsdp][gpt][autocast]") {
  const nn::OrderedDict<Tensor>& ref = mixed_reference();
  testing::require_no_failures(testing::run_threads(kWorld, [&](comm::ProcessGroup& pg, Expectations& e) {
    ddp::FullyShardOptions options;
    options.mp_policy(ddp::MixedPrecisionPolicy().param_dtype(tensor::kBFloat16));
    auto model = sharded_model(pg, options);
    // The module computes in bfloat16: its gathered parameters are, during the forward.
    autograd::RemovableHandle seen =
        model->h[0]->register_forward_hook([&](nn::Module& m, const nn::Tensors&, const nn::Tensors& out) {
          e.expect(m.named_registered_parameters().values()[0].dtype() == tensor::kBFloat16 &&
                       out[0].dtype() == tensor::kBFloat16,
                   "Block 0's gathered parameters and output are bfloat16");
          return std::optional<nn::Tensors>();
        });
    const Run run = train(*model, pg, e, 3e-3, 3e-4);  // the mixed-precision fixture's rates
    seen.remove();
    // Tensor `name` of `ours` against record `key` of PyTorch's bfloat16 run: within `factor`
    // times PyTorch's own bfloat16-vs-float32 distance plus 1e-6 of its largest magnitude.
    const auto expect_near = [&](const Tensor& ours, const std::string& key, double factor) {
      const Tensor& want = ref.at("mp." + key);
      const auto distance = [&](const Tensor& a) {
        return tensor::max(tensor::abs(tensor::sub(a, want))).item<double>();
      };
      const double scale = std::max(1.0, tensor::max(tensor::abs(want)).item<double>());
      const double allowed = factor * distance(ref.at("f32." + key)) + 1e-6 * scale;
      e.expect(ours.dtype() == tensor::kFloat32, key + ": not float32");
      e.expect(distance(ours) <= allowed,
               fmt::format("{}: {:.3g} off PyTorch's bf16 run, allowed {:.3g}", key, distance(ours), allowed));
    };
    for (const auto& [name, value] : run.grad0) expect_near(value, "grad0." + name, 2);
    double ours = 0, theirs = 0;  // squared distances from PyTorch's float32 run
    for (const auto& [name, value] : run.final_state) {
      e.expect(value.dtype() == tensor::kFloat32, name + ": the full state dict is not float32");
      const Tensor& f32 = ref.at("f32.param." + name);
      ours += tensor::sum(tensor::pow(tensor::sub(value, f32), 2.0)).item<double>();
      theirs += tensor::sum(tensor::pow(tensor::sub(ref.at("mp.param." + name), f32), 2.0)).item<double>();
    }
    e.expect(std::sqrt(ours) <= 2 * std::sqrt(theirs),
             fmt::format("the final parameters are {:.3g} from PyTorch's float32 run, its bf16 run {:.3g}",
                         std::sqrt(ours), std::sqrt(theirs)));
    const Tensor mp_loss = ref.at("mp.loss"), f32_loss = ref.at("f32.loss");
    const Tensor mp_norm = ref.at("mp.grad_norm"), f32_norm = ref.at("f32.grad_norm");
    double loss_drift = 0, norm_drift = 0;  // PyTorch's bfloat16 run against its float32 run, so far
    for (size_t step = 0; step < run.losses.size(); ++step) {
      const double want = mp_loss[step][pg.rank()].item<double>(), want_norm = mp_norm[step].item<double>();
      loss_drift = std::max(loss_drift, std::fabs(want - f32_loss[step][pg.rank()].item<double>()));
      norm_drift = std::max(norm_drift, std::fabs(want_norm - f32_norm[step].item<double>()));
      const double loss_ulp = std::ldexp(1.0, std::ilogb(want) - 7);  // bfloat16's unit at the loss
      e.expect(std::fabs(run.losses[step] - want) <= 3 * loss_drift + loss_ulp,
               fmt::format("step {}: loss {}, PyTorch's bf16 run {} (allowed {:.3g})", step, run.losses[step], want,
                           3 * loss_drift + loss_ulp));
      e.expect(std::fabs(run.norms[step] - want_norm) <= 3 * norm_drift,
               fmt::format("step {}: gradient norm {}, PyTorch's bf16 run {}", step, run.norms[step], want_norm));
    }
  }));
}

TEST_CASE("fully_shard: the GPT (each Block a unit, then the root with the tied embedding) trains as under DDP",
          "[ddp][fsdp][gpt]") {
  nn::GPTConfig config;
  config.block_size = 8;
  config.vocab_size = 13;
  config.n_layer = 2;
  config.n_head = 2;
  config.n_embd = 16;
  // In float64: the two sum the ranks' gradients in different orders, and Adam divides each
  // update by the root of its second moment, so where a gradient is near zero (the keys' bias,
  // whose gradient is exactly zero) a rounding difference becomes a visible one: over a dozen
  // float32 steps past 1e-5. In float64 the losses and norms agree to 1e-10, and the
  // parameters after 20 steps of lr 3e-2 to 1e-9 absolute.
  for (const int world : {2, 3}) {
    INFO(world << " ranks");
    testing::require_no_failures(testing::run_threads(world, [&](comm::ProcessGroup& pg, Expectations& e) {
      std::shared_ptr<nn::GPT> sharded, plain;
      {
        static std::mutex mutex;  // rank threads share the default generator
        std::lock_guard<std::mutex> lock(mutex);
        tensor::manual_seed(11);
        sharded = std::make_shared<nn::GPT>(config);
        tensor::manual_seed(11);
        plain = std::make_shared<nn::GPT>(config);
      }
      sharded->to(tensor::kFloat64);
      plain->to(tensor::kFloat64);
      // Each Block a unit, then the root (the wrapping policy).
      const auto units = ddp::fully_shard_by_policy(sharded, testing::borrow(pg), ddp::is_a<nn::Block>);
      e.expect_eq(units.size(), size_t{3}, "units: two Blocks and the root");
      ddp::DistributedDataParallel reference(plain, testing::borrow(pg));
      const auto adamw = [](const std::vector<Tensor>& params) {
        return nn::AdamW(nn::weight_decay_groups(params, kWeightDecay), nn::AdamWOptions(3e-2).betas(0.9, 0.95));
      };
      nn::AdamW fsdp_opt = adamw(sharded->parameters());  // the shards, since fully_shard
      nn::AdamW ddp_opt = adamw(plain->parameters());
      for (int step = 0; step < 20; ++step) {
        tensor::Generator gen(70 + step);
        const Tensor ids = tensor::randint(0, config.vocab_size, {2 * world, 8}, &gen);
        const Tensor targets = tensor::randint(0, config.vocab_size, {2 * world, 8}, &gen);
        const Tensor mine = ids.narrow(0, 2 * pg.rank(), 2), my_targets = targets.narrow(0, 2 * pg.rank(), 2);
        const Tensor fsdp_loss = sharded->call({mine, my_targets})[1];
        const Tensor ddp_loss = reference(mine, my_targets)[1];
        e.expect_close(fsdp_loss, ddp_loss, fmt::format("step {}: the loss", step), 1e-10, 1e-12);
        fsdp_loss.backward();
        ddp_loss.backward();
        const Tensor fsdp_norm = ddp::clip_sharded_grad_norm_(sharded->parameters(), 1.0, pg);
        const Tensor ddp_norm = nn::clip_grad_norm_(plain->parameters(), 1.0);
        e.expect_close(fsdp_norm.to(tensor::kFloat64), ddp_norm, fmt::format("step {}: the gradient norm", step), 1e-10,
                       1e-12);
        for (nn::AdamW* opt : {&fsdp_opt, &ddp_opt}) {
          opt->step();
          opt->zero_grad();
        }
      }
      const nn::OrderedDict<Tensor> full = ddp::full_state_dict(*sharded);
      for (const auto& [name, value] : plain->state_dict()) {
        e.expect_close(full.at(name), value, name + " after 20 steps", 1e-9, 1e-9);
      }
    }));
  }
}
