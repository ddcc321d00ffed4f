// Autograd wrappers of compare-arch's kernels: the 1-D convolution (ops/conv1d.hpp) and restricted
// (windowed) self-attention (ops/local_attention.hpp). Each runs its forward kernel and records one
// node whose closure calls the backward kernel.
// Legend: N batch, T length, C input channels, O output channels, k kernel size, E feature size.
//
//   Var y = autograd::conv1d(x, Var::param(w), Var::param(b), {ops::ConvPadding::Causal, 2});  // [N, T, O]
//   Var o = autograd::local_attention(q, k, v, ops::centred_window(8));                        // [N, T, E]
#pragma once
#include "attnkit/autograd/var.hpp"
#include "attnkit/ops/conv1d.hpp"
#include "attnkit/ops/local_attention.hpp"

namespace attnkit::autograd {

// x [N, T, C], w [O, C, k], b [O] or undefined -> [N, T, O].
Var conv1d(const Var& x, const Var& w, const Var& b, const ops::Conv1dOptions& options);

// q, k, v [N, T, E] -> [N, T, E]; scale 0 means 1/sqrt(E). The node keeps the [N, T, W] band.
Var local_attention(const Var& q, const Var& k, const Var& v, ops::LocalWindow window, float scale = 0.0f);

}  // namespace attnkit::autograd
