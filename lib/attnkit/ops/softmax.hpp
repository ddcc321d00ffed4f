// Softmax and log-softmax along the last axis.
//   softmax(x)_j     = exp(x_j - m) / sum_k exp(x_k - m),   m = max_k x_k
//   log_softmax(x)_j = x_j - m - log(sum_k exp(x_k - m))
// Subtracting the row max keeps every exp() in (0, 1], so inputs of +-1e4 (or any finite size)
// stay finite. A row whose entries are all -inf (every key masked) gives zeros from softmax and
// -inf from log_softmax, never NaN (attnkit's fully-masked-row rule).
//
// Backward (beside each forward; adds into dx, like every backward), per row of C entries:
//   softmax      y = softmax(x)       dx += y * (dy - sum_j dy_j y_j)
//   log_softmax  y = log_softmax(x)   dx += dy - exp(y) * sum_j dy_j
// A fully masked row gets a zero gradient, never NaN (softmax: y = 0 there; log_softmax: the row
// is skipped, as its y is all -inf).
#pragma once
#include <cstdint>
#include <vector>

#include "attnkit/tensor/tensor.hpp"

namespace attnkit::ops {

// Statistics a backward pass or an online (tiled) softmax needs, per row: the max m and
// the sum l = sum_k exp(x_k - m) (m = -inf and l = 0 for a fully masked row).
struct SoftmaxStats {
  Tensor row_max;  // [..]  the input shape without its last axis
  Tensor row_sum;  // [..]
};

Tensor softmax_forward(const Tensor& x, SoftmaxStats* stats = nullptr);
// y: softmax_forward's output; dy, y, dx [..., C].
void softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx);

Tensor log_softmax_forward(const Tensor& x);
// y: log_softmax_forward's output; dy, y, dx [..., C].
void log_softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx);

// In place over `rows` contiguous rows of `cols` floats (the kernel the attention code shares).
// row_max / row_sum may be null.
void softmax_rows(float* x, int64_t rows, int64_t cols, float* row_max = nullptr, float* row_sum = nullptr);

// Reference: the same in double precision with plain loops (tests compare against it); the
// *_reference forms keep the doubles (row-major), for finite-difference checks.
Tensor softmax_naive(const Tensor& x);
Tensor log_softmax_naive(const Tensor& x);
std::vector<double> softmax_reference(const Tensor& x);
std::vector<double> log_softmax_reference(const Tensor& x);

}  // namespace attnkit::ops
