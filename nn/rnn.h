// torch.nn.LSTM, GRU and RNN: PyTorch's constructor arguments and defaults (num_layers 1,
// bias, batch_first false, dropout 0, bidirectional false), its parameter names
// (weight_ih_l{k}, weight_hh_l{k}, bias_ih_l{k}, bias_hh_l{k}, "_reverse" for the second
// direction), gate order (LSTM i, f, g, o; GRU r, z, n) and initialisation (every parameter
// ~ U(-1/sqrt(hidden), 1/sqrt(hidden)) in registration order), so state dicts load either way
// and a seeded model starts with torch's weights. Each layer and direction is one graph node
// (rnn_layer.h). LSTM's proj_size P > 0 projects each h to P (weight_hr_l{k} [P, H], after
// the biases; h0, h_n and the output carry P, c0 and c_n H), as PyTorch's. Given a
// PackedSequence (packed_sequence.h), each sequence runs over its own length only.
#pragma once

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "tinyddp/nn/module.h"
#include "tinyddp/nn/options.h"
#include "tinyddp/nn/packed_sequence.h"

namespace tinyddp::nn {

class RNNBase : public Module {
 public:
  // mode: "LSTM", "GRU", "RNN_TANH" or "RNN_RELU" (PyTorch's names).
  RNNBase(std::string mode, int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias, bool batch_first,
          double dropout, bool bidirectional, int64_t proj_size = 0);
  std::shared_ptr<Module> clone_structure() const override;
  std::string extra_repr() const override;
  // The output only (input [T, N, I], batch_first [N, T, I], or unbatched [T, I]).
  Tensor forward(const Tensor& input) override;
  // (input[, h0[, c0]]) -> {output, h_n[, c_n]} (c for LSTM only): model(x, h0, c0) under DDP.
  std::vector<Tensor> forward_many(const std::vector<Tensor>& inputs) override;

  std::string mode;
  int64_t input_size, hidden_size, num_layers;
  bool bias, batch_first;
  double dropout;
  bool bidirectional;
  int64_t proj_size;
  // Per layer and direction (layer-major): {w_ih, w_hh, b_ih, b_hh[, w_hr]}, without the biases
  // when bias is false (PyTorch's all_weights), looked up by name, so replace_parameter shows.
  std::vector<std::vector<Tensor>> all_weights() const;

 protected:
  // output [T, N, D*H] (as the input's layout), h_n and c_n [num_layers * D, N, H] (unbatched:
  // without N); hx and cx undefined: zeros. c_n is undefined except for LSTM.
  std::tuple<Tensor, Tensor, Tensor> run(const Tensor& input, const Tensor& hx, const Tensor& cx);
  // The same over a packed batch: the output packed as the input; hx and cx (as run's, N the
  // batch, in the original order) and h_n, c_n in the batch's original order (PyTorch's
  // permutation by sorted_indices and back).
  std::tuple<PackedSequence, Tensor, Tensor> run_packed(const PackedSequence& input, const Tensor& hx,
                                                        const Tensor& cx);

 private:
  int64_t gates() const;
  // The weights, checked against the input x [*, I] (its last size, dtype and device).
  std::vector<std::vector<Tensor>> checked_weights(const Tensor& x) const;
  // The initial state `what` ("h0" or "c0") given for a batch of N (undefined: zeros), checked;
  // [num_layers * D, N, *], an unbatched one (given_dim 2) unsqueezed.
  Tensor initial_state(const Tensor& given, const char* what, int64_t batch, const Tensor& x, bool unbatched) const;
  // The layers and directions over x [T, N, I] from the states h and c ([num_layers * D, N,
  // *]); mask (bool [T, N, 1], optional) as rnn_layer.h's. -> (output [T, N, D * H_out], h_n, c_n).
  std::tuple<Tensor, Tensor, Tensor> layers(const Tensor& x, const Tensor& h, const Tensor& c,
                                            const std::vector<std::vector<Tensor>>& weights, const Tensor& mask);
  int64_t output_size() const;  // h's size: proj_size when set, else hidden_size
  void check_state(const Tensor& state, const char* what, const tensor::Shape& expected, const Tensor& input) const;
};

class LSTM : public RNNBase {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, int64_t num_layers = 1, bool bias = true, bool batch_first = false,
       double dropout = 0.0, bool bidirectional = false, int64_t proj_size = 0);
  // (the options' nonlinearity is RNN's: anything but its default "tanh" is refused)
  explicit LSTM(const LSTMOptions& o);
  using RNNBase::forward;
  // (output, (h_n, c_n)) as torch's; hx = (h0, c0) or {} for zeros.
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> forward(const Tensor& input,
                                                         const std::optional<std::tuple<Tensor, Tensor>>& hx);
  // (packed output, (h_n, c_n)) for a packed input (libtorch's forward_with_packed_input).
  std::tuple<PackedSequence, std::tuple<Tensor, Tensor>> forward(
      const PackedSequence& input, const std::optional<std::tuple<Tensor, Tensor>>& hx = std::nullopt);
  std::tuple<PackedSequence, std::tuple<Tensor, Tensor>> forward_with_packed_input(
      const PackedSequence& input, const std::optional<std::tuple<Tensor, Tensor>>& hx = std::nullopt) {
    return forward(input, hx);
  }
};

class GRU : public RNNBase {
 public:
  GRU(int64_t input_size, int64_t hidden_size, int64_t num_layers = 1, bool bias = true, bool batch_first = false,
      double dropout = 0.0, bool bidirectional = false);
  explicit GRU(const GRUOptions& o);
  using RNNBase::forward;
  // (output, h_n); hx undefined: zeros.
  std::tuple<Tensor, Tensor> forward(const Tensor& input, const Tensor& hx);
  // (packed output, h_n) for a packed input (libtorch's forward_with_packed_input).
  std::tuple<PackedSequence, Tensor> forward(const PackedSequence& input, const Tensor& hx = {});
  std::tuple<PackedSequence, Tensor> forward_with_packed_input(const PackedSequence& input, const Tensor& hx = {}) {
    return forward(input, hx);
  }
};

// The Elman RNN, h' = tanh (or relu) of x w_ih^T + b_ih + h w_hh^T + b_hh.
class RNN : public RNNBase {
 public:
  RNN(int64_t input_size, int64_t hidden_size, int64_t num_layers = 1, const std::string& nonlinearity = "tanh",
      bool bias = true, bool batch_first = false, double dropout = 0.0, bool bidirectional = false);
  explicit RNN(const RNNOptions& o);
  using RNNBase::forward;
  std::tuple<Tensor, Tensor> forward(const Tensor& input, const Tensor& hx);
  // (packed output, h_n) for a packed input (libtorch's forward_with_packed_input).
  std::tuple<PackedSequence, Tensor> forward(const PackedSequence& input, const Tensor& hx = {});
  std::tuple<PackedSequence, Tensor> forward_with_packed_input(const PackedSequence& input, const Tensor& hx = {}) {
    return forward(input, hx);
  }
};

}  // namespace tinyddp::nn
