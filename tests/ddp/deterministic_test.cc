// DistributedDataParallel's deterministic option: 1, 2, 3, 4 and 6 ranks (threads over Gloo)
// train an MLP to the same bits through deterministic_step; the step's gradient is the whole
// batch's (against one process's backward of the batch's loss, in float64); a run resumed on
// another world size with the grids (deterministic_state) gives the uninterrupted run's bits
// without running its first step twice; and what the option cannot take is refused by name.
#include <map>
#include <mutex>

#include <fstream>

#include "tests/comm/comm_test_util.h"
#include "tests/ddp/exact_batches.h"
#include "tests/test_util.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/ddp/sync_batchnorm.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp;
using Catch::Contains;
using tinyddp::testing::Batches;
using tinyddp::testing::borrow;
using tinyddp::testing::Expectations;
using tinyddp::testing::kChunk;
using tinyddp::testing::kRows;
using tinyddp::testing::require_no_failures;
using tinyddp::testing::run_processes;
using tinyddp::testing::run_threads;
namespace t = tinyddp::tensor;

namespace {

Batches make_batches(int steps, t::DType dtype) { return tinyddp::testing::make_batches(steps, dtype, 7); }

// The same weights on every thread and world size (a generator of its own: threads share the
// default one in no fixed order).
// Without `last_bias`, the last layer has a weight only, and `hidden` units.
std::shared_ptr<nn::Module> make_model(t::DType dtype, bool last_bias = true, int64_t hidden = 16) {
  std::shared_ptr<nn::Module> model = nn::mlp({6, 16, 3});
  if (!last_bias) {
    auto net = std::make_shared<nn::Sequential>();
    net->push_back(std::make_shared<nn::Linear>(6, hidden));
    net->push_back(std::make_shared<nn::ReLU>());
    net->push_back(std::make_shared<nn::Linear>(hidden, 3, false));
    model = net;
  }
  model->to(dtype);
  t::Generator init(3);
  t::NoGradGuard no_grad;
  for (const t::Tensor& p : model->parameters()) t::uniform_(p, -0.5, 0.5, &init);
  return model;
}

ddp::DDPOptions deterministic() { return ddp::DDPOptions().deterministic(true).chunk_size(kChunk); }

struct Trained {
  std::map<std::string, std::vector<double>> params;
  std::vector<double> losses;
  std::vector<int64_t> grids;
  int64_t reruns = 0;
};

// Steps [first, last) of SGD through deterministic_step on `pg`, from `start` (state dict and
// grids, or rank 0's fresh model); rank 0's result lands in `out`. With `reuse` (the hidden
// units, else 0), the last layer has no bias and some chunks (by their data) also take the
// first weight through a second linear() and the last one through a penalty. With
// BatchRows::kRank each rank is handed only its rows of each batch.
void train_steps(comm::ProcessGroup& pg, Expectations& e, const Batches& data, int first, int last,
                 const Trained* start, Trained& out, std::mutex& mutex, int64_t reuse, ddp::BatchRows rows) {
  auto model = make_model(t::kFloat32, reuse == 0, reuse == 0 ? 16 : reuse);
  if (start != nullptr) {
    nn::OrderedDict<t::Tensor> state;
    for (const auto& [name, values] : start->params) {
      const t::Tensor saved = t::from_vector(values).to(t::kFloat32);
      state.insert(name, saved.reshape(model->named_parameters().at(name).sizes()));
    }
    model->load_state_dict(state);
  }
  auto ddp = std::make_shared<ddp::DistributedDataParallel>(model, borrow(pg), deterministic());
  if (start != nullptr && !start->grids.empty()) ddp->load_deterministic_state(start->grids);
  nn::SGD opt(model->parameters(), nn::SGDOptions(0.05));
  Trained mine = start != nullptr ? *start : Trained{};
  const auto held = [&](const t::Tensor& batch) {  // kRank: rows [r n, (r + 1) n) of the batch
    const int64_t n = batch.size(0) / pg.size();
    return rows == ddp::BatchRows::kRank ? batch.narrow(0, pg.rank() * n, n).clone() : batch;
  };
  for (int s = first; s < last; ++s) {
    mine.losses.push_back(ddp->deterministic_step(
        held(data.inputs[s]), held(data.targets[s]),
        [&](const t::Tensor& x, const t::Tensor& y) {
          t::Tensor loss = nn::mse_loss(ddp->forward(x), y);
          if (reuse == 0) return loss;
          const t::Tensor first_w = model->parameters().front(), last_w = model->parameters().back();
          const std::vector<float> v = x.to_vector<float>();                                // [2, 6], row-major
          if (v[0] > 0) loss = t::add(loss, t::mul(t::mean(t::linear(x, first_w)), 0.1));   // a second product
          if (v[6] > 0) loss = t::add(loss, t::mul(t::sum(t::mul(last_w, last_w)), 0.01));  // a .grad besides
          return loss;
        },
        rows));
    opt.step();
  }
  e.expect(ddp->exact_sum() != nullptr, "the exact sum exists after a step");
  mine.grids = ddp->deterministic_state();
  mine.reruns = ddp->exact_sum()->reruns();
  for (const auto& [name, p] : model->named_parameters()) mine.params[name] = p.to(t::kFloat64).to_vector<double>();
  if (pg.rank() == 0) {
    std::lock_guard<std::mutex> lock(mutex);
    out = mine;
  }
}

Trained train_on(int world, const Batches& data, int first, int last, const Trained* start = nullptr, int64_t reuse = 0,
                 ddp::BatchRows rows = ddp::BatchRows::kGlobal) {
  Trained out;
  std::mutex mutex;
  require_no_failures(run_threads(world, [&](comm::ProcessGroup& pg, Expectations& e) {
    train_steps(pg, e, data, first, last, start, out, mutex, reuse, rows);
  }));
  return out;
}

}  // namespace

