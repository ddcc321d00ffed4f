// attention_forward / attention_backward: the score kinds (dot, scaled-dot, general, additive) on
// [T, D] / [N, T, D] tensors, over the strided kernels of ops/attention.hpp.
// Legend: N batch, T queries, S keys, Dq/Dk/Dv feature sizes, A additive size.
#include "attnkit/ops/attention_scores.hpp"

// GCC 12 warns about Eigen's AVX-512 intrinsics (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <omp.h>

#include "attnkit/ops/attention_detail.hpp"
#include "attnkit/ops/linear.hpp"
#include "attnkit/ops/matmul.hpp"
#include "attnkit/ops/softmax.hpp"
#include "attnkit/ops/vector_exp.hpp"
#include "attnkit/tensor/eigen_bridge.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/parallel_errors.hpp"
#include "attnkit/tensor/threads.hpp"

namespace attnkit::ops {
using namespace detail;

ScoreKind parse_score_kind(std::string_view name) {
  if (name == "dot") return ScoreKind::Dot;
  if (name == "scaled-dot") return ScoreKind::ScaledDot;
  if (name == "general") return ScoreKind::General;
  if (name == "additive") return ScoreKind::Additive;
  fail("attention: unknown score \"{}\" (expected dot, scaled-dot, general or additive)", name);
}

std::string_view score_kind_name(ScoreKind kind) {
  switch (kind) {
    case ScoreKind::Dot: return "dot";
    case ScoreKind::ScaledDot: return "scaled-dot";
    case ScoreKind::General: return "general";
    default: return "additive";
  }
}

// ---- attention_forward: the score kinds on [T, D] / [N, T, D] tensors ----
namespace detail {

Dims check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  Dims d;
  static_cast<QkvDims&>(d) = check_qkv(q, k, v, "attention", "Dq");
  d.Dq = q.dim(-1), d.Dk = k.dim(-1), d.Dv = v.dim(-1);
  const ScoreWeights& w = o.weights;
  switch (o.score) {
    case ScoreKind::Dot:
    case ScoreKind::ScaledDot:
      AK_CHECK(d.Dk == d.Dq, "attention: keys {} and query {} disagree on the feature size ({} score needs Dq == Dk)",
               k.shape_str(), q.shape_str(), score_kind_name(o.score));
      break;
    case ScoreKind::General:
      AK_CHECK(!w.W.empty(), "attention: the general score needs a weight W [Dq, Dk] = [{}, {}]", d.Dq, d.Dk);
      AK_CHECK(w.W.shape() == (Shape{d.Dq, d.Dk}), "attention: W has shape {}, expected [Dq, Dk] = [{}, {}]",
               w.W.shape_str(), d.Dq, d.Dk);
      break;
    case ScoreKind::Additive: {
      AK_CHECK(!w.W_q.empty() && !w.v.empty(),
               "attention: the additive score needs weights W_q [Dq, A] and v [A] (and W_k [Dk, A] unless the keys "
               "are already projected){}",
               w.W_q.empty() ? " (W_q is missing)" : " (v is missing)");
      AK_CHECK(w.W_q.rank() == 2 && w.W_q.dim(0) == d.Dq, "attention: W_q has shape {}, expected [Dq, A] with Dq = {}",
               w.W_q.shape_str(), d.Dq);
      const int64_t A = w.W_q.dim(1);
      if (w.W_k.empty())
        AK_CHECK(d.Dk == A, "attention: the additive score without W_k takes projected keys [.., S, A]: keys have {} "
                 "features, A = {}", d.Dk, A);
      else
        AK_CHECK(w.W_k.shape() == (Shape{d.Dk, A}), "attention: W_k has shape {}, expected [Dk, A] = [{}, {}]",
                 w.W_k.shape_str(), d.Dk, A);
      AK_CHECK(w.v.shape() == Shape{A}, "attention: v has shape {}, expected [A] = [{}]", w.v.shape_str(), A);
      AK_CHECK(w.b.empty() || w.b.shape() == Shape{A}, "attention: b has shape {}, expected [A] = [{}]",
               w.b.shape_str(), A);
      break;
    }
  }
  check_mask(o.mask, d.N, 1, d.T, d.S, "attention");
  return d;
}

SdpaProblem make_problem(const Dims& d, const float* q, int64_t dq, const float* k, const float* v, float* out,
                         const MaskSpec& mask, float scale) {
  SdpaProblem p;
  p.N = d.N, p.NH = 1, p.T = d.T, p.S = d.S, p.Dk = dq, p.Dv = d.Dv, p.scale = scale;
  p.q = {q, d.T * dq, 0, dq};
  p.k = {k, d.S * dq, 0, dq};
  p.v = {v, d.S * d.Dv, 0, d.Dv};
  p.out = {out, d.T * d.Dv, 0, d.Dv};
  p.mask = &mask;
  return p;
}

AttentionResult shaped(AttentionResult r, const Dims& d) {
  auto shape = [&](Shape s) {
    if (!d.batched) s.erase(s.begin());
    return s;
  };
  r.context.reshape(shape({d.N, d.T, d.Dv}));
  r.row_logsumexp.reshape(shape({d.N, d.T}));
  if (!r.weights.empty()) r.weights.reshape(shape({d.N, d.T, d.S}));
  if (!r.scores.empty()) r.scores.reshape(shape({d.N, d.T, d.S}));
  return r;
}
}  // namespace detail

