#include "attnkit/ops/dropout.hpp"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // Eigen AVX-512, GCC 12 false positive

#include <cmath>

#include "attnkit/tensor/eigen_bridge.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::ops {

Tensor dropout_forward(const Tensor& x, const DropoutOptions& o, Rng& rng, Tensor* mask) {
  AK_CHECK(o.p >= 0.0f && o.p < 1.0f, "dropout: p is {}, expected a probability in [0, 1)", o.p);
  if (!o.training || o.p == 0.0f) {  // the identity: no draws
    if (mask) *mask = Tensor();
    return x;
  }
  Tensor m(x.shape());  // [...]
  const float keep_scale = 1.0f / (1.0f - o.p);
  // mask = (u >= p) / (1 - p), one draw per element in row-major order (sequential: the Rng is a stream)
  for (int64_t i = 0; i < m.numel(); ++i) m[i] = rng.uniform() >= o.p ? keep_scale : 0.0f;
  Tensor y(x.shape());
  // y = x * mask
  Eigen::Map<Eigen::ArrayXf>(y.data(), y.numel()) =
      Eigen::Map<const Eigen::ArrayXf>(x.data(), x.numel()) * Eigen::Map<const Eigen::ArrayXf>(m.data(), m.numel());
  if (mask) *mask = std::move(m);
  return y;
}

void dropout_backward(const Tensor& dy, const Tensor& mask, Tensor& dx) {
  AK_CHECK(dx.shape() == dy.shape(), "dropout: input gradient has shape {}, expected {} like the output gradient",
           dx.shape_str(), dy.shape_str());
  Eigen::Map<Eigen::ArrayXf> d(dx.data(), dx.numel());
  const Eigen::Map<const Eigen::ArrayXf> g(dy.data(), dy.numel());
  if (mask.empty()) {  // forward: y = x (identity)  ->  dx += dy
    d += g;
    return;
  }
  AK_CHECK(mask.shape() == dy.shape(), "dropout: mask has shape {}, expected {} like the output gradient",
           mask.shape_str(), dy.shape_str());
  d += g * Eigen::Map<const Eigen::ArrayXf>(mask.data(), mask.numel());  // forward: y = x * mask  ->  dx += dy * mask
}

std::vector<double> dropout_reference(const Tensor& x, const Tensor& mask) {
  AK_CHECK(mask.empty() || mask.shape() == x.shape(), "dropout: mask has shape {}, expected {}", mask.shape_str(),
           x.shape_str());
  std::vector<double> y(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) y[static_cast<size_t>(i)] = double(x[i]) * (mask.empty() ? 1.0 : mask[i]);
  return y;
}

}  // namespace attnkit::ops
