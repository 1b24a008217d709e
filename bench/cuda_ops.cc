// //bench:cuda_ops: the GPU kernels the GPU issue sets targets for, timed with CUDA events
// (median of --repeats after a warm-up), one RESULT line each:
//   matmul 4096 x 4096 x 4096 in float32 (TF32 off), float32 with TF32, and bfloat16:
//     "RESULT op=matmul dtype=<float32|tf32|bfloat16> n=4096 ms=<x> tflops=<y>"
//   an elementwise add of 256 M floats into a third tensor, and a same-device copy of them:
//     "RESULT op=<add|copy> n=268435456 ms=<x> gbps=<y>" (bytes read and written per ms)
//   causal attention at GPT-2 small's shape [8, 12, 1024, 64], forward + backward, float32 and
//   bfloat16, composed (matmul, causal_softmax, matmul) and tensor::flash_attention's kernels
//   (bfloat16: the tensor-core ones), without and with attention dropout 0.1 (composed: dropout
//   on the weights), alone with --only attention:
//     "RESULT op=attention route=<composed|flash> dropout=<0|0.1> dtype=<float32|bfloat16> ms=<x>"
//   the general (strided, broadcast) elementwise path at GPT-2 small's sizes, alone with --only
//   strided: the heads' transpose of [8, 1024, 12, 64] bfloat16 into a dense [8, 12, 1024, 64],
//   and a float32 [8192, 768] minus a [8192, 1] column:
//     "RESULT op=<transpose_copy|broadcast_sub> ms=<x> gbps=<y>" (bytes read and written per ms)
// bench/torch_cuda_ops.py prints the same lines for PyTorch on the same GPU.
// Usage (a --config=cuda build): bazel-bin/bench/cuda_ops [--repeats 20] [--n 4096] [--elements 268435456]
//   [--only attention|strided]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "tinyddp/tensor/all.h"
#include "tinyddp/tensor/cuda.h"

namespace t = tinyddp::tensor;

