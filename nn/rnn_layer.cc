// The recurrences of rnn_layer.h: for each cell, its forward over the sequence and, beside it,
// its backward through time. Every backward ends in input_and_weight_grads: once the gradients
// of the pre-activations are known for all steps, the input and weight gradients are a few
// large matrix products over the whole sequence rather than T small ones.
#include "tinyddp/nn/rnn_layer.h"

#include <array>
#include <initializer_list>
#include <tuple>
#include <utility>
#include <vector>

#include "tinyddp/autograd/function.h"
#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::nn {

namespace {

namespace t = tinyddp::tensor;
using autograd::FunctionCtx;

// The time index of processing step `step` (reversed layers run T-1 down to 0).
int64_t time_at(int64_t step, int64_t steps, bool reverse) { return reverse ? steps - 1 - step : step; }

// The hidden state each time step starts from: h0 for the first step processed, then the
// previous step's output. hs [T, N, H], h0 [N, H] -> [T, N, H]
Tensor previous_hidden(const Tensor& hs, const Tensor& h0, bool reverse) {
  const int64_t steps = hs.size(0);
  const Tensor first = h0.unsqueeze(0);
  if (steps == 1) return first;
  return reverse ? t::cat({hs.narrow(0, 1, steps - 1), first}, 0) : t::cat({first, hs.narrow(0, 0, steps - 1)}, 0);
}

// [T, N, K] -> [T * N, K]
Tensor rows(const Tensor& x) { return x.reshape({x.size(0) * x.size(1), x.size(2)}); }

// A masked layer's state at time `time`: the step's where the mask is set, the held one
// elsewhere (a sequence of a packed batch that has ended or not begun). No mask: the step's.
Tensor keep(const Tensor& mask, int64_t time, const Tensor& stepped, const Tensor& held) {
  return mask.defined() ? t::where(mask.select(0, time), stepped, held) : stepped;
}

// The gradient of a state split as keep() joined it: the part that reaches the step (its rows
// that stepped) and the part that passes the step by to the held state (undefined: none).
struct SplitGrad {
  Tensor stepped, held;
};
SplitGrad split_at(const Tensor& mask, int64_t time, const Tensor& grad) {
  if (!mask.defined()) return {grad, Tensor()};
  const Tensor stepped = grad * mask.select(0, time).to(grad.dtype());
  return {stepped, grad - stepped};
}

Tensor plus_held(const Tensor& x, const Tensor& held) { return held.defined() ? x + held : x; }

// Which of x, w_ih, w_hh, b_ih, b_hh need a gradient, and the gradients.
struct LayerGrads {
  Tensor x, w_ih, w_hh, b_ih, b_hh;
};

// From the gradients of the input-side pre-activations (x_t w_ih^T + b_ih: dxw) and the
// hidden-side ones (h w_hh^T + b_hh: dhw), both [T, N, G*H], for all steps at once:
//   x: dxw w_ih -> [T, N, I];   w_ih: dxw^T x as [G*H, T*N] x [T*N, I];   b_ih: dxw summed over T, N
//   w_hh: dhw^T hprev as [G*H, T*N] x [T*N, H];   b_hh: dhw summed over T, N
LayerGrads input_and_weight_grads(const FunctionCtx& ctx, int first_weight_arg, const Tensor& x, const Tensor& hprev,
                                  const Tensor& w_ih, const Tensor& dxw, const Tensor& dhw) {
  const auto& needs = ctx.needs_input_grad;
  const int w = first_weight_arg;  // the arguments run x, states, w_ih, w_hh, b_ih, b_hh
  LayerGrads g;
  if (needs[0]) g.x = t::matmul(dxw, w_ih);
  if (needs[w]) g.w_ih = t::mm(rows(dxw).transpose(0, 1), rows(x));
  if (needs[w + 1]) g.w_hh = t::mm(rows(dhw).transpose(0, 1), rows(hprev));
  if (needs[w + 2]) g.b_ih = t::sum(dxw, {0, 1});
  if (needs[w + 3]) g.b_hh = t::sum(dhw, {0, 1});
  return g;
}

// Per-step tensors in time order, each the pieces put at its time joined along dim 1, and all
// of them stacked along a new first dim. Unrecorded, the pieces are copied straight into one
// buffer [T, N, width] (one copy each, no stacking); recorded (create_graph), they are joined
// by cat and stack, which autograd differentiates.
class ByTime {
 public:
  explicit ByTime(int64_t steps) : steps_(static_cast<size_t>(steps)) {}
  // Step `time`: the pieces joined; returns it.
  Tensor put(int64_t time, std::initializer_list<Tensor> pieces) {
    Tensor& step = steps_[static_cast<size_t>(time)];
    if (recording_) {
      step = pieces.size() == 1 ? *pieces.begin() : t::cat(pieces, 1);
      return step;
    }
    const Tensor& first = *pieces.begin();
    if (!buffer_.defined()) {
      int64_t width = 0;
      for (const Tensor& piece : pieces) width += piece.size(1);
      buffer_ = t::empty({static_cast<int64_t>(steps_.size()), first.size(0), width},
                         t::TensorOptions(first.dtype()).device(first.device()));
    }
    step = buffer_.select(0, time);
    int64_t offset = 0;
    for (const Tensor& piece : pieces) {
      step.narrow(1, offset, piece.size(1)).copy_(piece);
      offset += piece.size(1);
    }
    return step;
  }
  Tensor stacked() const { return recording_ ? t::stack(steps_, 0) : buffer_; }

