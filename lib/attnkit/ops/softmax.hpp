// Softmax and log-softmax along the last axis.
//   softmax(x)_j     = exp(x_j - m) / sum_k exp(x_k - m),   m = max_k x_k
//   log_softmax(x)_j = x_j - m - log(sum_k exp(x_k - m))
// Subtracting the row max keeps every exp() in (0, 1], so inputs of +-1e4 (or any finite size)
// stay finite. A row whose entries are all -inf (every key masked) gives zeros from softmax and
// -inf from log_softmax, never NaN (attnkit's fully-masked-row rule, DESIGN.md §4).
#pragma once
#include <cstdint>

#include "attnkit/tensor/tensor.hpp"

namespace attnkit::ops {

// Statistics a backward pass or an online (tiled) softmax needs, per row: the max m and
// the sum l = sum_k exp(x_k - m) (m = -inf and l = 0 for a fully masked row).
struct SoftmaxStats {
  Tensor row_max;  // [..]  the input shape without its last axis
  Tensor row_sum;  // [..]
};

Tensor softmax_forward(const Tensor& x, SoftmaxStats* stats = nullptr);
Tensor log_softmax_forward(const Tensor& x);

// In place over `rows` contiguous rows of `cols` floats (the kernel the attention code shares).
// row_max / row_sum may be null.
void softmax_rows(float* x, int64_t rows, int64_t cols, float* row_max = nullptr, float* row_sum = nullptr);

// Reference: the same in double precision with plain loops (tests compare against it).
Tensor softmax_naive(const Tensor& x);
Tensor log_softmax_naive(const Tensor& x);

}  // namespace attnkit::ops
