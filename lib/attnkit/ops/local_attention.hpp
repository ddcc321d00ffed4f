// Restricted (windowed, local) self-attention: each query sees only the keys within a fixed window
// around it, the "restricted self-attention" row of "Attention Is All You Need" (Table 1). A banded
// kernel: O(N*T*W*E) time and an [N, T, W] band of weights, never a T x T matrix.
//
// Legend: N batch, T positions (queries and keys), E feature size (one head), W = left + 1 + right
// window size, dout the upstream gradient of out.
//
//   key s is visible from query t iff  t - left <= s <= t + right  (and 0 <= s < T)
//   e[t, s] = scale * q_t . k_s;   p[t, .] = softmax over the visible s;   out_t = sum_s p[t, s] v_s
//   band[n, t, w] = p[t, t - left + w]  (0 where the window leaves the sequence)
#pragma once
#include <cstdint>

#include "attnkit/tensor/tensor.hpp"

namespace attnkit::ops {

struct LocalWindow {
  int64_t left = 0;   // keys before the query (>= 0)
  int64_t right = 0;  // keys after it (>= 0; 0 = causal)
  int64_t size() const { return left + 1 + right; }
};
// The window of r keys centred on the query: left = r / 2, right = r - 1 - left (r >= 1).
LocalWindow centred_window(int64_t r);

struct LocalAttentionResult {
  Tensor out;   // [N, T, E]
  Tensor band;  // [N, T, W] the softmax weights (what backward needs)
};

// q, k, v [N, T, E]; scale 0 means 1/sqrt(E). Throws attnkit::Error naming shapes.
LocalAttentionResult local_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, LocalWindow window,
                                             float scale = 0.0f);
// Adds d loss / d q, k, v into dq, dk, dv (nullptr: not wanted), given the forward's band.
void local_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& band,
                              const Tensor& dout, LocalWindow window, float scale, Tensor* dq, Tensor* dk, Tensor* dv);

// Reference: the same in double with plain loops, through a full T x T mask (for tests).
Tensor local_attention_forward_naive(const Tensor& q, const Tensor& k, const Tensor& v, LocalWindow window,
                                     float scale = 0.0f);

}  // namespace attnkit::ops
