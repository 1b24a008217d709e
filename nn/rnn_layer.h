// One layer and direction of a recurrent network over a whole sequence, as one graph node
// each (custom autograd Functions, autograd/function.h): the forward runs the time steps
// with recording off and keeps the gates; the backward is backpropagation through time, written
// out with tensor ops (so both backends have it). Under create_graph the backward runs the
// steps again recorded, so its gradients can be differentiated again (double backward). One node per layer instead of
// one per step and gate keeps the graph and the backward O(T): a step's slice of the input needs no gradient the size
// of the whole sequence. nn::LSTM, GRU and RNN (rnn.h) stack these.
//
// Shapes: x [T, N, I], h0 and c0 [N, H], w_ih [G*H, I], w_hh [G*H, H], b_ih and b_hh [G*H]
// (undefined without bias), G the gates: 4 for LSTM (i, f, g, o), 3 for GRU (r, z, n), 1 for
// RNN. `reverse` runs t = T-1 down to 0 (a bidirectional layer's second direction). `mask`
// (bool [T, N, 1], optional) says which sequences take the step at each time: the others hold
// their state through it (h and c as they were; the output row repeats it), which runs a
// packed batch (packed_sequence.h) padded: a sequence that has ended keeps its last state, and
// reversed, one not yet begun its initial. A held row's input and gradient play no part.
#pragma once

#include <string>
#include <utility>

#include "tinyddp/tensor/tensor.h"

namespace tinyddp::nn {

using tensor::Tensor;

// LSTM: -> [T + 1, N, H]: rows 0..T-1 the hidden state h_t at each time t, row T the last
// cell state (c after t = T-1, or after t = 0 when reversed).
//   i, f, g, o = sigmoid, sigmoid, tanh, sigmoid of (x_t w_ih^T + b_ih + h w_hh^T + b_hh)
//   c' = f c + i g,  h' = o tanh(c')
Tensor lstm_layer(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh,
                  const Tensor& b_ih, const Tensor& b_hh, bool reverse, const Tensor& mask = {});

// LSTM with a projection (PyTorch's proj_size P): h' = (o tanh(c')) w_hr^T, h0 and h_t [N, P],
// w_hh [4H, P], w_hr [P, H]. -> (the h_t [T, N, P], the last cell state [N, H]), views of one
// node's output (both joined, flattened), whose backward is lstm_layer's with the projection.
std::pair<Tensor, Tensor> lstm_projected_layer(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                                               const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh,
                                               const Tensor& w_hr, bool reverse, const Tensor& mask = {});

// GRU: -> [T, N, H], h_t at each time t.
//   r, z = sigmoid(x_t w_ir^T + b_ir + h w_hr^T + b_hr), the same with z's rows
//   n = tanh(x_t w_in^T + b_in + r (h w_hn^T + b_hn)),  h' = n + z (h - n)
Tensor gru_layer(const Tensor& x, const Tensor& h0, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                 const Tensor& b_hh, bool reverse, const Tensor& mask = {});

// Elman RNN: -> [T, N, H], h' = act(x_t w_ih^T + b_ih + h w_hh^T + b_hh), act "tanh" or "relu".
Tensor rnn_layer(const Tensor& x, const Tensor& h0, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                 const Tensor& b_hh, bool reverse, const std::string& nonlinearity, const Tensor& mask = {});

}  // namespace tinyddp::nn
