// Printing tests: Tensor::str() against the text PyTorch prints for the same tensors.
#include "tests/test_util.h"

using namespace tinyddp::tensor;

TEST_CASE("tensors print like PyTorch", "[print]") {
  CHECK(tensor({1.0, 2.0, 3.0}).str() == "tensor([1., 2., 3.])");
  CHECK(tensor({{1.5, 2}, {3, 4}}).str() == "tensor([[1.5000, 2.0000],\n        [3.0000, 4.0000]])");
  CHECK(arange(4).str() == "tensor([0, 1, 2, 3])");
  CHECK(tensor({-1, 10}, kInt64).str() == "tensor([-1, 10])");
  CHECK(gt(tensor({1.0, -1.0}), 0).str() == "tensor([ True, False])");
  CHECK(tensor({0.5}, kFloat64).str() == "tensor([0.5000], dtype=torch.float64)");
  CHECK(scalar_tensor(2.25).str() == "tensor(2.2500)");
  CHECK(zeros({0}).str() == "tensor([])");
  CHECK(zeros({0, 3}).str() == "tensor([], size=(0, 3))");
  CHECK(tensor({1e-5, 1}).str() == "tensor([1.0000e-05, 1.0000e+00])");
  CHECK(arange(8).view({2, 2, 2}).str() ==
        "tensor([[[0, 1],\n         [2, 3]],\n\n        [[4, 5],\n         [6, 7]]])");
  CHECK(arange(2000).str() == "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])");
  CHECK(arange(2500, kFloat32).str() ==
        "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 2.4970e+03, 2.4980e+03, 2.4990e+03])");
  CHECK(Tensor().str() == "tensor(undefined)");
  std::ostringstream os;
  os << tensor({1, 2}, kFloat16);
  CHECK(os.str() == "tensor([1., 2.], dtype=torch.float16)");
}