namespace {

// Bahdanau scores row by row: e[s] = v . tanh(Qp[t] + Kp[s]), never more than [S, A] at a time.
AttentionResult additive_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o,
                                 const Dims& d) {
  const ScoreWeights& w = o.weights;
  const int64_t A = w.W_q.dim(1);
  // The same products as additive_backward's (ops::gemm), so its recomputed Z is the forward's, bit for bit.
  MatrixRM Qp(d.N * d.T, A), Kp(d.N * d.S, A);
  gemm(Trans::No, Trans::No, d.N * d.T, A, d.Dq, 1.0f, q.data(), d.Dq, w.W_q.data(), A, 0.0f, Qp.data(), A);  // [N*T, A]
  if (w.W_k.empty()) Kp = as_matrix(k.data(), d.N * d.S, A);  // the keys already projected
  else gemm(Trans::No, Trans::No, d.N * d.S, A, d.Dk, 1.0f, k.data(), d.Dk, w.W_k.data(), A, 0.0f, Kp.data(), A);  // [N*S, A]
  if (!w.b.empty()) Kp.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(w.b.data(), A);
  AttentionResult r;
  r.context = Tensor({d.N, d.T, d.Dv});
  r.row_logsumexp = Tensor({d.N, d.T});
  const bool keep = o.keep == KeepWeights::Yes;
  if (keep) r.scores = Tensor({d.N, d.T, d.S}), r.weights = Tensor({d.N, d.T, d.S});
  SdpaProblem p = make_problem(d, q.data(), d.Dq, k.data(), v.data(), r.context.data(), o.mask, 1.0f);
  const int team = attnkit::detail::team_for(d.N * d.T, 4.0 * d.N * d.T * d.S * (A + d.Dv));  // tanh(Qp + Kp) . v, P V
  // Allocated before the team: each thread's M [S, A] and e [S].
  std::vector<MatrixRM> Ms(static_cast<size_t>(team), MatrixRM(d.S, A));
  std::vector<Eigen::VectorXf> es(static_cast<size_t>(team), Eigen::VectorXf(d.S));
  ParallelErrors errors;
#pragma omp parallel num_threads(team) if (team > 1)
  {
    MatrixRM& M = Ms[static_cast<size_t>(omp_get_thread_num())];
    Eigen::VectorXf& e = es[static_cast<size_t>(omp_get_thread_num())];
#pragma omp for schedule(static)
    for (int64_t nt = 0; nt < d.N * d.T; ++nt) {
      errors.run([&] {
        const int64_t n = nt / d.T, t = nt % d.T;
        M = Kp.middleRows(n * d.S, d.S);
        M.rowwise() += Qp.row(nt);
        M.array() = M.array().tanh();  // [S, A]; tanh in its own pass stays vectorised
        // e^T [1, S] = v^T [1, A] M^T: one row of C, ops::gemm's unpacked dot-product path (as the backward)
        gemm(Trans::No, Trans::Yes, 1, d.S, A, 1.0f, w.v.data(), A, M.data(), A, 0.0f, e.data(), d.S, GemmThreads::This);
        mask_scores(e.data(), 0, d.S, row_limit(p, n, t), mask_row(p, n, 0, t));
        if (keep) std::copy(e.data(), e.data() + d.S, r.scores.data() + nt * d.S);
        float mx = 0, sum = 0;
        softmax_rows(e.data(), 1, d.S, &mx, &sum);
        if (keep) std::copy(e.data(), e.data() + d.S, r.weights.data() + nt * d.S);
        r.row_logsumexp[nt] = sum > 0 ? mx + std::log(sum) : kNegInf;
        // context_t [1, Dv] = P [1, S] V[n] [S, Dv] (one row of C: streamed, nothing packed)
        gemm(Trans::No, Trans::No, 1, d.Dv, d.S, 1.0f, e.data(), d.S, v.data() + n * d.S * d.Dv, d.Dv, 0.0f,
             r.context.data() + nt * d.Dv, d.Dv, GemmThreads::This);
      });
    }
  }
  errors.rethrow();
  return r;
}

}  // namespace

