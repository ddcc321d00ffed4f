// Autograd ops: cheap glue as small nodes, and Linear. Each one: the forward, then a node whose
// closure adds the input gradients (the forward line it differentiates quoted above it).
// Fused ops (recurrent layers, attention, losses, norms) have their wrappers beside their domain:
// autograd/recurrent.hpp, autograd/attention.hpp, autograd/layers.hpp.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "attnkit/autograd/var.hpp"
#include "attnkit/ops/lowp_weights.hpp"
#include "attnkit/ops/matmul.hpp"

namespace attnkit::autograd {

Var add(const Var& a, const Var& b);        // same shape, or b broadcast over a's leading axes (b is a suffix of a's shape)
// a + b, the same values as add. Not recording, with b the output of an op held nowhere else (no parameter, the
// only Var of it: pass it by value, moved) and a of its shape, b's own buffer receives the sum instead of a fresh
// one: the page faults of a fresh [N, T, E] buffer (32 MB) cost about what the arithmetic does.
Var add_in_place(const Var& a, Var b);
Var sub(const Var& a, const Var& b);        // same shape
Var mul(const Var& a, const Var& b);        // elementwise, same shape
Var scale(const Var& a, float s);           // a * s
Var sum(const Var& a);                      // scalar
Var mean(const Var& a);                     // scalar
Var reshape(const Var& a, Shape shape);     // one dim may be -1
Var concat(const std::vector<Var>& parts, int axis);  // along `axis` (negative counts from the end)
Var slice(const Var& a, int axis, int64_t begin, int64_t end);  // [begin, end) along `axis`
Var matmul(const Var& a, const Var& b);     // [M, K] x [K, N]
// y = x W^T + b: x [..., in], W [out, in], b [out] or undefined (ops/linear.hpp).
Var linear(const Var& x, const Var& W, const Var& b);

// W^T packed for the product kernel, kept by the weight's owner (ops::LinearWeights::packed, ops/feed_forward.hpp).
using PackedWeight = std::function<std::shared_ptr<const ops::GemmPackedB>()>;
// W in int8 or bfloat16 for inference (ops/lowp_weights.hpp), or null: float32. Only where nothing is recorded:
// a product recorded for a backward pass with lower-precision weights is refused (they are not W).
using LowpWeight = std::shared_ptr<const ops::LowpWeights>;
// What follows the product: act(x W^T + b) + residual, residual [..., out] (nullptr: none).
struct LinearThen {
  bool relu = false;
  const Var* residual = nullptr;
};
// y = act(x W^T + b) + residual. Recording: linear, relu, add (each with its backward). Not recording: one product
// with the bias, the ReLU and the residual applied as the kernel stores (ops::linear_fused, W^T read from `packed`),
// no pass over y after it. Same values either way, bit for bit. (Anything malformed takes the recorded ops, which
// check shapes and say what is wrong.)
Var linear(const Var& x, const Var& W, const Var& b, const LinearThen& then, const PackedWeight& packed,
           const LowpWeight& lowp = nullptr);
// The feed-forward block inside its residual connection: base + relu(x W1^T + b1) W2^T + b2, x and base [..., E],
// W1 [F, E], W2 [E, F]. Recording: linear(.., then) twice (relu; then the residual). Not recording: ops::feed_forward,
// the hidden [rows, F] (32 MB at 16 x 256 x 2048) never whole. Same values either way.
Var feed_forward(const Var& x, const Var& W1, const Var& b1, const PackedWeight& packed1, const Var& W2, const Var& b2,
                 const PackedWeight& packed2, const Var& base, const LowpWeight& lowp1 = nullptr,
                 const LowpWeight& lowp2 = nullptr);

}  // namespace attnkit::autograd
