// F::embedding_bag and nn::EmbeddingBag (embedding_bag.h): the bags laid out on the host from
// the offsets, then composed of embedding, index_add (sum, mean) and a padded max.
#include "tinyddp/nn/embedding_bag.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace tinyddp::nn {

using tensor::Shape;

namespace functional {

namespace {

// Which bag each of the L positions belongs to, and each bag's positions (padding left out).
struct Bags {
  std::vector<int64_t> bag_of;                  // per position
  std::vector<std::vector<int64_t>> positions;  // per bag, the positions that count
};

std::vector<int64_t> bag_starts(const Tensor& input, const EmbeddingBagFuncOptions& o, int64_t length) {
  const Tensor& offsets = o.offsets();
  if (input.dim() == 2) {
    TDDP_CHECK(
        !offsets.defined(),
        "embedding_bag: if input is 2D, then offsets has to be undefined, as input is treated as a mini-batch of "
        "fixed length sequences; got offsets of shape {}",
        tensor::format_shape(offsets.sizes()));
    std::vector<int64_t> starts;
    for (int64_t b = 0; b < input.size(0); ++b) starts.push_back(b * input.size(1));
    return starts;
  }
  TDDP_CHECK(offsets.defined() && offsets.dim() == 1 && offsets.dtype() == tensor::kInt64,
             "embedding_bag: a 1D input needs offsets, a 1D int64 tensor of each bag's start");
  std::vector<int64_t> starts = offsets.to_vector<int64_t>();
  TDDP_CHECK(!starts.empty() && starts.front() == 0,
             "embedding_bag: offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from "
             "position 0. However, got {}",
             starts.empty() ? std::string("no offsets") : std::to_string(starts.front()));
  TDDP_CHECK(starts.back() <= length,
             "embedding_bag: offsets[-1] can not be greater than input's length {} but got offsets[-1] of {}", length,
             starts.back());
  TDDP_CHECK(std::is_sorted(starts.begin(), starts.end()),
             "embedding_bag: offsets must be non-decreasing (each bag starts where the one before it does or later)");
  if (o.include_last_offset()) {
    TDDP_CHECK(starts.back() == length,
               "embedding_bag: with include_last_offset the last offset ends the last bag: it must be the input's "
               "length {}, got {}",
               length, starts.back());
    starts.pop_back();
  }
  return starts;
}

Bags lay_out(const Tensor& input, const EmbeddingBagFuncOptions& o, std::optional<int64_t> padding_idx) {
  const int64_t length = input.numel();
  const std::vector<int64_t> starts = bag_starts(input, o, length);
  const std::vector<int64_t> ids = input.reshape({length}).to_vector<int64_t>();
  Bags bags;
  bags.bag_of.assign(static_cast<size_t>(length), 0);
  bags.positions.resize(starts.size());
  for (size_t b = 0; b < starts.size(); ++b) {
    const int64_t end = b + 1 < starts.size() ? starts[b + 1] : length;
    for (int64_t i = starts[b]; i < end; ++i) {
      bags.bag_of[static_cast<size_t>(i)] = static_cast<int64_t>(b);
      if (!padding_idx || ids[static_cast<size_t>(i)] != *padding_idx) bags.positions[b].push_back(i);
    }
  }
  return bags;
}

void check_arguments(const Tensor& input, const Tensor& weight, const EmbeddingBagFuncOptions& o) {
  TDDP_CHECK(input.defined() && input.dtype() == tensor::kInt64 && (input.dim() == 1 || input.dim() == 2),
             "embedding_bag: expected a 1D or 2D int64 input of indices, got {}",
             input.defined()
                 ? tensor::dtype_name(input.dtype()) + std::string(" ") + tensor::format_shape(input.sizes())
                 : std::string("an undefined tensor"));
  TDDP_CHECK(weight.defined() && weight.dim() == 2 && weight.is_floating_point(),
             "embedding_bag: expected a 2D floating-point weight [num_embeddings, embedding_dim]");
  TDDP_CHECK(o.mode() == "sum" || o.mode() == "mean" || o.mode() == "max",
             "embedding_bag: mode has to be one of sum, mean or max, got '{}'", o.mode());
  TDDP_CHECK(!o.scale_grad_by_freq() || o.mode() != "max",
             "embedding_bag: max mode does not support scaling the gradient by the frequency");
  TDDP_CHECK(!o.sparse(), "embedding_bag: sparse=true is not supported in tinyddp (no sparse gradients)");
  const Tensor& psw = o.per_sample_weights();
  if (!psw.defined()) return;
  TDDP_CHECK(o.mode() == "sum",
             "embedding_bag: per_sample_weights was given, but it is only supported for mode='sum' (got mode='{}')",
             o.mode());
  TDDP_CHECK(psw.sizes() == input.sizes(),
             "embedding_bag: per_sample_weights ({}) must have the same shape as the input ({})",
             tensor::format_shape(psw.sizes()), tensor::format_shape(input.sizes()));
  TDDP_CHECK(psw.dtype() == weight.dtype(), "embedding_bag: per_sample_weights is {} but the weight is {}",
             tensor::dtype_name(psw.dtype()), tensor::dtype_name(weight.dtype()));
}

std::optional<int64_t> wrapped_padding(std::optional<int64_t> padding_idx, int64_t rows) {
  if (!padding_idx) return std::nullopt;
  TDDP_CHECK(*padding_idx < rows && *padding_idx >= -rows,
             "embedding_bag: padding_idx must be within the number of embeddings, {} through {}, but got {}", -rows,
             rows - 1, *padding_idx);
  return *padding_idx < 0 ? *padding_idx + rows : *padding_idx;
}

// mode "max": each bag's rows gathered into [bags, longest, dim] (absent places -inf), maxed.
Tensor max_of_bags(const Tensor& rows, const Bags& bags, const tensor::TensorOptions& ints) {
  const auto num_bags = static_cast<int64_t>(bags.positions.size());
  size_t longest = 0;
  for (const auto& p : bags.positions) longest = std::max(longest, p.size());
  const int64_t dim = rows.size(1), absent = rows.size(0);
  if (longest == 0) return tensor::zeros({num_bags, dim}, tensor::TensorOptions(rows.dtype()).device(rows.device()));
  std::vector<int64_t> table(static_cast<size_t>(num_bags) * longest, absent);
  std::vector<double> empty(bags.positions.size(), 0.0);
  bool any_empty = false;
  for (size_t b = 0; b < bags.positions.size(); ++b) {
    std::copy(bags.positions[b].begin(), bags.positions[b].end(), table.begin() + static_cast<int64_t>(b * longest));
    empty[b] = bags.positions[b].empty() ? 1.0 : 0.0;
    any_empty = any_empty || bags.positions[b].empty();
  }
  const Tensor padded = tensor::cat({rows, tensor::full({1, dim}, -std::numeric_limits<double>::infinity(),
                                                        tensor::TensorOptions(rows.dtype()).device(rows.device()))},
                                    0);
  const Tensor picked = tensor::index_select(padded, 0, tensor::from_vector(table).to(ints.device()))
                            .view({num_bags, static_cast<int64_t>(longest), dim});
  const Tensor out = std::get<0>(tensor::max(picked, 1));
  if (!any_empty) return out;
  const Tensor empty_rows = tensor::gt(tensor::from_vector(empty, Shape{num_bags, 1}).to(ints.device()), 0.5);
  return tensor::masked_fill(out, empty_rows, 0.0);  // empty bags: zeros
}

}  // namespace

Tensor embedding_bag(const Tensor& input, const Tensor& weight, const EmbeddingBagFuncOptions& o) {
  check_arguments(input, weight, o);
  const std::optional<int64_t> padding_idx = wrapped_padding(o.padding_idx(), weight.size(0));
  if (o.max_norm()) embedding_renorm_(weight, input, *o.max_norm(), o.norm_type());
  const Bags bags = lay_out(input, o, padding_idx);
  const tensor::TensorOptions ints = tensor::TensorOptions(tensor::kInt64).device(weight.device());
  const Tensor flat = input.reshape({input.numel()});
  Tensor rows = tensor::embedding(flat, weight, std::nullopt, o.scale_grad_by_freq());  // [L, dim]
  if (o.mode() == "max") return max_of_bags(rows, bags, ints);
  if (o.per_sample_weights().defined()) rows = tensor::mul(rows, o.per_sample_weights().reshape({input.numel(), 1}));
  if (padding_idx)
    rows = tensor::masked_fill(rows, tensor::eq(flat, static_cast<double>(*padding_idx)).unsqueeze(1), 0.0);
  const auto num_bags = static_cast<int64_t>(bags.positions.size());
  const Tensor sums = tensor::index_add(
      tensor::zeros({num_bags, weight.size(1)}, tensor::TensorOptions(weight.dtype()).device(weight.device())), 0,
      tensor::from_vector(bags.bag_of).to(weight.device()), rows);
  if (o.mode() == "sum") return sums;
  std::vector<double> counts;
  for (const auto& p : bags.positions) counts.push_back(static_cast<double>(std::max<size_t>(p.size(), 1)));
  return tensor::div(sums, tensor::from_vector(counts, Shape{num_bags, 1}).to(weight.dtype()).to(weight.device()));
}

Tensor embedding_renorm_(const Tensor& weight, const Tensor& input, double max_norm, double norm_type) {
  TDDP_CHECK(max_norm > 0 && (norm_type == 1.0 || norm_type == 2.0),
             "embedding_renorm_: max_norm must be positive and norm_type 1 or 2, got max_norm {} and norm_type {}",
             max_norm, norm_type);
  tensor::NoGradGuard no_grad;
  const Tensor rows = std::get<0>(tensor::unique(input.reshape({input.numel()})));
  const Tensor picked = tensor::index_select(weight, 0, rows);
  const Tensor norms = tensor::norm(picked, norm_type, {1}, true);
  const Tensor scale =
      tensor::where(tensor::gt(norms, max_norm), tensor::div(tensor::full_like(norms, max_norm), norms + 1e-7),
                    tensor::ones_like(norms));
  weight.index_put_({rows}, tensor::mul(picked, scale));
  return weight;
}

}  // namespace functional

