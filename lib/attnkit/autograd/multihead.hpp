// Autograd wrappers of multi-head and split-heads attention: the fused forward
// (nn::multihead_attention_forward, keeping an nn::MhaCache), then ONE node whose closure calls
// nn::multihead_attention_backward (tiled sdpa backward: no T x S matrix).
//
//   nn::MultiheadAttention m = nn::MultiheadAttention::from_bundle(weights, NH);
//   Var x(input, /*requires_grad=*/true);
//   Var y = autograd::multihead_attention(m, x, x, x);   // self-attention [N, T, E]
//   autograd::backward(autograd::sum(y));                // x.grad(); m.in_proj_weight.grad, ...
//
// The node's inputs are query, key, value and the module's parameters (Var::param, in
// named_parameters() order), so parameter gradients accumulate into each Parameter's grad.
// `m` must outlive the backward pass. Averaged or per-head weights (options.weights) go to
// *weights when given; no gradient flows through them. Under NoGrad nothing is kept or recorded.
#pragma once
#include <cstdint>

#include "attnkit/autograd/var.hpp"
#include "attnkit/nn/attention.hpp"

namespace attnkit::autograd {

Var multihead_attention(nn::MultiheadAttention& m, const Var& query, const Var& key, const Var& value,
                        const nn::MhaOptions& options = {}, Tensor* weights = nullptr);

// No projections: NH equal column blocks of query/key/value (nn::split_heads_attention_forward).
Var split_heads_attention(const Var& query, const Var& key, const Var& value, int64_t num_heads,
                          const nn::MhaOptions& options = {}, Tensor* weights = nullptr);

}  // namespace attnkit::autograd
