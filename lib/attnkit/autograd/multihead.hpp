// Autograd wrappers of multi-head and split-heads attention: the fused forward
// (ops::multihead_attention_forward, keeping an ops::MhaCache), then ONE node whose closure calls
// ops::multihead_attention_backward (tiled sdpa backward: no T x S matrix).
//
//   nn::MultiheadAttention m = nn::MultiheadAttention::from_bundle(weights, NH);
//   Var x(input, /*requires_grad=*/true);
//   Var y = m.forward(x, x, x);                          // self-attention [N, T, E] (this wrapper on m's view)
//   autograd::backward(autograd::sum(y));                // x.grad(); m.in_proj_weight.grad, ...
//
// The node's inputs are query, key, value and `params` (Var::param, in the order the view's gradient
// slots index), so parameter gradients accumulate into each Parameter's grad. The weights the view
// reads must outlive the backward pass. Averaged or per-head weights (options.weights) go to
// *weights when given; no gradient flows through them. Under NoGrad nothing is kept or recorded.
#pragma once
#include <cstdint>
#include <vector>

#include "attnkit/autograd/var.hpp"
#include "attnkit/ops/mha.hpp"

namespace attnkit::autograd {

Var multihead_attention(const ops::MhaWeights& w, const std::vector<Parameter*>& params, const Var& query,
                        const Var& key, const Var& value, const ops::MhaOptions& options = {},
                        Tensor* weights = nullptr);

// No projections: NH equal column blocks of query/key/value (ops::split_heads_attention_forward).
Var split_heads_attention(const Var& query, const Var& key, const Var& value, int64_t num_heads,
                          const ops::MhaOptions& options = {}, Tensor* weights = nullptr);

}  // namespace attnkit::autograd
