// SGD, Adam, AdamW: PyTorch 1.13's torch.optim update rules (optimizer.hpp has the formulas).
// Each update is one plain loop over a parameter's elements, in PyTorch's order of float32 operations:
// `x.add_(y, alpha=a)` is std::fma(a, y, x) (PyTorch's vectorised add is fmadd), `x.addcmul_(a, b, value=s)`
// is std::fma(s * a, b, x) (its build contracts x + s * a * b), `x.addcdiv_(a, b, value=s)` is x + s * a / b. The loops are bandwidth-bound and
// vectorise (this file is compiled with -fno-math-errno so that std::sqrt becomes vsqrtps, and with
// -ffp-contract=off so that the compiler fuses no multiply-add that PyTorch does not: lib/CMakeLists.txt).
#include "attnkit/train/optimizer.hpp"

#include <cmath>
#include <unordered_set>
#include <utility>

#include "attnkit/tensor/enum_names.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::train {

namespace {

// The largest step count a float32 holds exactly (state()'s "step" is a float32 scalar).
constexpr int64_t kMaxExactStep = int64_t{1} << 24;

void check_non_negative(std::string_view opt, std::string_view option, double value) {
  AK_CHECK(std::isfinite(value) && value >= 0.0, "{}: {} must be >= 0 and finite, got {}", opt, option, value);
}

void check_beta(std::string_view opt, std::string_view option, double value) {
  AK_CHECK(value >= 0.0 && value < 1.0, "{}: {} must be in [0, 1), got {}", opt, option, value);
}

// The members of one parameter's state: each a tensor of the parameter's shape ("step": a scalar).
// Refuses a member that is not one of `names`, and a missing one.
std::vector<const Tensor*> state_members(std::string_view what, const Parameter& p, const io::Value& entry,
                                         const std::vector<std::string_view>& names) {
  AK_CHECK(entry.is_bundle(), "{}: the state of '{}' is not a bundle", what, p.name);
  std::string expected;
  for (std::string_view n : names) expected += (expected.empty() ? "" : ", ") + std::string(n);
  for (const auto& [member, value] : entry.members()) {
    bool known = false;
    for (std::string_view n : names) known = known || member == n;
    AK_CHECK(known, "{}: the state of '{}' has an unexpected member '{}' (expected {})", what, p.name, member,
             expected);
  }
  std::vector<const Tensor*> out;
  for (std::string_view n : names) {
    const io::Value* v = entry.find(n);
    AK_CHECK(v, "{}: the state of '{}' has no {} (expected {})", what, p.name, n, expected);
    AK_CHECK(v->is_tensor(), "{}: {} of '{}' is not a tensor{}{}", what, n, p.name, v->why().empty() ? "" : ": ",
             v->why());
    const Tensor& t = v->tensor();
    if (n == "step") {
      AK_CHECK(t.rank() == 0, "{}: step of '{}' has shape {}, expected a scalar", what, p.name, t.shape_str());
      const float s = t[0];
      AK_CHECK(std::isfinite(s) && s == std::floor(s) && s >= 1.0f && s <= static_cast<float>(kMaxExactStep),
               "{}: step of '{}' is {}, expected a whole number in [1, {}]", what, p.name, s, kMaxExactStep);
    } else {
      AK_CHECK(t.shape() == p.value.shape(), "{}: {} of '{}' has shape {}, expected {} (the parameter's)", what, n,
               p.name, t.shape_str(), p.value.shape_str());
    }
    out.push_back(&t);
  }
  return out;
}

}  // namespace

// ------------------------------------------------------------------------------------------- Optimizer

Optimizer::Optimizer(std::string_view name, std::vector<Parameter*> params, double lr)
    : name_(name), params_(std::move(params)), lr_(0.0) {
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    AK_CHECK(params_[i] != nullptr, "{}: parameter {} is a null pointer", name_, i);
    AK_CHECK(seen.insert(params_[i]->name).second,
             "{}: two parameters are called '{}' (the optimizer's state is keyed by name)", name_, params_[i]->name);
  }
  set_lr(lr);
}

void Optimizer::set_lr(double lr) {
  check_non_negative(name_, "lr", lr);
  lr_ = lr;
}