AttentionResult attention_forward(const Tensor& query, const Tensor& keys, const Tensor& values,
                                  const AttentionOptions& options) {
  const Dims d = check_inputs(query, keys, values, options);
  if (options.score == ScoreKind::Additive) return shaped(additive_forward(query, keys, values, options, d), d);
  // general: q' = q W [N, T, Dk], then the dot score
  Tensor projected;
  const float* q = query.data();
  if (options.score == ScoreKind::General) {
    projected = Tensor({d.N, d.T, d.Dk});
    as_matrix(projected).noalias() = as_matrix(query.data(), d.N * d.T, d.Dq) * as_matrix(options.weights.W);
    q = projected.data();
  }
  const float scale = options.score == ScoreKind::ScaledDot ? 1.0f / std::sqrt(static_cast<float>(d.Dk)) : 1.0f;
  AttentionResult r;
  r.context = Tensor({d.N, d.T, d.Dv});
  r.row_logsumexp = Tensor({d.N, d.T});
  if (d.N * d.T == 0 || d.S == 0) {
    // No queries, or no keys: a row with no key to attend to is a fully masked row (zeros).
    r.row_logsumexp = Tensor::filled({d.N, d.T}, -std::numeric_limits<float>::infinity());
    r = shaped(std::move(r), d);
    if (options.keep == KeepWeights::Yes) {  // empty: shaped() leaves them alone
      const Shape s = d.batched ? Shape{d.N, d.T, d.S} : Shape{d.T, d.S};
      r.scores = Tensor(s), r.weights = Tensor(s);
    }
    return r;
  }
  SdpaProblem p = make_problem(d, q, d.Dk, keys.data(), values.data(), r.context.data(), options.mask, scale);
  if (options.keep == KeepWeights::Yes) {
    AK_CHECK(d.N * d.T * d.S <= kMaxWeightElements,
             "attention: the scores and weights would be [N, T, S] = {} ({:.1f} GiB each); ask for the context only",
             shape_str({d.N, d.T, d.S}), d.N * d.T * d.S * 4.0 / (1 << 30));
    r.scores = Tensor({d.N, d.T, d.S});
    r.weights = Tensor({d.N, d.T, d.S});
    sdpa_full(p, r.scores.data(), r.weights.data(), r.row_logsumexp.data());
  } else {
    sdpa_tiled(p, r.row_logsumexp.data());
  }
  return shaped(std::move(r), d);
}