TEST_CASE("DDP's deterministic option trains to the same bits on 1, 2, 3, 4 and 6 ranks", "[ddp][exact]") {
  const Batches data = make_batches(4, t::kFloat32);
  const Trained one = train_on(1, data, 0, 4);
  CHECK(one.reruns == 1);  // the first step calibrates the grids
  for (int world : {2, 3, 4, 6}) {
    INFO(world << " ranks");
    const Trained other = train_on(world, data, 0, 4);
    CHECK(other.params == one.params);  // bit for bit
    CHECK(other.losses == one.losses);
    CHECK(other.grids == one.grids);
    // Each rank handed only its chunks' rows (BatchRows::kRank): the same bits.
    const Trained own_rows = train_on(world, data, 0, 4, nullptr, 0, ddp::BatchRows::kRank);
    CHECK(own_rows.params == one.params);
    CHECK(own_rows.losses == one.losses);
    CHECK(own_rows.grids == one.grids);
  }
}

TEST_CASE("A weight that some chunks also use elsewhere trains to the same bits on 1, 2, 3, 4 and 6 ranks",
          "[ddp][exact]") {
  // Its products and its other gradient are rounded apart, in every chunk alike. With 22,000
  // hidden units the last weight (66,000 elements) is reduce-scattered, and a rank whose last
  // chunk uses it more than the chunk before had its sums on their way too early: that step
  // runs again (a rerun more) with them waiting, and the bits do not change. With 16, every
  // parameter is small and their one allreduce leaves after the last of them is complete.
  const Batches data = make_batches(4, t::kFloat32);
  for (int64_t hidden : {16, 22000}) {
    INFO(hidden << " hidden units");
    const Trained one = train_on(1, data, 0, 4, nullptr, hidden);
    int64_t most_reruns = one.reruns;
    for (int world : {2, 3, 4, 6}) {
      INFO(world << " ranks");
      const Trained other = train_on(world, data, 0, 4, nullptr, hidden);
      CHECK(other.params == one.params);
      CHECK(other.losses == one.losses);
      most_reruns = std::max(most_reruns, other.reruns);
    }
    if (hidden > 16) CHECK(most_reruns > 1);  // the late path ran on some world size
  }
}

TEST_CASE("A run resumed on another world size with the grids gives the uninterrupted run's bits", "[ddp][exact]") {
  const Batches data = make_batches(4, t::kFloat32);
  const Trained straight = train_on(2, data, 0, 4);
  const Trained half = train_on(3, data, 0, 2);
  const Trained resumed = train_on(4, data, 2, 4, &half);
  CHECK(resumed.params == straight.params);
  CHECK(resumed.losses == straight.losses);
  CHECK(resumed.reruns == 0);  // its first step added on the saved grids
  Trained no_grids = half;
  no_grids.grids.clear();
  CHECK(train_on(4, data, 2, 4, &no_grids).reruns == 1);  // without them the first step runs twice
}