void Optimizer::zero_grad() {
  for (Parameter* p : params_) p->zero_grad();
}

std::vector<size_t> Optimizer::parameters_to_update() const {
  std::vector<size_t> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Parameter& p = *params_[i];
    if (p.grad.empty()) continue;
    AK_CHECK(p.grad.shape() == p.value.shape(), "{}: the grad of '{}' has shape {}, expected {} (the value's)", name_,
             p.name, p.grad.shape_str(), p.value.shape_str());
    out.push_back(i);
  }
  return out;
}

size_t Optimizer::index_of(const std::string& member) const {
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i]->name == member) return i;
  fail("{} state: '{}' is not a parameter of this optimizer", name_, member);
}

// ------------------------------------------------------------------------------------------- SGD

Sgd::Sgd(std::vector<Parameter*> params, const SgdOptions& options)
    : Optimizer("SGD", std::move(params), options.lr), options_(options) {
  check_non_negative(name_, "momentum", options.momentum);
  AK_CHECK(std::isfinite(options.dampening), "SGD: dampening must be finite, got {}", options.dampening);
  check_non_negative(name_, "weight_decay", options.weight_decay);
  if (options.nesterov) {
    AK_CHECK(options.momentum > 0.0, "SGD: nesterov needs momentum > 0, got momentum {}", options.momentum);
    AK_CHECK(options.dampening == 0.0, "SGD: nesterov needs dampening 0, got dampening {}", options.dampening);
  }
  momentum_buffer_.resize(params_.size());
}

void Sgd::step() {
  const bool decay = options_.weight_decay != 0.0;
  const bool momentum = options_.momentum != 0.0;
  const bool nesterov = options_.nesterov;
  const float wd = static_cast<float>(options_.weight_decay);
  const float mom = static_cast<float>(options_.momentum);
  const float one_minus_dampening = static_cast<float>(1.0 - options_.dampening);
  const float neg_lr = static_cast<float>(-lr_);
  for (size_t k : parameters_to_update()) {
    Parameter& param = *params_[k];
    const int64_t n = param.value.numel();
    float* p = param.value.data();
    const float* g = param.grad.data();
    if (!momentum) {
      for (int64_t i = 0; i < n; ++i) {
        float d = g[i];
        if (decay) d = std::fma(wd, p[i], d);  // d_p = d_p.add(param, alpha=weight_decay)
        p[i] = std::fma(neg_lr, d, p[i]);      // param.add_(d_p, alpha=-lr)
      }
    } else {
      Tensor& buffer = momentum_buffer_[k];
      const bool first = buffer.empty();
      if (first) buffer = Tensor(param.value.shape());
      float* b = buffer.data();
      for (int64_t i = 0; i < n; ++i) {
        float d = g[i];
        if (decay) d = std::fma(wd, p[i], d);
        // buf = clone(d_p) on the first step, else buf.mul_(momentum).add_(d_p, alpha=1 - dampening)
        b[i] = first ? d : std::fma(one_minus_dampening, d, b[i] * mom);
        d = nesterov ? std::fma(mom, b[i], d) : b[i];  // d_p = d_p.add(buf, alpha=momentum) or d_p = buf
        p[i] = std::fma(neg_lr, d, p[i]);
      }
    }
    param.touch();
  }
}

io::Value Sgd::state() const {
  io::Value out = io::Value::bundle();
  for (size_t k = 0; k < params_.size(); ++k) {
    if (momentum_buffer_[k].empty()) continue;
    out.set(params_[k]->name, io::Value::bundle().set("momentum_buffer", momentum_buffer_[k]));
  }
  return out;
}

void Sgd::load_state(const io::Value& state) {
  AK_CHECK(state.is_bundle(), "SGD state: expected a bundle of per-parameter states, got {}",
           state.is_tensor() ? "a tensor of shape " + state.tensor().shape_str() : "a non-tensor value");
  std::vector<Tensor> buffers(params_.size());
  for (const auto& [member, entry] : state.members()) {
    const size_t k = index_of(member);
    AK_CHECK(options_.momentum != 0.0,
             "SGD state: '{}' has state, but SGD without momentum keeps none (was it saved by another optimizer?)",
             member);
    buffers[k] = *state_members("SGD state", *params_[k], entry, {"momentum_buffer"})[0];
  }
  momentum_buffer_ = std::move(buffers);
}