// ---- attention_backward: the score kinds on [T, D] / [N, T, D] tensors ----
namespace {

// The strided core's gradients from the forward's weights W [N, T, S] (KeepWeights::Yes), for
// attention_forward's single-head problems (make_problem: NH = 1): per batch element n,
//   forward: out = W V;  W = softmax(E);  E = scale Q K^T
//   dV += W^T dout;  dW = dout V^T;  dE = W (dW - D), D_t = dout_t . out_t;
//   dQ += scale dE K;  dK += scale dE^T Q
void sdpa_backward_from_weights(const SdpaProblem& p, const float* weights, StridedIn dout, const SdpaGrads& g) {
  std::vector<float> dE(static_cast<size_t>(p.T * p.S));  // [T, S], one batch element at a time
  const int team = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(num_threads(), p.T)));
  for (int64_t n = 0; n < p.N; ++n) {
    const float* W = weights + n * p.T * p.S;  // [T, S]
    const float* Q = p.q.data + n * p.q.batch;
    const float* K = p.k.data + n * p.k.batch;
    const float* V = p.v.data + n * p.v.batch;
    const float* dO = dout.data + n * dout.batch;
    const float* O = p.out.data + n * p.out.batch;
    // dV += W^T dout   [S, Dv]
    if (g.dv.data) gemm(Trans::Yes, Trans::No, p.S, p.Dv, p.T, 1.0f, W, p.S, dO, dout.row, 1.0f, g.dv.data + n * g.dv.batch, g.dv.row);
    if (!g.dq.data && !g.dk.data) continue;
    // dW = dout V^T   [T, S]
    gemm(Trans::No, Trans::Yes, p.T, p.S, p.Dv, 1.0f, dO, dout.row, V, p.v.row, 0.0f, dE.data(), p.S);
    // dE = W (dW - D)
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1 && p.T * p.S > 4096)
    for (int64_t t = 0; t < p.T; ++t) {
      float D = 0;
      for (int64_t j = 0; j < p.Dv; ++j) D += dO[t * dout.row + j] * O[t * p.out.row + j];
      for (int64_t s = 0; s < p.S; ++s) dE[t * p.S + s] = W[t * p.S + s] * (dE[t * p.S + s] - D);
    }
    // dQ += scale dE K   [T, Dk];  dK += scale dE^T Q   [S, Dk]
    if (g.dq.data)
      gemm(Trans::No, Trans::No, p.T, p.Dk, p.S, p.scale, dE.data(), p.S, K, p.k.row, 1.0f, g.dq.data + n * g.dq.batch, g.dq.row);
    if (g.dk.data)
      gemm(Trans::Yes, Trans::No, p.S, p.Dk, p.T, p.scale, dE.data(), p.S, Q, p.q.row, 1.0f, g.dk.data + n * g.dk.batch, g.dk.row);
  }
}

