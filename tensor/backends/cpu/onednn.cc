// Matrix products on oneDNN (libdnnl, Debian's oneDNN 2.6: the library PyTorch's CPU bfloat16
// matmul calls here): float32 products on Intel CPUs under AVX-512 (onednn_sgemm), and bfloat16
// products, 2-D with Linear's bias folded in, and batched over strided N-D views (attention's
// [batch, heads] products) in one call. oneDNN picks its kernels at run time: AMX where the CPU
// has it, AVX512-BF16 (vdpbf16ps) otherwise, AVX-512 emulation without either. tinyddp calls it
// only where cpu_isa() chose AVX-512; below that (or with TINYDDP_CPU_ISA=avx2) bfloat16
// products compute in float32 (matmul.cc).
//
// One matmul primitive per shape and layout, kept per thread (oneDNN's own cache holds
// primitives but each lookup would first build a descriptor, tens of µs). oneDNN threads
// with OpenMP: one OpenMP thread per calling thread (onednn_stream); the intra-op threads
// share a product out as row or column blocks, each on its own stream (matmul.cc). The engine and
// streams are shared with the convolutions (onednn_conv.cc).
#include <omp.h>

#include <fmt/format.h>

#include <atomic>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "tinyddp/base/error.h"
#include "tinyddp/tensor/backends/cpu/algorithms.h"
#include "tinyddp/tensor/backends/cpu/backend.h"
#include "tinyddp/tensor/backends/cpu/onednn.h"
#include "tinyddp/tensor/cpu_isa.h"
#include "tinyddp/tensor/parallel.h"

namespace tinyddp::tensor::cpu {

bool onednn_used() { return cpu_isa() == CpuIsa::kAvx512; }

dnnl::engine& onednn_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

void onednn_sgemm(const GemmArgs<float>& g) {
  onednn_stream();  // this thread's OpenMP regions, the sgemm's among them, at one thread
  const dnnl_status_t status = dnnl_sgemm(g.a_row_major ? 'N' : 'T', g.b_row_major ? 'N' : 'T', g.n, g.m, g.k, 1.0f,
                                          g.a, g.lda, g.b, g.ldb, 0.0f, g.c, g.ldc > 0 ? g.ldc : g.m);
  TDDP_CHECK(status == dnnl_success, "oneDNN's sgemm failed (status {}) on a {} x {} x {} product",
             static_cast<int>(status), g.n, g.k, g.m);
}

dnnl::stream& onednn_stream() {
  thread_local dnnl::stream stream = [] {
    omp_set_num_threads(1);  // this thread's OpenMP regions, oneDNN's included
    return dnnl::stream(onednn_engine());
  }();
  return stream;
}

bool all_blocks_ran(int64_t blocks, const std::function<bool(int64_t)>& block) {
  std::atomic<bool> all_ran{true};
  parallel_chunks(blocks, [&](int64_t i) {
    if (!block(i)) all_ran = false;
  });
  return all_ran;
}

namespace {

using dnnl::memory;

// A 2-D operand's strides for oneDNN: its matrix_layout (matmul.cc), made contiguous first
// when it has none.
std::pair<Tensor, memory::dims> readable(const Tensor& t) {
  std::optional<MatrixLayout> layout = matrix_layout(t);
  const Tensor in_place = layout ? t : backend().contiguous(t);
  if (!layout) layout = matrix_layout(in_place);
  return {in_place, layout->row_major ? memory::dims{layout->leading_dim, 1} : memory::dims{1, layout->leading_dim}};
}

// One product's operands: a's dims and strides, b's, out's strides, whether a bias row is
// added. 2-D, or N-D with the same batch dims in front (out: its dims a's and b's; its rows
// dense, possibly a column block of a wider matrix).
using Key = std::tuple<memory::dims, memory::dims, memory::dims, memory::dims, memory::dims, bool>;

struct Product {
  dnnl::matmul primitive;
  std::string implementation;  // oneDNN's name for the kernel, e.g. "brg:avx512_core_bf16"
};

memory::desc bias_desc(int64_t m) { return memory::desc({1, m}, memory::data_type::bf16, memory::dims{m, 1}); }

// The product's output: a's dims with b's last, with `strides`.
memory::desc out_desc(const memory::dims& a_dims, const memory::dims& b_dims, const memory::dims& strides) {
  memory::dims dims = a_dims;
  dims.back() = b_dims.back();
  return memory::desc(dims, memory::data_type::bf16, strides);
}

// This thread's primitives. Bounded: a run that makes more than kMaxProducts shapes starts
// over (a model has a few dozen).
constexpr size_t kMaxProducts = 512;
const Product& product_for(const Key& key) {
  thread_local std::map<Key, Product> products;
  if (const auto it = products.find(key); it != products.end()) return it->second;
  if (products.size() >= kMaxProducts) products.clear();
  const auto& [a_dims, a_strides, b_dims, b_strides, out_strides, with_bias] = key;
  const memory::desc a(a_dims, memory::data_type::bf16, a_strides);
  const memory::desc b(b_dims, memory::data_type::bf16, b_strides);
  const memory::desc c = out_desc(a_dims, b_dims, out_strides);
  const dnnl::matmul::desc desc =
      with_bias ? dnnl::matmul::desc(a, b, bias_desc(b_dims.back()), c) : dnnl::matmul::desc(a, b, c);
  const dnnl::matmul::primitive_desc pd(desc, onednn_engine());
  return products.emplace(key, Product{dnnl::matmul(pd), pd.impl_info_str()}).first->second;
}

// Runs the product `key` describes on a's and b's elements (and bias) into out; false where
// oneDNN has no kernel for it.
bool run(const Key& key, const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  dnnl::stream& stream = onednn_stream();
  try {
    const Product& p = product_for(key);
    const auto& [a_dims, a_strides, b_dims, b_strides, out_strides, with_bias] = key;
    dnnl::engine& engine = onednn_engine();
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, memory(memory::desc(a_dims, memory::data_type::bf16, a_strides), engine, a.raw_data_ptr())},
        {DNNL_ARG_WEIGHTS, memory(memory::desc(b_dims, memory::data_type::bf16, b_strides), engine, b.raw_data_ptr())},
        {DNNL_ARG_DST, memory(out_desc(a_dims, b_dims, out_strides), engine, out.raw_data_ptr())}};
    if (with_bias) args.emplace(DNNL_ARG_BIAS, memory(bias_desc(b_dims.back()), engine, bias.raw_data_ptr()));
    p.primitive.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error&) {
    return false;  // no bfloat16 kernel for this CPU or shape: the caller's float32 route
  }
  return true;
}

