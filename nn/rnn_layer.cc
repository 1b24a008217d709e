// The recurrences of rnn_layer.h: for each cell, its forward over the sequence and, beside it,
// its backward through time. Every backward ends in input_and_weight_grads: once the gradients
// of the pre-activations are known for all steps, the input and weight gradients are a few
// large matrix products over the whole sequence rather than T small ones.
#include "tinyddp/nn/rnn_layer.h"

#include <array>
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

// The hand-written backward through time is not itself recorded: a backward that builds a
// graph of the gradients (create_graph) stops here with an error, as PyTorch's cuDNN RNNs.
void check_once_differentiable(const FunctionCtx& ctx) {
  TDDP_CHECK(!tensor::GradMode::is_enabled(),
             "{}: double backward (create_graph) through LSTM, GRU and RNN layers is not supported: their backward "
             "through time is not differentiable",
             ctx.name());
}

// [T, N, K] -> [T * N, K]
Tensor rows(const Tensor& x) { return x.reshape({x.size(0) * x.size(1), x.size(2)}); }

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

struct LstmLayer : autograd::Function<LstmLayer> {
  static Tensor forward(FunctionCtx* ctx, const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                        const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh, bool reverse) {
    const int64_t steps = x.size(0), batch = x.size(1), hidden = h0.size(1);
    const Tensor xw = t::linear(x, w_ih, b_ih);  // [T, N, 4H], every step's input side at once
    const Tensor out = t::empty({steps + 1, batch, hidden}, t::TensorOptions(x.dtype()).device(x.device()));
    const Tensor gates = t::empty_like(xw);  // i, f, g, o after their activations
    const Tensor cells = t::empty({steps, batch, hidden}, t::TensorOptions(x.dtype()).device(x.device()));
    Tensor h = h0, c = c0;
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t time = time_at(s, steps, reverse);
      const Tensor pre = t::add(xw.select(0, time), t::linear(h, w_hh, b_hh));  // [N, 4H]
      const Tensor act = gates.select(0, time);
      act.copy_(t::sigmoid(pre));
      act.narrow(1, 2 * hidden, hidden).copy_(t::tanh(pre.narrow(1, 2 * hidden, hidden)));
      const Tensor i = act.narrow(1, 0, hidden), f = act.narrow(1, hidden, hidden),
                   g = act.narrow(1, 2 * hidden, hidden), o = act.narrow(1, 3 * hidden, hidden);
      c = f * c + i * g;
      h = o * t::tanh(c);
      cells.select(0, time).copy_(c);
      out.select(0, time).copy_(h);
    }
    out.select(0, steps).copy_(c);
    ctx->save_for_backward({x, h0, c0, w_ih, w_hh, gates, cells, out});
    ctx->saved_data["reverse"] = reverse;
    return out;
  }

  // grad [T + 1, N, H] (the h_t rows, then the last cell's) -> one gradient per argument
  static std::vector<Tensor> backward(FunctionCtx* ctx, const std::vector<Tensor>& grad_outputs) {
    check_once_differentiable(*ctx);
    const std::vector<Tensor> saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &h0 = saved[1], &c0 = saved[2], &w_ih = saved[3], &w_hh = saved[4], &gates = saved[5],
                 &cells = saved[6], &out = saved[7];
    const bool reverse = ctx->saved_data.get<bool>("reverse");
    const Tensor& grad = grad_outputs[0];
    const int64_t steps = x.size(0), hidden = h0.size(1);
    const Tensor dgates = t::empty_like(gates);  // of the four pre-activations
    Tensor dh = t::zeros_like(h0), dc = grad.select(0, steps);
    for (int64_t s = steps - 1; s >= 0; --s) {
      const int64_t time = time_at(s, steps, reverse);
      const Tensor act = gates.select(0, time), d = dgates.select(0, time);
      const Tensor i = act.narrow(1, 0, hidden), f = act.narrow(1, hidden, hidden),
                   g = act.narrow(1, 2 * hidden, hidden), o = act.narrow(1, 3 * hidden, hidden);
      const Tensor c_prev = s == 0 ? c0 : cells.select(0, time_at(s - 1, steps, reverse));
      const Tensor tanh_c = t::tanh(cells.select(0, time));
      dh = dh + grad.select(0, time);
      // h = o tanh(c): do = dh tanh(c), and dh reaches c through tanh
      d.narrow(1, 3 * hidden, hidden).copy_(dh * tanh_c * o * (1.0 - o));
      dc = dc + dh * o * (1.0 - tanh_c * tanh_c);
      // c = f c_prev + i g
      d.narrow(1, 0, hidden).copy_(dc * g * i * (1.0 - i));
      d.narrow(1, hidden, hidden).copy_(dc * c_prev * f * (1.0 - f));
      d.narrow(1, 2 * hidden, hidden).copy_(dc * i * (1.0 - g * g));
      dc = dc * f;
      dh = t::mm(d, w_hh);  // [N, 4H] x [4H, H]
    }
    const Tensor hprev = previous_hidden(out.narrow(0, 0, steps), h0, reverse);
    const LayerGrads g = input_and_weight_grads(*ctx, 3, x, hprev, w_ih, dgates, dgates);
    const auto& needs = ctx->needs_input_grad;
    return {g.x, needs[1] ? dh : Tensor(), needs[2] ? dc : Tensor(), g.w_ih, g.w_hh, g.b_ih, g.b_hh, Tensor()};
  }
};

