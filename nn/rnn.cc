// LSTM, GRU and RNN (rnn.h): the parameters PyTorch registers, the checks it makes on the
// input and the initial states, and the stacking of layers and directions over rnn_layer.h's
// one-node recurrences.
#include "tinyddp/nn/rnn.h"

#include <cmath>

#include <fmt/format.h>

#include "tinyddp/nn/init.h"
#include "tinyddp/nn/rnn_layer.h"
#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::nn {

namespace {

namespace t = tinyddp::tensor;

const char* type_of(const std::string& mode) {
  if (mode == "LSTM" || mode == "GRU") return mode == "LSTM" ? "LSTM" : "GRU";
  TDDP_CHECK(mode == "RNN_TANH" || mode == "RNN_RELU",
             "RNNBase: unknown mode '{}' (expected LSTM, GRU, RNN_TANH or RNN_RELU)", mode);
  return "RNN";
}

std::string weight_name(const char* kind, int64_t layer, int64_t direction) {
  return fmt::format("{}_l{}{}", kind, layer, direction == 1 ? "_reverse" : "");
}

}  // namespace

RNNBase::RNNBase(std::string mode_, int64_t input_size_, int64_t hidden_size_, int64_t num_layers_, bool bias_,
                 bool batch_first_, double dropout_, bool bidirectional_, int64_t proj_size_)
    : Module(type_of(mode_)), mode(std::move(mode_)), input_size(input_size_), hidden_size(hidden_size_),
      num_layers(num_layers_), bias(bias_), batch_first(batch_first_), dropout(dropout_), bidirectional(bidirectional_),
      proj_size(proj_size_) {
  TDDP_CHECK(input_size > 0, "{}: input_size must be positive, got {}", type_name(), input_size);
  TDDP_CHECK(hidden_size > 0, "{}: hidden_size must be positive, got {}", type_name(), hidden_size);
  TDDP_CHECK(num_layers >= 1, "{}: num_layers must be at least 1, got {}", type_name(), num_layers);
  TDDP_CHECK(dropout >= 0 && dropout < 1,
             "{}: dropout must be a probability in [0, 1), got {} (it zeroes each layer's output but the last's "
             "in training)",
             type_name(), dropout);
  TDDP_CHECK(proj_size >= 0, "{}: proj_size should be a positive integer or zero to disable projections, got {}",
             type_name(), proj_size);
  TDDP_CHECK(proj_size == 0 || mode == "LSTM", "{}: proj_size argument is only supported for LSTM, not RNN or GRU",
             type_name());
  TDDP_CHECK(proj_size < hidden_size, "{}: proj_size has to be smaller than hidden_size, got {} and {}", type_name(),
             proj_size, hidden_size);
  const int64_t directions = bidirectional ? 2 : 1, rows = gates() * hidden_size, out = output_size();
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    const int64_t in = layer == 0 ? input_size : out * directions;
    for (int64_t direction = 0; direction < directions; ++direction) {
      register_parameter(weight_name("weight_ih", layer, direction), t::empty({rows, in}));
      register_parameter(weight_name("weight_hh", layer, direction), t::empty({rows, out}));
      if (bias) {
        register_parameter(weight_name("bias_ih", layer, direction), t::empty({rows}));
        register_parameter(weight_name("bias_hh", layer, direction), t::empty({rows}));
      }
      if (proj_size > 0)
        register_parameter(weight_name("weight_hr", layer, direction), t::empty({proj_size, hidden_size}));
    }
  }
  if (SkipInitGuard::active()) return;
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  for (const Tensor& p : parameters()) init::uniform_(p, -bound, bound);  // torch's order: registration
}

int64_t RNNBase::output_size() const { return proj_size > 0 ? proj_size : hidden_size; }

int64_t RNNBase::gates() const {
  if (mode == "LSTM") return 4;
  return mode == "GRU" ? 3 : 1;
}

std::vector<std::vector<Tensor>> RNNBase::all_weights() const {
  const OrderedDict<Tensor> own = named_registered_parameters(/*recurse=*/false);
  std::vector<std::vector<Tensor>> out;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    for (int64_t direction = 0; direction < (bidirectional ? 2 : 1); ++direction) {
      std::vector<Tensor>& w = out.emplace_back();
      for (const char* kind : {"weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr"}) {
        if (const Tensor* p = own.find(weight_name(kind, layer, direction))) w.push_back(*p);
      }
    }
  }
  return out;
}