TEST_CASE("deterministic_step leaves the whole batch's gradient and returns its loss", "[ddp][exact]") {
  // float64: the exact mean of the chunks' gradients, rounded once, against one backward of the
  // batch's mean loss (the same sum in another order): within a few float64 roundings.
  const Batches data = make_batches(1, t::kFloat64);
  auto reference = make_model(t::kFloat64);
  const t::Tensor ref_loss = nn::mse_loss(reference->forward(data.inputs[0]), data.targets[0]);
  ref_loss.backward();
  require_no_failures(run_threads(3, [&](comm::ProcessGroup& pg, Expectations& e) {
    auto model = make_model(t::kFloat64);
    ddp::DistributedDataParallel ddp(model, borrow(pg), deterministic());
    const double loss =
        ddp.deterministic_step(data.inputs[0], data.targets[0],
                               [&](const t::Tensor& x, const t::Tensor& y) { return nn::mse_loss(ddp.forward(x), y); });
    e.expect(std::abs(loss - ref_loss.item<double>()) <= 1e-14 * std::abs(ref_loss.item<double>()), "the loss");
    const auto ref_params = reference->named_parameters();
    for (const auto& [name, p] : model->named_parameters()) {
      const t::Tensor want = ref_params.at(name).grad();
      const double err = t::max(t::abs(t::sub(p.grad(), want))).item<double>();
      const double scale = t::max(t::abs(want)).item<double>();
      e.expect(err <= 1e-13 * scale, fmt::format("{}'s gradient differs by {:.3g} (scale {:.3g})", name, err, scale));
    }
  }));
}

TEST_CASE("In float32 the step's gradient, weight products folded from registers, is the whole batch's",
          "[ddp][exact]") {
  // Against one float64 backward of the batch's loss: the chunks' float32 forward and backward
  // (2 rows, 16 hidden units: each value a few roundings of 2^-24 of its terms) and the grid
  // (2^-53 of the largest): within 2^-16 of the largest gradient.
  const Batches data = make_batches(1, t::kFloat32);
  auto reference = make_model(t::kFloat32);  // the float32 model's weights, in float64
  reference->to(t::kFloat64);
  nn::mse_loss(reference->forward(data.inputs[0].to(t::kFloat64)), data.targets[0].to(t::kFloat64)).backward();
  require_no_failures(run_threads(2, [&](comm::ProcessGroup& pg, Expectations& e) {
    auto model = make_model(t::kFloat32);
    ddp::DistributedDataParallel ddp(model, borrow(pg), deterministic());
    ddp.deterministic_step(data.inputs[0], data.targets[0],
                           [&](const t::Tensor& x, const t::Tensor& y) { return nn::mse_loss(ddp.forward(x), y); });
    const auto ref_params = reference->named_parameters();
    for (const auto& [name, p] : model->named_parameters()) {
      const t::Tensor want = ref_params.at(name).grad();
      const double err = t::max(t::abs(t::sub(p.grad().to(t::kFloat64), want))).item<double>();
      const double scale = t::max(t::abs(want)).item<double>();
      e.expect(err <= std::ldexp(scale, -16),
               fmt::format("{}'s gradient differs by {:.3g} (scale {:.3g})", name, err, scale));
    }
  }));
}

