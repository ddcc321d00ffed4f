// Legend: M rows, E normalised size.
#include "attnkit/ops/layer_norm.hpp"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // Eigen AVX-512, GCC 12 false positive

#include <cmath>
#include <vector>

#include <omp.h>

#include "attnkit/ops/row_loop.hpp"
#include "attnkit/tensor/eigen_bridge.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::ops {
namespace {

using Arr = Eigen::Map<Eigen::ArrayXf>;
using CArr = Eigen::Map<const Eigen::ArrayXf>;

Shape without_last(const Shape& s) { return Shape(s.begin(), s.end() - 1); }

struct NormDims {
  int64_t M, E;
};

NormDims check(const Tensor& x, const Tensor& weight, const Tensor& bias, const char* what) {
  AK_CHECK(x.rank() >= 1, "{}: input has shape {}, expected [..., E] (at least one axis)", what, x.shape_str());
  const int64_t E = x.dim(-1);
  AK_CHECK(weight.empty() || weight.shape() == Shape{E}, "{}: weight has shape {}, expected [{}] (input {})", what,
           weight.shape_str(), E, x.shape_str());
  AK_CHECK(bias.empty() || bias.shape() == Shape{E}, "{}: bias has shape {}, expected [{}] (input {})", what,
           bias.shape_str(), E, x.shape_str());
  return {shape_numel(without_last(x.shape())), E};
}

// For R consecutive rows of x [.., E]: mu0 = mean, mu = mu0 + mean(x - mu0), sq = sum((x - mu)^2), each sum in
// detail::fixed_sum's order, the R rows in lockstep (detail::fixed_sums).
template <int R>
void row_sums(const float* x, int64_t E, float inv_E, float* mu0, float* mu, float* sq) {
  detail::fixed_sums<R>(E, E, x, [](float v, int) { return v; }, mu0);
  for (int q = 0; q < R; ++q) mu0[q] *= inv_E;
  detail::fixed_sums<R>(E, E, x, [&](float v, int q) { return v - mu0[q]; }, mu);
  for (int q = 0; q < R; ++q) mu[q] = mu0[q] + mu[q] * inv_E;
  detail::fixed_sums<R>(E, E, x, [&](float v, int q) { const float c = v - mu[q]; return c * c; }, sq);
}

}  // namespace

Tensor layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, LayerNormStats* stats,
                          const char* what) {
  const NormDims d = check(x, weight, bias, what);
  const int64_t M = d.M, E = d.E;
  AK_CHECK(eps >= 0.0f && std::isfinite(eps), "{}: eps is {}, expected a finite number >= 0", what, eps);
  Tensor y = Tensor::uninitialized(x.shape());  // [..., E], every row written below
  if (stats) stats->mean = Tensor(without_last(x.shape())), stats->rstd = Tensor(without_last(x.shape()));  // [..]
  if (E == 0) return y;
  const float* w = weight.empty() ? nullptr : weight.data();
  const float* b = bias.empty() ? nullptr : bias.data();
  float* mean_out = stats ? stats->mean.data() : nullptr;
  float* rstd_out = stats ? stats->rstd.data() : nullptr;
  const float inv_E = 1.0f / static_cast<float>(E);
  // mu = mean_e x, corrected once: x - mu0 is (nearly) exact for x near mu0, so the second pass removes the
  // float sum's rounding (x = 100 + 0.01 z: the error of the mean drops from ~2 ulp of 100 to half an ulp, which
  // is what xhat's precision rests on). Each sum in detail::fixed_sum's order (bits independent of alignment),
  // kRows rows in lockstep: one row's sums are a chain of dependent additions, latency-bound; several
  // rows' chains overlap. The same bits as one row at a time.
  constexpr int64_t kRows = 4;
  const int64_t blocks = (M + kRows - 1) / kRows;
  detail::for_rows(blocks, kRows * E, [&](int64_t block) {
    const int64_t r0 = block * kRows, n = std::min(kRows, M - r0);
    const float* xs = x.data() + r0 * E;
    float mu0[kRows], mu[kRows], var[kRows];
    if (n == kRows) row_sums<kRows>(xs, E, inv_E, mu0, mu, var);
    else
      for (int64_t q = 0; q < n; ++q) row_sums<1>(xs + q * E, E, inv_E, &mu0[q], &mu[q], &var[q]);  // the last rows
    for (int64_t q = 0; q < n; ++q) {
      const int64_t r = r0 + q;
      CArr xr(x.data() + r * E, E);
      Arr yr(y.data() + r * E, E);
      const float rs = 1.0f / std::sqrt(var[q] * inv_E + eps);  // rstd (biased variance)
      if (w && b) yr = (xr - mu[q]) * rs * CArr(w, E) + CArr(b, E);  // y = xhat * w + b
      else if (w) yr = (xr - mu[q]) * rs * CArr(w, E);
      else if (b) yr = (xr - mu[q]) * rs + CArr(b, E);
      else yr = (xr - mu[q]) * rs;
      if (mean_out) mean_out[r] = mu[q], rstd_out[r] = rs;
    }
  });
  return y;
}

