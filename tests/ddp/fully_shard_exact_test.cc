// fully_shard's deterministic option: an MLP whose Linear layers and root are sharded trains
// through ddp::deterministic_step to the bits of DDP's deterministic option on one process, on
// 1, 2, 3, 4 and 6 ranks (threads over Gloo; 3 output rows over 4 and 6 ranks leave some
// ranks an empty, padded block); with AdamW and clip_sharded_grad_norm_ (its norm summed
// exactly) to the same bits on every world size; with bfloat16 gathers (mp_policy) too; a run
// resumed on another world size with the state gives the uninterrupted run's bits; and what
// the option cannot take is refused by name.
#include <map>
#include <mutex>

#include "tests/comm/comm_test_util.h"
#include "tests/ddp/exact_batches.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/ddp/fully_shard.h"
#include "tinyddp/ddp/sync_batchnorm.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp;
using tinyddp::testing::Batches;
using tinyddp::testing::borrow;
using tinyddp::testing::Expectations;
using tinyddp::testing::kChunk;
using tinyddp::testing::kRows;
using tinyddp::testing::require_no_failures;
using tinyddp::testing::run_threads;
namespace t = tinyddp::tensor;

namespace {

Batches make_batches(int steps) { return tinyddp::testing::make_batches(steps, t::kFloat32, 11); }

// The same weights on every thread and world size (a generator of its own).
std::shared_ptr<nn::Sequential> make_model() {
  auto model = nn::mlp({6, 16, 5, 3});
  t::Generator init(3);
  t::NoGradGuard no_grad;
  for (const t::Tensor& p : model->parameters()) t::uniform_(p, -0.5, 0.5, &init);
  return model;
}

struct Setup {
  std::string optimizer = "sgd";  // or "adamw" (with clipping at 0.05)
  bool bf16 = false;              // mp_policy's param_dtype
  bool rank_rows = false;         // each rank handed only its chunks' rows (BatchRows::kRank)
};

struct Trained {
  std::map<std::string, std::vector<double>> params;
  std::vector<double> losses, norms;
  std::vector<int64_t> state;
};

std::unique_ptr<nn::Optimizer> make_optimizer(const Setup& setup, const std::vector<t::Tensor>& params) {
  if (setup.optimizer == "sgd") return std::make_unique<nn::SGD>(params, nn::SGDOptions(0.05));
  return std::make_unique<nn::AdamW>(nn::weight_decay_groups(params, 0.1), nn::AdamWOptions(0.01));
}

void keep(const nn::OrderedDict<t::Tensor>& state, Trained& out) {
  for (const auto& [name, p] : state) out.params[name] = p.to(t::kFloat64).to_vector<double>();
}

// Steps [first, last) through fully_shard's option on `pg`, from `start` (state dict and
// option state) or the fresh model; rank 0's result lands in `out`.
void train_sharded(comm::ProcessGroup& pg, const Batches& data, const Setup& setup, int first, int last,
                   const Trained* start, Trained& out, std::mutex& mutex) {
  auto model = make_model();
  if (start != nullptr) {
    nn::OrderedDict<t::Tensor> state;
    for (const auto& [name, values] : start->params) {
      state.insert(name, t::from_vector(values).to(t::kFloat32).reshape(model->named_parameters().at(name).sizes()));
    }
    model->load_state_dict(state);
  }
  auto options = ddp::FullyShardOptions().deterministic(true).chunk_size(kChunk);
  if (setup.bf16) options.mp_policy(ddp::MixedPrecisionPolicy().param_dtype(t::kBFloat16));
  ddp::fully_shard_by_policy(model, borrow(pg), ddp::is_a<nn::Linear>, options);
  if (start != nullptr) ddp::load_deterministic_state(*model, start->state);
  const std::vector<t::Tensor> shards = ddp::sharded_parameters(*model);
  auto opt = make_optimizer(setup, shards);
  Trained mine = start != nullptr ? *start : Trained{};
  const auto rows = setup.rank_rows ? ddp::BatchRows::kRank : ddp::BatchRows::kGlobal;
  const auto held = [&](const t::Tensor& batch) {
    const int64_t n = batch.size(0) / pg.size();
    return setup.rank_rows ? batch.narrow(0, pg.rank() * n, n).clone() : batch;
  };
  for (int s = first; s < last; ++s) {
    mine.losses.push_back(ddp::deterministic_step(
        *model, held(data.inputs[s]), held(data.targets[s]),
        [&](const t::Tensor& x, const t::Tensor& y) { return nn::mse_loss((*model)(x).to(t::kFloat32), y); }, rows));
    if (setup.optimizer != "sgd") mine.norms.push_back(ddp::clip_sharded_grad_norm_(shards, 0.05, pg).item<double>());
    opt->step();
  }
  mine.state = ddp::deterministic_state(*model);
  mine.params.clear();
  keep(ddp::full_state_dict(*model), mine);
  if (pg.rank() == 0) {
    std::lock_guard<std::mutex> lock(mutex);
    out = mine;
  }
}

Trained sharded_on(int world, const Batches& data, const Setup& setup, int first, int last,
                   const Trained* start = nullptr) {
  Trained out;
  std::mutex mutex;
  require_no_failures(run_threads(world, [&](comm::ProcessGroup& pg, Expectations&) {
    train_sharded(pg, data, setup, first, last, start, out, mutex);
  }));
  return out;
}

// The reference: DDP's deterministic option on one process, SGD.
Trained ddp_on_one(const Batches& data, int steps) {
  Trained out;
  std::mutex mutex;
  require_no_failures(run_threads(1, [&](comm::ProcessGroup& pg, Expectations&) {
    auto model = make_model();
    ddp::DistributedDataParallel ddp(model, borrow(pg), ddp::DDPOptions().deterministic(true).chunk_size(kChunk));
    nn::SGD opt(model->parameters(), nn::SGDOptions(0.05));
    for (int s = 0; s < steps; ++s) {
      out.losses.push_back(ddp.deterministic_step(
          data.inputs[s], data.targets[s],
          [&](const t::Tensor& x, const t::Tensor& y) { return nn::mse_loss(ddp.forward(x), y); }));
      opt.step();
    }
    out.state = ddp.deterministic_state();
    keep(model->state_dict(), out);
  }));
  return out;
}

}  // namespace

