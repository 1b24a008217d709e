// Packing (packed_sequence.h) as one gather each way: every (time, sequence) pair still running,
// in packed order, names its row of the padded input viewed as [T * B, *]; packing selects
// those rows, and unpacking has each padded position select its data row or a padding row
// (index_select both: embedding's lookup, whose backward adds the gradients back by rows).
#include "tinyddp/nn/packed_sequence.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::nn {

namespace {

namespace t = tinyddp::tensor;

std::vector<int64_t> int64_values(const Tensor& x) {
  const Tensor cpu = x.to(t::Device()).to(t::kInt64).contiguous();
  return cpu.to_vector<int64_t>();
}

Tensor int64_tensor(const std::vector<int64_t>& values, t::Device device = {}) {
  return t::from_vector(values, t::Shape{static_cast<int64_t>(values.size())}, device);
}

// The inverse of a permutation of 0..n-1.
Tensor invert_permutation(const Tensor& permutation) {
  const std::vector<int64_t> p = int64_values(permutation);
  std::vector<int64_t> inverse(p.size());
  for (size_t k = 0; k < p.size(); ++k) inverse[static_cast<size_t>(p[k])] = static_cast<int64_t>(k);
  return int64_tensor(inverse, permutation.device());
}

// Rows of the padded tensor [T * B, *] (time-major) in packed order: at each time t the first
// batch_sizes[t] sequences of the sorted batch, sequence k being the original one order[k].
Tensor packed_rows(const std::vector<int64_t>& batch_sizes, const std::vector<int64_t>& order, int64_t batch,
                   t::Device device) {
  std::vector<int64_t> rows;
  for (size_t time = 0; time < batch_sizes.size(); ++time) {
    for (int64_t k = 0; k < batch_sizes[time]; ++k) rows.push_back(static_cast<int64_t>(time) * batch + order[k]);
  }
  return int64_tensor(rows, device);
}

std::vector<int64_t> identity_order(int64_t n) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  return order;
}

// [T, B, *] <-> [T * B, *]
Tensor merge_time_and_batch(const Tensor& x) {
  t::Shape shape = x.sizes();
  shape.erase(shape.begin());
  shape[0] = x.size(0) * x.size(1);
  return x.reshape(shape);
}

}  // namespace

Tensor pad_sequence(const std::vector<Tensor>& sequences, bool batch_first, double padding_value,
                    std::string_view padding_side) {
  TDDP_CHECK(!sequences.empty(), "pad_sequence: received an empty list of sequences");
  TDDP_CHECK(padding_side == "right" || padding_side == "left",
             "pad_sequence: Expected padding_side to be one of left or right, but got {}", padding_side);
  int64_t longest = 0;
  for (const Tensor& s : sequences) {
    TDDP_CHECK(s.defined() && s.dim() >= 1, "pad_sequence: each sequence needs at least one dim");
    longest = std::max(longest, s.size(0));
  }
  std::vector<Tensor> padded;
  for (const Tensor& s : sequences) {
    const int64_t missing = longest - s.size(0);
    if (missing == 0) {
      padded.push_back(s);
      continue;
    }
    tensor::Shape fill_shape = s.sizes();
    fill_shape[0] = missing;
    const Tensor fill = tensor::full(fill_shape, padding_value, tensor::TensorOptions(s.dtype()).device(s.device()));
    padded.push_back(padding_side == "right" ? tensor::cat({s, fill}) : tensor::cat({fill, s}));
  }
  return tensor::stack(padded, batch_first ? 0 : 1);
}

PackedSequence::PackedSequence(Tensor data, Tensor batch_sizes, Tensor sorted_indices, Tensor unsorted_indices)
    : data_(std::move(data)), batch_sizes_(std::move(batch_sizes)), sorted_indices_(std::move(sorted_indices)),
      unsorted_indices_(std::move(unsorted_indices)) {
  TDDP_CHECK(
      batch_sizes_.defined() && batch_sizes_.dim() == 1 && batch_sizes_.dtype() == t::kInt64 && !batch_sizes_.is_cuda(),
      "PackedSequence: batch_sizes should be a 1-D int64 tensor on the CPU (make packed sequences with "
      "pack_padded_sequence or pack_sequence)");
  TDDP_CHECK(data_.defined() && data_.dim() >= 1, "PackedSequence: data should have at least one dimension");
  if (!unsorted_indices_.defined() && sorted_indices_.defined())
    unsorted_indices_ = invert_permutation(sorted_indices_);
}