 private:
  bool recording_ = tensor::GradMode::is_enabled();
  std::vector<Tensor> steps_;
  Tensor buffer_;
};

// The forward passes, written once from ops: the Functions' forwards run them unrecorded, and
// under create_graph their backwards run them again recorded from the saved inputs (which keep
// their graph), so the gradients below, built from ops too, carry a graph back to the inputs:
// double backward, as PyTorch's CPU RNNs, which are composed of ops. Each returns what the
// backward reads: the gates after their activations by time, and the layer's output.
// With a projection w_hr [P, H] (defined), h = (o tanh(c)) w_hr^T of size P and `out` holds
// the h_t only, [T, N, P].
struct LstmSteps {
  Tensor gates, cells, out;  // [T, N, 4H] (i, f, g, o), [T, N, H], [T + 1, N, H]
};
LstmSteps lstm_steps(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh,
                     const Tensor& b_ih, const Tensor& b_hh, bool reverse, const Tensor& mask,
                     const Tensor& w_hr = {}) {
  const int64_t steps = x.size(0), hidden = c0.size(1);
  const Tensor xw = t::linear(x, w_ih, b_ih);  // [T, N, 4H], every step's input side at once
  ByTime gates(steps), cells(steps), hs(w_hr.defined() ? steps : steps + 1);
  Tensor h = h0, c = c0;
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t time = time_at(s, steps, reverse);
    const Tensor pre = t::add(xw.select(0, time), t::linear(h, w_hh, b_hh));  // [N, 4H]
    const Tensor sig = t::sigmoid(pre);
    const Tensor i = sig.narrow(1, 0, hidden), f = sig.narrow(1, hidden, hidden),
                 g = t::tanh(pre.narrow(1, 2 * hidden, hidden)), o = sig.narrow(1, 3 * hidden, hidden);
    const Tensor c_new = f * c + i * g, h_new = o * t::tanh(c_new);
    h = keep(mask, time, w_hr.defined() ? t::mm(h_new, w_hr.t()) : h_new, h);
    c = keep(mask, time, c_new, c);
    gates.put(time, {sig.narrow(1, 0, 2 * hidden), g, o});
    cells.put(time, {c});
    hs.put(time, {h});
  }
  if (!w_hr.defined()) hs.put(steps, {c});
  return {gates.stacked(), cells.stacked(), hs.stacked()};
}

