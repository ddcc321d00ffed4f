// Linear: y = x W^T + b, PyTorch's nn.Linear layout (W [out, in], b [out]).
// Legend: M rows (every leading axis of x flattened), I in features, O out features.
//   forward   y [M, O] = x [M, I] W^T + b
//   backward  dx [M, I] += dy W          dW [O, I] += dy^T x          db [O] += sum_rows dy
// Backward adds into the gradients it is given (null pointers skip one), as every backward does.
#pragma once
#include <cstdint>

#include "attnkit/tensor/tensor.hpp"

namespace attnkit::ops {

void linear_forward(const float* x, int64_t M, int64_t I, const float* W, int64_t O, const float* b, float* y);
void linear_backward(const float* dy, const float* x, const float* W, int64_t M, int64_t I, int64_t O, float* dx,
                     float* dW, float* db);
// out [C] = the sums of the columns of x [R, C] (row-major), row after row (a bias's gradient): the
// same bits wherever the buffers are.
void column_sums(const float* x, int64_t R, int64_t C, float* out);

// Tensor forms: x [..., I] -> [..., O]. b may be empty (no bias). Checks shapes; `what` names the
// layer in messages ("linear1").
Tensor linear_forward(const Tensor& x, const Tensor& W, const Tensor& b, const char* what = "linear");
// dx/dW/db may be null; each non-null one must already have its shape (x's, W's, b's).
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& W, Tensor* dx, Tensor* dW, Tensor* db,
                     const char* what = "linear");

}  // namespace attnkit::ops
