#include "attnkit/autograd/conv1d.hpp"

namespace attnkit::autograd {

Var conv1d(const Var& x, const Var& w, const Var& b, const ops::Conv1dOptions& options) {
  Tensor y = ops::conv1d_forward(x.value(), w.value(), b.defined() ? &b.value() : nullptr, options);  // [N, T, O]
  std::vector<Var> inputs{x, w};
  if (b.defined()) inputs.push_back(b);
  return record("conv1d", inputs, std::move(y),
                [xi = x.impl(), wi = w.impl(), options](const auto& dy, const auto& dx) {
                  ops::conv1d_backward(xi->val(), wi->val(), *dy[0], options, dx[0], dx[1],
                                       dx.size() > 2 ? dx[2] : nullptr);
                });
}

Var local_attention(const Var& q, const Var& k, const Var& v, ops::LocalWindow window, float scale) {
  ops::LocalAttentionResult r = ops::local_attention_forward(q.value(), k.value(), v.value(), window, scale);
  if (!grad_enabled()) return Var(std::move(r.out));
  return record("local_attention", {q, k, v}, std::move(r.out),
                [qi = q.impl(), ki = k.impl(), vi = v.impl(), band = std::move(r.band), window, scale](
                    const auto& dout, const auto& d) {
                  ops::local_attention_backward(qi->val(), ki->val(), vi->val(), band, *dout[0], window, scale, d[0],
                                                d[1], d[2]);
                });
}

}  // namespace attnkit::autograd
