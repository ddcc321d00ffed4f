#include "attnkit/ops/local_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attnkit/ops/row_loop.hpp"
#include "attnkit/tensor/eigen_bridge.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::ops {

namespace {

struct LocalDims {
  int64_t N, T, E;
};

LocalDims check_local(const Tensor& q, const Tensor& k, const Tensor& v, LocalWindow window) {
  AK_CHECK(q.rank() == 3, "local attention: query has shape {}, expected [N, T, E]", q.shape_str());
  AK_CHECK(k.shape() == q.shape() && v.shape() == q.shape(),
           "local attention: query {}, keys {} and values {} must share one shape [N, T, E]", q.shape_str(),
           k.shape_str(), v.shape_str());
  AK_CHECK(window.left >= 0 && window.right >= 0, "local attention: window [-{}, +{}] has a negative side", window.left,
           window.right);
  return {q.dim(0), q.dim(1), q.dim(2)};
}

float resolve_scale(float scale, int64_t E) { return scale != 0.0f ? scale : 1.0f / std::sqrt(float(std::max<int64_t>(E, 1))); }

}  // namespace

LocalWindow centred_window(int64_t r) {
  AK_CHECK(r >= 1, "local attention: window of {} keys, expected at least 1", r);
  return {r / 2, r - 1 - r / 2};
}

LocalAttentionResult local_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, LocalWindow window,
                                             float scale) {
  const LocalDims d = check_local(q, k, v, window);
  scale = resolve_scale(scale, d.E);
  const int64_t W = window.size();
  LocalAttentionResult r{Tensor({d.N, d.T, d.E}), Tensor({d.N, d.T, W})};  // out [N, T, E], band [N, T, W]
  detail::for_rows(d.N * d.T, W * d.E, [&](int64_t row) {
    const int64_t n = row / d.T, t = row % d.T;
    const int64_t lo = std::max<int64_t>(0, t - window.left), hi = std::min<int64_t>(d.T - 1, t + window.right);
    float* p = r.band.data() + row * W;  // [W], p[w] for key s = t - left + w
    const ConstMapVec qt(q.data() + row * d.E, d.E);
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t s = lo; s <= hi; ++s) {
      // e[t, s] = scale * q_t . k_s
      const float e = scale * qt.dot(ConstMapVec(k.data() + (n * d.T + s) * d.E, d.E));
      p[s - t + window.left] = e;
      m = std::max(m, e);
    }
    float z = 0.0f;
    for (int64_t s = lo; s <= hi; ++s) z += (p[s - t + window.left] = std::exp(p[s - t + window.left] - m));
    MapVec out(r.out.data() + row * d.E, d.E);
    for (int64_t s = lo; s <= hi; ++s) {
      // out_t = sum_s p[t, s] v_s
      const float ps = (p[s - t + window.left] /= z);
      out += ps * ConstMapVec(v.data() + (n * d.T + s) * d.E, d.E);
    }
  });
  return r;
}