struct GruSteps {
  Tensor gates, hidden_n, out;  // [T, N, 3H] (r, z, n), [T, N, H] (h w_hn^T + b_hn, which r scales), [T, N, H]
};
GruSteps gru_steps(const Tensor& x, const Tensor& h0, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                   const Tensor& b_hh, bool reverse, const Tensor& mask) {
  const int64_t steps = x.size(0), hidden = h0.size(1);
  const Tensor xw = t::linear(x, w_ih, b_ih);  // [T, N, 3H]
  ByTime gates(steps), hidden_n(steps), hs(steps);
  Tensor h = h0;
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t time = time_at(s, steps, reverse);
    const Tensor hw = t::linear(h, w_hh, b_hh), xt = xw.select(0, time);  // [N, 3H]
    const Tensor rz = t::sigmoid(xt.narrow(1, 0, 2 * hidden) + hw.narrow(1, 0, 2 * hidden));
    const Tensor r = rz.narrow(1, 0, hidden), z = rz.narrow(1, hidden, hidden);
    const Tensor hn = hw.narrow(1, 2 * hidden, hidden);
    const Tensor n = t::tanh(xt.narrow(1, 2 * hidden, hidden) + r * hn);
    h = keep(mask, time, n + z * (h - n), h);
    gates.put(time, {rz, n});
    hidden_n.put(time, {hn});
    hs.put(time, {h});
  }
  return {gates.stacked(), hidden_n.stacked(), hs.stacked()};
}

Tensor rnn_steps(const Tensor& x, const Tensor& h0, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                 const Tensor& b_hh, bool reverse, bool relu, const Tensor& mask) {
  const int64_t steps = x.size(0);
  const Tensor xw = t::linear(x, w_ih, b_ih);  // [T, N, H]
  ByTime hs(steps);
  Tensor h = h0;
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t time = time_at(s, steps, reverse);
    const Tensor pre = t::add(xw.select(0, time), t::linear(h, w_hh, b_hh));
    h = keep(mask, time, relu ? t::relu(pre) : t::tanh(pre), h);
    hs.put(time, {h});
  }
  return hs.stacked();
}

struct LstmLayer : autograd::Function<LstmLayer> {
  static Tensor forward(FunctionCtx* ctx, const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                        const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh, bool reverse, const Tensor& mask) {
    LstmSteps run = lstm_steps(x, h0, c0, w_ih, w_hh, b_ih, b_hh, reverse, mask);
    ctx->save_for_backward({x, h0, c0, w_ih, w_hh, b_ih, b_hh, run.gates, run.cells, run.out, mask});
    ctx->saved_data["reverse"] = reverse;
    return run.out;
  }

  // grad [T + 1, N, H] (the h_t rows, then the last cell's) -> one gradient per argument
  static std::vector<Tensor> backward(FunctionCtx* ctx, const std::vector<Tensor>& grad_outputs) {
    const std::vector<Tensor> saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &h0 = saved[1], &c0 = saved[2], &w_ih = saved[3], &w_hh = saved[4], &mask = saved[10];
    const bool reverse = ctx->saved_data.get<bool>("reverse");
    // create_graph: the forward again, recorded (see lstm_steps).
    const LstmSteps run = tensor::GradMode::is_enabled()
                              ? lstm_steps(x, h0, c0, w_ih, w_hh, saved[5], saved[6], reverse, mask)
                              : LstmSteps{saved[7], saved[8], saved[9]};
    const Tensor& grad = grad_outputs[0];
    const int64_t steps = x.size(0), hidden = h0.size(1);
    ByTime dgates(steps);  // of the four pre-activations
    Tensor dh = t::zeros_like(h0), dc = grad.select(0, steps);
    for (int64_t s = steps - 1; s >= 0; --s) {
      const int64_t time = time_at(s, steps, reverse);
      const Tensor act = run.gates.select(0, time);
      const Tensor i = act.narrow(1, 0, hidden), f = act.narrow(1, hidden, hidden),
                   g = act.narrow(1, 2 * hidden, hidden), o = act.narrow(1, 3 * hidden, hidden);
      const Tensor c_prev = s == 0 ? c0 : run.cells.select(0, time_at(s - 1, steps, reverse));
      const Tensor tanh_c = t::tanh(run.cells.select(0, time));
      // (masked: only the rows that stepped reach the step; the others pass it by)
      const SplitGrad h_grad = split_at(mask, time, dh + grad.select(0, time)), c_grad = split_at(mask, time, dc);
      const Tensor& dh_step = h_grad.stepped;
      // h = o tanh(c): do = dh tanh(c), and dh reaches c through tanh
      const Tensor d_o = dh_step * tanh_c * o * (1.0 - o);
      const Tensor dc_step = c_grad.stepped + dh_step * o * (1.0 - tanh_c * tanh_c);
      // c = f c_prev + i g
      const Tensor d = dgates.put(
          time, {dc_step * g * i * (1.0 - i), dc_step * c_prev * f * (1.0 - f), dc_step * i * (1.0 - g * g), d_o});
      dc = plus_held(dc_step * f, c_grad.held);
      dh = plus_held(t::mm(d, w_hh), h_grad.held);  // [N, 4H] x [4H, H]
    }
    const Tensor hprev = previous_hidden(run.out.narrow(0, 0, steps), h0, reverse);
    const Tensor all = dgates.stacked();
    const LayerGrads g = input_and_weight_grads(*ctx, 3, x, hprev, w_ih, all, all);
    const auto& needs = ctx->needs_input_grad;
    return {g.x,     needs[1] ? dh : Tensor(), needs[2] ? dc : Tensor(), g.w_ih, g.w_hh, g.b_ih, g.b_hh, Tensor(),
            Tensor()};
  }
};