// Bahdanau: forward e[t, s] = v . tanh(Qp[t] + Kp[s]), Qp = q W_q [N*T, A], Kp = k W_k + b [N*S, A].
// Row by row (never more than [S, A] per thread), with Z = tanh(Qp[t] + Kp[n]) [S, A]:
//   P = weights row, or exp(e - lse);  dP = V dc_t [S];  dE = P (dP - D_t)
//   dv += Z^T dE;  G = (1 - Z^2) ⊙ (dE v^T) [S, A];  dQp[t] = colsum G;  dKp[n] += G
// then dvalues[n] += P[n]^T dC[n] (one product per batch row over its T rows of P, kept in Pall [N*T, S]),
// dq = dQp W_q^T, dW_q = q^T dQp, dk = dKp W_k^T, dW_k = k^T dKp, db = colsum dKp.
// The row's matrix-vector products are posed as one row of C (M = 1: ops::gemm's dot_rows / axpy_rows paths,
// nothing packed; as [S, 1] columns they would be padded to 16-wide panels and packed every step).
// dKp and dv are shared across rows: each thread sums into its own, reduced after.
void additive_backward(const Tensor& q, const Tensor& k, const Tensor& values, const AttentionOptions& o, const Dims& d,
                       const AttentionResult& fwd, const Tensor& dc, AttentionGrads& g) {
  const ScoreWeights& w = o.weights;
  const int64_t A = w.W_q.dim(1), NT = d.N * d.T, NS = d.N * d.S;
  Tensor Qp({NT, A}), Kp({NS, A});
  gemm(Trans::No, Trans::No, NT, A, d.Dq, 1.0f, q.data(), d.Dq, w.W_q.data(), A, 0.0f, Qp.data(), A);  // [N*T, A]
  if (w.W_k.empty()) std::copy(k.data(), k.data() + NS * A, Kp.data());  // the keys already projected
  else gemm(Trans::No, Trans::No, NS, A, d.Dk, 1.0f, k.data(), d.Dk, w.W_k.data(), A, 0.0f, Kp.data(), A);  // [N*S, A]
  if (!w.b.empty()) as_matrix(Kp).rowwise() += Eigen::Map<const Eigen::RowVectorXf>(w.b.data(), A);  // [N*S, A]
  const bool keep = !fwd.weights.empty();
  SdpaProblem p = make_problem(d, q.data(), d.Dq, k.data(), values.data(), nullptr, o.mask, 1.0f);
  const int team = attnkit::detail::team_for(NT, 8.0 * NT * d.S * (A + d.Dv));  // Z, e, dP, dv, G: about twice the forward's
  // Allocated before the team. Per thread: Z [S, A], dE [S], dP [S]; partial dKp [N*S, A] and dv [A] (zeroed).
  // Pall [N*T, S]: every row's P (the forward's weights when kept).
  std::vector<MatrixRM> Zs(static_cast<size_t>(team), MatrixRM(d.S, A));
  std::vector<Eigen::ArrayXf> es(static_cast<size_t>(team), Eigen::ArrayXf(d.S)), dps(es);
  const int64_t part = NS * A + A;
  std::vector<float> parts(static_cast<size_t>(team * part), 0.0f);
  Tensor dQp({NT, A});
  Tensor Pall;
  if (!keep) Pall = Tensor({NT, d.S});  // [N*T, S]
  const float* P_all = keep ? fwd.weights.data() : Pall.data();
  const Eigen::Map<const Eigen::VectorXf> vv(w.v.data(), A);
  ParallelErrors errors;
#pragma omp parallel num_threads(team) if (team > 1)
  {
    const int id = omp_get_thread_num();
    MatrixRM& Z = Zs[static_cast<size_t>(id)];
    Eigen::ArrayXf& e = es[static_cast<size_t>(id)];
    Eigen::ArrayXf& dP = dps[static_cast<size_t>(id)];
    float* dKp = parts.data() + id * part;  // [N*S, A]
    float* dv = dKp + NS * A;               // [A]
#pragma omp for schedule(static)
    for (int64_t nt = 0; nt < NT; ++nt) {
      errors.run([&] {
        const int64_t n = nt / d.T, t = nt % d.T;
        // Z = tanh(Qp[t] + Kp[n])   [S, A]
        Z = as_matrix(Kp.data() + n * d.S * A, d.S, A);
        Z.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(Qp.data() + nt * A, A);
        Z.array() = Z.array().tanh();
        // P: the forward's weights row, or exp(e - lse) with e = Z v masked   [S]
        if (keep) {
          e = Eigen::Map<const Eigen::ArrayXf>(fwd.weights.data() + nt * d.S, d.S);
        } else {
          const float lse = fwd.row_logsumexp[nt];
          if (lse == kNegInf) {
            e.setZero();
          } else {
            // e^T [1, S] = v^T [1, A] Z^T
            gemm(Trans::No, Trans::Yes, 1, d.S, A, 1.0f, w.v.data(), A, Z.data(), A, 0.0f, e.data(), d.S,
                 GemmThreads::This);
            mask_scores(e.data(), 0, d.S, row_limit(p, n, t), mask_row(p, n, 0, t));
            detail::exp_shifted_sum(e.data(), d.S, lse);  // masked entries (-inf) give 0
          }
          std::copy(e.data(), e.data() + d.S, Pall.data() + nt * d.S);
        }
        const float* dct = dc.data() + nt * d.Dv;
        // dP = V[n] dc_t [S]:  dP^T [1, S] = dc_t^T [1, Dv] V[n]^T;  dE = P (dP - D_t), D_t = dc_t . c_t
        gemm(Trans::No, Trans::Yes, 1, d.S, d.Dv, 1.0f, dct, d.Dv, values.data() + n * d.S * d.Dv, d.Dv, 0.0f,
             dP.data(), d.S, GemmThreads::This);
        float D = 0;
        for (int64_t j = 0; j < d.Dv; ++j) D += dct[j] * fwd.context[nt * d.Dv + j];
        e = e * (dP - D);  // e now holds dE
        // dv += Z^T dE [A]:  dv^T [1, A] += dE^T [1, S] Z
        gemm(Trans::No, Trans::No, 1, A, d.S, 1.0f, e.data(), d.S, Z.data(), A, 1.0f, dv, A, GemmThreads::This);
        // G = (1 - Z^2) ⊙ (dE v^T)   [S, A]
        Z.array() = 1.0f - Z.array().square();
        Z.array().colwise() *= e;
        Z.array().rowwise() *= vv.transpose().array();
        column_sums(Z.data(), d.S, A, dQp.data() + nt * A);  // dQp[t] = colsum G   [A]
        as_matrix(dKp + n * d.S * A, d.S, A) += Z;                       // dKp[n] += G
      });
    }
  }
  errors.rethrow();
  // reduce the partials into thread 0's
  for (int th = 1; th < team; ++th)
    for (int64_t i = 0; i < part; ++i) parts[static_cast<size_t>(i)] += parts[static_cast<size_t>(th * part + i)];
  const float* dKp = parts.data();
  const float* dv = dKp + NS * A;
  // context_t = P_t V[n]:  dvalues[n] += P[n]^T dC[n]   [S, Dv] = [S, T] x [T, Dv], one product per batch row
  for (int64_t n = 0; n < d.N; ++n)
    gemm(Trans::Yes, Trans::No, d.S, d.Dv, d.T, 1.0f, P_all + n * d.T * d.S, d.S, dc.data() + n * d.T * d.Dv, d.Dv, 1.0f,
         g.values.data() + n * d.S * d.Dv, d.Dv);
  // Qp = q W_q:  dq += dQp W_q^T [N*T, Dq];  dW_q = q^T dQp [Dq, A]
  gemm(Trans::No, Trans::Yes, NT, d.Dq, A, 1.0f, dQp.data(), A, w.W_q.data(), A, 1.0f, g.query.data(), d.Dq);
  gemm(Trans::Yes, Trans::No, d.Dq, A, NT, 1.0f, q.data(), d.Dq, dQp.data(), A, 0.0f, g.weights.W_q.data(), A);
  // Kp = k W_k + b:  dk += dKp W_k^T [N*S, Dk];  dW_k = k^T dKp [Dk, A];  db = colsum dKp [A]
  if (w.W_k.empty()) {  // projected keys: dk += dKp
    as_matrix(g.keys.data(), NS, A) += as_matrix(dKp, NS, A);
  } else {
    gemm(Trans::No, Trans::Yes, NS, d.Dk, A, 1.0f, dKp, A, w.W_k.data(), A, 1.0f, g.keys.data(), d.Dk);
    gemm(Trans::Yes, Trans::No, d.Dk, A, NS, 1.0f, k.data(), d.Dk, dKp, A, 0.0f, g.weights.W_k.data(), A);
  }
  std::copy(dv, dv + A, g.weights.v.data());
  if (!w.b.empty()) column_sums(dKp, NS, A, g.weights.b.data());
}

}  // namespace