void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const LayerNormStats& stats,
                         Tensor* dx, Tensor* dweight, Tensor* dbias, const char* what) {
  const NormDims d = check(x, weight, Tensor(), what);
  const int64_t M = d.M, E = d.E;
  AK_CHECK(dy.shape() == x.shape(), "{}: output gradient has shape {}, expected {}", what, dy.shape_str(),
           x.shape_str());
  const Shape rows = without_last(x.shape());
  AK_CHECK(stats.mean.shape() == rows && stats.rstd.shape() == rows,
           "{}: saved statistics have shapes {} and {}, expected {} (from the forward of input {})", what,
           stats.mean.shape_str(), stats.rstd.shape_str(), shape_str(rows), x.shape_str());
  AK_CHECK(!dx || dx->shape() == x.shape(), "{}: input gradient has shape {}, expected {}", what, dx->shape_str(),
           x.shape_str());
  AK_CHECK(!dweight || dweight->shape() == Shape{E}, "{}: weight gradient has shape {}, expected [{}]", what,
           dweight->shape_str(), E);
  AK_CHECK(!dbias || dbias->shape() == Shape{E}, "{}: bias gradient has shape {}, expected [{}]", what,
           dbias->shape_str(), E);
  if (E == 0 || M == 0) return;
  const float* w = weight.empty() ? nullptr : weight.data();
  const bool params = dweight || dbias;
  const int team = detail::row_team(M, E);
  // dw and db are sums over rows: each thread adds into its own [2, E] block, summed afterwards
  // (allocated here, before the team starts).
  std::vector<float> partial(params ? static_cast<size_t>(team) * 2 * E : 0, 0.0f);
  const float inv_E = 1.0f / static_cast<float>(E);
#pragma omp parallel num_threads(team) if (team > 1)
  {
    const int64_t id = omp_get_thread_num(), nt = omp_get_num_threads();  // OpenMP may give fewer
    float* pw = params ? partial.data() + id * 2 * E : nullptr;
    for (int64_t r = id * M / nt, end = (id + 1) * M / nt; r < end; ++r) {
      CArr xr(x.data() + r * E, E), dyr(dy.data() + r * E, E);
      const float mu = stats.mean[r], rs = stats.rstd[r];
      const auto xhat = (xr - mu) * rs;  // forward: xhat = (x - mu) * rstd (recomputed, lazily)
      if (params) {
        Arr(pw, E) += dyr * xhat;  // forward: y = xhat * w + b  ->  dw += dy * xhat
        Arr(pw + E, E) += dyr;     //                               db += dy
      }
      if (!dx) continue;
      // forward: y = xhat * w  ->  g = dy * w = d loss / d xhat
      // forward: xhat = (x - mu) * rstd, with mu and rstd functions of the whole row:
      //   dx = rstd * (g - mean_e g - xhat * mean_e(g * xhat))
      Arr dxr(dx->data() + r * E, E);
      const float *xp = xr.data(), *gp = dyr.data();
      auto xh = [xp, mu, rs](int64_t i) { return (xp[i] - mu) * rs; };
      if (w) {
        const auto g = dyr * CArr(w, E);
        const float mg = detail::fixed_sum(E, [gp, w](int64_t i) { return gp[i] * w[i]; }) * inv_E;
        const float mgx = detail::fixed_sum(E, [gp, w, &xh](int64_t i) { return gp[i] * w[i] * xh(i); }) * inv_E;
        dxr += rs * (g - mg - xhat * mgx);
      } else {
        const float mg = detail::fixed_sum(E, [gp](int64_t i) { return gp[i]; }) * inv_E;
        const float mgx = detail::fixed_sum(E, [gp, &xh](int64_t i) { return gp[i] * xh(i); }) * inv_E;
        dxr += rs * (dyr - mg - xhat * mgx);
      }
    }
  }
  for (int t = 0; t < team && params; ++t) {
    if (dweight) Arr(dweight->data(), E) += CArr(partial.data() + t * 2 * E, E);
    if (dbias) Arr(dbias->data(), E) += CArr(partial.data() + t * 2 * E + E, E);
  }
}

std::vector<double> layer_norm_reference(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  const NormDims d = check(x, weight, bias, "layer_norm");
  const int64_t M = d.M, E = d.E;
  std::vector<double> y(static_cast<size_t>(x.numel()));
  for (int64_t r = 0; r < M; ++r) {
    const float* xr = x.data() + r * E;
    double mu = 0, var = 0;
    for (int64_t e = 0; e < E; ++e) mu += xr[e];
    mu /= double(E);
    for (int64_t e = 0; e < E; ++e) var += (xr[e] - mu) * (xr[e] - mu);
    var /= double(E);
    const double rs = 1.0 / std::sqrt(var + eps);
    for (int64_t e = 0; e < E; ++e) {
      double v = (xr[e] - mu) * rs;
      if (!weight.empty()) v *= weight[e];
      if (!bias.empty()) v += bias[e];
      y[static_cast<size_t>(r * E + e)] = v;
    }
  }
  return y;
}

}  // namespace attnkit::ops