TEST_CASE("fully_shard's deterministic option gives DDP's deterministic bits on 1, 2, 3, 4 and 6 ranks",
          "[fsdp][exact]") {
  const Batches data = make_batches(4);
  const Trained reference = ddp_on_one(data, 4);
  for (int world : {1, 2, 3, 4, 6}) {
    INFO(world << " ranks");
    const Trained got = sharded_on(world, data, Setup{}, 0, 4);
    CHECK(got.params == reference.params);  // bit for bit
    CHECK(got.losses == reference.losses);
    CHECK(got.state == reference.state);  // the same grids, in DDP's layout
    Setup own_rows;
    own_rows.rank_rows = true;
    const Trained held = sharded_on(world, data, own_rows, 0, 4);
    CHECK(held.params == reference.params);
    CHECK(held.losses == reference.losses);
  }
}

TEST_CASE("fully_shard's deterministic option with AdamW, exact clipping and bfloat16 gathers", "[fsdp][exact]") {
  const Batches data = make_batches(4);
  for (const Setup& setup : {Setup{"adamw", false}, Setup{"adamw", true}}) {
    INFO((setup.bf16 ? "bfloat16 gathers" : "float32"));
    const Trained one = sharded_on(1, data, setup, 0, 4);
    REQUIRE(one.norms.size() == 4);
    CHECK(one.norms.front() > 0.05);  // the clipping acts
    for (int world : {2, 3, 4, 6}) {
      INFO(world << " ranks");
      const Trained got = sharded_on(world, data, setup, 0, 4);
      CHECK(got.params == one.params);
      CHECK(got.losses == one.losses);
      CHECK(got.norms == one.norms);
    }
  }
}

TEST_CASE("fully_shard's deterministic state resumes on another world size to the same bits", "[fsdp][exact]") {
  const Batches data = make_batches(4);
  const Trained straight = sharded_on(1, data, Setup{}, 0, 4);
  const Trained half = sharded_on(3, data, Setup{}, 0, 2);
  const Trained resumed = sharded_on(2, data, Setup{}, 2, 4, &half);
  CHECK(resumed.params == straight.params);
  CHECK(resumed.losses == straight.losses);
  CHECK(resumed.state == straight.state);
}

TEST_CASE("fully_shard's deterministic option refuses what it cannot take, by name", "[fsdp][exact]") {
  require_no_failures(run_threads(2, [&](comm::ProcessGroup& pg, Expectations& e) {
    const t::Tensor x = t::randn({kRows, 6}), y = t::randn({kRows, 3});
    auto model = make_model();
    const auto options = ddp::FullyShardOptions().deterministic(true).chunk_size(kChunk);
    ddp::fully_shard_by_policy(model, borrow(pg), ddp::is_a<nn::Linear>, options);
    const auto loss = [&](const t::Tensor& a, const t::Tensor& b) { return nn::mse_loss((*model)(a), b); };
    e.expect_throws([&] { (*model)(x); }, "training forwards run inside ddp::deterministic_step");
    e.expect_throws([&] { ddp::deterministic_step(*model, x.narrow(0, 0, 5), y.narrow(0, 0, 5), loss); },
                    "chunk_size 2 does not divide the global batch of 5 rows");
    e.expect_throws([&] { ddp::deterministic_step(*model, x.narrow(0, 0, 6), y.narrow(0, 0, 6), loss); },
                    "the 3 chunks of 2 rows do not split over 2 ranks");
    e.expect_throws(
        [&] {
          ddp::load_deterministic_state(*model, {1, 2});
        },
        "load_deterministic_state: 2 values, expected 7 (the steps done, then a bound");
    {
      t::NoGradGuard no_grad;
      e.expect((*model)(x).size(0) == kRows, "an evaluation forward runs anywhere");
    }
    // Not a unit's root, or a unit without the option.
    auto plain = make_model();
    e.expect_throws([&] { ddp::deterministic_step(*plain, x, y, loss); },
                    "deterministic_step: the module (Sequential) is not sharded");
    auto off = make_model();
    ddp::fully_shard(off, borrow(pg));
    e.expect_throws([&] { ddp::deterministic_state(*off); }, "deterministic_state: the deterministic option is off");
    // The option at the root only: every unit must have it.
    auto mixed = make_model();
    ddp::fully_shard((*mixed)[0], borrow(pg));
    ddp::fully_shard(mixed, borrow(pg), options);
    e.expect_throws([&] { ddp::deterministic_state(*mixed); }, "on at the root but off at the unit of '0'");
    auto with_bn = std::make_shared<nn::Sequential>();
    with_bn->push_back(std::make_shared<nn::Linear>(6, 4));
    with_bn->push_back(std::make_shared<ddp::SyncBatchNorm>(4));
    ddp::fully_shard(with_bn, borrow(pg), options);
    e.expect_throws([&] { ddp::deterministic_state(*with_bn); }, "does not take SyncBatchNorm ('1')");
    // The ordinary path is untouched: without the option, clipping and training as before.
    e.expect(!ddp::sharded_parameters(*off).empty(), "the plain unit's shards");
  }));
}