AttentionGrads attention_backward(const Tensor& query, const Tensor& keys, const Tensor& values,
                                  const AttentionOptions& options, const AttentionResult& forward,
                                  const Tensor& dcontext) {
  const Dims d = check_inputs(query, keys, values, options);
  const Shape cshape = d.batched ? Shape{d.N, d.T, d.Dv} : Shape{d.T, d.Dv};
  AK_CHECK(forward.context.shape() == cshape, "attention backward: the forward's context has shape {}, expected {}",
           forward.context.shape_str(), shape_str(cshape));
  AK_CHECK(dcontext.shape() == cshape, "attention backward: the context gradient has shape {}, expected {} like the context",
           dcontext.shape_str(), shape_str(cshape));
  AK_CHECK(forward.row_logsumexp.numel() == d.N * d.T,
           "attention backward: the forward's row log-sum-exp has shape {}, expected [N, T] = [{}, {}]",
           forward.row_logsumexp.shape_str(), d.N, d.T);
  const bool keep = !forward.weights.empty();
  AK_CHECK(!keep || forward.weights.numel() == d.N * d.T * d.S,
           "attention backward: the forward's weights have shape {}, expected [N, T, S] = [{}, {}, {}]",
           forward.weights.shape_str(), d.N, d.T, d.S);
  AttentionGrads g;
  g.query = Tensor(query.shape()), g.keys = Tensor(keys.shape()), g.values = Tensor(values.shape());
  const ScoreWeights& w = options.weights;
  if (options.score == ScoreKind::General) g.weights.W = Tensor(w.W.shape());
  if (options.score == ScoreKind::Additive) {
    g.weights.W_q = Tensor(w.W_q.shape()), g.weights.v = Tensor(w.v.shape());
    if (!w.W_k.empty()) g.weights.W_k = Tensor(w.W_k.shape());
    if (!w.b.empty()) g.weights.b = Tensor(w.b.shape());
  }
  if (d.N * d.T == 0 || d.S == 0) return g;  // nothing attended: every gradient is zero
  if (options.score == ScoreKind::Additive) {
    additive_backward(query, keys, values, options, d, forward, dcontext, g);
    return g;
  }
  // general: q' = q W [N*T, Dk], then the dot score on q'; its gradient dq' is mapped back below.
  Tensor projected, dprojected;
  const float* q = query.data();
  float* dq = g.query.data();
  if (options.score == ScoreKind::General) {
    projected = Tensor({d.N, d.T, d.Dk}), dprojected = Tensor({d.N, d.T, d.Dk});
    gemm(Trans::No, Trans::No, d.N * d.T, d.Dk, d.Dq, 1.0f, q, d.Dq, w.W.data(), d.Dk, 0.0f, projected.data(), d.Dk);
    q = projected.data(), dq = dprojected.data();
  }
  const float scale = options.score == ScoreKind::ScaledDot ? 1.0f / std::sqrt(static_cast<float>(d.Dk)) : 1.0f;
  // The backward only reads p.out (the forward's context).
  SdpaProblem p = make_problem(d, q, d.Dk, keys.data(), values.data(), const_cast<float*>(forward.context.data()),
                               options.mask, scale);
  const StridedIn dout{dcontext.data(), d.T * d.Dv, 0, d.Dv};
  const SdpaGrads grads{{dq, d.T * d.Dk, 0, d.Dk}, {g.keys.data(), d.S * d.Dk, 0, d.Dk}, {g.values.data(), d.S * d.Dv, 0, d.Dv}};
  if (keep) sdpa_backward_from_weights(p, forward.weights.data(), dout, grads);
  else sdpa_backward_tiled(p, forward.row_logsumexp.data(), dout, grads);
  if (options.score == ScoreKind::General) {
    // q' = q W:  dq += dq' W^T [N*T, Dq];  dW = q^T dq' [Dq, Dk]
    gemm(Trans::No, Trans::Yes, d.N * d.T, d.Dq, d.Dk, 1.0f, dprojected.data(), d.Dk, w.W.data(), d.Dk, 1.0f,
         g.query.data(), d.Dq);
    gemm(Trans::Yes, Trans::No, d.Dq, d.Dk, d.N * d.T, 1.0f, query.data(), d.Dq, dprojected.data(), d.Dk, 0.0f,
         g.weights.W.data(), d.Dk);
  }
  return g;
}

}  // namespace attnkit::ops
