// Self-attention and multi-head attention layers (inference forward; backward comes with autograd).
//
// Legend: N batch, T queries, S keys, E model size, NH heads, HS = E / NH head size,
// Dq/Dk/Dv input sizes of query, key, value. Inputs are batch-first: [N, T, E] or unbatched [T, E]
// (nn.MultiheadAttention(..., batch_first=True)).
//
//   Q = q Wq^T + bq [N, T, E]   K = k Wk^T + bk [N, S, E]   V = v Wv^T + bv [N, S, E]
//   head h: O_h = softmax(Q_h K_h^T / sqrt(HS) + mask) V_h   (Q_h = columns h*HS .. (h+1)*HS)
//   output = concat_h(O_h) Wo^T + bo [N, T, E]
//
// Weights (PyTorch nn.MultiheadAttention state_dict names and layouts, [out, in]):
//   in_proj_weight [3E, E] (rows q, k, v) + in_proj_bias [3E]          (kdim == vdim == E)
//   q_proj_weight [E, E], k_proj_weight [E, kdim], v_proj_weight [E, vdim] (+ in_proj_bias)
//   out_proj.weight [E, E], out_proj.bias [E]   (also nested: out_proj/weight)
// or the documents' form (x W, [in, out]): W_Q [Dq, E], W_K [Dk, E], W_V [Dk, Ev], optional W_O [Ev, Eo];
// with NH = 1 and no W_O this is the documents' single self-attention Q = X W_Q, K = X W_K, V = X W_V.
//
// The split-heads variant (the second document's "multi-head by splitting") has no weights:
// Q, K, V are the inputs themselves, cut into NH equal column blocks; the output is the
// concatenation of the heads' contexts.
//
// Without weights requested the tiled kernel runs: no NH x T x S matrix is ever held.
#pragma once
#include <string_view>

#include "attnkit/io/value.hpp"
#include "attnkit/ops/attention.hpp"
#include "attnkit/tensor/tensor.hpp"

namespace attnkit::nn {

struct MultiheadAttention {
  int64_t num_heads = 1;
  // y = x W^T + b (PyTorch layout [out, in]); biases may be empty.
  Tensor q_weight, k_weight, v_weight;  // [E, Dq], [E, Dk], [Ev, Dk'] (Dk' = value input size)
  Tensor q_bias, k_bias, v_bias;        // [E], [E], [Ev]
  Tensor out_weight, out_bias;          // [Eo, Ev], [Eo]; empty weight: no output projection

  int64_t embed_dim() const { return q_weight.dim(0); }  // E (query/key projection size)
  int64_t value_dim() const { return v_weight.dim(0); }  // Ev

  // From a bundle in either naming (see above). `op` prefixes messages. Throws attnkit::Error
  // naming the weight, its shape and the expected one, or if NH does not divide E.
  static MultiheadAttention from_bundle(const io::Value& bundle, int64_t num_heads, std::string_view op = "multi-head attention");
};

enum class HeadWeights { None, Averaged, PerHead };

struct MhaOptions {
  HeadWeights weights = HeadWeights::None;
  // Causal kinds, key lengths (key padding, per batch element) and an explicit mask
  // (1 = attend; [T, S], [N, T, S] or [N, NH, T, S]); see ops/attention.hpp.
  ops::MaskSpec mask;
};

struct MhaResult {
  Tensor output;   // [.., T, Eo]
  Tensor weights;  // [.., T, S] averaged over heads, or [.., NH, T, S] per head; empty if not asked
};

// query [T, Dq] / [N, T, Dq]; key [S, Dk] / [N, S, Dk]; value [S, Dv] / [N, S, Dv].
MhaResult multihead_attention_forward(const MultiheadAttention& m, const Tensor& query, const Tensor& key,
                                      const Tensor& value, const MhaOptions& options);
// The same, every head through ops::sdpa_naive (tests compare the two).
MhaResult multihead_attention_forward_naive(const MultiheadAttention& m, const Tensor& query, const Tensor& key,
                                            const Tensor& value, const MhaOptions& options);

// No projections: heads are NH equal column blocks of query/key/value (scale 1/sqrt(Dk / NH)).
MhaResult split_heads_attention_forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                        int64_t num_heads, const MhaOptions& options);

}  // namespace attnkit::nn