void local_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& band,
                              const Tensor& dout, LocalWindow window, float scale, Tensor* dq, Tensor* dk, Tensor* dv) {
  const LocalDims d = check_local(q, k, v, window);
  scale = resolve_scale(scale, d.E);
  const int64_t W = window.size();
  AK_CHECK(band.shape() == Shape({d.N, d.T, W}), "local attention backward: band has shape {}, expected [{}, {}, {}]",
           band.shape_str(), d.N, d.T, W);
  AK_CHECK(dout.shape() == q.shape(), "local attention backward: dout has shape {}, expected {}", dout.shape_str(),
           q.shape_str());
  for (Tensor* g : {dq, dk, dv})
    if (g) AK_CHECK(g->shape() == q.shape(), "local attention backward: a gradient has shape {}, expected {}", g->shape_str(), q.shape_str());
  // Pass 1, per query t: dE[t, s] = p[t, s] (dout_t . v_s - D_t), D_t = sum_s p[t, s] (dout_t . v_s)
  // (the softmax's backward), and dq_t += scale * sum_s dE[t, s] k_s  (from e = scale * q_t . k_s).
  Tensor dE({d.N, d.T, W});  // [N, T, W]
  detail::for_rows(d.N * d.T, W * d.E, [&](int64_t row) {
    const int64_t n = row / d.T, t = row % d.T;
    const int64_t lo = std::max<int64_t>(0, t - window.left), hi = std::min<int64_t>(d.T - 1, t + window.right);
    const float* p = band.data() + row * W;
    float* de = dE.data() + row * W;
    const ConstMapVec go(dout.data() + row * d.E, d.E);
    float D = 0.0f;
    for (int64_t s = lo; s <= hi; ++s) {
      // out_t = sum_s p[t, s] v_s  ->  dp[t, s] = dout_t . v_s
      const float dp = go.dot(ConstMapVec(v.data() + (n * d.T + s) * d.E, d.E));
      de[s - t + window.left] = dp;
      D += p[s - t + window.left] * dp;
    }
    for (int64_t s = lo; s <= hi; ++s) de[s - t + window.left] = p[s - t + window.left] * (de[s - t + window.left] - D);
    if (dq) {
      MapVec g(dq->data() + row * d.E, d.E);
      for (int64_t s = lo; s <= hi; ++s) g += (scale * de[s - t + window.left]) * ConstMapVec(k.data() + (n * d.T + s) * d.E, d.E);
    }
  });
  // Pass 2, per key s (gathered over the queries t that see it, s - right <= t <= s + left):
  // dk_s += scale * sum_t dE[t, s] q_t;  dv_s += sum_t p[t, s] dout_t  (out_t = sum_s p[t, s] v_s).
  if (!dk && !dv) return;
  detail::for_rows(d.N * d.T, W * d.E, [&](int64_t row) {
    const int64_t n = row / d.T, s = row % d.T;
    const int64_t lo = std::max<int64_t>(0, s - window.right), hi = std::min<int64_t>(d.T - 1, s + window.left);
    for (int64_t t = lo; t <= hi; ++t) {
      const int64_t at = (n * d.T + t) * W + (s - t + window.left);
      if (dk) MapVec(dk->data() + row * d.E, d.E) += (scale * dE[at]) * ConstMapVec(q.data() + (n * d.T + t) * d.E, d.E);
      if (dv) MapVec(dv->data() + row * d.E, d.E) += band[at] * ConstMapVec(dout.data() + (n * d.T + t) * d.E, d.E);
    }
  });
}

Tensor local_attention_forward_naive(const Tensor& q, const Tensor& k, const Tensor& v, LocalWindow window,
                                     float scale) {
  const LocalDims d = check_local(q, k, v, window);
  scale = resolve_scale(scale, d.E);
  Tensor out({d.N, d.T, d.E});  // [N, T, E]
  std::vector<double> e(size_t(d.T));
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t t = 0; t < d.T; ++t) {
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t s = 0; s < d.T; ++s) {
        const bool visible = s >= t - window.left && s <= t + window.right;  // the T x T mask
        double acc = 0;
        for (int64_t c = 0; c < d.E; ++c) acc += double(q[(n * d.T + t) * d.E + c]) * k[(n * d.T + s) * d.E + c];
        e[size_t(s)] = visible ? scale * acc : -std::numeric_limits<double>::infinity();
        m = std::max(m, e[size_t(s)]);
      }
      double z = 0;
      for (int64_t s = 0; s < d.T; ++s) z += (e[size_t(s)] = std::exp(e[size_t(s)] - m));
      for (int64_t c = 0; c < d.E; ++c) {
        double acc = 0;
        for (int64_t s = 0; s < d.T; ++s) acc += e[size_t(s)] / z * v[(n * d.T + s) * d.E + c];
        out[(n * d.T + t) * d.E + c] = static_cast<float>(acc);
      }
    }
  return out;
}

}  // namespace attnkit::ops
