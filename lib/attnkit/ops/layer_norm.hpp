// Layer normalisation over the last axis (PyTorch's F.layer_norm with normalized_shape = [E]).
// Legend: M rows (every leading axis of x flattened), E normalised size.
//   forward   mu = mean_e x [M]   var = mean_e (x - mu)^2 [M] (biased, as PyTorch)   rstd = 1/sqrt(var + eps)
//             xhat = (x - mu) * rstd [M, E]      y = xhat * w + b [M, E]
//   backward  db [E] += sum_rows dy     dw [E] += sum_rows dy * xhat
//             dx [M, E] += rstd * (g - mean_e g - xhat * mean_e(g * xhat)),   g = dy * w
// weight and bias may be empty (elementwise_affine=False: w = 1, b = 0). Backward adds into the
// gradients it is given (null pointers skip one).
#pragma once
#include <vector>

#include "attnkit/tensor/tensor.hpp"

namespace attnkit::ops {

constexpr float kLayerNormEps = 1e-5f;  // PyTorch's default

// What backward needs, per row: the mean and 1 / sqrt(var + eps).
struct LayerNormStats {
  Tensor mean;  // [..]  x's shape without its last axis
  Tensor rstd;  // [..]
};

// x [..., E], weight [E] or empty, bias [E] or empty -> y [..., E]. `what` names the layer ("norm1").
Tensor layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps = kLayerNormEps,
                          LayerNormStats* stats = nullptr, const char* what = "layer_norm");
// stats from the forward of the same x. dx [..., E], dweight [E], dbias [E] may each be null.
void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const LayerNormStats& stats,
                         Tensor* dx, Tensor* dweight, Tensor* dbias, const char* what = "layer_norm");

// Reference: the forward in double with plain loops (two-pass mean and variance), row-major [..., E].
std::vector<double> layer_norm_reference(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                         double eps = kLayerNormEps);

}  // namespace attnkit::ops
