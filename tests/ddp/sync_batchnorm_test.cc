// SyncBatchNorm against its definition (PyTorch 1.13 runs SyncBatchNorm only on CUDA, so the
// reference is what it means): W ranks, each with its share of a global batch, training under
// DDP with SyncBatchNorm, equal one process training BatchNorm on the whole global batch:
// outputs, the input's gradient, parameter gradients, parameters and running statistics, over
// several steps, for 2 and 3 ranks with even and uneven shares (one rank may hold a single
// sample). Also: convert_sync_batchnorm keeps the tensors themselves, eval and one rank do
// not communicate, Join with throw_on_early_termination fails on every rank, and DDP's
// timeline shows its collectives; a bfloat16 input is normalised in float32 as batch_norm does.
#include <fstream>
#include <map>
#include <numeric>

#include <nlohmann/json.hpp>

#include "tests/comm/comm_test_util.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/ddp/sync_batchnorm.h"
#include "tinyddp/ddp/timeline.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp;
using ddp::SyncBatchNorm;
using tensor::Tensor;
using testing::borrow;
using testing::Expectations;
using testing::require_no_failures;

namespace {

constexpr int64_t kSteps = 4;

// Conv2d -> BatchNorm2d -> ReLU -> Flatten -> Linear, on [N, 2, 4, 4].
std::shared_ptr<nn::Sequential> small_cnn() {
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(2, 3, 3, 1, 1), std::make_shared<nn::BatchNorm2d>(3, 1e-5, 0.3),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(48, 2)});
}

// What one process computes on the global batch of each step.
struct Reference {
  std::vector<Tensor> inputs, targets, outputs, input_grads;
  std::vector<nn::OrderedDict<Tensor>> grads, states;  // after backward / after the step
};

// sum of squared errors / global batch: the global mean, and on rank r (times W, since DDP
// averages gradients over the W ranks) its share of it.
Tensor sse(const Tensor& out, const Tensor& target, double scale) {
  const Tensor d = tensor::sub(out, target);
  return tensor::mul(tensor::sum(tensor::mul(d, d)), scale);
}

Reference run_reference(nn::Module& model, int64_t global_batch) {
  Reference ref;
  tensor::Generator gen(17);
  nn::SGD opt(model.parameters(), nn::SGDOptions(0.1).momentum(0.9));
  for (int64_t step = 0; step < kSteps; ++step) {
    const Tensor x = tensor::randn({global_batch, 2, 4, 4}, {}, &gen).requires_grad_();
    const Tensor y = tensor::randn({global_batch, 2}, {}, &gen);
    opt.zero_grad();
    const Tensor out = model.forward(x);
    sse(out, y, 1.0 / static_cast<double>(global_batch)).backward();
    ref.inputs.push_back(x.detach());
    ref.targets.push_back(y);
    ref.outputs.push_back(out.detach());
    ref.input_grads.push_back(x.grad());
    nn::OrderedDict<Tensor> grads;
    for (const auto& [name, p] : model.named_parameters()) grads.insert(name, p.grad().clone());
    ref.grads.push_back(grads);
    opt.step();
    nn::OrderedDict<Tensor> state;
    for (const auto& [name, t] : model.state_dict()) state.insert(name, t.clone());
    ref.states.push_back(state);
  }
  return ref;
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what, Expectations& e) {
  e.expect(got.defined() && got.sizes() == want.sizes() && tensor::allclose(got, want, 1e-5, 1e-6),
           fmt::format("{}: got {}, want {}", what, got.defined() ? got.str() : "undefined", want.str()));
}

// Trains under DDP with SyncBatchNorm on `shares.size()` ranks, rank r taking shares[r] rows.
void check_against_one_process(const std::vector<int64_t>& shares) {
  const int64_t global = std::accumulate(shares.begin(), shares.end(), int64_t{0});
  tensor::manual_seed(5);
  const auto reference_model = small_cnn();
  const nn::OrderedDict<Tensor> initial = reference_model->state_dict();
  std::vector<std::shared_ptr<nn::Module>> models;
  for (size_t r = 0; r < shares.size(); ++r) {
    models.push_back(small_cnn());
    models.back()->load_state_dict(initial);
  }
  const Reference ref = run_reference(*reference_model, global);
  require_no_failures(
      testing::run_threads(static_cast<int>(shares.size()), [&](comm::ProcessGroup& pg, Expectations& e) {
        const int rank = pg.rank();
        const int64_t first = std::accumulate(shares.begin(), shares.begin() + rank, int64_t{0}), rows = shares[rank];
        const auto model = SyncBatchNorm::convert_sync_batchnorm(models[rank], borrow(pg));
        e.expect((*std::dynamic_pointer_cast<nn::Sequential>(model))[1]->type_name() == "SyncBatchNorm",
                 "BatchNorm2d converted");
        ddp::DistributedDataParallel ddp_model(model, borrow(pg));
        nn::SGD opt(model->parameters(), nn::SGDOptions(0.1).momentum(0.9));
        for (int64_t step = 0; step < kSteps; ++step) {
          const std::string at = fmt::format("rank {} step {}", rank, step);
          const Tensor x = ref.inputs[step].narrow(0, first, rows).clone().requires_grad_();
          opt.zero_grad();
          const Tensor out = ddp_model.forward(x);
          const double scale = static_cast<double>(shares.size()) / static_cast<double>(global);
          sse(out, ref.targets[step].narrow(0, first, rows), scale).backward();
          expect_close(out, ref.outputs[step].narrow(0, first, rows), at + " output", e);
          // The input's gradient is not averaged by DDP: it carries the loss's factor W.
          expect_close(tensor::div(x.grad(), static_cast<double>(shares.size())),
                       ref.input_grads[step].narrow(0, first, rows), at + " input grad", e);
          for (const auto& [name, p] : model->named_parameters())
            expect_close(p.grad(), ref.grads[step].at(name), at + " grad " + name, e);
          opt.step();
          for (const auto& [name, t] : model->state_dict()) {
            expect_close(t.to(tensor::kFloat64), ref.states[step].at(name).to(tensor::kFloat64), at + " " + name, e);
          }
        }
      }));
}

}  // namespace