EmbeddingBag::EmbeddingBag(const EmbeddingBagOptions& o) : Module("EmbeddingBag"), options(o) {
  TDDP_CHECK(o.num_embeddings() > 0 && o.embedding_dim() > 0,
             "EmbeddingBag: num_embeddings ({}) and embedding_dim ({}) must be positive", o.num_embeddings(),
             o.embedding_dim());
  TDDP_CHECK(o.mode() == "sum" || o.mode() == "mean" || o.mode() == "max",
             "EmbeddingBag: mode has to be one of sum, mean or max, got '{}'", o.mode());
  TDDP_CHECK(!o.max_norm() || (*o.max_norm() > 0 && (o.norm_type() == 1.0 || o.norm_type() == 2.0)),
             "EmbeddingBag: max_norm must be positive and norm_type 1 or 2, got max_norm {} and norm_type {}",
             o.max_norm().value_or(0.0), o.norm_type());
  if (o.padding_idx()) {
    const int64_t n = o.num_embeddings(), p = *o.padding_idx();
    TDDP_CHECK(p < n && p >= -n, "EmbeddingBag: padding_idx must be within num_embeddings, got {} for {}", p, n);
    options.padding_idx(p < 0 ? p + n : p);
  }
  const bool skip = SkipInitGuard::active();
  const Shape shape{o.num_embeddings(), o.embedding_dim()};
  weight = register_parameter("weight", skip ? tensor::empty(shape) : tensor::randn(shape));
  if (options.padding_idx() && !skip) {
    tensor::NoGradGuard no_grad;
    weight.select(0, *options.padding_idx()).fill_(0.0);
  }
}

