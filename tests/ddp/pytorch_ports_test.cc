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
#include <mutex>

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

}  // namespace

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