namespace {

// Median GPU milliseconds of `repeats` calls of `fn` after 3 untimed ones.
double median_ms(int repeats, const std::function<void()>& fn) {
  for (int i = 0; i < 3; ++i) fn();
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    const t::cuda::StreamMark start = t::cuda::StreamMark::record(0, true);
    fn();
    const t::cuda::StreamMark end = t::cuda::StreamMark::record(0, true);
    ms.push_back(t::cuda::StreamMark::elapsed_ms(start, end));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void matmuls(int64_t n, int repeats) {
  const t::TensorOptions gpu = t::TensorOptions().device(t::Device::cuda(0));
  const t::Tensor a = t::randn({n, n}).to(gpu.device()), b = t::randn({n, n}).to(gpu.device());
  for (const char* mode : {"float32", "tf32", "bfloat16"}) {
    const bool bf16 = std::string(mode) == "bfloat16";
    t::cuda::set_allow_tf32(std::string(mode) == "tf32");
    const t::Tensor x = bf16 ? a.to(t::kBFloat16) : a, y = bf16 ? b.to(t::kBFloat16) : b;
    const double ms = median_ms(repeats, [&] { (void)t::matmul(x, y); });
    std::cout << "RESULT op=matmul dtype=" << mode << " n=" << n << " ms=" << ms
              << " tflops=" << 2.0 * n * n * n / (ms * 1e9) << std::endl;
  }
  t::cuda::set_allow_tf32(false);
}

void elementwise(int64_t elements, int repeats) {
  const t::TensorOptions gpu = t::TensorOptions().device(t::Device::cuda(0));
  const t::Tensor a = t::full({elements}, 1.5, gpu), b = t::full({elements}, 2.5, gpu), c = t::empty({elements}, gpu);
  const double bytes = static_cast<double>(elements) * sizeof(float);
  const double add_ms = median_ms(repeats, [&] { t::add_out(c, a, b, 1.0, "add"); });
  std::cout << "RESULT op=add n=" << elements << " ms=" << add_ms << " gbps=" << 3 * bytes / (add_ms * 1e6)
            << std::endl;
  const double copy_ms = median_ms(repeats, [&] { c.copy_(a); });
  std::cout << "RESULT op=copy n=" << elements << " ms=" << copy_ms << " gbps=" << 2 * bytes / (copy_ms * 1e6)
            << std::endl;
}

void attention(int repeats) {
  const t::Device gpu = t::Device::cuda(0);
  const t::Shape shape{8, 12, 1024, 64};
  for (const t::DType dtype : {t::kFloat32, t::kBFloat16}) {
    std::vector<t::Tensor> qkv;
    for (int i = 0; i < 3; ++i) qkv.push_back(t::randn(shape).to(dtype).to(gpu).requires_grad_());
    const t::Tensor grad = t::randn(shape).to(dtype).to(gpu);
    for (const double p : {0.0, 0.1}) {  // without and with attention dropout
      for (const bool flash : {false, true}) {
        t::cuda::enable_math_sdp(!flash);  // "flash": the kernel at any size (cuda.h, enable_math_sdp)
        const double ms = median_ms(repeats, [&] {
          const t::Tensor& q = qkv[0];
          const t::Tensor w = flash ? t::Tensor() : t::causal_softmax(t::matmul(q, qkv[1].transpose(-2, -1)), 0.125);
          const t::Tensor y =
              flash ? t::flash_attention(q, qkv[1], qkv[2], true, 0.125, p) : t::matmul(t::dropout(w, p), qkv[2]);
          y.backward(grad);
          for (const t::Tensor& x : qkv) x.mutable_grad() = t::Tensor();
        });
        t::cuda::enable_math_sdp(true);
        std::cout << "RESULT op=attention route=" << (flash ? "flash" : "composed") << " dropout=" << p
                  << " dtype=" << t::dtype_name(dtype) << " ms=" << ms << std::endl;
      }
    }
  }
}

void strided(int repeats) {
  const t::Device gpu = t::Device::cuda(0);
  const t::Tensor heads = t::randn({8, 1024, 12, 64}).to(gpu).to(t::kBFloat16);
  const t::Tensor dense = t::empty({8, 12, 1024, 64}, t::TensorOptions(t::kBFloat16).device(gpu));
  const double copy_ms = median_ms(repeats, [&] { dense.copy_(heads.transpose(1, 2)); });
  std::cout << "RESULT op=transpose_copy ms=" << copy_ms << " gbps=" << 2.0 * heads.nbytes() / (copy_ms * 1e6)
            << std::endl;
  const t::Tensor x = t::randn({8192, 768}).to(gpu), column = t::randn({8192, 1}).to(gpu);
  const t::Tensor out = t::empty({8192, 768}, t::TensorOptions().device(gpu));
  const double sub_ms = median_ms(repeats, [&] { t::add_out(out, x, column, -1.0, "sub"); });
  std::cout << "RESULT op=broadcast_sub ms=" << sub_ms << " gbps=" << 2.0 * x.nbytes() / (sub_ms * 1e6) << std::endl;
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 20;
  int64_t n = 4096, elements = int64_t{256} << 20;
  CLI::App app{"Time tinyddp's GPU matmul, add, copy and attention (CUDA events, medians)."};
  app.add_option("--repeats", repeats, "timed calls of each (default 20)")->check(CLI::PositiveNumber);
  app.add_option("--n", n, "matmul size (default 4096)")->check(CLI::PositiveNumber);
  app.add_option("--elements", elements, "floats per operand of add and copy (default 268435456)")
      ->check(CLI::PositiveNumber);
  std::string only;
  app.add_option("--only", only, "time only this (the others first, by default)")
      ->check(CLI::IsMember({"attention", "strided"}));
  CLI11_PARSE(app, argc, argv);
  try {
    if (!t::cuda::is_available()) throw tinyddp::Error(t::cuda::unavailable_reason());
    if (only.empty()) {
      matmuls(n, repeats);
      elementwise(elements, repeats);
    }
    if (only != "strided") attention(repeats);
    if (only != "attention") strided(repeats);
  } catch (const std::exception& e) {
    std::cerr << "cuda_ops: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
