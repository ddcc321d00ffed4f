// Optimizers: SGD, Adam, AdamW with PyTorch 1.13's update rules (torch.optim, the per-tensor loop that
// foreach=False runs), on the parameters a Module lists (Parameter: name, value, grad, version).
//
//   SGD    g = grad (+ weight_decay * p)
//          momentum != 0:  buf = g on a parameter's first step, else buf = momentum * buf + (1 - dampening) * g
//                          g = nesterov ? g + momentum * buf : buf
//          p -= lr * g
//   Adam   t += 1 (per parameter);  g = grad (+ weight_decay * p: L2, added to the gradient)
//          m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g * g
//          v_max = max(v_max, v) with amsgrad (then used in place of v below)
//          p += -(lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
//   AdamW  as Adam with weight_decay = 0, after p *= 1 - lr * weight_decay (decoupled weight decay)
//
// Arithmetic follows PyTorch's float32 kernels operation by operation: scalars (lr / bias corrections,
// 1 - beta1, ...) are computed in double and rounded to float once, and `x.add_(y, alpha=a)` is the fused
// a * y + x that PyTorch's vectorised CPU kernel computes (std::fma), so results agree with PyTorch to
// within a few float32 ulps (tests/unit/test_optim.cpp says how close).
//
// A parameter whose grad is empty is skipped: its value, its version and its state stay as they are
// (PyTorch skips grad None; an Adam parameter's step count then lags the others, as in PyTorch).
// Every updated parameter is touch()ed, so packed copies of its weight are refreshed.
// Non-finite gradients are not checked here (they propagate, as in PyTorch): clip_grad_norm (clip.hpp)
// is where a trainer sees them.
//
// State (state() / load_state()): an io::Value bundle keyed by parameter name, one member per parameter
// that has state (PyTorch's optimizer.state, keyed by name instead of position):
//   SGD with momentum   {"<name>": {"momentum_buffer": [same shape as the parameter]}}
//   Adam / AdamW        {"<name>": {"step": scalar, "exp_avg": [..], "exp_avg_sq": [..],
//                                   "max_exp_avg_sq": [..] (amsgrad only)}}
//   SGD without momentum keeps no state: {}.
// The step count is a float32 scalar (PyTorch's 1.13 state["step"] is one too), exact up to 2^24 steps;
// state() refuses a larger count rather than round it. The hyperparameters are not in the state:
// they are the optimizer's options, which the caller's checkpoint records. Saving, writing the JSON,
// reading it and restoring into a fresh optimizer over the same parameter values gives the same bits
// on every later step as never having stopped (the test checks it).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/io/value.hpp"
#include "attnkit/tensor/parameter.hpp"

namespace attnkit::train {

// PyTorch's defaults, except SGD's lr (required there).
struct SgdOptions {
  double lr = 0.01;            // >= 0
  double momentum = 0.0;       // >= 0
  double dampening = 0.0;      // any finite value (PyTorch checks none); must be 0 with nesterov
  double weight_decay = 0.0;   // >= 0 (L2: weight_decay * p added to the gradient)
  bool nesterov = false;       // needs momentum > 0 and dampening == 0 (PyTorch refuses otherwise)
};

struct AdamOptions {
  double lr = 1e-3;            // >= 0
  double beta1 = 0.9;          // in [0, 1)
  double beta2 = 0.999;        // in [0, 1)
  double eps = 1e-8;           // >= 0
  double weight_decay = 0.0;   // >= 0: Adam adds weight_decay * p to the gradient; AdamW decays p itself
  bool amsgrad = false;
};

// AdamW's options: Adam's, with PyTorch's AdamW default weight_decay = 0.01.
struct AdamWOptions : AdamOptions {
  AdamWOptions() { weight_decay = 1e-2; }
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // "SGD", "Adam", "AdamW": the prefix of every message.
  std::string_view name() const { return name_; }
  const std::vector<Parameter*>& parameters() const { return params_; }

  // One update of every parameter with a non-empty grad (see the top of this file).
  // Throws attnkit::Error, before changing anything, if a grad's shape differs from its value's.
  virtual void step() = 0;
  // Every non-empty grad filled with zeros (PyTorch 1.13's zero_grad(set_to_none=False)); an empty
  // grad stays empty, so its parameter stays skipped.
  void zero_grad();

  // The learning rate of the next step(); schedules set it before each step. Must be >= 0 and finite.
  double lr() const { return lr_; }
  void set_lr(double lr);

  // Saves / restores the per-parameter state (the bundle described at the top of this file).
  // load_state() checks the whole bundle before changing anything: every member names a parameter of
  // this optimizer, has exactly the members this optimizer keeps, each of the parameter's shape.
  virtual io::Value state() const = 0;
  virtual void load_state(const io::Value& state) = 0;

 protected:
  // Refuses null pointers and duplicate names (the state is keyed by name).
  Optimizer(std::string_view name, std::vector<Parameter*> params, double lr);
  // The parameters step() updates: those with a non-empty grad, whose shapes were checked.
  std::vector<size_t> parameters_to_update() const;
  // The index of the parameter called `member` (for load_state), or an error naming it.
  size_t index_of(const std::string& member) const;

  std::string name_;
  std::vector<Parameter*> params_;
  double lr_;
};

class Sgd : public Optimizer {
 public:
  // Throws attnkit::Error naming the option and its value for a bad hyperparameter.
  Sgd(std::vector<Parameter*> params, const SgdOptions& options);
  const SgdOptions& options() const { return options_; }
  void step() override;
  io::Value state() const override;
  void load_state(const io::Value& state) override;

 private:
  SgdOptions options_;
  std::vector<Tensor> momentum_buffer_;  // per parameter; empty until its first step (momentum != 0)
};

// Adam, or AdamW with `decoupled` (the AdamW class below sets it).
class Adam : public Optimizer {
 public:
  Adam(std::vector<Parameter*> params, const AdamOptions& options);
  const AdamOptions& options() const { return options_; }
  void step() override;
  io::Value state() const override;
  void load_state(const io::Value& state) override;

 protected:
  Adam(std::string_view name, std::vector<Parameter*> params, const AdamOptions& options, bool decoupled);

 private:
  struct State {
    int64_t step = 0;  // 0: no state yet
    Tensor exp_avg, exp_avg_sq, max_exp_avg_sq;
  };
  AdamOptions options_;
  bool decoupled_;
  std::vector<State> state_;
};

class AdamW : public Adam {
 public:
  AdamW(std::vector<Parameter*> params, const AdamWOptions& options = {});
};

// The optimizers seq2seq-train offers, by name ("sgd", "adam", "adamw"); each with its defaults and `lr`.
enum class OptimizerKind { Sgd, Adam, AdamW };
OptimizerKind parse_optimizer_kind(std::string_view name);
std::string_view optimizer_kind_name(OptimizerKind kind);
std::unique_ptr<Optimizer> make_optimizer(OptimizerKind kind, std::vector<Parameter*> params, double lr);

}  // namespace attnkit::train