// ------------------------------------------------------------------------------------------- Adam, AdamW

Adam::Adam(std::vector<Parameter*> params, const AdamOptions& options)
    : Adam("Adam", std::move(params), options, false) {}

AdamW::AdamW(std::vector<Parameter*> params, const AdamWOptions& options)
    : Adam("AdamW", std::move(params), options, true) {}

Adam::Adam(std::string_view name, std::vector<Parameter*> params, const AdamOptions& options, bool decoupled)
    : Optimizer(name, std::move(params), options.lr), options_(options), decoupled_(decoupled) {
  check_beta(name_, "beta1", options.beta1);
  check_beta(name_, "beta2", options.beta2);
  check_non_negative(name_, "eps", options.eps);
  check_non_negative(name_, "weight_decay", options.weight_decay);
  state_.resize(params_.size());
}

namespace {

// The float32 scalars of one Adam step (in double in PyTorch's Python, rounded to float by its kernels).
struct AdamScalars {
  float wd, decay, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, neg_step_size, bias_correction2_sqrt;
};

// One parameter's update, a branch-free loop per variant (so that it vectorises).
template <bool kDecoupled, bool kL2, bool kAmsgrad>
void adam_update(int64_t n, float* p, const float* g, float* m, float* v, float* vmax, const AdamScalars& k) {
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i];
    float pi = p[i];
    if constexpr (kDecoupled) pi = pi * k.decay;      // param.mul_(1 - lr * weight_decay)
    if constexpr (kL2) gi = std::fma(k.wd, pi, gi);  // grad = grad.add(param, alpha=weight_decay)
    const float mi = std::fma(k.one_minus_beta1, gi, m[i] * k.beta1);  // exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
    // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2): PyTorch's build contracts
    // self + value * t1 * t2 into fma(value * t1, t2, self) (the fixtures match only so)
    const float vi = std::fma(k.one_minus_beta2 * gi, gi, v[i] * k.beta2);
    m[i] = mi;
    v[i] = vi;
    float second = vi;
    if constexpr (kAmsgrad) {  // torch.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq): NaN propagates
      const float mx = vi != vi ? vi : std::max(vmax[i], vi);
      vmax[i] = mx;
      second = mx;
    }
    const float denom = std::sqrt(second) / k.bias_correction2_sqrt + k.eps;  // (v.sqrt() / bc2_sqrt).add_(eps)
    p[i] = pi + k.neg_step_size * mi / denom;  // param.addcdiv_(exp_avg, denom, value=-step_size)
  }
}

}  // namespace

void Adam::step() {
  const AdamOptions& o = options_;
  const bool l2 = !decoupled_ && o.weight_decay != 0.0;
  const float wd = static_cast<float>(o.weight_decay);
  const float decay = static_cast<float>(1.0 - lr_ * o.weight_decay);  // AdamW: param.mul_(1 - lr * weight_decay)
  const float beta1 = static_cast<float>(o.beta1), one_minus_beta1 = static_cast<float>(1.0 - o.beta1);
  const float beta2 = static_cast<float>(o.beta2), one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
  const float eps = static_cast<float>(o.eps);
  const bool amsgrad = o.amsgrad;
  for (size_t k : parameters_to_update()) {
    Parameter& param = *params_[k];
    State& s = state_[k];
    if (s.step == 0) {
      s.exp_avg = Tensor(param.value.shape());
      s.exp_avg_sq = Tensor(param.value.shape());
      if (amsgrad) s.max_exp_avg_sq = Tensor(param.value.shape());
    }
    s.step += 1;
    // In double, as PyTorch's Python scalars: bias_correction1 = 1 - beta1 ** step, ...
    const double t = static_cast<double>(s.step);
    const double bias_correction1 = 1.0 - std::pow(o.beta1, t);
    const double bias_correction2 = 1.0 - std::pow(o.beta2, t);
    const float neg_step_size = static_cast<float>(-(lr_ / bias_correction1));
    const float bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));

    const AdamScalars sc{wd, decay, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, neg_step_size, bias_correction2_sqrt};
    float* vmax = amsgrad ? s.max_exp_avg_sq.data() : nullptr;
    const int64_t n = param.value.numel();
    float* p = param.value.data();
    const float* g = param.grad.data();
    float* m = s.exp_avg.data();
    float* v = s.exp_avg_sq.data();
    if (decoupled_) {
      if (amsgrad) adam_update<true, false, true>(n, p, g, m, v, vmax, sc);
      else adam_update<true, false, false>(n, p, g, m, v, vmax, sc);
    } else if (l2) {
      if (amsgrad) adam_update<false, true, true>(n, p, g, m, v, vmax, sc);
      else adam_update<false, true, false>(n, p, g, m, v, vmax, sc);
    } else {
      if (amsgrad) adam_update<false, false, true>(n, p, g, m, v, vmax, sc);
      else adam_update<false, false, false>(n, p, g, m, v, vmax, sc);
    }
    param.touch();
  }
}

