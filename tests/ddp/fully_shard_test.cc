// fully_shard (ddp/fully_shard.h) against DDP, its reference: an MLP whose three Linear layers
// and root are sharded, trained on 2 and 3 ranks (3: every layer's rows split unevenly, the
// last block padded) with SGD with momentum and with AdamW in weight-decay groups made from the
// shards, beside the same model under DDP on the same batches. Each step's loss and the
// parameters after the steps must agree to float32 rounding (the averages are summed in
// another order). Also: what each unit gathers and frees per step, the full state dict
// loading into a plain model, and the errors.
#include <mutex>

#include "tests/comm/comm_test_util.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/ddp/fully_shard.h"
#include "tinyddp/nn/nn.h"
#include "tinyddp/nn/transformer.h"

using namespace tinyddp;
using tensor::Tensor;
using testing::Expectations;

namespace {

// Two identical MLPs 4-6-5-3 (the same default-generator draws), one to shard, one for DDP.
std::pair<std::shared_ptr<nn::Sequential>, std::shared_ptr<nn::Sequential>> twin_mlps() {
  static std::mutex mutex;  // rank threads share the default generator
  std::lock_guard<std::mutex> lock(mutex);
  const auto make = [] {
    tensor::manual_seed(5);
    return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(4, 6), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(6, 5),
        std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(5, 3)});
  };
  return {make(), make()};
}

// nanoGPT's groups (two or more dims decay), made from the given tensors.
std::vector<nn::ParamGroup> decay_groups(const std::vector<Tensor>& params) {
  return nn::weight_decay_groups(params, 0.1);
}

std::unique_ptr<nn::Optimizer> make_optimizer(const std::string& kind, const std::vector<Tensor>& params) {
  if (kind == "sgd") return std::make_unique<nn::SGD>(params, nn::SGDOptions(0.1).momentum(0.9));
  return std::make_unique<nn::AdamW>(decay_groups(params), nn::AdamWOptions(0.01));
}

// Steps both optimizers and clears their gradients.
void step_both(nn::Optimizer& a, nn::Optimizer& b) {
  a.step();
  b.step();
  a.zero_grad();
  b.zero_grad();
}

// The sharded model's gathered state dict against the plain one's, entry by entry.
void expect_same_state(const nn::Module& sharded, const nn::Module& plain, Expectations& e, const std::string& when,
                       double rtol, double atol) {
  const nn::OrderedDict<Tensor> full = ddp::full_state_dict(sharded);
  for (const auto& [name, value] : plain.state_dict()) {
    e.expect_close(full.at(name), value, fmt::format("{} {}", name, when), rtol, atol);
  }
}

