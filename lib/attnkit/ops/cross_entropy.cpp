// Legend: R rows, C classes, eps = label smoothing.
#include "attnkit/ops/cross_entropy.hpp"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // Eigen AVX-512, GCC 12 false positive

#include <cmath>
#include <limits>

#include "attnkit/ops/embedding.hpp"
#include "attnkit/ops/row_loop.hpp"
#include "attnkit/tensor/eigen_bridge.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::ops {
namespace {

using CArr = Eigen::Map<const Eigen::ArrayXf>;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

Shape without_last(const Shape& s) { return Shape(s.begin(), s.end() - 1); }

// exp over 8 floats at a time (Eigen's vectorised exp on one fixed-size packet; scalar std::exp per element
// is slow over a vocabulary-sized row). Each lane's value depends on its input
// alone, never on the address or the neighbours, so results do not depend on alignment; -inf gives exactly 0.
using Pack8 = Eigen::Array<float, 8, 1>;
inline Pack8 exp_shifted8(const float* x, int64_t n, float shift) {  // exp(x[i] - shift), i < n <= 8
  Pack8 v = Pack8::Zero();
  if (n == 8) v = Eigen::Map<const Pack8>(x) - shift;
  else
    for (int64_t i = 0; i < n; ++i) v[i] = x[i] - shift;
  Pack8 e = v.exp();  // on its own: Eigen 3.4 evaluates a select() around it element by element (std::exp)
  for (int k = 0; k < 8; ++k)
    if (v[k] == kNegInf) e[k] = 0.0f;
  return e;
}

// sum_j exp(x_j - shift) in detail::fixed_sum's order (8 interleaved partial sums, the tail in sequence,
// then the fixed tree), with exp_shifted8's values.
inline float sum_exp_shifted(const float* x, int64_t n, float shift) {
  Pack8 acc = Pack8::Zero();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc += exp_shifted8(x + i, 8, shift);
  float tail = 0.0f;
  if (i < n) {
    const Pack8 t = exp_shifted8(x + i, n - i, shift);
    for (int64_t k = 0; k < n - i; ++k) tail += t[k];
  }
  return (((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))) + tail;
}

struct CeDims {
  int64_t R, C, counted;
};

CeDims check(const Tensor& logits, const std::vector<int64_t>& targets, const CrossEntropyOptions& o) {
  AK_CHECK(logits.rank() >= 1, "cross_entropy: logits have shape {}, expected [..., C] (classes last)",
           logits.shape_str());
  AK_CHECK(o.label_smoothing >= 0.0f && o.label_smoothing < 1.0f,
           "cross_entropy: label_smoothing is {}, expected a number in [0, 1)", o.label_smoothing);
  const Shape rows = without_last(logits.shape());
  const int64_t C = logits.dim(-1), R = shape_numel(rows);
  AK_CHECK(static_cast<int64_t>(targets.size()) == R,
           "cross_entropy: {} targets for logits {}, expected {} (one per row of {} classes)", targets.size(),
           logits.shape_str(), R, C);
  int64_t counted = 0;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t t = targets[static_cast<size_t>(r)];
    if (t == o.ignore_index) continue;
    AK_CHECK(t >= 0 && t < C, "cross_entropy: targets{} = {} is out of range for {} classes (logits {}; ignore_index {})",
             shape_str(unravel_index(r, rows)), t, C, logits.shape_str(), o.ignore_index);
    ++counted;
  }
  return {R, C, counted};
}

}  // namespace

Tensor cross_entropy_forward(const Tensor& logits, const std::vector<int64_t>& targets, const CrossEntropyOptions& o,
                             CrossEntropySaved* saved) {
  const CeDims d = check(logits, targets, o);
  const int64_t R = d.R, C = d.C;
  const float eps = o.label_smoothing;
  Tensor lse({R});      // [R]
  Tensor per_row({R});  // [R] loss_r, 0 for an ignored row
  detail::for_rows(R, C, [&](int64_t r) {
    const int64_t t = targets[static_cast<size_t>(r)];
    if (t == o.ignore_index) return;
    const CArr x(logits.data() + r * C, C);
    const float m = x.maxCoeff();
    // lse = m + log sum_j exp(x_j - m): every exp in (0, 1]
    const float* xp = x.data();  // sums in a fixed order (detail::fixed_sum's): bits independent of alignment
    const float l = m == kNegInf ? m : m + std::log(sum_exp_shifted(xp, C, m));
    lse[r] = l;
    float loss = l - x[t];                                              // nll = lse - x_t
    if (eps > 0.0f)  // + eps * (lse - mean_j x_j)
      loss = (1.0f - eps) * loss + eps * (l - detail::fixed_sum(C, [xp](int64_t j) { return xp[j]; }) / float(C));
    per_row[r] = loss;
  });
  Tensor loss;
  if (o.reduction == Reduction::None) {
    loss = std::move(per_row);
    loss.reshape(without_last(logits.shape()));  // [..]
  } else {
    double sum = 0;
    for (int64_t r = 0; r < R; ++r) sum += per_row[r];
    if (o.reduction == Reduction::Mean) sum = d.counted ? sum / double(d.counted) : 0.0;  // every row ignored: 0
    loss = Tensor::scalar(static_cast<float>(sum));
  }
  if (saved) saved->row_lse = std::move(lse), saved->counted = d.counted;
  return loss;
}