// LSTM with a projection as one node: the output is the h_t [T, N, P] and the last cell state
// [N, H], flattened and joined (a node has one output). The backward is LstmLayer's with the
// projection between h and o tanh(c): dm = dh w_hr, and w_hr's gradient one product at the end,
// sum_t dh_t^T (o tanh(c))_t.
struct LstmProjectedLayer : autograd::Function<LstmProjectedLayer> {
  static Tensor forward(FunctionCtx* ctx, const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                        const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh, const Tensor& w_hr, bool reverse,
                        const Tensor& mask) {
    LstmSteps run = lstm_steps(x, h0, c0, w_ih, w_hh, b_ih, b_hh, reverse, mask, w_hr);
    ctx->save_for_backward({x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, run.gates, run.cells, run.out, mask});
    ctx->saved_data["reverse"] = reverse;
    const Tensor c_last = run.cells.select(0, reverse ? 0 : x.size(0) - 1);
    return t::cat({run.out.reshape({-1}), c_last.reshape({-1})}, 0);
  }

  static std::vector<Tensor> backward(FunctionCtx* ctx, const std::vector<Tensor>& grad_outputs) {
    const std::vector<Tensor> saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &h0 = saved[1], &c0 = saved[2], &w_ih = saved[3], &w_hh = saved[4], &w_hr = saved[7],
                 &mask = saved[11];
    const bool reverse = ctx->saved_data.get<bool>("reverse");
    const LstmSteps run = tensor::GradMode::is_enabled()
                              ? lstm_steps(x, h0, c0, w_ih, w_hh, saved[5], saved[6], reverse, mask, w_hr)
                              : LstmSteps{saved[8], saved[9], saved[10]};
    const int64_t steps = x.size(0), hidden = c0.size(1), outputs = steps * h0.numel();
    const Tensor grad_h = grad_outputs[0].narrow(0, 0, outputs).view(run.out.sizes());
    ByTime dgates(steps), dhs(steps);  // of the pre-activations; of each step's projected h
    Tensor dh = t::zeros_like(h0), dc = grad_outputs[0].narrow(0, outputs, c0.numel()).view(c0.sizes());
    for (int64_t s = steps - 1; s >= 0; --s) {
      const int64_t time = time_at(s, steps, reverse);
      const Tensor act = run.gates.select(0, time);
      const Tensor i = act.narrow(1, 0, hidden), f = act.narrow(1, hidden, hidden),
                   g = act.narrow(1, 2 * hidden, hidden), o = act.narrow(1, 3 * hidden, hidden);
      const Tensor c_prev = s == 0 ? c0 : run.cells.select(0, time_at(s - 1, steps, reverse));
      const Tensor tanh_c = t::tanh(run.cells.select(0, time));
      const SplitGrad h_grad = split_at(mask, time, dh + grad_h.select(0, time)), c_grad = split_at(mask, time, dc);
      const Tensor dm = t::mm(dhs.put(time, {h_grad.stepped}), w_hr);  // h = m w_hr^T: [N, P] x [P, H]
      const Tensor d_o = dm * tanh_c * o * (1.0 - o);
      const Tensor dc_step = c_grad.stepped + dm * o * (1.0 - tanh_c * tanh_c);
      const Tensor d = dgates.put(
          time, {dc_step * g * i * (1.0 - i), dc_step * c_prev * f * (1.0 - f), dc_step * i * (1.0 - g * g), d_o});
      dc = plus_held(dc_step * f, c_grad.held);
      dh = plus_held(t::mm(d, w_hh), h_grad.held);  // [N, 4H] x [4H, P]
    }
    const Tensor all = dgates.stacked();
    const LayerGrads grads = input_and_weight_grads(*ctx, 3, x, previous_hidden(run.out, h0, reverse), w_ih, all, all);
    const auto& needs = ctx->needs_input_grad;
    Tensor d_hr;  // sum over t of dh_t^T (o tanh(c))_t: [P, T*N] x [T*N, H]
    if (needs[7]) {
      const Tensor m = run.gates.narrow(2, 3 * hidden, hidden) * t::tanh(run.cells);
      d_hr = t::mm(rows(dhs.stacked()).transpose(0, 1), rows(m));
    }
    return {grads.x,
            needs[1] ? dh : Tensor(),
            needs[2] ? dc : Tensor(),
            grads.w_ih,
            grads.w_hh,
            grads.b_ih,
            grads.b_hh,
            d_hr,
            Tensor(),
            Tensor()};
  }
};