void RNNBase::check_state(const Tensor& state, const char* what, const tensor::Shape& expected,
                          const Tensor& input) const {
  TDDP_CHECK(state.sizes() == expected, "{}: expected {} of shape {}, got {}", type_name(), what,
             t::format_shape(expected), t::format_shape(state.sizes()));
  TDDP_CHECK(state.dtype() == input.dtype() && state.device() == input.device(),
             "{}: {} ({}, {}) must have the input's dtype and device ({}, {})", type_name(), what,
             t::dtype_name(state.dtype()), state.device().str(), t::dtype_name(input.dtype()), input.device().str());
}

std::vector<std::vector<Tensor>> RNNBase::checked_weights(const Tensor& x) const {
  TDDP_CHECK(x.size(-1) == input_size, "{}: input.size(-1) must be equal to input_size: expected {}, got {}",
             type_name(), input_size, x.size(-1));
  std::vector<std::vector<Tensor>> weights = all_weights();
  TDDP_CHECK(weights[0][0].dtype() == x.dtype() && weights[0][0].device() == x.device(),
             "{}: input ({}, {}) and weights ({}, {}) must have the same dtype and device (convert the module "
             "with to())",
             type_name(), t::dtype_name(x.dtype()), x.device().str(), t::dtype_name(weights[0][0].dtype()),
             weights[0][0].device().str());
  return weights;
}

Tensor RNNBase::initial_state(const Tensor& given, const char* what, int64_t batch, const Tensor& x,
                              bool unbatched) const {
  // h carries the projection's size, c the hidden size
  const tensor::Shape state_shape{num_layers * (bidirectional ? 2 : 1), batch,
                                  what[0] == 'h' ? output_size() : hidden_size};
  if (!given.defined()) return t::zeros(state_shape, t::TensorOptions(x.dtype()).device(x.device()));
  const int dims = unbatched ? 2 : 3;
  TDDP_CHECK(given.dim() == dims, "{}: for a {} input, {} should be {}-D, got shape {}", type_name(),
             unbatched ? "2-D" : "batched", what, dims, t::format_shape(given.sizes()));
  const Tensor state = unbatched ? given.unsqueeze(1) : given;
  check_state(state, what, state_shape, x);
  return state;
}

std::tuple<Tensor, Tensor, Tensor> RNNBase::layers(const Tensor& x, const Tensor& h, const Tensor& c,
                                                   const std::vector<std::vector<Tensor>>& weights,
                                                   const Tensor& mask) {
  const bool lstm = mode == "LSTM";
  const int64_t directions = bidirectional ? 2 : 1, steps = x.size(0);
  std::vector<Tensor> h_n, c_n;
  Tensor layer_input = x;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    std::vector<Tensor> outputs;
    for (int64_t direction = 0; direction < directions; ++direction) {
      const int64_t index = layer * directions + direction;
      const std::vector<Tensor>& w = weights[index];
      const Tensor b_ih = bias ? w[2] : Tensor(), b_hh = bias ? w[3] : Tensor();
      const bool reverse = direction == 1;
      // where the direction's final h is (a masked row holds it there too)
      const int64_t last = reverse ? 0 : steps - 1;
      if (lstm && proj_size > 0) {
        const auto [hs, c_last] = lstm_projected_layer(layer_input, h.select(0, index), c.select(0, index), w[0], w[1],
                                                       b_ih, b_hh, w.back(), reverse, mask);
        outputs.push_back(hs);
        h_n.push_back(hs.select(0, last));
        c_n.push_back(c_last);
      } else if (lstm) {
        const Tensor y = lstm_layer(layer_input, h.select(0, index), c.select(0, index), w[0], w[1], b_ih, b_hh,
                                    reverse, mask);  // [T + 1, N, H]: the h_t, then the last c
        outputs.push_back(y.narrow(0, 0, steps));
        h_n.push_back(y.select(0, last));
        c_n.push_back(y.select(0, steps));
      } else {
        const Tensor y = mode == "GRU"
                             ? gru_layer(layer_input, h.select(0, index), w[0], w[1], b_ih, b_hh, reverse, mask)
                             : rnn_layer(layer_input, h.select(0, index), w[0], w[1], b_ih, b_hh, reverse,
                                         mode == "RNN_RELU" ? "relu" : "tanh", mask);
        outputs.push_back(y);
        h_n.push_back(y.select(0, last));
      }
    }
    layer_input = directions == 2 ? t::cat(outputs, 2) : outputs[0];  // [T, N, D * H]
    if (dropout > 0 && is_training() && layer + 1 < num_layers) layer_input = t::dropout(layer_input, dropout);
  }
  return {layer_input, t::stack(h_n, 0), lstm ? t::stack(c_n, 0) : Tensor()};
}