void run_against_ddp(int world, const std::string& kind, bool reshard_after_forward) {
  testing::require_no_failures(testing::run_threads(world, [&](comm::ProcessGroup& pg, Expectations& e) {
    auto [sharded, plain] = twin_mlps();
    std::vector<std::shared_ptr<ddp::FullyShardedUnit>> units;
    ddp::FullyShardOptions options;
    options.reshard_after_forward(reshard_after_forward);
    for (size_t i : {0, 2, 4}) units.push_back(ddp::fully_shard((*sharded)[i], testing::borrow(pg), options));
    units.push_back(ddp::fully_shard(sharded, testing::borrow(pg)));  // the root: nothing of its own left
    const auto first = std::dynamic_pointer_cast<nn::Linear>((*sharded)[0]);
    ddp::DistributedDataParallel reference(plain, testing::borrow(pg));
    auto fsdp_opt = make_optimizer(kind, ddp::sharded_parameters(*sharded));
    auto ddp_opt = make_optimizer(kind, plain->parameters());
    const int steps = 6;
    for (int step = 0; step < steps; ++step) {
      tensor::Generator gen(40 + step);  // the global batch, drawn alike on every rank
      const Tensor x = tensor::randn({4 * world, 4}, {}, &gen), y = tensor::randn({4 * world, 3}, {}, &gen);
      const Tensor xr = x.narrow(0, 4 * pg.rank(), 4), yr = y.narrow(0, 4 * pg.rank(), 4);
      const Tensor fsdp_loss = nn::mse_loss((*sharded)(xr), yr);
      const Tensor ddp_loss = nn::mse_loss(reference(xr), yr);
      e.expect_close(fsdp_loss, ddp_loss, fmt::format("{} step {}: the loss", kind, step), 1e-5, 1e-7);
      // Between the forward and the backward a unit's full parameters hold their bytes only
      // without reshard_after_forward.
      e.expect_eq(first->weight.storage().nbytes() > 0, !reshard_after_forward, "the first layer's weight is held");
      e.expect_eq(units[0]->stats().gathered, !reshard_after_forward, "the first unit is gathered");
      if (reshard_after_forward && step == 0) {  // reading it then is an error, not a crash
        std::string message;
        try {
          tensor::NoGradGuard no_grad;
          tensor::sum(first->weight);
        } catch (const std::exception& ex) {
          message = ex.what();
        }
        e.expect_contains(message, "reads a storage whose bytes were freed");
      }
      fsdp_loss.backward();
      ddp_loss.backward();
      for (size_t u = 0; u + 1 < units.size(); ++u) {
        e.expect(!units[u]->stats().gathered, fmt::format("step {}: unit {} still holds its full parameters", step, u));
      }
      step_both(*fsdp_opt, *ddp_opt);
    }
    // One gather per forward, and one more per backward when the forward freed them.
    const int64_t gathers = steps * (reshard_after_forward ? 2 : 1);
    for (size_t u = 0; u + 1 < units.size(); ++u) {
      e.expect_eq(units[u]->stats().gathers, gathers, fmt::format("unit {}: gathers", u));
      e.expect_eq(units[u]->stats().reduce_scatters, int64_t{steps}, fmt::format("unit {}: reduce-scatters", u));
      // Once the order is known every gather is issued while the unit before it computes: in
      // the forward from the second step on (the order is the previous forward's), in the
      // backward (when the forward freed them) from the first.
      e.expect_eq(units[u]->stats().prefetches, (steps - 1) + (reshard_after_forward ? steps : 0),
                  fmt::format("unit {}: prefetches", u));
    }
    const nn::OrderedDict<Tensor> full = ddp::full_state_dict(*sharded);
    for (const auto& [name, value] : plain->state_dict()) {
      e.expect_close(full.at(name), value, fmt::format("{}: {} after {} steps", kind, name, steps), 1e-5, 1e-6);
    }
    // The full state dict loads into a model that is not sharded, which then computes the same.
    auto loaded = twin_mlps().first;
    loaded->load_state_dict(full);
    const Tensor probe = tensor::ones({2, 4});
    e.expect_close((*loaded)(probe), (*plain)(probe), "the loaded model's output", 1e-5, 1e-6);
  }));
}

}  // namespace

TEST_CASE("fully_shard trains as DDP: 2 and 3 ranks, SGD with momentum and AdamW with decay groups", "[ddp][fsdp]") {
  for (const int world : {2, 3}) {
    for (const std::string kind : {"sgd", "adamw"}) {
      for (const bool reshard : {true, false}) {
        INFO(world << " ranks, " << kind << ", reshard_after_forward " << reshard);
        run_against_ddp(world, kind, reshard);
      }
    }
  }
}