io::Value Adam::state() const {
  io::Value out = io::Value::bundle();
  for (size_t k = 0; k < params_.size(); ++k) {
    const State& s = state_[k];
    if (s.step == 0) continue;
    AK_CHECK(s.step <= kMaxExactStep, "{} state: '{}' has taken {} steps, more than a float32 step count holds ({})",
             name_, params_[k]->name, s.step, kMaxExactStep);
    io::Value entry = io::Value::bundle();
    entry.set("step", Tensor::scalar(static_cast<float>(s.step)));
    entry.set("exp_avg", s.exp_avg);
    entry.set("exp_avg_sq", s.exp_avg_sq);
    if (options_.amsgrad) entry.set("max_exp_avg_sq", s.max_exp_avg_sq);
    out.set(params_[k]->name, std::move(entry));
  }
  return out;
}

void Adam::load_state(const io::Value& state) {
  const std::string what = name_ + " state";
  AK_CHECK(state.is_bundle(), "{}: expected a bundle of per-parameter states, got {}", what,
           state.is_tensor() ? "a tensor of shape " + state.tensor().shape_str() : "a non-tensor value");
  std::vector<std::string_view> names = {"step", "exp_avg", "exp_avg_sq"};
  if (options_.amsgrad) names.push_back("max_exp_avg_sq");
  std::vector<State> loaded(params_.size());
  for (const auto& [member, entry] : state.members()) {
    const size_t k = index_of(member);
    std::vector<const Tensor*> t = state_members(what, *params_[k], entry, names);
    State& s = loaded[k];
    s.step = static_cast<int64_t>((*t[0])[0]);
    s.exp_avg = *t[1];
    s.exp_avg_sq = *t[2];
    if (options_.amsgrad) s.max_exp_avg_sq = *t[3];
  }
  state_ = std::move(loaded);
}

namespace {

constexpr EnumName<OptimizerKind> kOptimizerNames[] = {
    {OptimizerKind::Sgd, "sgd"}, {OptimizerKind::Adam, "adam"}, {OptimizerKind::AdamW, "adamw"}};

}  // namespace

OptimizerKind parse_optimizer_kind(std::string_view name) {
  if (const std::optional<OptimizerKind> kind = parse_name(kOptimizerNames, name)) return *kind;
  fail("unknown optimizer \"{}\" (expected {})", name, names_or(kOptimizerNames));
}

std::string_view optimizer_kind_name(OptimizerKind kind) { return name_of(kOptimizerNames, kind); }

std::unique_ptr<Optimizer> make_optimizer(OptimizerKind kind, std::vector<Parameter*> params, double lr) {
  switch (kind) {
    case OptimizerKind::Sgd: {
      SgdOptions o;
      o.lr = lr;
      return std::make_unique<Sgd>(std::move(params), o);
    }
    case OptimizerKind::Adam: {
      AdamOptions o;
      o.lr = lr;
      return std::make_unique<Adam>(std::move(params), o);
    }
    case OptimizerKind::AdamW: {
      AdamWOptions o;
      o.lr = lr;
      return std::make_unique<AdamW>(std::move(params), o);
    }
  }
  fail("optimizer: unknown kind");
}

}  // namespace attnkit::train