Tensor cross_entropy_forward(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options,
                             CrossEntropySaved* saved) {
  AK_CHECK(logits.rank() >= 1 && targets.shape() == without_last(logits.shape()),
           "cross_entropy: targets have shape {}, expected {} (logits {} without the class axis)", targets.shape_str(),
           logits.rank() >= 1 ? shape_str(without_last(logits.shape())) : "?", logits.shape_str());
  return cross_entropy_forward(logits, indices_from(targets, "cross_entropy", "targets"), options, saved);
}

void cross_entropy_backward(const Tensor& dloss, const Tensor& logits, const std::vector<int64_t>& targets,
                            const CrossEntropyOptions& o, const CrossEntropySaved& saved, Tensor& dlogits) {
  const CeDims d = check(logits, targets, o);
  const int64_t R = d.R, C = d.C;
  AK_CHECK(dlogits.shape() == logits.shape(), "cross_entropy: logits gradient has shape {}, expected {}",
           dlogits.shape_str(), logits.shape_str());
  AK_CHECK(saved.row_lse.shape() == Shape{R} && saved.counted == d.counted,
           "cross_entropy: saved statistics are for [{}] rows ({} counted), expected [{}] ({} counted)",
           saved.row_lse.numel(), saved.counted, R, d.counted);
  const Shape loss_shape = o.reduction == Reduction::None ? without_last(logits.shape()) : Shape{};
  AK_CHECK(dloss.shape() == loss_shape, "cross_entropy: loss gradient has shape {}, expected {}", dloss.shape_str(),
           shape_str(loss_shape));
  // g_r: mean = sum / counted  ->  dloss / counted;  sum  ->  dloss;  none  ->  dloss_r
  const float g_all = o.reduction == Reduction::Mean ? (d.counted ? dloss[0] / static_cast<float>(d.counted) : 0.0f)
                      : o.reduction == Reduction::Sum ? dloss[0]
                                                      : 0.0f;
  const float eps = o.label_smoothing, off = eps / static_cast<float>(C);
  detail::for_rows(R, C, [&](int64_t r) {
    const int64_t t = targets[static_cast<size_t>(r)];
    if (t == o.ignore_index) return;  // loss_r = 0: no gradient
    const float g = o.reduction == Reduction::None ? dloss[r] : g_all;
    if (g == 0.0f) return;
    const CArr x(logits.data() + r * C, C);
    float* dx = dlogits.data() + r * C;
    // forward: loss_r = (1 - eps)(lse - x_t) + eps (lse - mean_j x_j), d lse / d x_j = p_j
    //   ->  dx_j += g (p_j - (1 - eps) [j = t] - eps / C)
    // (a masked logit, -inf, has p = 0 exactly: exp_shifted8 selects it, Eigen's packet exp(-inf) is 2.9e-39)
    const float lse = saved.row_lse[r];
    int64_t j = 0;
    for (; j + 8 <= C; j += 8) Eigen::Map<Pack8>(dx + j) += g * (exp_shifted8(x.data() + j, 8, lse) - off);
    if (j < C) {
      const Pack8 p = exp_shifted8(x.data() + j, C - j, lse);
      for (int64_t k = 0; k < C - j; ++k) dx[j + k] += g * (p[k] - off);
    }
    dx[t] -= g * (1.0f - eps);
  });
}

std::vector<double> cross_entropy_reference(const Tensor& logits, const std::vector<int64_t>& targets,
                                            const CrossEntropyOptions& o) {
  const CeDims d = check(logits, targets, o);
  std::vector<double> per_row(static_cast<size_t>(d.R), 0.0);
  double sum = 0;
  for (int64_t r = 0; r < d.R; ++r) {
    const int64_t t = targets[static_cast<size_t>(r)];
    if (t == o.ignore_index) continue;
    const float* x = logits.data() + r * d.C;
    double m = -std::numeric_limits<double>::infinity(), s = 0, mean = 0;
    for (int64_t j = 0; j < d.C; ++j) m = std::max(m, double(x[j]));
    for (int64_t j = 0; j < d.C; ++j) s += std::exp(x[j] - m), mean += x[j];
    const double lse = m + std::log(s);
    mean /= double(d.C);
    const double eps = o.label_smoothing;
    per_row[static_cast<size_t>(r)] = (1 - eps) * (lse - x[t]) + (eps > 0 ? eps * (lse - mean) : 0.0);
    sum += per_row[static_cast<size_t>(r)];
  }
  if (o.reduction == Reduction::None) return per_row;
  if (o.reduction == Reduction::Sum) return {sum};
  return {d.counted ? sum / double(d.counted) : 0.0};
}

}  // namespace attnkit::ops
