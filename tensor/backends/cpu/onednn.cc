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
// with OpenMP: one OpenMP thread per calling thread (onednn_stream, called on a thread before
// its first primitive is made: a primitive made for more threads may sum in another order); the
// intra-op threads share a product out as row or column blocks, each on its own stream
// (matmul.cc), row blocks reading b packed once (bf16_mm_row_blocks_onednn). The engine and
// streams are shared with the convolutions (onednn_conv.cc).
#include <omp.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
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
#include "tinyddp/tensor/factory.h"
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
// The last flag: the kernel reads b packed, copied into the layout it prefers (`weights`), from
// b as the other dims describe it (pack, below).
using Key = std::tuple<memory::dims, memory::dims, memory::dims, memory::dims, memory::dims, bool, bool>;

struct Product {
  dnnl::matmul primitive;
  std::string implementation;  // oneDNN's name for the kernel, e.g. "brg:avx512_core_bf16"
  memory::desc weights;        // the layout in which the kernel reads b
  int64_t pair_width = 0;      // packed: the width of weights' pair-interleaved blocks, or 0 (pair_block_width)
};

int64_t pair_block_width(const memory::desc& layout, int64_t k, int64_t m);

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
  const auto& [a_dims, a_strides, b_dims, b_strides, out_strides, with_bias, packed] = key;
  const memory::desc a(a_dims, memory::data_type::bf16, a_strides);
  const memory::desc b(b_dims, memory::data_type::bf16, b_strides);
  const memory::desc b_any(b_dims, memory::data_type::bf16, memory::format_tag::any);
  const memory::desc c = out_desc(a_dims, b_dims, out_strides);
  const memory::desc& weights = packed ? b_any : b;
  const dnnl::matmul::desc desc =
      with_bias ? dnnl::matmul::desc(a, weights, bias_desc(b_dims.back()), c) : dnnl::matmul::desc(a, weights, c);
  const dnnl::matmul::primitive_desc pd(desc, onednn_engine());
  const int64_t pair_width = packed ? pair_block_width(pd.weights_desc(), b_dims[0], b_dims[1]) : 0;
  return products.emplace(key, Product{dnnl::matmul(pd), pd.impl_info_str(), pd.weights_desc(), pair_width})
      .first->second;
}

// Runs the product `key` describes on the elements at a and b (b in the kernel's own layout when
// the key says packed) and bias, into out; false where oneDNN has no kernel for it.
bool run(const Key& key, const void* a, const void* b, const void* bias, void* out) {
  dnnl::stream& stream = onednn_stream();
  try {
    const Product& p = product_for(key);
    const auto& [a_dims, a_strides, b_dims, b_strides, out_strides, with_bias, packed] = key;
    dnnl::engine& engine = onednn_engine();
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, memory(memory::desc(a_dims, memory::data_type::bf16, a_strides), engine, const_cast<void*>(a))},
        {DNNL_ARG_WEIGHTS, memory(p.weights, engine, const_cast<void*>(b))},
        {DNNL_ARG_DST, memory(out_desc(a_dims, b_dims, out_strides), engine, out)}};
    if (with_bias) args.emplace(DNNL_ARG_BIAS, memory(bias_desc(b_dims.back()), engine, const_cast<void*>(bias)));
    p.primitive.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error&) {
    return false;  // no bfloat16 kernel for this CPU or shape: the caller's float32 route
  }
  return true;
}

memory::dims dims_of(const Shape& s) { return memory::dims(s.begin(), s.end()); }
const void* data_or_null(const Tensor& t) { return t.defined() ? t.raw_data_ptr() : nullptr; }

