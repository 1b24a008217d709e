// A short tour of the tensor library that prints what each step does
// (creation, views sharing storage, broadcasting, matmul, softmax, 16-bit conversion,
// seeded randomness), then times a 512x512 matmul and reports whether CUDA is usable.
#include <chrono>
#include <iostream>

#include "tinyddp/tensor/all.h"

namespace t = tinyddp::tensor;

int main() {
  try {
    std::cout << "tinyddp tensor demo\n\n";
    const t::Tensor x = t::arange(12, t::kFloat32).view({3, 4});
    std::cout << "x = arange(12).view({3, 4})\n" << x << "\n\n";

    const t::Tensor col = x.narrow(1, 1, 2);
    col.mul_(10);
    std::cout << "x.narrow(1, 1, 2).mul_(10) writes through the view into x:\n" << x << "\n\n";

    const t::Tensor bias = t::tensor({1.0, 2.0, 3.0, 4.0});
    std::cout << "x + bias (shape [4] broadcasts over the rows):\n" << x + bias << "\n\n";

    const t::Tensor w = t::tensor({{1.0, 0.0}, {0.0, 1.0}, {1.0, 1.0}, {2.0, -1.0}});
    std::cout << "matmul(x, w) with w [4, 2]:\n" << t::matmul(x, w) << "\n";
    std::cout << "matmul(x.t().t(), w) uses the transposed view without a copy:\n" << t::matmul(x.t().t(), w) << "\n\n";

    std::cout << "softmax(x / 10, dim=1):\n" << t::softmax(x / 10, 1) << "\n";
    std::cout << "sum over dim 0: " << t::sum(x, {0}) << ", mean: " << t::mean(x) << "\n";
    const auto [values, indices] = t::max(x, 1);
    std::cout << "max over dim 1: values " << values << ", indices " << indices << "\n\n";

    const t::Tensor third = t::tensor({1.0 / 3.0, 65519.0, 65520.0});
    std::cout << "float16 rounding (nearest even; 65520 overflows): " << third.to(t::kFloat16) << "\n";
    std::cout << "bfloat16: " << third.to(t::kBFloat16) << "\n\n";

    t::manual_seed(0);
    std::cout << "manual_seed(0); rand({4}) (the same numbers as torch.rand): " << t::rand({4}) << "\n\n";

    const t::Tensor a = t::randn({512, 512});
    const t::Tensor b = t::randn({512, 512});
    t::matmul(a, b);  // warm up
    const auto start = std::chrono::steady_clock::now();
    constexpr int kRepeats = 10;
    for (int i = 0; i < kRepeats; ++i) t::matmul(a, b);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / kRepeats;
    std::cout << "512x512 float32 matmul: " << seconds * 1e3 << " ms (" << 2.0 * 512 * 512 * 512 / seconds / 1e9
              << " GFLOP/s, one thread)\n";

    std::cout << "CUDA: " << (t::cuda::is_available() ? "available" : t::cuda::unavailable_reason()) << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "tensor_demo: " << e.what() << "\n";
    return 1;
  }
}
