// Recurrent layers: the module's runs (recurrent.hpp): the derived layout of each layer and direction,
// kept in a DerivedSlot, and the kernels of the recurrent stack (ops/recurrent_stack.hpp) on it.
// Legend: N batch, T steps, D input size, H hidden size, L layers, G gates, dirs 1 or 2.
#include "attnkit/nn/recurrent.hpp"

#include "attnkit/ops/recurrent_packed.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::nn {

ops::RecurrentWeights Recurrent::weights() const {
  AK_CHECK(!params_.empty() && packed_.size() == params_.size(), "recurrent: the model was moved from");
  ops::RecurrentWeights w{config_, {}};
  w.directions.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const DirectionParams& p = params_[i];
    std::shared_ptr<const ops::RecurrentPacked> packed =
        packed_[i].get({&p.w_ih, &p.w_hh, &p.b_ih, &p.b_hh}, [&] {
          check_parameters();  // a caller may have changed a value in place
          return ops::pack_recurrent_direction(config_.cell, config_.hidden_size, p.w_ih.value, p.w_hh.value,
                                               p.b_ih.value, p.b_hh.value);
        });
    ops::RecurrentDirection d{&p.w_ih.value, &p.w_hh.value, std::move(packed), nullptr, nullptr};
    if (i < precision_ih_.size()) {
      auto lowp = [&](const Parameter& param, ops::Precision precision, const DerivedSlot<ops::LowpWeights>& slot) {
        return precision == ops::Precision::Fp32
                   ? nullptr
                   : slot.get({&param}, [&] {
                       return ops::make_recurrent_lowp(config_.cell, config_.hidden_size, param.value, precision,
                                                        param.name);
                     });
      };
      d.lowp_ih = lowp(p.w_ih, precision_ih_[i], lowp_ih_[i]);
      d.lowp_hh = lowp(p.w_hh, precision_hh_[i], lowp_hh_[i]);
    }
    w.directions.push_back(std::move(d));
  }
  return w;
}

void Recurrent::set_precision(PrecisionPlan& plan) {
  std::vector<ops::Precision> ih, hh;
  for (const DirectionParams& p : params_) {
    ih.push_back(plan.for_weight(p.w_ih.name, p.w_ih.value.dim(0), p.w_ih.value.dim(1)));
    hh.push_back(plan.for_weight(p.w_hh.name, p.w_hh.value.dim(0), p.w_hh.value.dim(1)));
  }
  precision_ih_ = std::move(ih), precision_hh_ = std::move(hh);
  lowp_ih_ = std::vector<DerivedSlot<ops::LowpWeights>>(params_.size());
  lowp_hh_ = std::vector<DerivedSlot<ops::LowpWeights>>(params_.size());
  const auto seed = [&](const Parameter& w, ops::Precision precision, const DerivedSlot<ops::LowpWeights>& slot) {
    if (const ops::LowpWeights* s = plan.stored(w.name, precision, w.value.dim(0), w.value.dim(1)))
      slot.get({&w}, [&] { return ops::recurrent_lowp_from_stored(config_.cell, config_.hidden_size, *s, w.name); });
  };
  for (size_t i = 0; i < params_.size(); ++i) {
    seed(params_[i].w_ih, precision_ih_[i], lowp_ih_[i]);
    seed(params_[i].w_hh, precision_hh_[i], lowp_hh_[i]);
  }
  weights();  // the copies made now: a weight the precision cannot hold is refused here, not at the first run
}

bool Recurrent::lowered() const {
  for (size_t i = 0; i < precision_ih_.size(); ++i)
    if (precision_ih_[i] != ops::Precision::Fp32 || precision_hh_[i] != ops::Precision::Fp32) return true;
  return false;
}

ops::RecurrentResult Recurrent::forward(const ops::RecurrentInputs& inputs, const ops::RunOptions& options) const {
  return ops::recurrent_stack_forward(weights(), inputs, options);
}

void Recurrent::backward(const ops::RecurrentInputs& inputs, const ops::RecurrentResult& result,
                         const ops::RecurrentGradOutputs& dy, const ops::RecurrentGradInputs& grads,
                         const ops::RunOptions& options) {
  const ops::RecurrentWeights w = weights();  // refreshed first if a parameter changed
  std::vector<ops::RecurrentWeightGrads> weight_grads;
  for (DirectionParams& p : params_)
    weight_grads.push_back({&p.w_ih.grad, &p.w_hh.grad, &p.b_ih.grad, &p.b_hh.grad});  // allocated as they are reached
  ops::recurrent_stack_backward(w, inputs, result, dy, grads, weight_grads, options);
}

autograd::RecurrentVars Recurrent::forward(const autograd::Var& x, const autograd::Var& h0, const autograd::Var& c0,
                                           const std::vector<int64_t>* lengths) {
  AK_CHECK(!autograd::grad_enabled() || !lowered(), "recurrent: weights in lower precision are for inference only "
           "(under autograd::NoGrad); a recorded forward needs the float32 weights");
  return autograd::recurrent(weights(), named_parameters(), x, h0, c0, lengths);
}

}  // namespace attnkit::nn