std::shared_ptr<EmbeddingBag> EmbeddingBag::from_pretrained(const Tensor& embeddings, bool freeze, std::string mode) {
  TDDP_CHECK(embeddings.defined() && embeddings.dim() == 2 && embeddings.is_floating_point(),
             "EmbeddingBag::from_pretrained: embeddings must be a 2-D floating-point tensor");
  std::shared_ptr<EmbeddingBag> bag;
  {
    SkipInitGuard skip;  // (the weight is replaced next: no draw from the generator)
    bag = std::make_shared<EmbeddingBag>(
        EmbeddingBagOptions(embeddings.size(0), embeddings.size(1)).mode(std::move(mode)));
  }
  bag->weight = bag->replace_parameter("weight", embeddings.detach().requires_grad_(!freeze));
  return bag;
}

Tensor EmbeddingBag::forward(const Tensor& input, const Tensor& offsets, const Tensor& per_sample_weights) {
  return functional::embedding_bag(input, weight,
                                   functional::EmbeddingBagFuncOptions()
                                       .offsets(offsets)
                                       .max_norm(options.max_norm())
                                       .norm_type(options.norm_type())
                                       .scale_grad_by_freq(options.scale_grad_by_freq())
                                       .mode(options.mode())
                                       .per_sample_weights(per_sample_weights)
                                       .include_last_offset(options.include_last_offset())
                                       .padding_idx(options.padding_idx()));
}

std::string EmbeddingBag::extra_repr() const {
  std::string s = fmt::format("{}, {}", options.num_embeddings(), options.embedding_dim());
  if (options.max_norm()) s += ", max_norm=" + repr_float(*options.max_norm());
  if (options.max_norm() && options.norm_type() != 2.0) s += ", norm_type=" + repr_float(options.norm_type());
  if (options.scale_grad_by_freq()) s += ", scale_grad_by_freq=True";
  s += ", mode=" + options.mode();
  if (options.padding_idx()) s += fmt::format(", padding_idx={}", *options.padding_idx());
  return s;
}

std::shared_ptr<Module> EmbeddingBag::clone_structure() const { return std::make_shared<EmbeddingBag>(options); }

}  // namespace tinyddp::nn