// The columns in one block of `layout` (64 in AMX's BA16a64b2a), and whether it pads no dim.
int64_t column_block(const memory::desc& layout) {
  const dnnl_blocking_desc_t& blocking = layout.data.format_desc.blocking;
  int64_t columns = 1;
  for (int i = 0; i < blocking.inner_nblks; ++i) {
    if (blocking.inner_idxs[i] == 1) columns *= blocking.inner_blks[i];
  }
  return columns;
}
bool unpadded(const memory::desc& layout) {
  return layout.data.format_kind == dnnl_blocked && layout.data.padded_dims[0] == layout.data.dims[0] &&
         layout.data.padded_dims[1] == layout.data.dims[1];
}

// The width of the pair-interleaved blocks (isa/kernels.h: PairPackArgs) `layout` stores b [k, m]
// in unpadded, or 0 for any other layout.
int64_t pair_block_width(const memory::desc& layout, int64_t k, int64_t m) {
  using Tag = memory::format_tag;
  for (const auto& [tag, width] : {std::pair{Tag::BA16a64b2a, 64}, std::pair{Tag::BA16a48b2a, 48},
                                   std::pair{Tag::BA16a32b2a, 32}, std::pair{Tag::BA16a16b2a, 16}}) {
    if (k % 32 == 0 && m % width == 0 && layout == memory::desc({k, m}, memory::data_type::bf16, tag)) return width;
  }
  return 0;
}

// The whole of b [k, m] (strides {row, column}) as pack_pairs_16 copies it into blocks of
// `width` columns (the product's pair_width) at `packed` (tinyddp's own copy: oneDNN 2.6's
// reorder into these blocks moved 8-13 GB/s, bench/README.md); none where the layout is not the
// pair-interleaved one (width 0) or b's strides do not suit the copy (neither row- nor
// column-major with its pairs as aligned 4-byte words).
std::optional<PairPackArgs> pair_pack(const void* b, const memory::dims& dims, const memory::dims& strides,
                                      int64_t width, void* packed) {
  const bool row_major = strides[1] == 1;
  const bool column_major =
      strides[0] == 1 && strides[1] % 2 == 0 && reinterpret_cast<uintptr_t>(b) % alignof(float) == 0;
  if (width == 0 || !(row_major || column_major)) return std::nullopt;
  return PairPackArgs{static_cast<const uint16_t*>(b),
                      dims[0],
                      row_major ? strides[0] : 1,
                      row_major ? 1 : strides[1],
                      width,
                      0,
                      dims[1] / width,
                      static_cast<uint16_t*>(packed)};
}

// One piece of a reorder into a product's weights layout: columns [from, from + width) of b.
struct PackPiece {
  dnnl::reorder reorder;
  memory::desc src, dst;
};

// b [k, m] (as the packed product `key` reads it, before packing) reordered into the layout
// `product` reads it in, at `packed`: in up to `pieces` column pieces of whole layout blocks on
// the intra-op threads where the layout pads nothing (each piece then writes only its own
// blocks), else in one piece; by pack_pairs_16 where pair_pack serves, else by oneDNN's reorder.
bool pack(const Key& key, const Product& product, const void* b, void* packed, int64_t pieces) {
  const memory::dims& b_dims = std::get<2>(key);
  const memory::desc& layout = product.weights;
  const std::optional<PairPackArgs> pairs = pair_pack(b, b_dims, std::get<3>(key), product.pair_width, packed);
  const int64_t k = b_dims[0], m = b_dims[1], unit = pairs ? pairs->width : column_block(layout);
  if (!unpadded(layout) || m % unit != 0) pieces = 1;
  const int64_t width = (m / unit + pieces - 1) / pieces * unit;
  return all_blocks_ran((m + width - 1) / width, [&](int64_t i) {
    if (pairs) {
      PairPackArgs piece = *pairs;
      piece.block_from = i * width / unit;
      piece.block_to = std::min(m, (i + 1) * width) / unit;
      isa_kernels().pack_pairs_16(piece);
      return true;
    }
    constexpr size_t kMaxPieces = 512;
    thread_local std::map<std::tuple<Key, int64_t, int64_t>, PackPiece> cached;
    const std::tuple<Key, int64_t, int64_t> piece_key{key, i * width, std::min(width, m - i * width)};
    dnnl::stream& stream = onednn_stream();
    try {
      auto it = cached.find(piece_key);
      if (it == cached.end()) {
        if (cached.size() >= kMaxPieces) cached.clear();
        const memory::desc b_desc(b_dims, memory::data_type::bf16, std::get<3>(key));
        const memory::desc src = b_desc.submemory_desc({k, std::get<2>(piece_key)}, {0, std::get<1>(piece_key)});
        const memory::desc dst = layout.submemory_desc({k, std::get<2>(piece_key)}, {0, std::get<1>(piece_key)});
        const dnnl::reorder::primitive_desc pd(onednn_engine(), src, onednn_engine(), dst);
        it = cached.emplace(piece_key, PackPiece{dnnl::reorder(pd), src, dst}).first;
      }
      memory from(it->second.src, onednn_engine(), const_cast<void*>(b));
      memory to(it->second.dst, onednn_engine(), packed);
      it->second.reorder.execute(stream, from, to);
      stream.wait();
    } catch (const dnnl::error&) {
      return false;
    }
    return true;
  });
}

}  // namespace