struct GruLayer : autograd::Function<GruLayer> {
  static Tensor forward(FunctionCtx* ctx, const Tensor& x, const Tensor& h0, const Tensor& w_ih, const Tensor& w_hh,
                        const Tensor& b_ih, const Tensor& b_hh, bool reverse) {
    const int64_t steps = x.size(0), batch = x.size(1), hidden = h0.size(1);
    const Tensor xw = t::linear(x, w_ih, b_ih);  // [T, N, 3H]
    const Tensor out = t::empty({steps, batch, hidden}, t::TensorOptions(x.dtype()).device(x.device()));
    const Tensor gates = t::empty_like(xw);      // r, z, n after their activations
    const Tensor hidden_n = t::empty_like(out);  // h w_hn^T + b_hn, which r scales
    Tensor h = h0;
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t time = time_at(s, steps, reverse);
      const Tensor hw = t::linear(h, w_hh, b_hh), xt = xw.select(0, time);  // [N, 3H]
      const Tensor act = gates.select(0, time);
      act.narrow(1, 0, 2 * hidden).copy_(t::sigmoid(xt.narrow(1, 0, 2 * hidden) + hw.narrow(1, 0, 2 * hidden)));
      const Tensor r = act.narrow(1, 0, hidden), z = act.narrow(1, hidden, hidden);
      const Tensor hn = hw.narrow(1, 2 * hidden, hidden);
      hidden_n.select(0, time).copy_(hn);
      const Tensor n = t::tanh(xt.narrow(1, 2 * hidden, hidden) + r * hn);
      act.narrow(1, 2 * hidden, hidden).copy_(n);
      h = n + z * (h - n);
      out.select(0, time).copy_(h);
    }
    ctx->save_for_backward({x, h0, w_ih, w_hh, gates, hidden_n, out});
    ctx->saved_data["reverse"] = reverse;
    return out;
  }

  // grad [T, N, H] -> one gradient per argument
  static std::vector<Tensor> backward(FunctionCtx* ctx, const std::vector<Tensor>& grad_outputs) {
    check_once_differentiable(*ctx);
    const std::vector<Tensor> saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &h0 = saved[1], &w_ih = saved[2], &w_hh = saved[3], &gates = saved[4],
                 &hidden_n = saved[5], &out = saved[6];
    const bool reverse = ctx->saved_data.get<bool>("reverse");
    const Tensor& grad = grad_outputs[0];
    const int64_t steps = x.size(0), hidden = h0.size(1);
    // The pre-activations differ on the two sides only in n's rows: x's side enters n as is,
    // the hidden side scaled by r.
    const Tensor dxw = t::empty_like(gates), dhw = t::empty_like(gates);
    Tensor dh = t::zeros_like(h0);
    for (int64_t s = steps - 1; s >= 0; --s) {
      const int64_t time = time_at(s, steps, reverse);
      const Tensor act = gates.select(0, time);
      const Tensor r = act.narrow(1, 0, hidden), z = act.narrow(1, hidden, hidden),
                   n = act.narrow(1, 2 * hidden, hidden);
      const Tensor h_prev = s == 0 ? h0 : out.select(0, time_at(s - 1, steps, reverse));
      dh = dh + grad.select(0, time);
      // h = n + z (h_prev - n) = (1 - z) n + z h_prev
      const Tensor dn = dh * (1.0 - z) * (1.0 - n * n);
      const Tensor dz = dh * (h_prev - n) * z * (1.0 - z);
      const Tensor dr = dn * hidden_n.select(0, time) * r * (1.0 - r);
      const Tensor dx_t = dxw.select(0, time), dh_t = dhw.select(0, time);
      dx_t.narrow(1, 0, hidden).copy_(dr);
      dx_t.narrow(1, hidden, hidden).copy_(dz);
      dx_t.narrow(1, 2 * hidden, hidden).copy_(dn);
      dh_t.narrow(1, 0, 2 * hidden).copy_(dx_t.narrow(1, 0, 2 * hidden));
      dh_t.narrow(1, 2 * hidden, hidden).copy_(dn * r);
      dh = dh * z + t::mm(dh_t, w_hh);  // [N, 3H] x [3H, H]
    }
    const Tensor hprev = previous_hidden(out, h0, reverse);
    const LayerGrads g = input_and_weight_grads(*ctx, 2, x, hprev, w_ih, dxw, dhw);
    return {g.x, ctx->needs_input_grad[1] ? dh : Tensor(), g.w_ih, g.w_hh, g.b_ih, g.b_hh, Tensor()};
  }
};

