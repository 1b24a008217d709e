// LSTMCell, GRUCell and RNNCell (rnn_cell.h): one step of rnn_layer.h's recurrences.
#include "tinyddp/nn/rnn_cell.h"

#include <cmath>

#include <fmt/format.h>

#include "tinyddp/nn/init.h"
#include "tinyddp/nn/rnn_layer.h"
#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::nn {

namespace t = tinyddp::tensor;

RNNCellBase::RNNCellBase(std::string type_name, int64_t input_size_, int64_t hidden_size_, bool bias_, int64_t gates)
    : Module(std::move(type_name)), input_size(input_size_), hidden_size(hidden_size_), bias(bias_) {
  TDDP_CHECK(input_size > 0, "{}: input_size must be positive, got {}", this->type_name(), input_size);
  TDDP_CHECK(hidden_size > 0, "{}: hidden_size must be positive, got {}", this->type_name(), hidden_size);
  weight_ih = register_parameter("weight_ih", t::empty({gates * hidden_size, input_size}));
  weight_hh = register_parameter("weight_hh", t::empty({gates * hidden_size, hidden_size}));
  if (bias) {
    bias_ih = register_parameter("bias_ih", t::empty({gates * hidden_size}));
    bias_hh = register_parameter("bias_hh", t::empty({gates * hidden_size}));
  }
  if (SkipInitGuard::active()) return;
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  for (const Tensor& p : parameters()) init::uniform_(p, -bound, bound);  // torch's order: registration
}

std::string RNNCellBase::extra_repr() const {
  std::string s = fmt::format("{}, {}", input_size, hidden_size);
  if (!bias) s += ", bias=False";
  return s;
}

Tensor RNNCellBase::as_batch(const Tensor& input, bool& batched) const {
  TDDP_CHECK(input.dim() == 1 || input.dim() == 2, "{}: expected input to be 1D or 2D, got {}D instead", type_name(),
             input.dim());
  TDDP_CHECK(input.size(-1) == input_size, "{}: input has inconsistent input_size: got {} expected {}", type_name(),
             input.size(-1), input_size);
  TDDP_CHECK(input.dtype() == weight_ih.dtype() && input.device() == weight_ih.device(),
             "{}: input ({}, {}) and weights ({}, {}) must have the same dtype and device", type_name(),
             t::dtype_name(input.dtype()), input.device().str(), t::dtype_name(weight_ih.dtype()),
             weight_ih.device().str());
  batched = input.dim() == 2;
  return batched ? input : input.unsqueeze(0);
}

Tensor RNNCellBase::state_or_zeros(const Tensor& state, const char* what, const Tensor& input, bool batched) const {
  if (!state.defined())
    return t::zeros({input.size(0), hidden_size}, t::TensorOptions(input.dtype()).device(input.device()));
  const t::Shape expected = batched ? t::Shape{input.size(0), hidden_size} : t::Shape{hidden_size};
  TDDP_CHECK(state.sizes() == expected, "{}: {} has shape {}, expected {} (the input is {})", type_name(), what,
             t::format_shape(state.sizes()), t::format_shape(expected), t::format_shape(input.sizes()));
  return batched ? state : state.unsqueeze(0);
}

namespace {
// A batch result back to the input's form (unbatched: without N).
Tensor unbatch(const Tensor& x, bool batched) { return batched ? x : x.squeeze(0); }

// (input[, hx...]) from forward_many's list: at most `states` states after the input.
void check_arity(const std::vector<Tensor>& inputs, size_t states, const std::string& type, const char* form) {
  TDDP_CHECK(!inputs.empty() && inputs.size() <= 1 + states, "{}: forward takes ({}), got {} tensors", type, form,
             inputs.size());
}
}  // namespace

// ---- LSTMCell ---------------------------------------------------------------------------------

LSTMCell::LSTMCell(int64_t input_size_, int64_t hidden_size_, bool bias_)
    : RNNCellBase("LSTMCell", input_size_, hidden_size_, bias_, 4) {}

