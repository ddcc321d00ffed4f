// The reference kernels: plain loops in double precision (tests compare the fast kernels to them):
// sdpa_naive, sdpa_backward_naive and attention_forward_naive (every score kind).
// Legend: N batch, T queries, S keys, Dq/Dk/Dv feature sizes, A additive size, NH heads.
#include "attnkit/ops/attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attnkit/ops/attention_detail.hpp"
#include "attnkit/ops/attention_scores.hpp"

namespace attnkit::ops {
using namespace detail;

// ---- reference: plain loops, double precision ----
namespace {
// Given raw scores e [S] (double) of query (n, h, t): mask, softmax, context. Writes the outputs.
void naive_finish(const SdpaProblem& p, int64_t n, int64_t h, int64_t t, std::vector<double>& e, float* scores,
                  float* weights, float* row_lse) {
  const int64_t nh = n * p.NH + h;
  const int64_t lim = row_limit(p, n, t);
  const float* mrow = mask_row(p, n, h, t);
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t s = 0; s < p.S; ++s) {
    if (s >= lim || (mrow && mrow[s] == 0.0f)) e[s] = -std::numeric_limits<double>::infinity();
    mx = std::max(mx, e[s]);
  }
  double sum = 0;
  std::vector<double> a(static_cast<size_t>(p.S), 0.0);
  if (mx > -std::numeric_limits<double>::infinity()) {
    for (int64_t s = 0; s < p.S; ++s) sum += (a[s] = std::exp(e[s] - mx));
    for (int64_t s = 0; s < p.S; ++s) a[s] /= sum;
  }
  for (int64_t s = 0; s < p.S; ++s) {
    if (scores) scores[(nh * p.T + t) * p.S + s] = static_cast<float>(e[s]);
    if (weights) weights[(nh * p.T + t) * p.S + s] = static_cast<float>(a[s]);
  }
  if (row_lse) row_lse[nh * p.T + t] = sum > 0 ? static_cast<float>(mx + std::log(sum)) : kNegInf;
  for (int64_t j = 0; j < p.Dv; ++j) {
    double c = 0;
    for (int64_t s = 0; s < p.S; ++s) c += a[s] * p.v.data[n * p.v.batch + h * p.v.head + s * p.v.row + j];
    p.out.data[n * p.out.batch + h * p.out.head + t * p.out.row + j] = static_cast<float>(c);
  }
}
}  // namespace

void sdpa_naive(const SdpaProblem& p, float* scores, float* weights, float* row_lse) {
  std::vector<double> e(static_cast<size_t>(p.S));
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t h = 0; h < p.NH; ++h)
      for (int64_t t = 0; t < p.T; ++t) {
        for (int64_t s = 0; s < p.S; ++s) {
          double d = 0;
          for (int64_t j = 0; j < p.Dk; ++j)
            d += double(p.q.data[n * p.q.batch + h * p.q.head + t * p.q.row + j]) *
                 p.k.data[n * p.k.batch + h * p.k.head + s * p.k.row + j];
          e[s] = d * p.scale;
        }
        naive_finish(p, n, h, t, e, scores, weights, row_lse);
      }
}