std::tuple<Tensor, Tensor, Tensor> RNNBase::run(const Tensor& input, const Tensor& hx, const Tensor& cx) {
  TDDP_CHECK(input.defined() && (input.dim() == 2 || input.dim() == 3),
             "{}: expected a 2-D (unbatched) or 3-D input, got {}", type_name(),
             input.defined() ? t::format_shape(input.sizes()) : "an undefined tensor");
  const bool unbatched = input.dim() == 2;
  const Tensor x = unbatched ? input.unsqueeze(1) : (batch_first ? input.transpose(0, 1) : input);  // [T, N, I]
  TDDP_CHECK(x.size(0) > 0, "{}: expected a sequence of at least one step, got input of shape {}", type_name(),
             t::format_shape(input.sizes()));
  const std::vector<std::vector<Tensor>> weights = checked_weights(x);
  const bool lstm = mode == "LSTM";
  const Tensor h = initial_state(hx, "h0", x.size(1), x, unbatched),
               c = lstm ? initial_state(cx, "c0", x.size(1), x, unbatched) : Tensor();
  auto [output, h_last, c_last] = layers(x, h, c, weights, Tensor());
  if (unbatched) {
    output = output.squeeze(1);
    h_last = h_last.squeeze(1);
    if (lstm) c_last = c_last.squeeze(1);
  } else if (batch_first) {
    output = output.transpose(0, 1);
  }
  return {output, h_last, c_last};
}

std::tuple<PackedSequence, Tensor, Tensor> RNNBase::run_packed(const PackedSequence& input, const Tensor& hx,
                                                               const Tensor& cx) {
  const Tensor& data = input.data();
  TDDP_CHECK(data.dim() == 2, "{}: a packed input's data must have 2 dimensions ([sum of lengths, {}]), got {}",
             type_name(), input_size, t::format_shape(data.sizes()));
  const std::vector<std::vector<Tensor>> weights = checked_weights(data);
  const int64_t batch = input.batch_size_list().at(0);
  const Tensor& sorted = input.sorted_indices();
  // The states given follow the original batch order; the packed rows, the sorted one.
  const auto initial = [&](const Tensor& given, const char* what) {
    const Tensor state = initial_state(given, what, batch, data, /*unbatched=*/false);
    return given.defined() && sorted.defined() ? t::index_select(state, 1, sorted) : state;
  };
  const bool lstm = mode == "LSTM";
  const Tensor h = initial(hx, "h0"), c = lstm ? initial(cx, "c0") : Tensor();
  // Run padded [T, N, I] in the sorted order, each sequence stepping over its own length only.
  const auto [x, lengths] = pad_packed_sequence(PackedSequence(data, input.batch_sizes()));
  const Tensor mask = t::lt(t::arange(x.size(0), t::TensorOptions(t::kInt64).device(x.device())).reshape({-1, 1, 1}),
                            lengths.to(x.device()).reshape({1, -1, 1}));  // [T, N, 1]
  const auto [output, h_n, c_n] = layers(x, h, c, weights, mask);
  const Tensor& unsorted = input.unsorted_indices();
  const auto original_order = [&](const Tensor& states) {
    return unsorted.defined() ? t::index_select(states, 1, unsorted) : states;
  };
  const Tensor packed_output = pack_padded_sequence(output, lengths).data();
  return {PackedSequence(packed_output, input.batch_sizes(), sorted, unsorted), original_order(h_n),
          lstm ? original_order(c_n) : Tensor()};
}

Tensor RNNBase::forward(const Tensor& input) { return std::get<0>(run(input, Tensor(), Tensor())); }

std::vector<Tensor> RNNBase::forward_many(const std::vector<Tensor>& inputs) {
  const bool lstm = mode == "LSTM";
  TDDP_CHECK(inputs.size() == 1 || inputs.size() == (lstm ? 3u : 2u), "{}: forward takes (input{}), got {} tensors",
             type_name(), lstm ? "[, h0, c0]" : "[, h0]", inputs.size());
  const auto [output, h_n, c_n] =
      run(inputs[0], inputs.size() > 1 ? inputs[1] : Tensor(), inputs.size() > 2 ? inputs[2] : Tensor());
  if (lstm) return {output, h_n, c_n};
  return {output, h_n};
}

std::string RNNBase::extra_repr() const {
  std::string s = fmt::format("{}, {}", input_size, hidden_size);
  if (proj_size != 0) s += fmt::format(", proj_size={}", proj_size);
  if (num_layers != 1) s += fmt::format(", num_layers={}", num_layers);
  if (!bias) s += ", bias=False";
  if (batch_first) s += ", batch_first=True";
  if (dropout != 0) s += fmt::format(", dropout={}", dropout);
  if (bidirectional) s += ", bidirectional=True";
  return s;
}