TEST_CASE("SyncBatchNorm under DDP equals BatchNorm on the whole global batch in one process", "[ddp][sync_bn]") {
  for (const std::vector<int64_t>& shares : std::vector<std::vector<int64_t>>{{4, 4}, {3, 5}, {3, 3, 3}, {1, 4, 2}}) {
    INFO("local batches " << fmt::format("{}", fmt::join(shares, ", ")));
    check_against_one_process(shares);
  }
}

TEST_CASE("convert_sync_batchnorm swaps every BatchNorm in place, keeping its tensors and mode", "[ddp][sync_bn]") {
  auto inner = std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::Module>>{std::make_shared<nn::BatchNorm1d>(4, 1e-3, std::nullopt)});
  auto model = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(3, 4), inner, std::make_shared<nn::BatchNorm2d>(2, 1e-5, 0.1, false)});
  model->eval();
  const auto bn1 = std::dynamic_pointer_cast<nn::BatchNorm>((*inner)[0]);
  const Tensor weight = bn1->weight, running_var = bn1->running_var;
  const std::vector<std::string> names_before = model->state_dict().keys();
  CHECK(SyncBatchNorm::convert_sync_batchnorm(model) == model);
  const auto sync1 = std::dynamic_pointer_cast<SyncBatchNorm>((*inner)[0]);
  const auto sync2 = std::dynamic_pointer_cast<SyncBatchNorm>((*model)[2]);
  REQUIRE(sync1 != nullptr);
  REQUIRE(sync2 != nullptr);
  CHECK(sync1->weight.is_same(weight));  // the same handles: optimizers made before still apply
  CHECK(sync1->running_var.is_same(running_var));
  CHECK(sync1->eps == 1e-3);
  CHECK(!sync1->momentum.has_value());
  CHECK(!sync2->affine);
  CHECK(!sync1->is_training());
  CHECK(model->state_dict().keys() == names_before);
  CHECK_THAT(model->repr(), Catch::Contains("SyncBatchNorm(4, eps=0.001, momentum=None"));
  // A BatchNorm at the root comes back as a new SyncBatchNorm.
  const auto root = SyncBatchNorm::convert_sync_batchnorm(std::make_shared<nn::BatchNorm2d>(3));
  CHECK(root->type_name() == "SyncBatchNorm");
}

TEST_CASE("SyncBatchNorm communicates only in training on more than one rank", "[ddp][sync_bn]") {
  require_no_failures(testing::run_threads(2, [](comm::ProcessGroup& pg, Expectations& e) {
    auto recording = std::make_shared<testing::RecordingGroup>(borrow(pg));
    SyncBatchNorm bn(3, 1e-5, 0.1, true, true, recording);
    const Tensor x = tensor::randn({4, 3, 2, 2}).requires_grad_();
    tensor::sum(bn.forward(x)).backward();
    e.expect_eq(recording->count("allgather"), size_t{1}, "allgathers in a training forward");
    e.expect_eq(recording->count("allreduce"), size_t{1}, "allreduces in its backward");
    recording->clear();
    bn.eval();
    const Tensor y = bn.forward(x);
    e.expect(recording->calls().empty(), "eval communicates nothing");
    e.expect(tensor::allclose(y, tensor::batch_norm(x, bn.running_mean, bn.running_var, bn.weight, bn.bias)),
             "eval normalises with the running statistics");
  }));
  // No group and no default group: plain BatchNorm.
  SyncBatchNorm alone(3);
  nn::BatchNorm2d plain(3);
  const Tensor x = tensor::randn({4, 3, 2, 2});
  CHECK(tensor::equal(alone.forward(x), plain.forward(x)));
  CHECK(tensor::equal(alone.running_var, plain.running_var));
  CHECK_THROWS_WITH(alone.forward(tensor::randn({4, 5})),
                    Catch::Contains("SyncBatchNorm: expected input with 3 channels"));
  CHECK_THROWS_WITH(alone.forward(tensor::randn({4})), Catch::Contains("SyncBatchNorm: expected at least 2D input"));
}

