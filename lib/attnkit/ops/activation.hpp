// Elementwise activations (any shape [...]):
//   relu      y = max(x, 0)                         dx += dy * (y > 0)    (0 at x = 0, as PyTorch)
//   gelu      y = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))                (PyTorch's default, exact)
//             dx += dy * (Phi(x) + x * phi(x)),     phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
//   gelu tanh y = 0.5 x (1 + tanh(u)),  u = sqrt(2 / pi) (x + 0.044715 x^3)  (approximate="tanh")
//             dx += dy * (0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2 / pi) (1 + 3 * 0.044715 x^2))
//   tanh      y = tanh(x)                           dx += dy * (1 - y^2)
// Backward adds into the gradient it is given.
#pragma once
#include <vector>

#include "attnkit/tensor/tensor.hpp"

namespace attnkit::ops {

enum class GeluApproximate { None, Tanh };  // PyTorch's approximate="none" | "tanh"

Tensor relu_forward(const Tensor& x);
// y: relu's output (y > 0 exactly where x > 0, so the input need not be kept).
void relu_backward(const Tensor& dy, const Tensor& y, Tensor& dx);

Tensor gelu_forward(const Tensor& x, GeluApproximate approximate = GeluApproximate::None);
void gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx, GeluApproximate approximate = GeluApproximate::None);

Tensor tanh_forward(const Tensor& x);
// y: tanh's output (the derivative 1 - y^2 needs only it).
void tanh_backward(const Tensor& dy, const Tensor& y, Tensor& dx);

// References: the forwards in double (std::erf, std::tanh), row-major.
std::vector<double> relu_reference(const Tensor& x);
std::vector<double> gelu_reference(const Tensor& x, GeluApproximate approximate = GeluApproximate::None);
std::vector<double> tanh_reference(const Tensor& x);

}  // namespace attnkit::ops
