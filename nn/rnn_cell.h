// One time step of a recurrent network, as torch.nn.LSTMCell, GRUCell and RNNCell: the user's
// loop calls the cell once per step (a decoder, or sampling a character at a time). Weights as
// PyTorch's (weight_ih [G*H, I], weight_hh [G*H, H], bias_ih and bias_hh [G*H], G = 4, 3, 1),
// all ~ U(-1/sqrt(H), 1/sqrt(H)) from the default generator in that order, so that after the same
// manual_seed they equal torch's. A step is the sequence layers' (rnn_layer.h) over T = 1: the
// same arithmetic and gradients as nn::LSTM, GRU and RNN.
#pragma once

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "tinyddp/nn/module.h"

namespace tinyddp::nn {

class RNNCellBase : public Module {
 public:
  std::string extra_repr() const override;

  int64_t input_size, hidden_size;
  bool bias;
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;  // the biases undefined without bias

 protected:
  // gates: 4 (LSTM), 3 (GRU) or 1 (RNN).
  RNNCellBase(std::string type_name, int64_t input_size, int64_t hidden_size, bool bias, int64_t gates);
  // The input as a batch [N, I] (an unbatched [I] gains N = 1), checked; `batched` tells which.
  Tensor as_batch(const Tensor& input, bool& batched) const;
  // The state given (undefined: zeros [N, H]) as a batch, checked against the input's.
  Tensor state_or_zeros(const Tensor& state, const char* what, const Tensor& input, bool batched) const;
};

class LSTMCell : public RNNCellBase {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  LSTMCell(int64_t input_size, int64_t hidden_size, bool bias = true);
  // input [N, I] or [I]; hx = (h, c), each [N, H] or [H] (unset: zeros) -> (h', c').
  std::tuple<Tensor, Tensor> forward(const Tensor& input, const std::optional<std::tuple<Tensor, Tensor>>& hx);
  Tensor forward(const Tensor& input) override { return std::get<0>(forward(input, std::nullopt)); }
  // (input[, h[, c]]) -> {h', c'}.
  std::vector<Tensor> forward_many(const std::vector<Tensor>& inputs) override;
};

class GRUCell : public RNNCellBase {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  GRUCell(int64_t input_size, int64_t hidden_size, bool bias = true);
  // input [N, I] or [I], hx [N, H] or [H] (undefined: zeros) -> h'.
  Tensor forward(const Tensor& input, const Tensor& hx);
  Tensor forward(const Tensor& input) override { return forward(input, Tensor()); }
  std::vector<Tensor> forward_many(const std::vector<Tensor>& inputs) override;
};

// nonlinearity "tanh" or "relu".
class RNNCell : public RNNCellBase {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  RNNCell(int64_t input_size, int64_t hidden_size, bool bias = true, std::string nonlinearity = "tanh");
  Tensor forward(const Tensor& input, const Tensor& hx);
  Tensor forward(const Tensor& input) override { return forward(input, Tensor()); }
  std::vector<Tensor> forward_many(const std::vector<Tensor>& inputs) override;
  std::string extra_repr() const override;

  std::string nonlinearity;
};

}  // namespace tinyddp::nn