bool bf16_mm_onednn(const Tensor& out, const Tensor& a_in, const Tensor& b_in, const Tensor& bias) {
  if (!onednn_used()) return false;
  if (out.stride(1) != 1) return false;  // dense rows only (out is contiguous, or a column block of it)
  const auto [a, a_strides] = readable(a_in);
  const auto [b, b_strides] = readable(b_in);
  return run(
      Key{dims_of(a.sizes()), a_strides, dims_of(b.sizes()), b_strides, dims_of(out.strides()), bias.defined(), false},
      a.raw_data_ptr(), b.raw_data_ptr(), data_or_null(bias), out.raw_data_ptr());
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
                 dims_of(out.strides()), false, false},
             a.raw_data_ptr(), b.raw_data_ptr(), nullptr, out.raw_data_ptr());
}

bool bf16_mm_row_blocks_onednn(const Tensor& out, const Tensor& a_in, const Tensor& b_in, const Tensor& bias,
                               int64_t rows) {
  if (!onednn_used() || out.stride(1) != 1) return false;
  const auto [a, a_strides] = readable(a_in);
  const auto [b, b_strides] = readable(b_in);
  const int64_t n = a.size(0), k = a.size(1), m = b.size(1), blocks = (n + rows - 1) / rows;
  // A column-major a: each block copied dense (oneDNN's AMX kernels take a transposed a only
  // dense, and ran the strided blocks on its slower gemm), except with more terms than columns,
  // where that gemm on the blocks in place, reading b plain, was the faster (bench/README.md).
  const bool a_columns = a_strides[0] == 1 && k > 1, in_place = a_columns && k > m, copy_a = a_columns && !in_place;
  const auto block_key = [&, &a_strides = a_strides, &b_strides = b_strides](int64_t count, bool packed) {
    const memory::dims block_a = copy_a ? memory::dims{1, count} : a_strides;
    return Key{{count, k}, block_a, {k, m}, b_strides, dims_of(out.strides()), bias.defined(), packed};
  };
  Tensor packed;
  memory::desc layout;
  onednn_stream();  // this thread's OpenMP at one thread before a primitive is made for it
  if (!in_place) {
    const Product* product = nullptr;
    try {
      product = &product_for(block_key(rows, true));
      layout = product->weights;
      packed = empty({static_cast<int64_t>(layout.get_size())}, TensorOptions(kUInt8));
    } catch (const dnnl::error&) {
      return false;
    }
    const int64_t pieces = std::min<int64_t>(blocks, get_num_threads());  // a copy: any cut gives the same bits
    if (!pack(block_key(rows, true), *product, b.raw_data_ptr(), packed.raw_data_ptr(), pieces)) return false;
  }
  const auto* a_data = static_cast<const uint16_t*>(a.raw_data_ptr());
  auto* out_rows = static_cast<uint16_t*>(out.raw_data_ptr());
  const int64_t lda = a_columns ? a_strides[1] : a_strides[0];
  const Tensor copies = copy_a ? empty({n * k}, TensorOptions(kBFloat16)) : Tensor();  // block i's at i * rows * k
  return all_blocks_ran(blocks, [&](int64_t i) {
    const int64_t from = i * rows, count = std::min(rows, n - from);
    const uint16_t* block_a = a_data + from * (a_columns ? 1 : lda);
    if (copy_a) {
      auto* dense = static_cast<uint16_t*>(copies.raw_data_ptr()) + from * k;
      for (int64_t p = 0; p < k; ++p) std::copy_n(block_a + p * lda, count, dense + p * count);
      block_a = dense;
    }
    bool use_packed = false;
    onednn_stream();  // before this thread's first primitive, as above
    try {
      // not where a shorter last block's kernel reads b in another layout: it reads b as it is
      use_packed = !in_place && product_for(block_key(count, true)).weights == layout;
    } catch (const dnnl::error&) {
      return false;
    }
    return run(block_key(count, use_packed), block_a, use_packed ? packed.raw_data_ptr() : b.raw_data_ptr(),
               data_or_null(bias), out_rows + from * out.stride(0));
  });
}