TEST_CASE("fully_shard: shards of a third of the rows, freed parameters, and clear errors", "[ddp][fsdp]") {
  testing::require_no_failures(testing::run_threads(3, [](comm::ProcessGroup& pg, Expectations& e) {
    auto model = twin_mlps().first;
    auto first = std::dynamic_pointer_cast<nn::Linear>((*model)[0]);
    auto unit = ddp::fully_shard(first, testing::borrow(pg));
    // Linear(4, 6) on 3 ranks: weight [6, 4] -> blocks of 2 rows, bias [6] -> 2.
    const nn::OrderedDict<Tensor> shards = ddp::sharded_named_parameters(*first);
    e.expect_eq(shards.at("weight").sizes(), tensor::Shape{2, 4}, "the weight's shard");
    e.expect_eq(shards.at("bias").sizes(), tensor::Shape{2}, "the bias's shard");
    e.expect_eq(unit->stats().shard_numel, int64_t{10}, "shard elements");
    e.expect_eq(first->weight.numel(), int64_t{0}, "the full weight between steps (freed)");
    e.expect_eq(first->weight.dim(), int64_t{2}, "the freed weight's dims");
    // Without grad mode a forward gathers and frees at once.
    {
      tensor::NoGradGuard no_grad;
      (*first)(tensor::ones({1, 4}));
    }
    e.expect(!unit->stats().gathered && unit->stats().gathers == 1, "a no-grad forward leaves nothing gathered");
    // A gathered parameter changed in place (here between the forward and the backward of the
    // root, which keeps its parameters): the backward says so rather than lose the change.
    const Tensor out = (*first)(tensor::ones({1, 4}));
    {
      tensor::NoGradGuard no_grad;
      first->bias.add_(1.0);
    }
    std::string changed;
    try {
      tensor::sum(out).backward();
    } catch (const std::exception& ex) {
      changed = ex.what();
    }
    e.expect_contains(changed, "fully_shard(Linear): a parameter of shape [6] was changed in place while gathered");
    std::string message;
    try {
      ddp::fully_shard(first, testing::borrow(pg));
    } catch (const std::exception& ex) {
      message = ex.what();
    }
    e.expect_contains(message, "fully_shard(Linear): this module is sharded already");
    // A parameter shared with a module outside, which another unit holds.
    auto sharing = std::make_shared<nn::Module>("Sharing");
    sharing->register_parameter("w", first->weight);
    message.clear();
    try {
      ddp::fully_shard(sharing, testing::borrow(pg));
    } catch (const std::exception& ex) {
      message = ex.what();
    }
    e.expect_contains(message, "fully_shard(Sharing): parameter 'w' is shared with a module outside this one");
    // A weight tied across units inside one root: the head its own unit, the embedding the root's.
    auto head = std::make_shared<nn::Linear>(4, 3, false);
    auto tied = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{head});
    tied->register_parameter("embedding", head->weight);
    ddp::fully_shard(head, testing::borrow(pg));
    message.clear();
    try {
      ddp::fully_shard(tied, testing::borrow(pg));
    } catch (const std::exception& ex) {
      message = ex.what();
    }
    e.expect_contains(message,
                      "fully_shard(Sequential): parameter 'embedding' is held by the unit of '0' but also used "
                      "by 'Sequential', outside that unit");
  }));
}

TEST_CASE("fully_shard: ranks that wrap differently get an error naming the unit, not a hang", "[ddp][fsdp]") {
  const std::vector<std::string> failures = testing::run_threads(2, [](comm::ProcessGroup& pg, Expectations& e) {
    auto model = twin_mlps().first;
    std::string message;
    try {
      // Rank 1 leaves the middle layer to the root: the units' collectives differ.
      for (size_t i : {size_t{0}, size_t{2}, size_t{4}}) {
        if (pg.rank() == 0 || i != 2) ddp::fully_shard((*model)[i], testing::borrow(pg));
      }
      ddp::fully_shard(model, testing::borrow(pg));
      (*model)(tensor::ones({1, 4}));
    } catch (const std::exception& ex) {
      message = ex.what();
    }
    e.expect_contains(message, "fully_shard(Linear): broadcasting the parameters from rank 0");
    e.expect_contains(message, "the ranks called different collectives");
  });
  testing::require_no_failures(failures);
}

TEST_CASE("fully_shard: gradient accumulation without sync equals DDP's no_sync", "[ddp][fsdp]") {
  testing::require_no_failures(testing::run_threads(2, [](comm::ProcessGroup& pg, Expectations& e) {
    auto [sharded, plain] = twin_mlps();
    for (size_t i : {0, 2, 4}) ddp::fully_shard((*sharded)[i], testing::borrow(pg));
    ddp::fully_shard(sharded, testing::borrow(pg));
    ddp::DistributedDataParallel reference(plain, testing::borrow(pg));
    auto fsdp_opt = make_optimizer("sgd", ddp::sharded_parameters(*sharded));
    auto ddp_opt = make_optimizer("sgd", plain->parameters());
    for (int step = 0; step < 3; ++step) {
      for (int micro = 0; micro < 3; ++micro) {  // the last micro-step syncs
        const bool sync = micro == 2;
        tensor::Generator gen(90 + 3 * step + micro);
        const Tensor x = tensor::randn({8, 4}, {}, &gen), y = tensor::randn({8, 3}, {}, &gen);
        const Tensor xr = x.narrow(0, 4 * pg.rank(), 4), yr = y.narrow(0, 4 * pg.rank(), 4);
        ddp::set_requires_gradient_sync(*sharded, sync);
        tensor::mul(nn::mse_loss((*sharded)(xr), yr), 1.0 / 3).backward();
        if (sync) {
          tensor::mul(nn::mse_loss(reference(xr), yr), 1.0 / 3).backward();
        } else {
          auto guard = reference.no_sync();
          tensor::mul(nn::mse_loss(reference(xr), yr), 1.0 / 3).backward();
        }
      }
      step_both(*fsdp_opt, *ddp_opt);
    }
    expect_same_state(*sharded, *plain, e, "after 3 accumulated steps", 1e-5, 1e-6);
  }));
}