// ---- backward reference: plain loops, double precision ----
// Recomputes the softmax and the output in double from q, k, v (row_lse is not read, so the
// reference does not inherit a forward's rounding), then for every (n, h):
//   forward: e = scale q.k (masked: -inf);  P = softmax(e);  out_t = sum_s P[t, s] v_s
//   D_t = dout_t . out_t;  dP[t, s] = dout_t . v_s;  dE = P (dP - D)
//   dv_s += sum_t P[t, s] dout_t;  dq_t += scale sum_s dE[t, s] k_s;  dk_s += scale sum_t dE[t, s] q_t
// A fully masked row has P = 0, so it contributes nothing (zero gradients, never NaN).
void sdpa_backward_naive(const SdpaProblem& p, const float* /*row_lse*/, StridedIn dout, const SdpaGrads& grads) {
  const double ninf = -std::numeric_limits<double>::infinity();
  auto at = [](const auto& a, int64_t n, int64_t h, int64_t i, int64_t j) -> auto& {
    return a.data[n * a.batch + h * a.head + i * a.row + j];
  };
  std::vector<double> P(static_cast<size_t>(p.T * p.S)), dq(static_cast<size_t>(p.T * p.Dk)),
      dk(static_cast<size_t>(p.S * p.Dk)), dv(static_cast<size_t>(p.S * p.Dv));
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t h = 0; h < p.NH; ++h) {
      std::fill(dq.begin(), dq.end(), 0.0), std::fill(dk.begin(), dk.end(), 0.0), std::fill(dv.begin(), dv.end(), 0.0);
      for (int64_t t = 0; t < p.T; ++t) {
        double* Pt = &P[static_cast<size_t>(t * p.S)];
        const int64_t lim = row_limit(p, n, t);
        const float* mrow = mask_row(p, n, h, t);
        double mx = ninf;
        for (int64_t s = 0; s < p.S; ++s) {  // e = scale q.k, masked -inf   [S]
          double d = 0;
          for (int64_t j = 0; j < p.Dk; ++j) d += double(at(p.q, n, h, t, j)) * at(p.k, n, h, s, j);
          Pt[s] = (s >= lim || (mrow && mrow[s] == 0.0f)) ? ninf : d * p.scale;
          mx = std::max(mx, Pt[s]);
        }
        double sum = 0;  // P = softmax(e); a fully masked row stays all zero
        for (int64_t s = 0; s < p.S; ++s) sum += (Pt[s] = mx == ninf ? 0.0 : std::exp(Pt[s] - mx));
        if (sum > 0)
          for (int64_t s = 0; s < p.S; ++s) Pt[s] /= sum;
        double D = 0;  // D_t = dout_t . out_t, out_t = sum_s P v_s
        for (int64_t j = 0; j < p.Dv; ++j) {
          double o = 0;
          for (int64_t s = 0; s < p.S; ++s) o += Pt[s] * at(p.v, n, h, s, j);
          D += double(at(dout, n, h, t, j)) * o;
        }
        for (int64_t s = 0; s < p.S; ++s) {
          if (Pt[s] == 0.0) continue;
          double dP = 0;  // dP[t, s] = dout_t . v_s
          for (int64_t j = 0; j < p.Dv; ++j) {
            dP += double(at(dout, n, h, t, j)) * at(p.v, n, h, s, j);
            dv[static_cast<size_t>(s * p.Dv + j)] += Pt[s] * at(dout, n, h, t, j);  // dv_s += P dout_t
          }
          const double dE = Pt[s] * (dP - D) * p.scale;  // dE = P (dP - D), times the score's scale
          for (int64_t j = 0; j < p.Dk; ++j) {
            dq[static_cast<size_t>(t * p.Dk + j)] += dE * at(p.k, n, h, s, j);
            dk[static_cast<size_t>(s * p.Dk + j)] += dE * at(p.q, n, h, t, j);
          }
        }
      }
      auto add = [&](const StridedOut& g, const std::vector<double>& src, int64_t rows, int64_t cols) {
        if (!g.data) return;
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j) at(g, n, h, i, j) += static_cast<float>(src[static_cast<size_t>(i * cols + j)]);
      };
      add(grads.dq, dq, p.T, p.Dk), add(grads.dk, dk, p.S, p.Dk), add(grads.dv, dv, p.S, p.Dv);
    }
}

AttentionResult attention_forward_naive(const Tensor& query, const Tensor& keys, const Tensor& values,
                                        const AttentionOptions& options) {
  const Dims d = check_inputs(query, keys, values, options);
  AttentionResult r;
  r.context = Tensor({d.N, d.T, d.Dv});
  r.row_logsumexp = Tensor({d.N, d.T});
  r.scores = Tensor({d.N, d.T, d.S});
  r.weights = Tensor({d.N, d.T, d.S});
  SdpaProblem p = make_problem(d, query.data(), d.Dq, keys.data(), values.data(), r.context.data(), options.mask, 1.0f);
  const ScoreWeights& w = options.weights;
  const int64_t A = w.W_q.empty() ? 0 : w.W_q.dim(1);
  std::vector<double> e(static_cast<size_t>(d.S));
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t t = 0; t < d.T; ++t) {
      const float* qt = query.data() + (n * d.T + t) * d.Dq;
      for (int64_t s = 0; s < d.S; ++s) {
        const float* ks = keys.data() + (n * d.S + s) * d.Dk;
        double acc = 0;
        switch (options.score) {
          case ScoreKind::Dot:
          case ScoreKind::ScaledDot:
            for (int64_t j = 0; j < d.Dk; ++j) acc += double(qt[j]) * ks[j];
            if (options.score == ScoreKind::ScaledDot) acc /= std::sqrt(double(d.Dk));
            break;
          case ScoreKind::General:
            for (int64_t i = 0; i < d.Dq; ++i)
              for (int64_t j = 0; j < d.Dk; ++j) acc += double(qt[i]) * w.W[i * d.Dk + j] * ks[j];
            break;
          case ScoreKind::Additive:
            for (int64_t a = 0; a < A; ++a) {
              double z = w.b.empty() ? 0.0 : w.b[a];
              for (int64_t i = 0; i < d.Dq; ++i) z += double(qt[i]) * w.W_q[i * A + a];
              if (w.W_k.empty()) z += ks[a];  // projected keys
              else
                for (int64_t j = 0; j < d.Dk; ++j) z += double(ks[j]) * w.W_k[j * A + a];
              acc += w.v[a] * std::tanh(z);
            }
            break;
        }
        e[s] = acc;
      }
      naive_finish(p, n, 0, t, e, r.scores.data(), r.weights.data(), r.row_logsumexp.data());
    }
  return shaped(std::move(r), d);
}

}  // namespace attnkit::ops