struct RnnLayer : autograd::Function<RnnLayer> {
  static Tensor forward(FunctionCtx* ctx, const Tensor& x, const Tensor& h0, const Tensor& w_ih, const Tensor& w_hh,
                        const Tensor& b_ih, const Tensor& b_hh, bool reverse, bool relu) {
    const int64_t steps = x.size(0);
    const Tensor xw = t::linear(x, w_ih, b_ih);  // [T, N, H]
    const Tensor out = t::empty_like(xw);
    Tensor h = h0;
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t time = time_at(s, steps, reverse);
      const Tensor pre = t::add(xw.select(0, time), t::linear(h, w_hh, b_hh));
      h = relu ? t::relu(pre) : t::tanh(pre);
      out.select(0, time).copy_(h);
    }
    ctx->save_for_backward({x, h0, w_ih, w_hh, out});
    ctx->saved_data["reverse"] = reverse;
    ctx->saved_data["relu"] = relu;
    return out;
  }

  // grad [T, N, H] -> one gradient per argument
  static std::vector<Tensor> backward(FunctionCtx* ctx, const std::vector<Tensor>& grad_outputs) {
    check_once_differentiable(*ctx);
    const std::vector<Tensor> saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &h0 = saved[1], &w_ih = saved[2], &w_hh = saved[3], &out = saved[4];
    const bool reverse = ctx->saved_data.get<bool>("reverse"), relu = ctx->saved_data.get<bool>("relu");
    const Tensor& grad = grad_outputs[0];
    const int64_t steps = x.size(0);
    const Tensor dpre = t::empty_like(out);
    Tensor dh = t::zeros_like(h0);
    for (int64_t s = steps - 1; s >= 0; --s) {
      const int64_t time = time_at(s, steps, reverse);
      const Tensor h = out.select(0, time);
      dh = dh + grad.select(0, time);
      // relu passes where its output is positive (PyTorch's rule at 0); tanh' = 1 - h^2
      const Tensor d = relu ? dh * t::gt(h, 0.0).to(h.dtype()) : dh * (1.0 - h * h);
      dpre.select(0, time).copy_(d);
      dh = t::mm(d, w_hh);  // [N, H] x [H, H]
    }
    const LayerGrads g = input_and_weight_grads(*ctx, 2, x, previous_hidden(out, h0, reverse), w_ih, dpre, dpre);
    return {g.x, ctx->needs_input_grad[1] ? dh : Tensor(), g.w_ih, g.w_hh, g.b_ih, g.b_hh, Tensor(), Tensor()};
  }
};

}  // namespace

Tensor lstm_layer(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh,
                  const Tensor& b_ih, const Tensor& b_hh, bool reverse) {
  return LstmLayer::apply(x, h0, c0, w_ih, w_hh, b_ih, b_hh, reverse);
}

Tensor gru_layer(const Tensor& x, const Tensor& h0, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                 const Tensor& b_hh, bool reverse) {
  return GruLayer::apply(x, h0, w_ih, w_hh, b_ih, b_hh, reverse);
}

Tensor rnn_layer(const Tensor& x, const Tensor& h0, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                 const Tensor& b_hh, bool reverse, const std::string& nonlinearity) {
  TDDP_CHECK(nonlinearity == "tanh" || nonlinearity == "relu",
             "RNN: unknown nonlinearity '{}' (expected 'tanh' or 'relu')", nonlinearity);
  return RnnLayer::apply(x, h0, w_ih, w_hh, b_ih, b_hh, reverse, nonlinearity == "relu");
}

}  // namespace tinyddp::nn
