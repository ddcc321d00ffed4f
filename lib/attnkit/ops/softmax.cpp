#include "attnkit/ops/softmax.hpp"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // Eigen AVX-512, GCC 12 false positive

#include <cmath>
#include <limits>

#include "attnkit/ops/row_loop.hpp"
#include "attnkit/ops/vector_exp.hpp"
#include "attnkit/tensor/eigen_bridge.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::ops {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

Shape without_last(const Shape& s) { return s.empty() ? Shape{} : Shape(s.begin(), s.end() - 1); }

void check_rank(const Tensor& x, const char* op) {
  AK_CHECK(x.rank() >= 1, "{}: input has shape {}, expected at least one axis", op, x.shape_str());
}

}  // namespace

void softmax_rows(float* x, int64_t rows, int64_t cols, float* row_max, float* row_sum) {
  for (int64_t r = 0; r < rows; ++r) {
    Eigen::Map<Eigen::ArrayXf> row(x + r * cols, cols);
    const float m = detail::row_max(row.data(), cols);  // -inf for no columns
    float l = 0.0f;
    if (m == kNegInf) {
      row.setZero();  // every entry masked: zero weights, not 0/0
    } else {
      // every value in (0, 1]; a masked entry (-inf) gives exactly 0; the sum in an order fixed by
      // cols alone: bits independent of alignment
      l = detail::exp_shifted_sum(row.data(), cols, m);
      row *= 1.0f / l;
    }
    if (row_max) row_max[r] = m;
    if (row_sum) row_sum[r] = l;
  }
}

Tensor softmax_forward(const Tensor& x, SoftmaxStats* stats) {
  check_rank(x, "softmax");
  Tensor y = x;
  const int64_t cols = x.dim(-1), rows = cols ? x.numel() / cols : 0;
  if (stats) {
    stats->row_max = Tensor(without_last(x.shape()));
    stats->row_sum = Tensor(without_last(x.shape()));
  }
  softmax_rows(y.data(), rows, cols, stats ? stats->row_max.data() : nullptr,
               stats ? stats->row_sum.data() : nullptr);
  return y;
}

namespace {
// Shapes of a row-wise backward: dy, y and dx all [..., C].
int64_t check_backward(const Tensor& dy, const Tensor& y, const Tensor& dx, const char* op) {
  check_rank(y, op);
  AK_CHECK(dy.shape() == y.shape(), "{}: output gradient has shape {}, expected {} like the output", op,
           dy.shape_str(), y.shape_str());
  AK_CHECK(dx.shape() == y.shape(), "{}: input gradient has shape {}, expected {}", op, dx.shape_str(),
           y.shape_str());
  return y.dim(-1);
}
}  // namespace

void softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  const int64_t C = check_backward(dy, y, dx, "softmax"), rows = C ? y.numel() / C : 0;
  detail::for_rows(rows, C, [&](int64_t r) {
    const Eigen::Map<const Eigen::ArrayXf> yr(y.data() + r * C, C), g(dy.data() + r * C, C);
    // forward: y_j = exp(x_j - m) / sum_k exp(x_k - m)  ->  dx_j += y_j (dy_j - sum_k dy_k y_k)
    // (a fully masked row has y = 0: its gradient is 0)
    const float *gp = g.data(), *yp = yr.data();
    const float s = detail::fixed_sum(C, [gp, yp](int64_t i) { return gp[i] * yp[i]; });
    Eigen::Map<Eigen::ArrayXf>(dx.data() + r * C, C) += yr * (g - s);
  });
}

Tensor log_softmax_forward(const Tensor& x) {
  check_rank(x, "log_softmax");
  Tensor y = x;
  const int64_t cols = x.dim(-1), rows = cols ? x.numel() / cols : 0;
  for (int64_t r = 0; r < rows; ++r) {
    Eigen::Map<Eigen::ArrayXf> row(y.data() + r * cols, cols);
    const float m = row.maxCoeff();
    if (m == kNegInf) continue;  // all -inf stays -inf
    const float* p = row.data();
    const float lse = m + std::log(detail::fixed_sum(cols, [p, m](int64_t i) { return std::exp(p[i] - m); }));
    row -= lse;
  }
  return y;
}

void log_softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  const int64_t C = check_backward(dy, y, dx, "log_softmax"), rows = C ? y.numel() / C : 0;
  detail::for_rows(rows, C, [&](int64_t r) {
    const Eigen::Map<const Eigen::ArrayXf> yr(y.data() + r * C, C), g(dy.data() + r * C, C);
    if (yr.maxCoeff() == kNegInf) return;  // a fully masked row: zero gradient, not NaN
    // forward: y_j = x_j - m - log(sum_k exp(x_k - m))  ->  dx_j += dy_j - exp(y_j) sum_k dy_k
    const float* gp = g.data();
    const float s = detail::fixed_sum(C, [gp](int64_t i) { return gp[i]; });
    // (a masked entry, y = -inf, has exp(y) = 0 exactly: not Eigen's 2.9e-39)
    Eigen::Map<Eigen::ArrayXf>(dx.data() + r * C, C) += g - (yr == kNegInf).select(0.0f, yr.exp()) * s;
  });
}

namespace {
// The naive references: per row, in double, y = f(x_j, m, sum_k exp(x_k - m)); rows of -inf are
// left as `masked` values (0 for softmax, -inf for log-softmax).
template <typename F>
std::vector<double> naive_rows(const Tensor& x, const char* op, double masked, F f) {
  check_rank(x, op);
  std::vector<double> y(static_cast<size_t>(x.numel()), masked);
  const int64_t cols = x.dim(-1), rows = cols ? x.numel() / cols : 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x.data() + r * cols;
    double m = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int64_t j = 0; j < cols; ++j) m = std::max(m, double(in[j]));
    if (std::isinf(m) && m < 0) continue;
    for (int64_t j = 0; j < cols; ++j) sum += std::exp(double(in[j]) - m);
    for (int64_t j = 0; j < cols; ++j) y[static_cast<size_t>(r * cols + j)] = f(double(in[j]), m, sum);
  }
  return y;
}
Tensor to_float(const Shape& shape, const std::vector<double>& v) {
  Tensor y(shape);
  for (int64_t i = 0; i < y.numel(); ++i) y[i] = static_cast<float>(v[static_cast<size_t>(i)]);
  return y;
}
}  // namespace

std::vector<double> softmax_reference(const Tensor& x) {
  return naive_rows(x, "softmax", 0.0, [](double xj, double m, double sum) { return std::exp(xj - m) / sum; });
}

std::vector<double> log_softmax_reference(const Tensor& x) {
  return naive_rows(x, "log_softmax", -std::numeric_limits<double>::infinity(),
                    [](double xj, double m, double sum) { return xj - m - std::log(sum); });
}

Tensor softmax_naive(const Tensor& x) { return to_float(x.shape(), softmax_reference(x)); }
Tensor log_softmax_naive(const Tensor& x) { return to_float(x.shape(), log_softmax_reference(x)); }

}  // namespace attnkit::ops
