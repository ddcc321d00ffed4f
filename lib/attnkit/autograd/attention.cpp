// Legend: N batch, T queries, S keys, Dv value size.
#include "attnkit/autograd/attention.hpp"

#include <memory>
#include <utility>

namespace attnkit::autograd {

AttentionOutput attention(const Var& query, const Var& keys, const Var& values, const AttentionOptions& options) {
  const ScoreWeightVars& w = options.weights;
  auto value_of = [](const Var& v) { return v.defined() ? v.value() : Tensor(); };
  ops::AttentionOptions o;
  o.score = options.score;
  o.mask = options.mask;
  o.keep = options.keep;
  if (o.score == ops::ScoreKind::General) o.weights.W = value_of(w.W);
  if (o.score == ops::ScoreKind::Additive)
    o.weights.W_q = value_of(w.W_q), o.weights.W_k = value_of(w.W_k), o.weights.v = value_of(w.v), o.weights.b = value_of(w.b);
  auto fwd = std::make_shared<ops::AttentionResult>(ops::attention_forward(query.value(), keys.value(), values.value(), o));
  fwd->scores = Tensor();  // the backward reads context, row_logsumexp and (when kept) weights
  AttentionOutput out;
  bool needs = false;
  for (const Var* v : {&query, &keys, &values, &w.W, &w.W_q, &w.W_k, &w.v, &w.b}) needs = needs || v->requires_grad();
  if (!grad_enabled() || !needs) {  // nothing to record: hand the results over without copies
    out.context = Var(std::move(fwd->context));
    out.weights = std::move(fwd->weights);
    return out;
  }
  out.weights = fwd->weights;
  // Inputs: query, keys, values, then the score weights in ScoreWeightVars order (undefined ones
  // need no gradient). The closure reads query, keys and values from their Vars; the forward's
  // result (context [.., T, Dv], row log-sum-exp [.., T], weights) is saved beside them.
  std::vector<Var> inputs{query, keys, values, w.W, w.W_q, w.W_k, w.v, w.b};
  if (o.score != ops::ScoreKind::General) inputs[3] = Var();
  if (o.score != ops::ScoreKind::Additive) inputs[4] = inputs[5] = inputs[6] = inputs[7] = Var();
  Tensor context = fwd->context;
  out.context = record(
      "attention", inputs, std::move(context),
      [qi = query.impl(), ki = keys.impl(), vi = values.impl(), o = std::move(o), fwd](const auto& dout, const auto& din) {
        if (!dout[0]) return;
        // c = attention(q, k, v; W | W_q, W_k, v, b): every gradient from one backward call
        const ops::AttentionGrads g = ops::attention_backward(qi->val(), ki->val(), vi->val(), o, *fwd, *dout[0]);
        const Tensor* grads[] = {&g.query, &g.keys, &g.values, &g.weights.W, &g.weights.W_q, &g.weights.W_k,
                                 &g.weights.v, &g.weights.b};
        for (size_t i = 0; i < din.size() && i < 8; ++i)
          if (din[i] && !grads[i]->empty()) accumulate(*din[i], *grads[i]);
      });
  return out;
}

}  // namespace attnkit::autograd