TEST_CASE("SyncBatchNorm widens a bfloat16 input as batch_norm does, with or without running statistics",
          "[ddp][sync_bn]") {
  // Autocast hands a float32 SyncBatchNorm bfloat16 activations: normalised in float32 over the
  // global batch and rounded back once, whether the float32 tensor it can go by is running_mean
  // or, without running statistics, the weight. Reference: t::batch_norm on the whole batch.
  tensor::Generator gen(3);
  const Tensor global = tensor::randn({6, 3, 2, 2}, {}, &gen).to(tensor::kBFloat16);
  for (const bool track : {true, false}) {
    INFO("track_running_stats " << track);
    SyncBatchNorm whole(3, 1e-5, 0.1, true, track);
    const Tensor want =
        tensor::batch_norm(global, whole.running_mean, whole.running_var, whole.weight, whole.bias, true, 0.1, 1e-5);
    require_no_failures(testing::run_threads(2, [&](comm::ProcessGroup& pg, Expectations& e) {
      SyncBatchNorm bn(3, 1e-5, 0.1, true, track, borrow(pg));
      const Tensor x = global.narrow(0, 3 * pg.rank(), 3).clone().requires_grad_();
      const Tensor out = bn.forward(x);
      e.expect(out.dtype() == tensor::kBFloat16, fmt::format("output dtype {}", tensor::dtype_name(out.dtype())));
      e.expect(
          tensor::allclose(out.to(tensor::kFloat32), want.narrow(0, 3 * pg.rank(), 3).to(tensor::kFloat32), 1e-2, 1e-2),
          fmt::format("rank {} output {}", pg.rank(), out.str()));
      tensor::sum(out.to(tensor::kFloat32)).backward();
      e.expect(x.grad().defined() && x.grad().dtype() == tensor::kBFloat16, "the input's gradient is bfloat16");
      e.expect(bn.weight.grad().defined() && bn.weight.grad().dtype() == tensor::kFloat32,
               "the weight's gradient is float32");
    }));
  }
}

TEST_CASE("SyncBatchNorm inside DDP under Join with throw_on_early_termination: every rank raises", "[ddp][sync_bn]") {
  require_no_failures(testing::run_threads(2, [](comm::ProcessGroup& pg, Expectations& e) {
    const auto model = SyncBatchNorm::convert_sync_batchnorm(small_cnn(), borrow(pg));
    ddp::DistributedDataParallel ddp_model(model, borrow(pg));
    try {
      ddp_model.join(
          [&] {
            for (int k = 0; k < 2 + 3 * pg.rank(); ++k) {
              tensor::sum(ddp_model.forward(tensor::randn({3, 2, 4, 4}))).backward();
            }
          },
          ddp::JoinOptions().throw_on_early_termination(true));
      e.failures.push_back("no error with uneven inputs");
    } catch (const Error& ex) {
      e.expect_contains(ex.what(), "ran out of inputs");
    }
  }));
}

TEST_CASE("SyncBatchNorm's collectives appear on DDP's timeline, in their own row, per iteration", "[ddp][sync_bn]") {
  require_no_failures(testing::run_threads(2, [](comm::ProcessGroup& pg, Expectations& e) {
    const std::string path = testing::temp_path(fmt::format("sync_bn_timeline.rank{}.json", pg.rank()));
    const auto model = SyncBatchNorm::convert_sync_batchnorm(small_cnn(), borrow(pg));
    {
      ddp::DistributedDataParallel ddp_model(model, borrow(pg), ddp::DDPOptions().timeline(path + ".unused"));
      for (int k = 0; k < 2; ++k) tensor::sum(ddp_model.forward(tensor::randn({3, 2, 4, 4}))).backward();
      ddp_model.write_timeline(path);
    }
    const auto sync = std::dynamic_pointer_cast<SyncBatchNorm>((*std::dynamic_pointer_cast<nn::Sequential>(model))[1]);
    e.expect(!sync->on_collective, "DDP's destructor clears the observer");
    std::ifstream in(path);
    const nlohmann::json trace = nlohmann::json::parse(in);
    std::map<std::string, int> counts;
    bool named_row = false;
    for (const auto& event : trace["traceEvents"]) {
      if (event["name"] == "thread_name" && event["tid"] == ddp::Timeline::kLayerCollectives) {
        named_row = event["args"]["name"] == "layer collectives (SyncBatchNorm)";
      }
      const std::string name = event["name"];
      if (name.rfind("SyncBatchNorm", 0) != 0) continue;
      e.expect(event["tid"] == ddp::Timeline::kLayerCollectives && event["ph"] == "X", "on its row, as a span");
      ++counts[fmt::format("{} iteration {}", name, event["args"]["iteration"].get<int>())];
    }
    e.expect(named_row, "the row is named");
    for (int it = 0; it < 2; ++it) {
      e.expect_eq(counts[fmt::format("SyncBatchNorm allgather (statistics) iteration {}", it)], 1, "allgathers");
      e.expect_eq(counts[fmt::format("SyncBatchNorm allreduce (gradient sums) iteration {}", it)], 1, "allreduces");
    }
  }));
}
