// autograd::recurrent (recurrent.hpp): the stack's forward, one node, the stack's backward.
#include "attnkit/autograd/recurrent.hpp"

#include <memory>

#include "attnkit/tensor/error.hpp"

namespace attnkit::autograd {

RecurrentVars recurrent(const ops::RecurrentWeights& weights, const std::vector<Parameter*>& params, const Var& x,
                        const Var& h0, const Var& c0, const std::vector<int64_t>* lengths) {
  AK_CHECK(x.defined(), "recurrent: the input is undefined");
  AK_CHECK(params.size() == 4 * weights.directions.size(),
           "recurrent: {} parameters for {} directions (expected 4 each)", params.size(), weights.directions.size());
  const bool lstm = weights.config.cell == ops::CellKind::Lstm;
  auto kept_lengths = std::make_shared<std::vector<int64_t>>(lengths ? *lengths : std::vector<int64_t>{});
  ops::RecurrentInputs in;
  in.x = &x.value();
  in.h0 = h0.defined() ? &h0.value() : nullptr;
  in.c0 = c0.defined() ? &c0.value() : nullptr;
  in.lengths = lengths ? kept_lengths.get() : nullptr;
  ops::RunOptions options;
  options.keep_cache = grad_enabled();  // what backward needs: every layer's cache and input
  auto result = std::make_shared<ops::RecurrentResult>(ops::recurrent_stack_forward(weights, in, options));

  // inputs: x, h0, c0, then every parameter (its grad buffer is the Parameter's grad)
  std::vector<Var> inputs = {x, h0, c0};
  for (Parameter* p : params) inputs.push_back(Var::param(*p));
  std::vector<Tensor> outputs = {result->output, result->h_n};
  if (lstm) outputs.push_back(result->c_n);
  if (!options.keep_cache) result.reset();
  else result->output = Tensor(), result->h_n = Tensor(), result->c_n = Tensor();  // copies live in the Vars

  std::vector<Var> out = record(
      "recurrent", inputs, std::move(outputs),
      [weights, params, result, kept_lengths, has_lengths = lengths != nullptr, xi = x.impl(), h0i = h0.impl(),
       c0i = c0.impl()](const std::vector<const Tensor*>& dy, const std::vector<Tensor*>& dx) {
        ops::RecurrentInputs in;
        in.x = &xi->val();
        in.h0 = h0i ? &h0i->val() : nullptr;
        in.c0 = c0i ? &c0i->val() : nullptr;
        in.lengths = has_lengths ? kept_lengths.get() : nullptr;
        ops::RecurrentGradOutputs g;
        g.output = dy[0], g.h_n = dy[1], g.c_n = dy.size() > 2 ? dy[2] : nullptr;
        ops::RecurrentGradInputs gi;
        gi.x = dx[0], gi.h0 = dx[1], gi.c0 = dx[2];
        // The weight gradients go into each Parameter's grad: the same tensors as dx[3...].
        std::vector<ops::RecurrentWeightGrads> wg(weights.directions.size());
        for (size_t i = 0; i < wg.size(); ++i)
          wg[i] = {&params[4 * i]->grad, &params[4 * i + 1]->grad, &params[4 * i + 2]->grad, &params[4 * i + 3]->grad};
        ops::recurrent_stack_backward(weights, in, *result, g, gi, wg);
      });
  RecurrentVars r;
  r.output = std::move(out[0]);
  r.h_n = std::move(out[1]);
  if (lstm) r.c_n = std::move(out[2]);
  return r;
}

}  // namespace attnkit::autograd
