// Adamax, NAdam and RAdam, as torch.optim's, following their single-tensor code paths operation
// for operation, with their defaults and their state under PyTorch's names ("step", "exp_avg",
// "exp_avg_sq" or "exp_inf", NAdam's "mu_product"). Each keeps Adam's first moment and a
// second statistic of the gradient; they differ in how a step is taken from the two:
//   Adamax: p -= lr / (1 - beta1^t) * m / u, with u = max(beta2 u, |g| + eps) (an infinity norm)
//   NAdam:  Nesterov momentum inside Adam, with a momentum schedule mu_t (momentum_decay)
//   RAdam:  Adam's step times a rectification term once the variance estimate is reliable
//           (rho_t > 5), plain momentum SGD before
#pragma once

#include "tinyddp/nn/optim.h"

namespace tinyddp::nn {

// The options the three share (Self: the options type, so that the setters chain as it).
template <class Self>
struct MomentOptions {
  explicit MomentOptions(double lr) : lr_(lr) {}
  Self& lr(double v) { return set(lr_, v); }
  Self& betas(double beta1, double beta2) {
    beta1_ = beta1;
    return set(beta2_, beta2);
  }
  Self& eps(double v) { return set(eps_, v); }
  Self& weight_decay(double v) { return set(weight_decay_, v); }
  Self& maximize(bool v) { return set(maximize_, v); }
  double lr() const { return lr_; }
  double beta1() const { return beta1_; }
  double beta2() const { return beta2_; }
  double eps() const { return eps_; }
  double weight_decay() const { return weight_decay_; }
  bool maximize() const { return maximize_; }

 protected:
  template <class T>
  Self& set(T& field, T v) {
    field = v;
    return static_cast<Self&>(*this);
  }

 private:
  double lr_, beta1_ = 0.9, beta2_ = 0.999, eps_ = 1e-8, weight_decay_ = 0;
  bool maximize_ = false;
};

struct AdamaxOptions : MomentOptions<AdamaxOptions> {
  explicit AdamaxOptions(double lr = 2e-3) : MomentOptions(lr) {}
};

struct NAdamOptions : MomentOptions<NAdamOptions> {
  explicit NAdamOptions(double lr = 2e-3) : MomentOptions(lr) {}
  // psi in mu_t = beta1 (1 - 0.96^(t psi) / 2).
  NAdamOptions& momentum_decay(double v) { return set(momentum_decay_, v); }
  // As PyTorch 2's decoupled_weight_decay=True: decay the weights (AdamW's way), not the gradient.
  NAdamOptions& decoupled_weight_decay(bool v) { return set(decoupled_, v); }
  double momentum_decay() const { return momentum_decay_; }
  bool decoupled_weight_decay() const { return decoupled_; }

 private:
  double momentum_decay_ = 4e-3;
  bool decoupled_ = false;
};

struct RAdamOptions : MomentOptions<RAdamOptions> {
  explicit RAdamOptions(double lr = 1e-3) : MomentOptions(lr) {}
  RAdamOptions& decoupled_weight_decay(bool v) { return set(decoupled_, v); }
  bool decoupled_weight_decay() const { return decoupled_; }

 private:
  bool decoupled_ = false;
};

// What the three keep per parameter, and its state_dict.
class MomentOptimizer : public Optimizer {
 public:
  using Optimizer::step;
  // Every parameter with a gradient: its state advanced, its gradient negated (maximize) and
  // decayed (an L2 term, or the weights decayed when decoupled), then the derived update.
  void step() override;
  OrderedDict<Tensor> state_dict() const override;
  void load_state_dict(const OrderedDict<Tensor>& state) override;

 protected:
  struct State {
    int64_t step = 0;
    Tensor exp_avg, second;   // second: exp_avg_sq (NAdam, RAdam) or exp_inf (Adamax)
    float mu_product = 1.0f;  // NAdam: the product of the mu_t so far (float32, as PyTorch's)
  };
  // second_name: the second statistic's state key; mu_product: whether it keeps one (NAdam).
  MomentOptimizer(std::vector<ParamGroup> groups, std::string name, double lr, double weight_decay, double beta1,
                  double beta2, double eps, bool maximize, bool decoupled_weight_decay, std::string second_name,
                  bool mu_product = false);
  void params_added() override { state_.resize(params_.size()); }
  // One parameter's step from its state (already counted) and its gradient (already decayed);
  // lr and beta1 are its group's.
  virtual void update(const Tensor& p, State& s, const Tensor& grad, double lr, double beta1) = 0;

  std::vector<State> state_;

 private:
  bool maximize_, decoupled_weight_decay_;
  std::string second_name_;
  bool has_mu_product_;
};

class Adamax : public MomentOptimizer {
 public:
  Adamax(std::vector<Tensor> params, AdamaxOptions options = AdamaxOptions());
  Adamax(std::vector<ParamGroup> groups, AdamaxOptions options = AdamaxOptions());
  const AdamaxOptions& defaults() const { return options_; }

 protected:
  void update(const Tensor& p, State& s, const Tensor& grad, double lr, double beta1) override;

 private:
  AdamaxOptions options_;
};

class NAdam : public MomentOptimizer {
 public:
  NAdam(std::vector<Tensor> params, NAdamOptions options = NAdamOptions());
  NAdam(std::vector<ParamGroup> groups, NAdamOptions options = NAdamOptions());
  const NAdamOptions& defaults() const { return options_; }

 protected:
  void update(const Tensor& p, State& s, const Tensor& grad, double lr, double beta1) override;

 private:
  NAdamOptions options_;
};

class RAdam : public MomentOptimizer {
 public:
  RAdam(std::vector<Tensor> params, RAdamOptions options = RAdamOptions());
  RAdam(std::vector<ParamGroup> groups, RAdamOptions options = RAdamOptions());
  const RAdamOptions& defaults() const { return options_; }

 protected:
  void update(const Tensor& p, State& s, const Tensor& grad, double lr, double beta1) override;

 private:
  RAdamOptions options_;
};

}  // namespace tinyddp::nn
