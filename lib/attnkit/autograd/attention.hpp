// Autograd wrapper of the fused attention op (ops/attention_scores.hpp): the forward kernel, then one
// node whose closure calls ops::attention_backward.
//
// Legend: N batch, T queries, S keys, Dq / Dk / Dv feature sizes, A additive size.
//
//   autograd::AttentionOptions o;
//   o.score = ops::ScoreKind::Additive;
//   o.weights = {.W_q = Var::param(layer.W_q), ...};   // gradients land in the parameters
//   Var c = autograd::attention(q, k, v, o).context;   // [N, T, Dv]
//   autograd::backward(autograd::sum(c));
#pragma once
#include "attnkit/autograd/var.hpp"
#include "attnkit/ops/attention_scores.hpp"

namespace attnkit::autograd {

// The score weights as Vars (leaves, Var::param(parameter), or outputs of other ops); leave the
// ones a score kind does not use undefined. general: W [Dq, Dk]; additive: W_q [Dq, A],
// W_k [Dk, A], v [A] and optionally b [A].
struct ScoreWeightVars {
  Var W;
  Var W_q, W_k, v, b;
};

struct AttentionOptions {
  ops::ScoreKind score = ops::ScoreKind::ScaledDot;
  ScoreWeightVars weights;
  ops::MaskSpec mask;
  // Yes: the weights [.., T, S] are returned and the backward reuses them (a T x S matrix);
  // No: the tiled kernels both ways, O(T) memory (the backward recomputes them from the saved
  // row log-sum-exp).
  ops::KeepWeights keep = ops::KeepWeights::No;
};

struct AttentionOutput {
  Var context;     // [.., T, Dv], differentiable w.r.t. query, keys, values and the score weights
  Tensor weights;  // [.., T, S] when keep == Yes (not differentiable), else empty
};

// query [T, Dq] / [N, T, Dq], keys [S, Dk] / [N, S, Dk], values [S, Dv] / [N, S, Dv]: see
// ops::attention_forward for the scores and masks. Records one node ("attention") when grads are on.
AttentionOutput attention(const Var& query, const Var& keys, const Var& values, const AttentionOptions& options);

}  // namespace attnkit::autograd