TEST_CASE("DDP's deterministic option refuses what it cannot take, by name", "[ddp][exact]") {
  require_no_failures(run_threads(2, [&](comm::ProcessGroup& pg, Expectations& e) {
    auto model = make_model(t::kFloat32);
    ddp::DistributedDataParallel ddp(model, borrow(pg), deterministic());
    const t::Tensor x = t::randn({kRows, 6}), y = t::randn({kRows, 3});
    const auto loss = [&](const t::Tensor& a, const t::Tensor& b) { return nn::mse_loss(ddp.forward(a), b); };
    e.expect_throws([&] { ddp.forward(x); }, "training forwards run inside deterministic_step");
    e.expect_throws([&] { ddp.deterministic_step(x.narrow(0, 0, 5), y.narrow(0, 0, 5), loss); },
                    "chunk_size 2 does not divide the global batch of 5 rows");
    e.expect_throws([&] { ddp.deterministic_step(x.narrow(0, 0, 6), y.narrow(0, 0, 6), loss); },
                    "the 3 chunks of 2 rows do not split over 2 ranks");
    e.expect_throws([&] { ddp.deterministic_step(x.narrow(0, 0, 3), y.narrow(0, 0, 3), loss, ddp::BatchRows::kRank); },
                    "this rank's 3 rows (BatchRows::kRank) are not a whole number of chunks of 2 rows");
    e.expect_throws([&] { ddp.register_comm_hook([](ddp::GradBucket&) { return std::shared_ptr<ddp::Future>(); }); },
                    "takes no comm hook");
    e.expect_throws(
        [&] {
          ddp.load_deterministic_state({1, 2});
        },
        "2 values, expected 5 (the steps done, then a bound");
    e.expect_throws([&] { ddp.join([] {}); }, "join does not take the deterministic option");
    e.expect_throws([&] { ddp.reducer(); }, "the deterministic option has no Reducer");
    e.expect(ddp.stats().bucket_bytes.empty() && ddp.stats().iterations == 0, "no Reducer: no buckets, no iterations");
    e.expect_throws(
        [&] {
          ddp::DistributedDataParallel made(make_model(t::kFloat32), borrow(pg),
                                            deterministic().find_unused_parameters(true));
        },
        "does not take find_unused_parameters or static_graph");
    {
      t::NoGradGuard no_grad;
      e.expect(ddp.forward(x).size(0) == kRows, "an evaluation forward runs anywhere");
    }
    auto with_bn = std::make_shared<nn::Sequential>();
    with_bn->push_back(std::make_shared<nn::Linear>(6, 4));
    with_bn->push_back(std::make_shared<ddp::SyncBatchNorm>(4));
    e.expect_throws([&] { ddp::DistributedDataParallel made(with_bn, borrow(pg), deterministic()); },
                    "does not take SyncBatchNorm ('1')");
    auto plain = make_model(t::kFloat32);
    ddp::DistributedDataParallel off(plain, borrow(pg));
    e.expect_throws([&] { off.deterministic_step(x, y, loss); }, "the deterministic option is off");
  }));
}

namespace {

// Processes (the default generator is per process): an MLP with Dropout(0.5) for 3 steps
// through deterministic_step on `world` ranks; rank 0 writes its parameters and losses, in
// text with 17 digits, to the returned path.
std::string dropout_run(int world, const std::string& name) {
  const std::string path = tinyddp::testing::temp_path(name);
  const Batches data = make_batches(3, t::kFloat32);
  require_no_failures(run_processes(world, [&](comm::ProcessGroup& pg, Expectations& e) {
    t::manual_seed(11 + static_cast<uint64_t>(pg.rank()));  // each rank its own stream, as train's seed + rank
    auto net = std::make_shared<nn::Sequential>();
    net->push_back(std::make_shared<nn::Linear>(6, 32));
    net->push_back(std::make_shared<nn::ReLU>());
    net->push_back(std::make_shared<nn::Dropout>(0.5));
    net->push_back(std::make_shared<nn::Linear>(32, 3));
    ddp::DistributedDataParallel model(net, borrow(pg), deterministic());
    nn::SGD opt(net->parameters(), nn::SGDOptions(0.05));
    std::ofstream out;
    if (pg.rank() == 0) out.open(path);
    out.precision(17);
    const std::string before = t::default_generator().get_state();
    for (int s = 0; s < 3; ++s) {
      out << model.deterministic_step(data.inputs[s], data.targets[s], [&](const t::Tensor& x, const t::Tensor& y) {
        return nn::mse_loss(model.forward(x), y);
      }) << "\n";
      opt.step();
    }
    e.expect(t::default_generator().get_state() == before, "the rank's generator is where it was");
    for (const t::Tensor& p : net->parameters()) {
      for (double v : p.to(t::kFloat64).to_vector<double>()) out << v << "\n";
    }
  }));
  return tinyddp::testing::read_file(path);
}

}  // namespace

