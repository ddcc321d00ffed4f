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
    w.directions.push_back({&p.w_ih.value, &p.w_hh.value, std::move(packed)});
  }
  return w;
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
  return autograd::recurrent(weights(), named_parameters(), x, h0, c0, lengths);
}

}  // namespace attnkit::nn