bool bf16_mm_column_blocks_onednn(const Tensor& out, const Tensor& a_in, const Tensor& b_in, const Tensor& bias,
                                  int64_t columns) {
  if (!onednn_used() || out.stride(1) != 1) return false;
  const auto [a, a_strides] = readable(a_in);
  const auto [b, b_strides] = readable(b_in);
  const int64_t n = a.size(0), k = a.size(1), m = b.size(1), blocks = (m + columns - 1) / columns;
  const auto* b_data = static_cast<const uint16_t*>(b.raw_data_ptr());
  const auto* bias_data = static_cast<const uint16_t*>(data_or_null(bias));
  auto* out_data = static_cast<uint16_t*>(out.raw_data_ptr());
  const int64_t b_column = b_strides[1];                            // elements from one column of b to the next
  const Tensor outputs = empty({n * m}, TensorOptions(kBFloat16));  // block i's, its rows dense, at i * columns * n
  return all_blocks_ran(blocks, [&, &a = a, &a_strides = a_strides, &b_strides = b_strides](int64_t i) {
    const int64_t from = i * columns, count = std::min(columns, m - from);
    auto* dense = static_cast<uint16_t*>(outputs.raw_data_ptr()) + from * n;
    const Key key{{n, k}, a_strides, {k, count}, b_strides, {count, 1}, bias.defined(), false};
    if (!run(key, a.raw_data_ptr(), b_data + from * b_column, bias_data ? bias_data + from : nullptr, dense)) {
      return false;
    }
    for (int64_t r = 0; r < n; ++r) std::copy_n(dense + r * count, count, out_data + r * out.stride(0) + from);
    return true;
  });
}

std::string bf16_matmul_engine(int64_t n, int64_t k, int64_t m) {
  if (!onednn_used()) {
    return fmt::format("float32 kernels, results rounded to bfloat16 (oneDNN not used: {} selected)",
                       cpu_isa_name(cpu_isa()));
  }
  onednn_stream();  // this thread set up for oneDNN
  try {
    return "oneDNN " + product_for(Key{{n, k}, {k, 1}, {k, m}, {m, 1}, {m, 1}, false, false}).implementation;
  } catch (const dnnl::error& e) {
    return fmt::format("float32 kernels, results rounded to bfloat16 (oneDNN has no bfloat16 matmul here: {})",
                       e.what());
  }
}

}  // namespace tinyddp::tensor::cpu