std::vector<int64_t> PackedSequence::batch_size_list() const { return int64_values(batch_sizes_); }

PackedSequence PackedSequence::to(tensor::Device device) const {
  const auto moved = [&](const Tensor& x) { return x.defined() ? x.to(device) : x; };
  return {data_.to(device), batch_sizes_, moved(sorted_indices_), moved(unsorted_indices_)};
}

PackedSequence PackedSequence::to(tensor::DType dtype) const {
  return {data_.to(dtype), batch_sizes_, sorted_indices_, unsorted_indices_};
}

PackedSequence pack_padded_sequence(const Tensor& input, const std::vector<int64_t>& lengths, bool batch_first,
                                    bool enforce_sorted) {
  TDDP_CHECK(input.defined() && input.dim() >= 2 && input.numel() > 0,
             "pack_padded_sequence: cannot pack empty tensors (input of shape {})",
             input.defined() ? t::format_shape(input.sizes()) : "undefined");
  const Tensor x = batch_first ? input.transpose(0, 1) : input;  // [T, B, *]
  const int64_t steps = x.size(0), batch = x.size(1);
  TDDP_CHECK(static_cast<int64_t>(lengths.size()) == batch,
             "pack_padded_sequence: Expected `len(lengths)` to be equal to batch_size, but got {} (batch_size={})",
             lengths.size(), batch);
  for (const int64_t length : lengths) {
    TDDP_CHECK(length > 0,
               "pack_padded_sequence: Length of all samples has to be greater than 0, but found an element in "
               "'lengths' that is <= 0 (lengths {})",
               fmt::join(lengths, ", "));
    TDDP_CHECK(length <= steps, "pack_padded_sequence: a length of {} exceeds the input's {} time steps (shape {}{})",
               length, steps, t::format_shape(input.sizes()), batch_first ? ", batch_first" : "");
  }
  std::vector<int64_t> order = identity_order(batch);
  if (enforce_sorted) {
    TDDP_CHECK(std::is_sorted(lengths.rbegin(), lengths.rend()),
               "pack_padded_sequence: `lengths` array must be sorted in decreasing order when `enforce_sorted` is "
               "True. You can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to sidestep "
               "this requirement if you do not need ONNX exportability (lengths {})",
               fmt::join(lengths, ", "));
  } else {
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return lengths[a] > lengths[b]; });
  }
  std::vector<int64_t> batch_sizes;
  for (int64_t time = 0; time < lengths[order[0]]; ++time) {
    int64_t running = 0;
    while (running < batch && lengths[order[running]] > time) ++running;
    batch_sizes.push_back(running);
  }
  const Tensor data = t::index_select(merge_time_and_batch(x), 0, packed_rows(batch_sizes, order, batch, x.device()));
  if (enforce_sorted) return {data, int64_tensor(batch_sizes)};
  return {data, int64_tensor(batch_sizes), int64_tensor(order, x.device())};
}

PackedSequence pack_padded_sequence(const Tensor& input, const Tensor& lengths, bool batch_first, bool enforce_sorted) {
  TDDP_CHECK(lengths.defined() && lengths.dim() == 1 && !t::is_floating_point(lengths.dtype()),
             "pack_padded_sequence: 'lengths' should be a 1-D integer tensor (one length per sequence), got {} {}",
             lengths.defined() ? t::dtype_name(lengths.dtype()) : "an undefined tensor",
             lengths.defined() ? t::format_shape(lengths.sizes()) : "");
  return pack_padded_sequence(input, int64_values(lengths), batch_first, enforce_sorted);
}

