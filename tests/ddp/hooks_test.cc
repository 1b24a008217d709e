// Communication hooks: a hook's result may be another tensor than the bucket (read through
// the bucket's layout, with and without gradient_as_bucket_view); a custom hook with state;
// fp16 and bf16 compression.

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
using testing::require_no_failures;
using testing::run_threads;

TEST_CASE("communication hooks: a hook may return another tensor than the bucket", "[ddp][hooks]") {
  // The averages land in .grad through the bucket's layout over the returned tensor, with and
  // without gradient_as_bucket_view: the same gradients as the built-in hook.
  for (bool as_view : {false, true}) {
    INFO("gradient_as_bucket_view " << as_view);
    require_no_failures(run_threads(2, [&](ProcessGroup& pg, Expectations& e) {
      const auto gradients = [&](bool own_tensor) {
        auto model = nn::mlp({6, 8, 3});
        {
          tensor::NoGradGuard no_grad;
          tensor::Generator g(21);
          for (const Tensor& p : model->parameters()) tensor::uniform_(p, -0.5, 0.5, &g);
        }
        DistributedDataParallel ddp(model, borrow(pg), DDPOptions().gradient_as_bucket_view(as_view));
        if (own_tensor) {
          ddp.register_comm_hook([&pg](GradBucket& b) -> std::shared_ptr<Future> {
            const Tensor copy = tensor::div(b.buffer, static_cast<double>(pg.size()));  // not the bucket
            return Future::from_work(pg.allreduce(copy), copy);
          });
        }
        tensor::Generator data(30 + pg.rank());
        nn::mse_loss(ddp(tensor::randn({4, 6}, {}, &data)), tensor::randn({4, 3}, {}, &data)).backward();
        std::vector<Tensor> out;
        for (const Tensor& p : model->parameters()) out.push_back(p.grad().clone());
        return out;
      };
      const auto want = gradients(false), got = gradients(true);
      for (size_t k = 0; k < want.size(); ++k) {
        e.expect_close(got[k], want[k], fmt::format("gradient {} against the built-in hook's", k), 1e-5, 1e-8);
      }
    }));
  }
}

TEST_CASE("communication hooks: a custom hook with state, fp16 and bf16 compression", "[ddp][hooks]") {
  require_no_failures(run_threads(2, [](ProcessGroup& pg, Expectations& e) {
    // The same two training steps with the default, fp16 and bf16 hooks, and a counting hook.
    const auto train = [&](const std::function<void(DistributedDataParallel&)>& setup) {
      auto model = nn::mlp({6, 8, 3});
      {
        tensor::NoGradGuard no_grad;
        tensor::Generator g(11);
        for (const Tensor& p : model->parameters()) tensor::uniform_(p, -0.5, 0.5, &g);
      }
      DistributedDataParallel ddp(model, borrow(pg));
      setup(ddp);
      nn::SGD opt(model->parameters(), nn::SGDOptions(0.1));
      tensor::Generator data(100 + pg.rank());
      for (int s = 0; s < 2; ++s) {
        opt.zero_grad();
        nn::mse_loss(ddp(tensor::randn({4, 6}, {}, &data)), tensor::randn({4, 3}, {}, &data)).backward();
        opt.step();
      }
      std::vector<Tensor> out;
      for (const Tensor& p : model->parameters()) out.push_back(p.clone());
      return out;
    };
    const auto reference = train([](DistributedDataParallel&) {});
    int calls = 0;
    const auto counted = train([&](DistributedDataParallel& ddp) {
      ddp.register_comm_hook(
          ddp.process_group_ptr(), [&calls, &e](const std::shared_ptr<ProcessGroup>& state, GradBucket& b) {
            ++calls;
            // PyTorch's GradBucket API: the parameters, and their gradients as views of the buffer.
            const std::vector<Tensor> grads = b.gradients();
            e.expect_eq(grads.size(), b.parameters().size(), "gradients() against parameters()");
            e.expect_eq(grads.size(), b.parameter_indices.size(), "gradients() against parameter_indices");
            for (size_t k = 0; k < grads.size(); ++k) {
              e.expect_eq(grads[k].sizes(), b.parameters()[k].sizes(), fmt::format("gradient {}'s sizes", k));
              e.expect(grads[k].shares_storage(b.buffer),
                       fmt::format("gradient {} is not a view of the bucket's buffer", k));
            }
            return hooks::allreduce(state)(b);
          });
      try {
        ddp.register_comm_hook(hooks::allreduce(ddp.process_group_ptr()));
        e.failures.push_back("a second communication hook was accepted");
      } catch (const Error& ex) {
        e.expect_contains(ex.what(), "can only be registered once");
      }
    });
    e.expect(calls >= 2, fmt::format("the custom hook was called {} time(s), not for every bucket", calls));
    for (size_t i = 0; i < reference.size(); ++i) {
      e.expect_close(counted[i], reference[i],
                     fmt::format("parameter {} with the custom allreduce hook against the built-in one", i));
    }
    const auto fp16 = train(
        [](DistributedDataParallel& ddp) { ddp.register_comm_hook(hooks::fp16_compress(ddp.process_group_ptr())); });
    const auto bf16 = train(
        [](DistributedDataParallel& ddp) { ddp.register_comm_hook(hooks::bf16_compress(ddp.process_group_ptr())); });
    bool bf16_differs = false;  // bf16's rounding must show somewhere: proof the hook ran
    for (size_t i = 0; i < reference.size(); ++i) {
      e.expect_close(fp16[i], reference[i], fmt::format("fp16 hook: parameter {} against float32", i), 1e-3, 1e-3);
      e.expect_close(bf16[i], reference[i], fmt::format("bf16 hook: parameter {} against float32", i), 2e-2, 2e-2);
      bf16_differs |= !tensor::equal(bf16[i], reference[i]);
    }
    e.expect(bf16_differs, "the bf16 hook left no trace (was it used?)");
  }));
}