TEST_CASE("fully_shard: the digits CNN with BatchNorm trains as under DDP (buffers broadcast, not sharded)",
          "[ddp][fsdp][cnn]") {
  testing::require_no_failures(testing::run_threads(2, [](comm::ProcessGroup& pg, Expectations& e) {
    const auto cnn = [] {
      return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Conv2d>(1, 16, 3, 1, 1), std::make_shared<nn::BatchNorm2d>(16),
          std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
          std::make_shared<nn::Conv2d>(16, 32, 3, 1, 1), std::make_shared<nn::BatchNorm2d>(32),
          std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
          std::make_shared<nn::Linear>(2 * 2 * 32, 10)});
    };
    std::shared_ptr<nn::Sequential> sharded, plain;
    {
      static std::mutex mutex;  // rank threads share the default generator
      std::lock_guard<std::mutex> lock(mutex);
      tensor::manual_seed(4);
      sharded = cnn();
      tensor::manual_seed(4);
      plain = cnn();
    }
    for (size_t i : {0, 1, 4, 5, 9}) ddp::fully_shard((*sharded)[i], testing::borrow(pg));
    ddp::fully_shard(sharded, testing::borrow(pg));
    ddp::DistributedDataParallel reference(plain, testing::borrow(pg));
    auto fsdp_opt = make_optimizer("sgd", ddp::sharded_parameters(*sharded));
    auto ddp_opt = make_optimizer("sgd", plain->parameters());
    for (int step = 0; step < 5; ++step) {
      tensor::Generator gen(30 + step);  // each rank's own images: the running statistics differ
      const Tensor x = tensor::randn({6, 1, 8, 8}, {}, &gen);
      const Tensor y = tensor::randint(0, 10, {6}, &gen);
      const Tensor xr = x.narrow(0, 3 * pg.rank(), 3), yr = y.narrow(0, 3 * pg.rank(), 3);
      const Tensor fsdp_loss = nn::cross_entropy((*sharded)(xr), yr);
      const Tensor ddp_loss = nn::cross_entropy(reference(xr), yr);
      e.expect_close(fsdp_loss, ddp_loss, fmt::format("step {}: the loss", step), 1e-5, 1e-6);
      fsdp_loss.backward();
      ddp_loss.backward();
      step_both(*fsdp_opt, *ddp_opt);
    }
    expect_same_state(*sharded, *plain, e, "after 5 steps", 1e-5, 1e-6);
  }));
}

