// Embedding lookups (torch.nn.functional.embedding): each int64 id picks a row of the weight;
// the backward adds the output's gradient rows back onto the rows they came from (divided by
// their id's count with scale_grad_by_freq; none onto the padding row).
#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/graph.h"
#include "tinyddp/tensor/native/checks.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::tensor {

using namespace detail;

namespace {

void check_embedding(const Tensor& input, const Tensor& weight) {
  check_defined(input, "embedding", "input");
  check_defined(weight, "embedding", "weight");
  TDDP_CHECK(input.dtype() == kInt64 || input.dtype() == kInt32,
             "embedding: expected int64 or int32 indices, got dtype {}", dtype_name(input.dtype()));
  TDDP_CHECK(weight.dim() == 2, "embedding: expected a 2-D weight [num_embeddings, embedding_dim], got shape {}",
             format_shape(weight.sizes()));
  TDDP_CHECK(weight.is_floating_point(), "embedding: expected a floating-point weight, got dtype {}",
             dtype_name(weight.dtype()));
  check_same_device(input, weight, "embedding", "input", "weight");
  check_kernel_device(weight, "embedding");
  if (input.numel() == 0) return;
  // Every id in [0, V): the largest and the smallest (on a GPU this waits for them). Not while
  // a CUDA graph is captured, which cannot read back: the eager steps before it checked theirs,
  // and a replay's ids are the caller's to keep in range (train_gpt checks its data on loading).
  if (input.is_cuda() && cuda::is_capturing(input.device().index)) return;
  const auto [lowest, highest] = integer_extremes(input);
  const int64_t bad = highest >= weight.size(0) ? highest : lowest;
  TDDP_CHECK(lowest >= 0 && highest < weight.size(0),
             "embedding: index {} is out of range for {} embeddings (weight shape {}, indices of shape {})", bad,
             weight.size(0), format_shape(weight.sizes()), format_shape(input.sizes()));
}

}  // namespace

Tensor embedding(const Tensor& input, const Tensor& weight) { return embedding(input, weight, std::nullopt, false); }

Tensor embedding(const Tensor& input, const Tensor& weight, std::optional<int64_t> padding_idx,
                 bool scale_grad_by_freq) {
  check_embedding(input, weight);
  const int64_t n = input.numel(), dim = weight.size(1), rows = weight.size(0);
  TDDP_CHECK(!padding_idx || (*padding_idx >= 0 && *padding_idx < rows),
             "embedding: padding_idx must be in [0, {}) for {} embeddings, got {}", rows, rows,
             padding_idx.value_or(0));
  Shape out_shape = input.sizes();
  out_shape.push_back(dim);
  const Tensor out = new_output(out_shape, weight.dtype(), weight.device());
  Tensor ids;
  {
    NoGradGuard no_grad;
    ids = input.to(kInt64).contiguous().view({n});  // the kernels read int64 ids
    backend_for(weight.device(), "embedding").embedding(out.view({n, dim}), weight.contiguous(), ids);
  }
  if (!needs_grad(weight)) return out;
  // What scales the gradient rows: 1 / (each id's count) with scale_grad_by_freq; zero for
  // the padding row (a [rows, 1] factor applied to the weight's gradient).
  Tensor per_position, per_row;
  {
    NoGradGuard no_grad;
    const TensorOptions options = TensorOptions(weight.dtype()).device(weight.device());
    if (scale_grad_by_freq && n > 0) {
      per_position = reciprocal(index_select(bincount(ids, Tensor(), rows), 0, ids).to(weight.dtype())).view({n, 1});
    }
    if (padding_idx) {
      per_row = ones({rows, 1}, options);
      per_row.select(0, *padding_idx).fill_(0.0);
    }
  }
  // grad_out [..., C] -> grad_weight [V, C]: each row of grad_out added onto row ids[i].
  record_op("EmbeddingBackward", out, {weight}, [ids, n, dim, rows, per_position, per_row](const Tensor& grad) {
    const Tensor g = per_position.defined() ? mul(grad.reshape({n, dim}), per_position) : grad;
    Tensor grad_weight = new_output({rows, dim}, g.dtype(), g.device());
    {
      NoGradGuard no_grad;
      backend_for(g.device(), "embedding backward").embedding_backward(grad_weight, g.contiguous().view({n, dim}), ids);
    }
    // create_graph: linear in g, so its own gradient is the lookup again
    if (needs_grad(g)) {
      record_op("EmbeddingBackwardBackward", grad_weight, {g}, [ids, shape = g.sizes()](const Tensor& gg) {
        return std::vector<Tensor>{embedding(ids, gg).view(shape)};
      });
    }
    return std::vector<Tensor>{per_row.defined() ? mul(grad_weight, per_row) : grad_weight};
  });
  return out;
}

Tensor detail::add_rows(const Tensor& src, const Tensor& ids, int64_t rows) {
  const int64_t k = src.size(0), c = src.size(1);
  if (k == 0 || c == 0) return zeros({rows, c}, TensorOptions(src.dtype()).device(src.device()));
  check_kernel_device(src, "add_rows");
  const Tensor out = new_output({rows, c}, src.dtype(), src.device());
  {
    NoGradGuard no_grad;
    backend_for(src.device(), "add_rows").embedding_backward(out, src.contiguous(), ids.contiguous());
  }
  // linear in src: the gradient of row i is the gradient's row ids[i]
  if (needs_grad(src)) {
    record_op("AddRowsBackward", out, {src},
              [ids](const Tensor& grad) { return std::vector<Tensor>{embedding(ids, grad)}; });
  }
  return out;
}

}  // namespace tinyddp::tensor
