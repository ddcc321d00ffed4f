// Autograd ops: cheap glue as small nodes, and Linear. Each one: the forward, then a node whose
// closure adds the input gradients (the forward line it differentiates quoted above it).
// Fused ops (recurrent layers, attention, losses, norms) have their wrappers beside their domain:
// autograd/recurrent.hpp, autograd/attention.hpp, autograd/layers.hpp.
#pragma once
#include <cstdint>
#include <vector>

#include "attnkit/autograd/var.hpp"

namespace attnkit::autograd {

Var add(const Var& a, const Var& b);        // same shape, or b broadcast over a's leading axes (b is a suffix of a's shape)
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

}  // namespace attnkit::autograd
