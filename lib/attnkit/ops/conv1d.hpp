// 1-D convolution over a sequence, channels last: the convolutional layer of compare-arch
// (arch/), PyTorch's nn.Conv1d weights on batch-first [N, T, C] input.
//
// Legend: N batch, T length, C input channels, O output channels, k kernel size, dil dilation,
// P left padding (taps reaching before position 0 or past T-1 read zeros).
//
//   y[n, t, o] = b[o] + sum_{c, j} w[o, c, j] * x[n, t - P + j*dil, c]        y [N, T, O]
//   causal:  P = dil*(k-1)          (y_t sees x_{t-dil(k-1)} .. x_t, never the future)
//   same:    P = dil*(k-1) / 2      (PyTorch's padding='same': the odd extra tap goes right)
//
// Done as one GEMM on an im2col copy: cols [N*T, C*k], cols[(n, t), c*k + j] = x[n, t - P + j*dil, c],
// so that y = cols w^T with w [O, C, k] read in place as [O, C*k] (its PyTorch layout). The copy costs
// k times the input's memory (the "activation memory" compare-arch reports for this layer).
#pragma once
#include <cstdint>

#include "attnkit/tensor/tensor.hpp"

namespace attnkit::ops {

enum class ConvPadding { Causal, Same };

struct Conv1dOptions {
  ConvPadding padding = ConvPadding::Causal;
  int64_t dilation = 1;  // >= 1
};

// The left padding P for kernel size k.
int64_t conv1d_left_padding(int64_t k, const Conv1dOptions& options);

// x [N, T, C], w [O, C, k], b [O] or nullptr -> y [N, T, O]. Throws attnkit::Error naming shapes.
Tensor conv1d_forward(const Tensor& x, const Tensor& w, const Tensor* b, const Conv1dOptions& options);
// Adds d loss / d x, w, b into dx [N, T, C], dw [O, C, k], db [O] (nullptr: not wanted) given
// dy [N, T, O], the upstream gradient of conv1d_forward(x, w, b, options).
void conv1d_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Conv1dOptions& options, Tensor* dx,
                     Tensor* dw, Tensor* db);

// Reference: the sum above with plain loops in double precision, rounded to float at the end.
Tensor conv1d_forward_naive(const Tensor& x, const Tensor& w, const Tensor* b, const Conv1dOptions& options);

}  // namespace attnkit::ops