TEST_CASE("fully_shard: a sharded checkpoint resumes bit for bit; another world size is refused by name",
          "[ddp][fsdp][checkpoint]") {
  const std::string path = testing::temp_path("fsdp_checkpoint");
  // One step of the MLP on this rank's rows of a global batch drawn from `seed`; the loss.
  const auto step = [](nn::Sequential& model, nn::Optimizer& optimizer, comm::ProcessGroup& pg, int seed) {
    tensor::Generator gen(seed);
    const Tensor x = tensor::randn({4 * pg.size(), 4}, {}, &gen), y = tensor::randn({4 * pg.size(), 3}, {}, &gen);
    const Tensor loss = nn::mse_loss(model(x.narrow(0, 4 * pg.rank(), 4)), y.narrow(0, 4 * pg.rank(), 4));
    loss.backward();
    optimizer.step();
    optimizer.zero_grad();
    return loss.item<float>();
  };
  const auto sharded_mlp = [](comm::ProcessGroup& pg) {
    auto model = twin_mlps().first;
    ddp::fully_shard_by_policy(model, testing::borrow(pg), ddp::is_a<nn::Linear>);
    return model;
  };
  testing::require_no_failures(testing::run_threads(2, [&](comm::ProcessGroup& pg, Expectations& e) {
    auto model = sharded_mlp(pg);
    nn::AdamW optimizer(ddp::sharded_parameters(*model), nn::AdamWOptions(0.01));
    for (int s = 0; s < 3; ++s) step(*model, optimizer, pg, 60 + s);
    ddp::save_sharded_checkpoint(path, *model, optimizer, pg, 3);
    std::vector<float> straight;
    for (int s = 3; s < 6; ++s) straight.push_back(step(*model, optimizer, pg, 60 + s));
    const nn::OrderedDict<Tensor> expected = ddp::full_state_dict(*model);

    auto resumed = sharded_mlp(pg);  // fresh weights, fresh optimizer: all from the file
    nn::AdamW resumed_optimizer(ddp::sharded_parameters(*resumed), nn::AdamWOptions(0.01));
    const nn::TrainingCheckpoint loaded = ddp::load_sharded_checkpoint(path, *resumed, resumed_optimizer, pg);
    e.expect_eq(loaded.step, int64_t{3}, "the step");
    for (int s = 3; s < 6; ++s) {
      e.expect_eq(step(*resumed, resumed_optimizer, pg, 60 + s), straight[static_cast<size_t>(s - 3)],
                  fmt::format("step {}'s loss after resuming", s));
    }
    const nn::OrderedDict<Tensor> got = ddp::full_state_dict(*resumed);
    for (const auto& [name, value] : expected) e.expect_close(got.at(name), value, name + " after resuming");
  }));
  testing::require_no_failures(testing::run_threads(3, [&](comm::ProcessGroup& pg, Expectations& e) {
    auto model = sharded_mlp(pg);
    nn::AdamW optimizer(ddp::sharded_parameters(*model), nn::AdamWOptions(0.01));
    std::string message;
    try {
      ddp::load_sharded_checkpoint(path, *model, optimizer, pg);
    } catch (const std::exception& ex) {
      message = ex.what();
    }
    e.expect_contains(message, "a sharded checkpoint loads at the world size that saved it");
    e.expect_contains(message, "fsdp_checkpoint.rank0-of-2");
  }));
}

TEST_CASE("fully_shard: mixed precision casts the inputs, computes in param_dtype and hands float32 to the optimizer",
          "[ddp][fsdp][autocast]") {
  testing::require_no_failures(testing::run_threads(2, [](comm::ProcessGroup& pg, Expectations& e) {
    auto [sharded, plain] = twin_mlps();
    ddp::FullyShardOptions options;
    options.mp_policy(ddp::MixedPrecisionPolicy()
                          .param_dtype(tensor::kBFloat16)
                          .reduce_dtype(tensor::kFloat32)
                          .output_dtype(tensor::kFloat32));
    for (size_t i : {0, 2, 4}) ddp::fully_shard((*sharded)[i], testing::borrow(pg), options);
    ddp::fully_shard(sharded, testing::borrow(pg), options);
    tensor::Generator gen(3);
    const Tensor x = tensor::randn({4, 4}, {}, &gen).requires_grad_(true);  // float32 in
    const Tensor out = (*sharded)(x);
    e.expect(out.dtype() == tensor::kFloat32, "the output is cast to output_dtype");
    e.expect(std::dynamic_pointer_cast<nn::Linear>((*sharded)[2])->weight.dtype() == tensor::kBFloat16,
             "the gathered parameters are bfloat16");
    tensor::sum(out).backward();
    e.expect(x.grad().dtype() == tensor::kFloat32, "the input's gradient comes back in its own dtype");
    for (const Tensor& shard : ddp::sharded_parameters(*sharded)) {
      e.expect(shard.dtype() == tensor::kFloat32 && shard.grad().dtype() == tensor::kFloat32,
               "shards and their gradients stay float32");
    }
    // The same model in float32 on the same input: the gradients agree to bfloat16's precision
    // (the parameters, the activations and the gradients rounded to 8 bits: 2^-8 relative each,
    // a few roundings on each path).
    ddp::DistributedDataParallel reference(plain, testing::borrow(pg));
    tensor::sum(reference(x.detach())).backward();
    const auto shards = ddp::sharded_named_parameters(*sharded);
    for (const auto& [name, p] : plain->named_parameters()) {
      const Tensor& g = shards.at(name).grad();
      const Tensor mine =
          p.grad().narrow(0, pg.rank() * g.size(0), std::min(g.size(0), p.size(0) - pg.rank() * g.size(0)));
      e.expect_close(g.narrow(0, 0, mine.size(0)), mine, name + ": the gradient", 0.05, 0.02);
    }
    // Without cast_forward_inputs a float32 input meets bfloat16 weights: PyTorch's error.
    auto [other, unused] = twin_mlps();
    ddp::MixedPrecisionPolicy policy = options.mp_policy();
    options.mp_policy(policy.cast_forward_inputs(false));
    for (size_t i : {0, 2, 4}) ddp::fully_shard((*other)[i], testing::borrow(pg), options);
    std::string message;
    try {
      (*other)(x.detach());
    } catch (const std::exception& ex) {
      message = ex.what();
    }
    e.expect_contains(message, "linear: expected tensors of the same dtype");
  }));
}

