#include "attnkit/ops/activation.hpp"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // Eigen AVX-512, GCC 12 false positive

#include <algorithm>
#include <cmath>

#include <unsupported/Eigen/SpecialFunctions>  // Array::erf(), vectorised for float

#include "attnkit/tensor/eigen_bridge.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::ops {
namespace {

using Arr = Eigen::Map<Eigen::ArrayXf>;
using CArr = Eigen::Map<const Eigen::ArrayXf>;

Arr flat(Tensor& t) { return Arr(t.data(), t.numel()); }
CArr flat(const Tensor& t) { return CArr(t.data(), t.numel()); }

// Element-wise functions run in blocks copied into aligned local arrays: Eigen's vectorised erf, exp and tanh
// (and the fused multiply-adds of its packets) round differently from its scalar code, which it uses for the
// elements before the destination's first aligned address; so the same values would give different bits
// depending on where the heap put a tensor. In an aligned block which elements take which path depends on the
// element count only. `f(i0, n)` handles elements [i0, i0 + n), n <= kBlock.
constexpr int64_t kBlock = 256;
using Block = Eigen::Array<float, kBlock, 1>;
template <typename F>
void in_blocks(int64_t numel, F f) {
  for (int64_t i0 = 0; i0 < numel; i0 += kBlock) f(i0, std::min(kBlock, numel - i0));
}

constexpr double kSqrt1_2 = 0.70710678118654752440;         // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;      // 1 / sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588;     // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;

void check_grads(const Tensor& dy, const Tensor& saved, const Tensor& dx, const char* op, const char* saved_name) {
  AK_CHECK(dy.shape() == saved.shape(), "{}: output gradient has shape {}, expected {} like the {}", op,
           dy.shape_str(), saved.shape_str(), saved_name);
  AK_CHECK(dx.shape() == saved.shape(), "{}: input gradient has shape {}, expected {}", op, dx.shape_str(),
           saved.shape_str());
}

}  // namespace

Tensor relu_forward(const Tensor& x) {
  Tensor y(x.shape());
  flat(y) = flat(x).max(0.0f);  // y = max(x, 0)
  return y;
}

void relu_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  check_grads(dy, y, dx, "relu", "output");
  // forward: y = max(x, 0)  ->  dx += dy where y > 0
  flat(dx) += (flat(y) > 0.0f).select(flat(dy), 0.0f);
}

Tensor tanh_forward(const Tensor& x) {
  Tensor y(x.shape());
  in_blocks(x.numel(), [&](int64_t i0, int64_t n) {
    Block a, r;
    a.head(n) = flat(x).segment(i0, n);
    r.head(n) = a.head(n).tanh();  // y = tanh(x)
    flat(y).segment(i0, n) = r.head(n);
  });
  return y;
}

void tanh_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  check_grads(dy, y, dx, "tanh", "output");
  // forward: y = tanh(x)  ->  dx += dy * (1 - y^2)
  in_blocks(y.numel(), [&](int64_t i0, int64_t n) {
    Block a, g, r;
    a.head(n) = flat(y).segment(i0, n);
    g.head(n) = flat(dy).segment(i0, n);
    r.head(n) = flat(dx).segment(i0, n);
    r.head(n) += g.head(n) * (1.0f - a.head(n).square());
    flat(dx).segment(i0, n) = r.head(n);
  });
}

Tensor gelu_forward(const Tensor& x, GeluApproximate approximate) {
  Tensor y(x.shape());
  in_blocks(x.numel(), [&](int64_t i0, int64_t n) {
    Block a, r;
    a.head(n) = flat(x).segment(i0, n);
    const auto v = a.head(n);
    if (approximate == GeluApproximate::None)  // y = 0.5 x (1 + erf(x / sqrt 2))
      r.head(n) = 0.5f * v * (1.0f + (v * float(kSqrt1_2)).erf());
    else  // y = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
      r.head(n) = 0.5f * v * (1.0f + (float(kSqrt2OverPi) * (v + float(kGeluCubic) * v.cube())).tanh());
    flat(y).segment(i0, n) = r.head(n);
  });
  return y;
}

void gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx, GeluApproximate approximate) {
  check_grads(dy, x, dx, "gelu", "input");
  in_blocks(x.numel(), [&](int64_t i0, int64_t n) {
    Block a, g, t, r;
    a.head(n) = flat(x).segment(i0, n);
    g.head(n) = flat(dy).segment(i0, n);
    r.head(n) = flat(dx).segment(i0, n);
    const auto v = a.head(n);
    if (approximate == GeluApproximate::None) {
      // forward: y = x * Phi(x)  ->  dx += dy * (Phi(x) + x * phi(x))
      r.head(n) += g.head(n) * (0.5f * (1.0f + (v * float(kSqrt1_2)).erf()) +
                                v * float(kInvSqrt2Pi) * (-0.5f * v.square()).exp());
    } else {
      // forward: y = 0.5 x (1 + tanh u), u = sqrt(2/pi) (x + 0.044715 x^3)
      //   ->  dx += dy * (0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx),  du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
      auto tb = t.head(n);
      tb = (float(kSqrt2OverPi) * (v + float(kGeluCubic) * v.cube())).tanh();
      r.head(n) += g.head(n) * (0.5f * (1.0f + tb) + 0.5f * v * (1.0f - tb.square()) * float(kSqrt2OverPi) *
                                                         (1.0f + float(3 * kGeluCubic) * v.square()));
    }
    flat(dx).segment(i0, n) = r.head(n);
  });
}

std::vector<double> relu_reference(const Tensor& x) {
  std::vector<double> y(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) y[static_cast<size_t>(i)] = x[i] > 0 ? double(x[i]) : 0.0;
  return y;
}

std::vector<double> tanh_reference(const Tensor& x) {
  std::vector<double> y(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) y[static_cast<size_t>(i)] = std::tanh(double(x[i]));
  return y;
}

std::vector<double> gelu_reference(const Tensor& x, GeluApproximate approximate) {
  std::vector<double> y(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = x[i];
    y[static_cast<size_t>(i)] = approximate == GeluApproximate::None
                                    ? 0.5 * v * (1.0 + std::erf(v * kSqrt1_2))
                                    : 0.5 * v * (1.0 + std::tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v)));
  }
  return y;
}

}  // namespace attnkit::ops
