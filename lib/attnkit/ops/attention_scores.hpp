// The score kinds of attention on [T, D] / [N, T, D] tensors: attention_forward, its reference and its
// backward, over the strided kernels of ops/attention.hpp.
//
// Legend: N batch, T queries, S keys, Dq query size, Dk key size, Dv value size, A additive
// attention size.
//
// Scores e[t, s] between query q_t [Dq] and key k_s [Dk]:
//   dot         e = q . k                                      (Dq == Dk)
//   scaled-dot  e = q . k / sqrt(Dk)                           (Dq == Dk)
//   general     e = q^T W k,            W [Dq, Dk]             (Luong)
//   additive    e = v^T tanh(q W_q + k W_k + b), W_q [Dq, A], W_k [Dk, A], v [A], b [A] (Bahdanau)
// weights a[t, :] = softmax(e[t, :]) over the visible keys; context c_t = sum_s a[t, s] v_s.
//
#pragma once
#include <string_view>

#include "attnkit/ops/attention.hpp"
#include "attnkit/tensor/tensor.hpp"

namespace attnkit::ops {

enum class ScoreKind { Dot, ScaledDot, General, Additive };
// "dot", "scaled-dot", "general", "additive"; throws attnkit::Error on anything else.
ScoreKind parse_score_kind(std::string_view name);
std::string_view score_kind_name(ScoreKind kind);

// Learned parameters of the general and additive scores (empty tensors when unused).
struct ScoreWeights {
  Tensor W;    // general:  [Dq, Dk]
  Tensor W_q;  // additive: [Dq, A]
  Tensor W_k;  // additive: [Dk, A]; empty: the keys given are projected already, k W_k [.., S, A]
  Tensor v;    // additive: [A]
  Tensor b;    // additive, optional: [A]
};

struct AttentionOptions {
  ScoreKind score = ScoreKind::ScaledDot;
  ScoreWeights weights;  // for general and additive
  MaskSpec mask;
  KeepWeights keep = KeepWeights::Yes;  // No: the tiled kernel (no T x S matrix, no scores/weights)
};

struct AttentionResult {
  Tensor scores;   // [.., T, S] (masked entries -inf); empty unless KeepWeights::Yes
  Tensor weights;  // [.., T, S] softmax over keys;      empty unless KeepWeights::Yes
  Tensor context;  // [.., T, Dv]
  // For a backward pass: log-sum-exp of each query's visible scores [.., T] (-inf when none).
  Tensor row_logsumexp;
};

// query [T, Dq] or [N, T, Dq]; keys [S, Dk] / [N, S, Dk]; values [S, Dv] / [N, S, Dv]
// (the same rank as query; N must agree). Throws attnkit::Error naming shapes on any mismatch.
AttentionResult attention_forward(const Tensor& query, const Tensor& keys, const Tensor& values,
                                  const AttentionOptions& options);
// The same through sdpa_naive / a per-pair double loop for every score kind.
AttentionResult attention_forward_naive(const Tensor& query, const Tensor& keys, const Tensor& values,
                                        const AttentionOptions& options);

// (Loading score weights from a bundle and key lengths from a tensor lives one floor up:
// nn/attention_scores.hpp. ops/ loads nothing.)

// Gradients of attention_forward for every score kind: `forward` is what attention_forward
// returned for the same inputs and options, dcontext is shaped like forward.context. With
// forward.weights (KeepWeights::Yes) the backward reuses them (GEMMs over [T, S]); without, it
// recomputes them from forward.row_logsumexp (dot / scaled-dot / general through
// sdpa_backward_tiled, O(T) memory; additive row by row, [S, A] per thread).
//   general   q' = q W:  dq = dq' W^T,  dW = q^T dq'
//   additive  Z = tanh(q W_q + k W_k + b), e = Z v:  G = (1 - Z^2) ⊙ (dE v^T);  dv = sum Z^T dE;
//             dq = (sum_s G) W_q^T, dW_q = q^T (sum_s G), dk = (sum_t G) W_k^T, dW_k = k^T (sum_t G), db = sum G
// The returned gradients are fresh tensors (zeros where nothing flows), not accumulated.
struct AttentionGrads {
  Tensor query, keys, values;  // shaped like the inputs
  ScoreWeights weights;        // general: W; additive: W_q, W_k, v, b (b only when given)
};
AttentionGrads attention_backward(const Tensor& query, const Tensor& keys, const Tensor& values,
                                  const AttentionOptions& options, const AttentionResult& forward,
                                  const Tensor& dcontext);

}  // namespace attnkit::ops