std::shared_ptr<Module> RNNBase::clone_structure() const {
  if (mode == "LSTM") {
    return std::make_shared<LSTM>(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                                  proj_size);
  }
  if (mode == "GRU") {
    return std::make_shared<GRU>(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional);
  }
  return std::make_shared<RNN>(input_size, hidden_size, num_layers, mode == "RNN_RELU" ? "relu" : "tanh", bias,
                               batch_first, dropout, bidirectional);
}

LSTM::LSTM(int64_t input_size_, int64_t hidden_size_, int64_t num_layers_, bool bias_, bool batch_first_,
           double dropout_, bool bidirectional_, int64_t proj_size_)
    : RNNBase("LSTM", input_size_, hidden_size_, num_layers_, bias_, batch_first_, dropout_, bidirectional_,
              proj_size_) {}

namespace {
// The options' nonlinearity is RNN's; an LSTM or GRU given another would silently ignore it.
const RNNOptions& gated_options(const RNNOptions& o, const char* type) {
  TDDP_CHECK(o.nonlinearity() == "tanh", "{}: nonlinearity '{}' is an option of RNN only ({} has fixed gates)", type,
             o.nonlinearity(), type);
  return o;
}
}  // namespace

LSTM::LSTM(const LSTMOptions& o)
    : LSTM(gated_options(o, "LSTM").input_size(), o.hidden_size(), o.num_layers(), o.bias(), o.batch_first(),
           o.dropout(), o.bidirectional(), o.proj_size()) {}

std::tuple<Tensor, std::tuple<Tensor, Tensor>> LSTM::forward(const Tensor& input,
                                                             const std::optional<std::tuple<Tensor, Tensor>>& hx) {
  const auto [output, h_n, c_n] = hx ? run(input, std::get<0>(*hx), std::get<1>(*hx)) : run(input, {}, {});
  return {output, {h_n, c_n}};
}

std::tuple<PackedSequence, std::tuple<Tensor, Tensor>> LSTM::forward(
    const PackedSequence& input, const std::optional<std::tuple<Tensor, Tensor>>& hx) {
  const auto [output, h_n, c_n] =
      hx ? run_packed(input, std::get<0>(*hx), std::get<1>(*hx)) : run_packed(input, {}, {});
  return {output, {h_n, c_n}};
}

GRU::GRU(int64_t input_size_, int64_t hidden_size_, int64_t num_layers_, bool bias_, bool batch_first_, double dropout_,
         bool bidirectional_)
    : RNNBase("GRU", input_size_, hidden_size_, num_layers_, bias_, batch_first_, dropout_, bidirectional_) {}

GRU::GRU(const GRUOptions& o)
    : RNNBase("GRU", gated_options(o, "GRU").input_size(), o.hidden_size(), o.num_layers(), o.bias(), o.batch_first(),
              o.dropout(), o.bidirectional(), o.proj_size()) {}

std::tuple<Tensor, Tensor> GRU::forward(const Tensor& input, const Tensor& hx) {
  const auto [output, h_n, unused] = run(input, hx, Tensor());
  return {output, h_n};
}

std::tuple<PackedSequence, Tensor> GRU::forward(const PackedSequence& input, const Tensor& hx) {
  const auto [output, h_n, unused] = run_packed(input, hx, Tensor());
  return {output, h_n};
}

namespace {

std::string rnn_mode(const std::string& nonlinearity) {
  TDDP_CHECK(nonlinearity == "tanh" || nonlinearity == "relu",
             "RNN: unknown nonlinearity '{}' (expected 'tanh' or 'relu')", nonlinearity);
  return nonlinearity == "tanh" ? "RNN_TANH" : "RNN_RELU";
}

}  // namespace

RNN::RNN(int64_t input_size_, int64_t hidden_size_, int64_t num_layers_, const std::string& nonlinearity, bool bias_,
         bool batch_first_, double dropout_, bool bidirectional_)
    : RNNBase(rnn_mode(nonlinearity), input_size_, hidden_size_, num_layers_, bias_, batch_first_, dropout_,
              bidirectional_) {}

RNN::RNN(const RNNOptions& o)
    : RNNBase(rnn_mode(o.nonlinearity()), o.input_size(), o.hidden_size(), o.num_layers(), o.bias(), o.batch_first(),
              o.dropout(), o.bidirectional(), o.proj_size()) {}

std::tuple<Tensor, Tensor> RNN::forward(const Tensor& input, const Tensor& hx) {
  const auto [output, h_n, unused] = run(input, hx, Tensor());
  return {output, h_n};
}

std::tuple<PackedSequence, Tensor> RNN::forward(const PackedSequence& input, const Tensor& hx) {
  const auto [output, h_n, unused] = run_packed(input, hx, Tensor());
  return {output, h_n};
}

}  // namespace tinyddp::nn