TEST_CASE("Dropout under the deterministic option: each chunk's masks are its own, on any world size", "[ddp][exact]") {
  const std::string one = dropout_run(1, "deterministic_dropout_1.txt");
  REQUIRE(one.size() > 1000);
  for (int world : {2, 3}) {
    INFO(world << " ranks");
    CHECK(dropout_run(world, "deterministic_dropout_" + std::to_string(world) + ".txt") == one);
  }
}

namespace {

// Linear(6, 16), BatchNorm1d(16), ReLU, Linear(16, 3) with the same weights everywhere.
std::shared_ptr<nn::Sequential> make_norm_model() {
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Linear>(6, 16));
  net->push_back(std::make_shared<nn::BatchNorm1d>(16));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::Linear>(16, 3));
  t::Generator init(5);
  t::NoGradGuard no_grad;
  for (const t::Tensor& p : net->parameters()) t::uniform_(p, -0.5, 0.5, &init);
  return net;
}

// `steps` steps of SGD with a BatchNorm on `world` ranks: rank 0's state dict (parameters and
// running statistics) after each step, in float64.
std::vector<std::map<std::string, std::vector<double>>> train_norm(int world, const Batches& data, int steps) {
  std::vector<std::map<std::string, std::vector<double>>> states;
  std::mutex mutex;
  require_no_failures(run_threads(world, [&](comm::ProcessGroup& pg, Expectations&) {
    auto net = make_norm_model();
    ddp::DistributedDataParallel model(net, borrow(pg), deterministic());
    nn::SGD opt(net->parameters(), nn::SGDOptions(0.05));
    std::vector<std::map<std::string, std::vector<double>>> mine;
    for (int s = 0; s < steps; ++s) {
      model.deterministic_step(data.inputs[s], data.targets[s], [&](const t::Tensor& x, const t::Tensor& y) {
        return nn::mse_loss(model.forward(x), y);
      });
      opt.step();
      std::map<std::string, std::vector<double>> state;
      for (const auto& [name, v] : net->state_dict()) state[name] = v.to(t::kFloat64).to_vector<double>();
      mine.push_back(state);
    }
    if (pg.rank() == 0) {
      std::lock_guard<std::mutex> lock(mutex);
      states = mine;
    }
  }));
  return states;
}

}  // namespace

TEST_CASE("BatchNorm under the deterministic option: running statistics in chunk order, on any world size",
          "[ddp][exact]") {
  const Batches data = make_batches(3, t::kFloat32);
  const auto one = train_norm(1, data, 3);
  REQUIRE(one.size() == 3);
  // After the first step (which ran twice to calibrate the grids): the running statistics
  // moved once per chunk, in chunk order, by each chunk's own statistics (float64 reference
  // from the initial weights; float32 statistics of 2 rows agree to a few ulps of O(1)).
  const auto net = make_norm_model();
  auto* linear = dynamic_cast<nn::Linear*>(net->children()[0].get());
  REQUIRE(linear != nullptr);
  t::Tensor mean = t::zeros({16}, t::kFloat64), var = t::ones({16}, t::kFloat64);
  for (int64_t c = 0; c < kRows / kChunk; ++c) {
    const t::Tensor x = data.inputs[0].narrow(0, c * kChunk, kChunk).to(t::kFloat64);
    const t::Tensor h = t::add(t::matmul(x, linear->weight.to(t::kFloat64).t()), linear->bias.to(t::kFloat64));
    mean = t::add(t::mul(mean, 0.9), t::mul(t::mean(h, {0}), 0.1));
    var = t::add(t::mul(var, 0.9), t::mul(t::var(h, {0}), 0.1));  // unbiased, as the running variance
  }
  CHECK(one[0].at("1.num_batches_tracked") == std::vector<double>{12});
  const std::vector<double> want_mean = mean.to_vector<double>(), want_var = var.to_vector<double>();
  for (size_t i = 0; i < want_mean.size(); ++i) {
    CHECK(one[0].at("1.running_mean")[i] == Approx(want_mean[i]).margin(1e-6));
    CHECK(one[0].at("1.running_var")[i] == Approx(want_var[i]).margin(1e-5));
  }
  for (int world : {2, 3, 4, 6}) {
    INFO(world << " ranks");
    CHECK(train_norm(world, data, 3) == one);  // parameters and running statistics, bit for bit
  }
}
