// ReduceLROnPlateau, as torch.optim.lr_scheduler.ReduceLROnPlateau: step(metric) after each
// evaluation; when the metric has not improved for more than `patience` steps, every group's
// rate is multiplied by `factor` (not below its min_lr, and not at all when the change would be
// smaller than eps), then `cooldown` steps pass before bad steps count again. "Improved" is
// mode min (lower) or max (higher) beyond a threshold, relative ("rel": best * (1 -+
// threshold)) or absolute ("abs": best -+ threshold). PyTorch's defaults.
//
//   nn::ReduceLROnPlateau plateau(opt, nn::PlateauOptions().patience(2));
//   for (epoch ...) { train(); plateau.step(validation_loss); }
#pragma once

#include <string>
#include <vector>

#include "tinyddp/nn/optim.h"

namespace tinyddp::nn {

struct PlateauOptions {
  PlateauOptions& mode(std::string v) {
    mode_ = std::move(v);
    return *this;
  }
  PlateauOptions& factor(double v) {
    factor_ = v;
    return *this;
  }
  PlateauOptions& patience(int64_t v) {
    patience_ = v;
    return *this;
  }
  PlateauOptions& threshold(double v) {
    threshold_ = v;
    return *this;
  }
  PlateauOptions& threshold_mode(std::string v) {
    threshold_mode_ = std::move(v);
    return *this;
  }
  PlateauOptions& cooldown(int64_t v) {
    cooldown_ = v;
    return *this;
  }
  PlateauOptions& min_lr(double v) {  // one for every group (min_lrs: one per group)
    min_lrs_ = {v};
    return *this;
  }
  PlateauOptions& min_lrs(std::vector<double> v) {
    min_lrs_ = std::move(v);
    return *this;
  }
  PlateauOptions& eps(double v) {
    eps_ = v;
    return *this;
  }
  const std::string& mode() const { return mode_; }
  double factor() const { return factor_; }
  int64_t patience() const { return patience_; }
  double threshold() const { return threshold_; }
  const std::string& threshold_mode() const { return threshold_mode_; }
  int64_t cooldown() const { return cooldown_; }
  const std::vector<double>& min_lrs() const { return min_lrs_; }
  double eps() const { return eps_; }

 private:
  std::string mode_ = "min";
  double factor_ = 0.1;
  int64_t patience_ = 10;
  double threshold_ = 1e-4;
  std::string threshold_mode_ = "rel";
  int64_t cooldown_ = 0;
  std::vector<double> min_lrs_ = {0.0};
  double eps_ = 1e-8;
};

class ReduceLROnPlateau {
 public:
  // Throws naming the option out of range (factor >= 1, a mode or threshold_mode not known,
  // min_lrs neither one value nor one per group).
  explicit ReduceLROnPlateau(Optimizer& optimizer, PlateauOptions options = {});
  void step(double metric);
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  int64_t last_epoch() const { return last_epoch_; }
  // best, num_bad_epochs, cooldown_counter, last_epoch (float64 and int64 scalars), to resume.
  OrderedDict<Tensor> state_dict() const;
  void load_state_dict(const OrderedDict<Tensor>& state);

 private:
  bool is_better(double current) const;

  Optimizer& optimizer_;
  PlateauOptions options_;
  std::vector<double> min_lrs_;  // one per group
  double best_;
  int64_t num_bad_epochs_ = 0, cooldown_counter_ = 0, last_epoch_ = 0;
  std::vector<double> last_lr_;
};

}  // namespace tinyddp::nn