memory::dims dims_of(const Shape& s) { return memory::dims(s.begin(), s.end()); }

}  // namespace

bool bf16_mm_onednn(const Tensor& out, const Tensor& a_in, const Tensor& b_in, const Tensor& bias) {
  if (!onednn_used()) return false;
  if (out.stride(1) != 1) return false;  // dense rows only (out is contiguous, or a column block of it)
  const auto [a, a_strides] = readable(a_in);
  const auto [b, b_strides] = readable(b_in);
  return run(Key{dims_of(a.sizes()), a_strides, dims_of(b.sizes()), b_strides, dims_of(out.strides()), bias.defined()},
             a, b, bias, out);
}

bool bf16_bmm_onednn(const Tensor& out, const Tensor& a, const Tensor& b) {
  if (!onednn_used() || a.dim() > 6) return false;
  for (const Tensor* t : {&a, &b}) {
    for (int64_t d = 0; d < t->dim(); ++d) {
      if (t->size(d) > 1 && t->stride(d) == 0) return false;  // a broadcast batch: the caller's loop
    }
    if (t->stride(-1) != 1 && t->stride(-2) != 1) return false;  // no unit stride in the matrices
  }
  if (!out.is_contiguous()) return false;
  return run(Key{dims_of(a.sizes()), dims_of(a.strides()), dims_of(b.sizes()), dims_of(b.strides()),
                 dims_of(out.strides()), false},
             a, b, Tensor(), out);
}

std::string bf16_matmul_engine(int64_t n, int64_t k, int64_t m) {
  if (!onednn_used()) {
    return fmt::format("float32 kernels, results rounded to bfloat16 (oneDNN not used: {} selected)",
                       cpu_isa_name(cpu_isa()));
  }
  onednn_stream();  // this thread set up for oneDNN
  try {
    return "oneDNN " + product_for(Key{{n, k}, {k, 1}, {k, m}, {m, 1}, {m, 1}, false}).implementation;
  } catch (const dnnl::error& e) {
    return fmt::format("float32 kernels, results rounded to bfloat16 (oneDNN has no bfloat16 matmul here: {})",
                       e.what());
  }
}

}  // namespace tinyddp::tensor::cpu