struct GruLayer : autograd::Function<GruLayer> {
  static Tensor forward(FunctionCtx* ctx, const Tensor& x, const Tensor& h0, const Tensor& w_ih, const Tensor& w_hh,
                        const Tensor& b_ih, const Tensor& b_hh, bool reverse, const Tensor& mask) {
    GruSteps run = gru_steps(x, h0, w_ih, w_hh, b_ih, b_hh, reverse, mask);
    ctx->save_for_backward({x, h0, w_ih, w_hh, b_ih, b_hh, run.gates, run.hidden_n, run.out, mask});
    ctx->saved_data["reverse"] = reverse;
    return run.out;
  }

  // grad [T, N, H] -> one gradient per argument
  static std::vector<Tensor> backward(FunctionCtx* ctx, const std::vector<Tensor>& grad_outputs) {
    const std::vector<Tensor> saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &h0 = saved[1], &w_ih = saved[2], &w_hh = saved[3], &mask = saved[9];
    const bool reverse = ctx->saved_data.get<bool>("reverse");
    const GruSteps run = tensor::GradMode::is_enabled()
                             ? gru_steps(x, h0, w_ih, w_hh, saved[4], saved[5], reverse, mask)
                             : GruSteps{saved[6], saved[7], saved[8]};
    const Tensor& grad = grad_outputs[0];
    const int64_t steps = x.size(0), hidden = h0.size(1);
    // The pre-activations differ on the two sides only in n's rows: x's side enters n as is,
    // the hidden side scaled by r.
    ByTime dxw(steps), dhw(steps);
    Tensor dh = t::zeros_like(h0);
    for (int64_t s = steps - 1; s >= 0; --s) {
      const int64_t time = time_at(s, steps, reverse);
      const Tensor act = run.gates.select(0, time);
      const Tensor r = act.narrow(1, 0, hidden), z = act.narrow(1, hidden, hidden),
                   n = act.narrow(1, 2 * hidden, hidden);
      const Tensor h_prev = s == 0 ? h0 : run.out.select(0, time_at(s - 1, steps, reverse));
      const SplitGrad h_grad = split_at(mask, time, dh + grad.select(0, time));
      const Tensor& dh_step = h_grad.stepped;
      // h = n + z (h_prev - n) = (1 - z) n + z h_prev
      const Tensor dn = dh_step * (1.0 - z) * (1.0 - n * n);
      const Tensor dz = dh_step * (h_prev - n) * z * (1.0 - z);
      const Tensor dr = dn * run.hidden_n.select(0, time) * r * (1.0 - r);
      dxw.put(time, {dr, dz, dn});
      const Tensor dh_t = dhw.put(time, {dr, dz, dn * r});
      dh = plus_held(dh_step * z + t::mm(dh_t, w_hh), h_grad.held);  // [N, 3H] x [3H, H]
    }
    const Tensor hprev = previous_hidden(run.out, h0, reverse);
    const LayerGrads g = input_and_weight_grads(*ctx, 2, x, hprev, w_ih, dxw.stacked(), dhw.stacked());
    return {g.x, ctx->needs_input_grad[1] ? dh : Tensor(), g.w_ih, g.w_hh, g.b_ih, g.b_hh, Tensor(), Tensor()};
  }
};