std::tuple<Tensor, Tensor> LSTMCell::forward(const Tensor& input, const std::optional<std::tuple<Tensor, Tensor>>& hx) {
  bool batched = false;
  const Tensor x = as_batch(input, batched);
  const Tensor h = state_or_zeros(hx ? std::get<0>(*hx) : Tensor(), "hx", x, batched);
  const Tensor c = state_or_zeros(hx ? std::get<1>(*hx) : Tensor(), "cx", x, batched);
  // One step: rows 0 and 1 of the layer's [T + 1, N, H] are h' and c'.
  const Tensor out = lstm_layer(x.unsqueeze(0), h, c, weight_ih, weight_hh, bias_ih, bias_hh, false);
  return {unbatch(out.select(0, 0), batched), unbatch(out.select(0, 1), batched)};
}

std::vector<Tensor> LSTMCell::forward_many(const std::vector<Tensor>& inputs) {
  check_arity(inputs, 2, type_name(), "input[, h, c]");
  std::optional<std::tuple<Tensor, Tensor>> hx;
  if (inputs.size() > 1) hx = std::make_tuple(inputs[1], inputs.size() > 2 ? inputs[2] : Tensor());
  const auto [h, c] = forward(inputs[0], hx);
  return {h, c};
}

std::shared_ptr<Module> LSTMCell::clone_structure() const {
  return std::make_shared<LSTMCell>(input_size, hidden_size, bias);
}

// ---- GRUCell ----------------------------------------------------------------------------------

GRUCell::GRUCell(int64_t input_size_, int64_t hidden_size_, bool bias_)
    : RNNCellBase("GRUCell", input_size_, hidden_size_, bias_, 3) {}

Tensor GRUCell::forward(const Tensor& input, const Tensor& hx) {
  bool batched = false;
  const Tensor x = as_batch(input, batched);
  const Tensor h = state_or_zeros(hx, "hx", x, batched);
  return unbatch(gru_layer(x.unsqueeze(0), h, weight_ih, weight_hh, bias_ih, bias_hh, false).select(0, 0), batched);
}

std::vector<Tensor> GRUCell::forward_many(const std::vector<Tensor>& inputs) {
  check_arity(inputs, 1, type_name(), "input[, h]");
  return {forward(inputs[0], inputs.size() > 1 ? inputs[1] : Tensor())};
}

std::shared_ptr<Module> GRUCell::clone_structure() const {
  return std::make_shared<GRUCell>(input_size, hidden_size, bias);
}

// ---- RNNCell ----------------------------------------------------------------------------------

RNNCell::RNNCell(int64_t input_size_, int64_t hidden_size_, bool bias_, std::string nonlinearity_)
    : RNNCellBase("RNNCell", input_size_, hidden_size_, bias_, 1), nonlinearity(std::move(nonlinearity_)) {
  TDDP_CHECK(nonlinearity == "tanh" || nonlinearity == "relu", "RNNCell: unknown nonlinearity '{}' (tanh or relu)",
             nonlinearity);
}

Tensor RNNCell::forward(const Tensor& input, const Tensor& hx) {
  bool batched = false;
  const Tensor x = as_batch(input, batched);
  const Tensor h = state_or_zeros(hx, "hx", x, batched);
  return unbatch(rnn_layer(x.unsqueeze(0), h, weight_ih, weight_hh, bias_ih, bias_hh, false, nonlinearity).select(0, 0),
                 batched);
}

std::vector<Tensor> RNNCell::forward_many(const std::vector<Tensor>& inputs) {
  check_arity(inputs, 1, type_name(), "input[, h]");
  return {forward(inputs[0], inputs.size() > 1 ? inputs[1] : Tensor())};
}

std::string RNNCell::extra_repr() const {
  std::string s = RNNCellBase::extra_repr();
  if (nonlinearity != "tanh") s += ", nonlinearity=" + nonlinearity;
  return s;
}

std::shared_ptr<Module> RNNCell::clone_structure() const {
  return std::make_shared<RNNCell>(input_size, hidden_size, bias, nonlinearity);
}

}  // namespace tinyddp::nn
