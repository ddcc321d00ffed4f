#include "attnkit/autograd/multihead.hpp"

#include <memory>

namespace attnkit::autograd {

Var multihead_attention(const ops::MhaWeights& w, const std::vector<Parameter*>& params, const Var& query,
                        const Var& key, const Var& value, const ops::MhaOptions& options, Tensor* weights) {
  // The parameters always require grad: with recording on, the node is recorded and needs the cache.
  auto cache = grad_enabled() ? std::make_shared<ops::MhaCache>() : nullptr;
  ops::MhaResult r = ops::multihead_attention_forward(w, query.value(), key.value(), value.value(), options, cache.get());
  if (weights) *weights = std::move(r.weights);
  std::vector<Var> inputs{query, key, value};
  for (Parameter* p : params) inputs.push_back(Var::param(*p));
  return record("multihead_attention", inputs, std::move(r.output),
                [w, qi = query.impl(), ki = key.impl(), vi = value.impl(), options, cache](
                    const std::vector<const Tensor*>& out_grads, const std::vector<Tensor*>& in_grads) {
                  // output = MHA(query, key, value; parameters)
                  const std::vector<Tensor*> dparams(in_grads.begin() + 3, in_grads.end());
                  ops::multihead_attention_backward(w, qi->val(), ki->val(), vi->val(), options, *cache, *out_grads[0],
                                                    in_grads[0], in_grads[1], in_grads[2], w.grads.in(dparams));
                });
}

Var split_heads_attention(const Var& query, const Var& key, const Var& value, int64_t num_heads,
                          const ops::MhaOptions& options, Tensor* weights) {
  const bool needs = grad_enabled() && (query.requires_grad() || key.requires_grad() || value.requires_grad());
  auto cache = needs ? std::make_shared<ops::MhaCache>() : nullptr;
  ops::MhaResult r =
      ops::split_heads_attention_forward(query.value(), key.value(), value.value(), num_heads, options, cache.get());
  if (weights) *weights = std::move(r.weights);
  return record("split_heads_attention", {query, key, value}, std::move(r.output),
                [qi = query.impl(), ki = key.impl(), vi = value.impl(), num_heads, options, cache](
                    const std::vector<const Tensor*>& out_grads, const std::vector<Tensor*>& in_grads) {
                  // output = concat_h softmax(q_h k_h^T / sqrt(HS)) v_h
                  ops::split_heads_attention_backward(qi->val(), ki->val(), vi->val(), num_heads, options, *cache,
                                                      *out_grads[0], in_grads[0], in_grads[1], in_grads[2]);
                });
}

}  // namespace attnkit::autograd