struct RnnLayer : autograd::Function<RnnLayer> {
  static Tensor forward(FunctionCtx* ctx, const Tensor& x, const Tensor& h0, const Tensor& w_ih, const Tensor& w_hh,
                        const Tensor& b_ih, const Tensor& b_hh, bool reverse, bool relu, const Tensor& mask) {
    const Tensor out = rnn_steps(x, h0, w_ih, w_hh, b_ih, b_hh, reverse, relu, mask);
    ctx->save_for_backward({x, h0, w_ih, w_hh, b_ih, b_hh, out, mask});
    ctx->saved_data["reverse"] = reverse;
    ctx->saved_data["relu"] = relu;
    return out;
  }

  // grad [T, N, H] -> one gradient per argument
  static std::vector<Tensor> backward(FunctionCtx* ctx, const std::vector<Tensor>& grad_outputs) {
    const std::vector<Tensor> saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &h0 = saved[1], &w_ih = saved[2], &w_hh = saved[3], &mask = saved[7];
    const bool reverse = ctx->saved_data.get<bool>("reverse"), relu = ctx->saved_data.get<bool>("relu");
    const Tensor out = tensor::GradMode::is_enabled()
                           ? rnn_steps(x, h0, w_ih, w_hh, saved[4], saved[5], reverse, relu, mask)
                           : saved[6];
    const Tensor& grad = grad_outputs[0];
    const int64_t steps = x.size(0);
    ByTime dpre(steps);
    Tensor dh = t::zeros_like(h0);
    for (int64_t s = steps - 1; s >= 0; --s) {
      const int64_t time = time_at(s, steps, reverse);
      const Tensor h = out.select(0, time);
      const SplitGrad h_grad = split_at(mask, time, dh + grad.select(0, time));
      const Tensor& dh_step = h_grad.stepped;
      // relu passes where its output is positive (PyTorch's rule at 0); tanh' = 1 - h^2
      const Tensor d = dpre.put(time, {relu ? dh_step * t::gt(h, 0.0).to(h.dtype()) : dh_step * (1.0 - h * h)});
      dh = plus_held(t::mm(d, w_hh), h_grad.held);  // [N, H] x [H, H]
    }
    const Tensor all = dpre.stacked();
    const LayerGrads g = input_and_weight_grads(*ctx, 2, x, previous_hidden(out, h0, reverse), w_ih, all, all);
    return {g.x,     ctx->needs_input_grad[1] ? dh : Tensor(), g.w_ih, g.w_hh, g.b_ih, g.b_hh, Tensor(), Tensor(),
            Tensor()};
  }
};

}  // namespace

std::pair<Tensor, Tensor> lstm_projected_layer(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                                               const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh,
                                               const Tensor& w_hr, bool reverse, const Tensor& mask) {
  const Tensor out = LstmProjectedLayer::apply(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, reverse, mask);
  const int64_t outputs = x.size(0) * h0.numel();  // then the last cell state's c0.numel()
  return {out.narrow(0, 0, outputs).view({x.size(0), h0.size(0), h0.size(1)}),
          out.narrow(0, outputs, c0.numel()).view(c0.sizes())};
}

Tensor lstm_layer(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh,
                  const Tensor& b_ih, const Tensor& b_hh, bool reverse, const Tensor& mask) {
  return LstmLayer::apply(x, h0, c0, w_ih, w_hh, b_ih, b_hh, reverse, mask);
}

Tensor gru_layer(const Tensor& x, const Tensor& h0, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                 const Tensor& b_hh, bool reverse, const Tensor& mask) {
  return GruLayer::apply(x, h0, w_ih, w_hh, b_ih, b_hh, reverse, mask);
}

Tensor rnn_layer(const Tensor& x, const Tensor& h0, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                 const Tensor& b_hh, bool reverse, const std::string& nonlinearity, const Tensor& mask) {
  TDDP_CHECK(nonlinearity == "tanh" || nonlinearity == "relu",
             "RNN: unknown nonlinearity '{}' (expected 'tanh' or 'relu')", nonlinearity);
  return RnnLayer::apply(x, h0, w_ih, w_hh, b_ih, b_hh, reverse, nonlinearity == "relu", mask);
}

}  // namespace tinyddp::nn
