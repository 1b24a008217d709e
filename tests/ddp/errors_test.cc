// DDP's errors: models that differ across ranks (named on every rank at construction),
// different strides, nothing to synchronise, an unknown ignored name; a backward that fails
// part way, reported at the next forward.

#include "tests/comm/comm_test_util.h"
#include "tests/ddp/ddp_test_util.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp;
using namespace tinyddp::ddp;
using comm::ProcessGroup;
using testing::borrow;
using testing::Expectations;
using testing::require_no_failures;
using testing::run_threads;

TEST_CASE("mismatched models across ranks give a clear construction error on every rank", "[ddp][errors]") {
  require_no_failures(run_threads(2, [](ProcessGroup& pg, Expectations& e) {
    auto model = nn::mlp({6, pg.rank() == 0 ? 8 : 9, 3});
    try {
      DistributedDataParallel ddp(model, borrow(pg));
      e.failures.push_back("mismatched models were accepted");
    } catch (const Error& ex) {
      e.expect_contains(
          ex.what(), "parameter 0 ('0.weight' on this rank) is float32 [8, 6] on rank 0 but float32 [9, 6] on rank 1");
    }
  }));
  require_no_failures(run_threads(2, [](ProcessGroup& pg, Expectations& e) {
    auto model = pg.rank() == 0 ? nn::mlp({6, 8, 3}) : nn::mlp({6, 8, 8, 3});
    try {
      DistributedDataParallel ddp(model, borrow(pg));
      e.failures.push_back("mismatched models were accepted");
    } catch (const Error& ex) {
      e.expect_contains(ex.what(), "rank 0 has 4 parameters that require grad but rank 1 has 6");
    }
  }));
}

TEST_CASE("construction errors: different strides, nothing to synchronise, an unknown ignored name", "[ddp][errors]") {
  struct One : nn::Module {
    Tensor w;
    explicit One(const Tensor& t) : Module("One") { w = register_parameter("w", t); }
  };
  require_no_failures(run_threads(2, [](ProcessGroup& pg, Expectations& e) {
    // The same sizes, but rank 1's parameter is a transposed (column-major) layout.
    auto model = std::make_shared<One>(pg.rank() == 0 ? tensor::zeros({8, 6}) : tensor::zeros({6, 8}).t());
    try {
      DistributedDataParallel ddp(model, borrow(pg));
      e.failures.push_back("different strides were accepted");
    } catch (const Error& ex) {
      e.expect_contains(ex.what(),
                        "parameter 0 ('w' on this rank) is float32 [8, 6] with strides [6, 1] on rank 0 "
                        "but float32 [8, 6] with strides [1, 8] on rank 1");
    }
  }));
  require_no_failures(run_threads(1, [](ProcessGroup& pg, Expectations& e) {
    auto frozen = nn::mlp({3, 2});
    for (const Tensor& p : frozen->parameters()) p.requires_grad_(false);
    const std::vector<std::shared_ptr<nn::Module>> modules{std::make_shared<nn::ReLU>(), frozen};
    for (const auto& module : modules) {
      try {
        DistributedDataParallel ddp(module, borrow(pg));
        e.failures.push_back("a module without parameters to synchronise was accepted");
      } catch (const Error& ex) {
        e.expect_contains(ex.what(), "no parameter that requires a gradient");
      }
    }
    try {
      DistributedDataParallel ddp(nn::mlp({3, 2}), borrow(pg), DDPOptions().params_and_buffers_to_ignore({"0.wieght"}));
      e.failures.push_back("an unknown name to ignore was accepted");
    } catch (const Error& ex) {
      e.expect_contains(ex.what(), "names '0.wieght', which is neither a parameter nor a buffer");
    }
  }));
}

TEST_CASE("a backward pass that fails part way is reported at the next forward", "[ddp][errors]") {
  require_no_failures(run_threads(1, [](ProcessGroup& pg, Expectations& e) {
    auto model = nn::mlp({4, 6, 2});
    DistributedDataParallel ddp(model, borrow(pg), DDPOptions().first_bucket_cap_mb(1e-6).bucket_cap_mb(1e-6));
    // A tensor hook that throws on the first layer's weight: the hooks of the later layers
    // have already fired (and launched their buckets) when it does.
    auto handle = model->named_parameters().at("0.weight").register_hook([](const Tensor&) -> Tensor {
      throw Error("hook failed on purpose");
    });
    try {
      nn::mse_loss(ddp(tensor::ones({2, 4})), tensor::zeros({2, 2})).backward();
      e.failures.push_back("the failing hook did not fail backward");
    } catch (const Error& ex) {
      e.expect_contains(ex.what(), "hook failed on purpose");
    }
    handle.remove();
    try {
      ddp(tensor::ones({2, 4}));
      e.failures.push_back("forward after an interrupted backward did not fail");
    } catch (const Error& ex) {
      e.expect_contains(ex.what(), "previous backward pass started reducing gradients but never finished");
    }
  }));
}

// ---- DDP on GPUs ---------------------------------------------------------------------------------