std::tuple<Tensor, Tensor> pad_packed_sequence(const PackedSequence& sequence, bool batch_first, double padding_value,
                                               std::optional<int64_t> total_length) {
  const std::vector<int64_t> batch_sizes = sequence.batch_size_list();
  TDDP_CHECK(!batch_sizes.empty(), "pad_packed_sequence: the packed sequence holds no time steps");
  const int64_t longest = static_cast<int64_t>(batch_sizes.size()), batch = batch_sizes[0];
  const int64_t steps = total_length.value_or(longest);
  TDDP_CHECK(steps >= longest,
             "pad_packed_sequence: Expected total_length to be at least the length of the longest sequence in input, "
             "but got total_length={} and max sequence length being {}",
             steps, longest);
  const Tensor& data = sequence.data();
  const std::vector<int64_t> order =
      sequence.sorted_indices().defined() ? int64_values(sequence.sorted_indices()) : identity_order(batch);
  // Each padded position [T * B] reads its data row, or past the data the padding row.
  const int64_t rows = data.size(0);
  std::vector<int64_t> source(static_cast<size_t>(steps * batch), rows);
  int64_t row = 0;
  for (size_t time = 0; time < batch_sizes.size(); ++time) {
    for (int64_t k = 0; k < batch_sizes[time]; ++k)
      source[static_cast<size_t>(static_cast<int64_t>(time) * batch + order[k])] = row++;
  }
  t::Shape shape = data.sizes();
  shape[0] = 1;
  const Tensor padding = t::full(shape, padding_value, t::TensorOptions(data.dtype()).device(data.device()));
  const Tensor flat = t::index_select(t::cat({data, padding}, 0), 0, int64_tensor(source, data.device()));
  shape[0] = batch;
  shape.insert(shape.begin(), steps);
  const Tensor padded = flat.reshape(shape);  // [T, B, *]
  std::vector<int64_t> lengths(static_cast<size_t>(batch), 0);
  for (const int64_t size : batch_sizes) {
    for (int64_t k = 0; k < size; ++k) ++lengths[static_cast<size_t>(order[k])];
  }
  return {batch_first ? padded.transpose(0, 1) : padded, int64_tensor(lengths)};
}

PackedSequence pack_sequence(const std::vector<Tensor>& sequences, bool enforce_sorted) {
  TDDP_CHECK(!sequences.empty(), "pack_sequence: received an empty list of sequences");
  std::vector<int64_t> lengths;
  for (const Tensor& s : sequences) {
    TDDP_CHECK(s.defined() && s.dim() >= 1, "pack_sequence: each sequence needs at least one dim");
    lengths.push_back(s.size(0));
  }
  return pack_padded_sequence(pad_sequence(sequences), lengths, /*batch_first=*/false, enforce_sorted);
}

std::vector<Tensor> unpad_sequence(const Tensor& padded_sequences, const Tensor& lengths, bool batch_first) {
  TDDP_CHECK(padded_sequences.defined() && padded_sequences.dim() >= 2,
             "unpad_sequence: expected padded sequences [T, B, *] or [B, T, *], got {}",
             padded_sequences.defined() ? t::format_shape(padded_sequences.sizes()) : "an undefined tensor");
  const Tensor x = batch_first ? padded_sequences : padded_sequences.transpose(0, 1);  // [B, T, *]
  const std::vector<int64_t> values = int64_values(lengths);
  TDDP_CHECK(static_cast<int64_t>(values.size()) == x.size(0),
             "unpad_sequence: {} lengths given for a batch of {} sequences", values.size(), x.size(0));
  std::vector<Tensor> out;
  for (size_t k = 0; k < values.size(); ++k) {
    TDDP_CHECK(values[k] >= 0 && values[k] <= x.size(1), "unpad_sequence: length {} of sequence {} is outside 0..{}",
               values[k], k, x.size(1));
    out.push_back(x.select(0, static_cast<int64_t>(k)).narrow(0, 0, values[k]));
  }
  return out;
}

std::vector<Tensor> unpack_sequence(const PackedSequence& packed) {
  const auto [padded, lengths] = pad_packed_sequence(packed, /*batch_first=*/true);
  return unpad_sequence(padded, lengths, /*batch_first=*/true);
}

}  // namespace tinyddp::nn
