// torch.nn.utils.rnn: padding (pad_sequence) and packed sequences, a batch of sequences of
// different lengths stored without their padding, time step by time step, longest first. At time t the packed
// data holds batch_sizes[t] rows, one per sequence still running, so an LSTM, GRU or RNN given a
// PackedSequence (rnn.h) steps each sequence over its own length only: its final state is the
// one after its last element, and a reversed direction starts at that element. As libtorch's
// torch::nn::utils::rnn (accessors data(), batch_sizes(), ...), with PyTorch's defaults.
#pragma once

#include <optional>
#include <string_view>
#include <tuple>
#include <vector>

#include "tinyddp/tensor/tensor.h"

namespace tinyddp::nn {

using tensor::Tensor;

// As torch.nn.utils.rnn.pad_sequence: tensors [L_i, *] padded with `padding_value` to the
// longest length (on the right, or the left) and stacked: [max_L, B, *], or [B, max_L, *]
// with batch_first. Differentiable.
Tensor pad_sequence(const std::vector<Tensor>& sequences, bool batch_first = false, double padding_value = 0.0,
                    std::string_view padding_side = "right");

class PackedSequence {
 public:
  PackedSequence() = default;
  // data [sum of the lengths, *]; batch_sizes int64 [T] on the CPU, non-increasing;
  // sorted_indices (int64 [B]): the batch's order, longest first, as positions in the
  // original batch (undefined: the batch was already in that order); unsorted_indices its
  // inverse, computed when undefined. Made by pack_padded_sequence and pack_sequence.
  PackedSequence(Tensor data, Tensor batch_sizes, Tensor sorted_indices = {}, Tensor unsorted_indices = {});

  const Tensor& data() const { return data_; }
  const Tensor& batch_sizes() const { return batch_sizes_; }
  const Tensor& sorted_indices() const { return sorted_indices_; }
  const Tensor& unsorted_indices() const { return unsorted_indices_; }
  // The data (and the index permutations) on `device`; batch_sizes stays on the CPU.
  PackedSequence to(tensor::Device device) const;
  PackedSequence to(tensor::DType dtype) const;  // the data only
  bool is_cuda() const { return data_.is_cuda(); }
  // batch_sizes as numbers (T of them).
  std::vector<int64_t> batch_size_list() const;

 private:
  Tensor data_, batch_sizes_, sorted_indices_, unsorted_indices_;
};

// As torch.nn.utils.rnn.pack_padded_sequence: input [T, B, *] (batch_first [B, T, *]) padded
// past each sequence's length (lengths: B values, each in 1..T, on the CPU) packed. With
// enforce_sorted the lengths must be non-increasing; without, the batch is sorted longest first
// (a stable sort: equal lengths keep their order) and the order kept in sorted_indices.
// Differentiable in the input.
PackedSequence pack_padded_sequence(const Tensor& input, const Tensor& lengths, bool batch_first = false,
                                    bool enforce_sorted = true);
PackedSequence pack_padded_sequence(const Tensor& input, const std::vector<int64_t>& lengths, bool batch_first = false,
                                    bool enforce_sorted = true);

// As torch.nn.utils.rnn.pad_packed_sequence: the inverse, -> (padded [T, B, *] (batch_first
// [B, T, *]) in the original batch order, the lengths (int64 [B], CPU)). Past each length the
// result holds padding_value; total_length (at least the longest length) pads T further, for a
// fixed shape. Differentiable in the data.
std::tuple<Tensor, Tensor> pad_packed_sequence(const PackedSequence& sequence, bool batch_first = false,
                                               double padding_value = 0.0,
                                               std::optional<int64_t> total_length = std::nullopt);

// As torch.nn.utils.rnn.pack_sequence: sequences [L_i, *] packed (pad_sequence, then
// pack_padded_sequence with their lengths).
PackedSequence pack_sequence(const std::vector<Tensor>& sequences, bool enforce_sorted = true);

// As torch.nn.utils.rnn.unpack_sequence: the packed sequences back as a list [L_i, *], in the
// original order.
std::vector<Tensor> unpack_sequence(const PackedSequence& packed);

// As torch.nn.utils.rnn.unpad_sequence: padded [T, B, *] (batch_first [B, T, *]) cut to the
// lengths, -> B tensors [L_i, *].
std::vector<Tensor> unpad_sequence(const Tensor& padded_sequences, const Tensor& lengths, bool batch_first = false);

}  // namespace tinyddp::nn