TEST_CASE(
    "fully_shard: model.parameters() lists the shards under the parameters' names, so an optimizer built "
    "from it trains as DDP",
    "[ddp][fsdp]") {
  testing::require_no_failures(testing::run_threads(2, [](comm::ProcessGroup& pg, Expectations& e) {
    auto [sharded, plain] = twin_mlps();
    ddp::fully_shard_by_policy(sharded, testing::borrow(pg), ddp::is_a<nn::Linear>);
    // FSDP2's parameters: this rank's rows of each, under the plain model's names.
    const nn::OrderedDict<Tensor> named = sharded->named_parameters();
    e.expect(named.keys() == plain->named_parameters().keys(), "the shards' names are the parameters'");
    e.expect_eq(named.at("0.weight").sizes(), tensor::Shape{3, 4}, "0.weight's shard: 3 of its 6 rows");
    e.expect_eq(named.at("4.bias").sizes(), tensor::Shape{2}, "4.bias's shard: 2 of its 3 rows, one padding");
    for (const auto& [name, shard] : named) e.expect(nn::is_stand_in(shard), name + " is a shard");
    const auto first = std::dynamic_pointer_cast<nn::Linear>((*sharded)[0]);
    e.expect(nn::is_placeholder(first->weight) && first->weight.numel() == 0, "the layer's own weight: a placeholder");
    // Built as every PyTorch user builds it (no decay groups, so every parameter decays alike).
    nn::AdamW fsdp_opt(sharded->parameters(), nn::AdamWOptions(0.01));
    ddp::DistributedDataParallel reference(plain, testing::borrow(pg));
    nn::AdamW ddp_opt(plain->parameters(), nn::AdamWOptions(0.01));
    for (int step = 0; step < 4; ++step) {
      tensor::Generator gen(70 + step);
      const Tensor x = tensor::randn({8, 4}, {}, &gen), y = tensor::randn({8, 3}, {}, &gen);
      const Tensor xr = x.narrow(0, 4 * pg.rank(), 4), yr = y.narrow(0, 4 * pg.rank(), 4);
      nn::mse_loss((*sharded)(xr), yr).backward();
      nn::mse_loss(reference(xr), yr).backward();
      fsdp_opt.step();
      ddp_opt.step();
      sharded->zero_grad();  // the shards' gradients, as FSDP2's model.zero_grad()
      ddp_opt.zero_grad();
      for (const Tensor& shard : sharded->parameters()) e.expect(!shard.grad().defined(), "zero_grad cleared a shard");
    }
    // Four Adam steps of lr 0.01 move every weight by up to 0.04: a model that trained nothing
    // is that far off, float32 rounding of two summation orders 1e-6.
    expect_same_state(*sharded, *plain, e, "after 4 steps", 1e-5, 1e-6);
    std::string refused;
    try {
      nn::SGD wrong(first->named_registered_parameters().values(), nn::SGDOptions(0.1));
    } catch (const std::exception& ex) {
      refused = ex.what();
    }
    e.expect_contains(refused, "SGD: parameter 0 is a placeholder that fully_shard left in its module");
  }));
}
