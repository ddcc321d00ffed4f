// Legend: N batch, T queries, S keys, E model size, Ev value projection size, Eo output size,
// NH heads, HS head size, P = 2E + Ev (the fused Q | K | V row).
#include "attnkit/ops/mha.hpp"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // Eigen AVX-512, GCC 12 false positive

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "attnkit/ops/matmul.hpp"
#include "attnkit/ops/mha_stages.hpp"
#include "attnkit/tensor/eigen_bridge.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/scratch_pool.hpp"
#include "attnkit/tensor/threads.hpp"

namespace attnkit::ops {

using namespace detail;

namespace {

using Dims = QkvDims;

Dims check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, std::string_view op) {
  return check_qkv(q, k, v, op, "E", "key", "value");
}

void check_feature(const Tensor& x, const char* name, const Projection& p, const char* proj, std::string_view op) {
  AK_CHECK(x.dim(-1) == p.in, "{}: {} has shape {}, expected feature size {} ({} input size)", op, name, x.shape_str(),
           p.in, proj);
}

// The attention problem over NH heads read in place from [N*T, ld] buffers, writing the
// concatenated contexts into ctx [N*T, NH*HSv] (row stride NH*HSv).
// Keys and values of batch element n start kv_stride rows apart (d.S unless a cache keeps spare rows).
SdpaProblem heads_problem(const float* Q, int64_t ldq, const float* K, int64_t ldk, const float* V, int64_t ldv,
                          const Dims& d, int64_t NH, int64_t HSk, int64_t HSv, const MhaOptions& o, float* ctx,
                               int64_t kv_stride = -1) {
  if (kv_stride < 0) kv_stride = d.S;
  SdpaProblem p;
  p.N = d.N, p.NH = NH, p.T = d.T, p.S = d.S, p.Dk = HSk, p.Dv = HSv;
  p.scale = 1.0f / std::sqrt(static_cast<float>(HSk));
  p.q = {Q, d.T * ldq, HSk, ldq};
  p.k = {K, kv_stride * ldk, HSk, ldk};
  p.v = {V, kv_stride * ldv, HSv, ldv};
  p.out = {ctx, d.T * NH * HSv, HSv, NH * HSv};
  p.mask = &o.mask;
  return p;
}

// Weights [N, NH, T, S] through sdpa_full (or sdpa_naive), kept per head or averaged as asked;
// also writes the contexts (p.out) and row_lse (may be null).
Tensor head_weights(const SdpaProblem& p, const Dims& d, const MhaOptions& o, bool naive, float* row_lse,
                    std::string_view op) {
  const int64_t NH = p.NH;
  AK_CHECK(d.N * NH * d.T * d.S <= kMaxWeightElements,
           "{}: the attention weights would be [N, NH, T, S] = {} ({:.1f} GiB); ask for no weights (the tiled kernel "
           "never holds them)", op, shape_str({d.N, NH, d.T, d.S}), d.N * NH * d.T * d.S * 4.0 / (1 << 30));
  Tensor per_head({d.N, NH, d.T, d.S});
  if (naive) sdpa_naive(p, nullptr, per_head.data(), row_lse);
  else sdpa_full(p, nullptr, per_head.data(), row_lse);
  Tensor weights;
  if (o.weights == HeadWeights::PerHead) {
    weights = std::move(per_head);
  } else if (o.weights == HeadWeights::Averaged) {
    weights = Tensor({d.N, d.T, d.S});
    const int64_t TS = d.T * d.S;
    for (int64_t n = 0; n < d.N; ++n) {
      auto avg = as_matrix(weights.data() + n * TS, 1, TS);
      for (int64_t h = 0; h < NH; ++h) avg += as_matrix(per_head.data() + (n * NH + h) * TS, 1, TS);
      avg *= 1.0f / static_cast<float>(NH);
    }
  }
  if (!d.batched && !weights.empty()) {
    Shape s = weights.shape();
    s.erase(s.begin());
    weights.reshape(s);
  }
  return weights;
}

// Whether attend() runs the tiled kernel (then it needs the problem's TiledKvPanels).
bool tiled(const MhaOptions& o, bool naive) { return o.weights == HeadWeights::None && !naive; }

// A LinearJob's rows_done that packs the keys and values it projected (rows n * S + s of a [N*S, ..] buffer).
std::function<void(int64_t, int64_t)> pack_projected(TiledKvPanels& keys, int64_t S, bool k, bool v) {
  return [&keys, S, k, v](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1;) {
      const int64_t n = r / S, end = std::min(r1 - n * S, S);
      keys.pack_keys(n, r - n * S, end, k, v);
      r = n * S + end;
    }
  };
}

// K and V packed into `keys`' panels by the tasks that project them (rows n * S + s; one job for both when
// kjob and vjob are one), when both run on pre-packed weights; returns whether they do.
bool pack_in_projections(std::optional<TiledKvPanels>& keys, int64_t S, LinearJob& kjob, LinearJob& vjob) {
  if (!keys || keys->tasks() == 0 || !kjob.packed || !vjob.packed) return false;
  if (&kjob == &vjob) {
    kjob.rows_done = pack_projected(*keys, S, true, true);
  } else {
    kjob.rows_done = pack_projected(*keys, S, true, false);
    vjob.rows_done = pack_projected(*keys, S, false, true);
  }
  return true;
}

// Attention on Q, K, V buffers into ctx, then (if given) the output projection from ctx into
// r.output: one team for the lot when no weights are asked for (the tiled kernel), else the
// weights kernels between the projections. Without an output projection ctx is r.output's data.
// With `cache` and the probabilities within o.saved_probs_budget, the tiled attention stage also
// writes them (its tiles exp(E - m_j) and their row maxes) into cache->probs for the backward.
// `keys`: the problem's panels when tiled(); keys_packed: the projection stage packs them (rows_done).
void attend(const SdpaProblem& p, std::vector<Stage> stages, TiledKvPanels* keys, bool keys_packed,
            const Dims& d, const MhaOptions& o, bool naive, const float* ctx, const Projection& out,
            const GemmPackedB* out_packed, MhaResult& r, float* row_lse, std::string_view op, MhaCache* cache) {
  check_mask(o.mask, d.N, p.NH, d.T, d.S, op);
  Stage out_stage;
  if (!out.empty())
    out_stage = linear_stage({LinearJob{ctx, d.N * d.T, p.NH * p.Dv, out, r.output.data(), out.out, out_packed}});
  const int64_t kept_ld = TiledWorker::kept_stride(p);
  const int64_t kept_row = kept_ld + TiledWorker::key_tiles(p);  // floats kept per query: P's row, its tile maxes
  const bool keep = cache && tiled(o, naive) && d.N * d.T * d.S > 0 &&
                    double(d.N) * p.NH * d.T * kept_row * sizeof(float) <= double(o.saved_probs_budget);
  const int team = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(num_threads(), TiledWorker::tasks(p))));
  if (tiled(o, naive)) {
    float *probs = nullptr, *tile_max = nullptr;
    if (keep) {  // [N, NH, T, kept_ld] then [N, NH, T, key tiles]; the tiles no row sees stay unwritten
      const int64_t rows = d.N * p.NH * d.T;
      std::shared_ptr<float> buf = ScratchPool::get(rows * kept_row);
      probs = buf.get(), tile_max = probs + rows * kept_ld;
      cache->probs = std::move(buf), cache->probs_ld = kept_ld;
      cache->probs_tile_max = tile_max, cache->probs_key_width = TiledWorker::key_width(p);
    }
    std::vector<TiledWorker> workers;  // allocated before the team: nothing throws inside it
    for (int i = 0; i < team; ++i) workers.emplace_back(p, keys, probs, kept_ld, tile_max);
    if (keys->tasks() > 0 && !keys_packed) stages.push_back({keys->tasks(), [&](int, int64_t t) { keys->pack(t); }});
    stages.push_back({TiledWorker::tasks(p),
                      [&](int id, int64_t t) { workers[static_cast<size_t>(id)].run(t, row_lse); }});
    stages.push_back(std::move(out_stage));
    run_stages(stages, team);
  } else {
    run_stages(stages, team);
    r.weights = head_weights(p, d, o, naive, row_lse, op);
    run_stages({out_stage}, team);
  }
}

// The result with its output [.., T, cols] allocated, uninitialised: every path writes each row whole (the output
// projection, or the attention's contexts, zero where every key is masked).
MhaResult make_output(const Dims& d, int64_t cols) {
  MhaResult r;
  r.output = Tensor::uninitialized(d.batched ? Shape{d.N, d.T, cols} : Shape{d.T, cols});
  return r;
}

// Whether the three inputs are one tensor read by three projections of one input size (the
// fused Q | K | V projection).
bool is_self_attention(const MhaWeights& w, const Tensor& q, const Tensor& k, const Tensor& v) {
  return q.data() == k.data() && k.data() == v.data() && w.q.in == w.k.in &&
         w.k.in == w.v.in;
}

// Lower-precision weights are for inference: a forward keeping a cache for the backward, or the backward, refuses
// them (the gradients would be of the float32 weights, not of the ones multiplied by).
void check_no_lowp(const MhaWeights& w, std::string_view op) {
  for (const Projection* p : {&w.q, &w.k, &w.v, &w.out})
    AK_CHECK(!p->lowp, "{}: {} weights [{}, {}] are for inference only (under autograd::NoGrad); a recorded "
             "forward and its backward need the float32 weights", op, precision_name(p->lowp->precision),
             p->lowp->out, p->lowp->in);
}

void check_projection_inputs(const MhaWeights& w, const Tensor& q, const Tensor& k, const Tensor& v,
                             std::string_view op) {
  check_feature(q, "query", w.q, "query projection", op);
  check_feature(k, "key", w.k, "key projection", op);
  check_feature(v, "value", w.v, "value projection", op);
}

MhaResult mha(const MhaWeights& w, const Tensor& q, const Tensor& k, const Tensor& v, const MhaOptions& o,
              bool naive, MhaCache* cache) {
  constexpr std::string_view op = "multi-head attention";
  const Dims d = check_inputs(q, k, v, op);
  check_projection_inputs(w, q, k, v, op);
  if (cache) check_no_lowp(w, op);
  const int64_t NH = w.num_heads, E = w.embed_dim(), Ev = w.value_dim();
  const Projection pq = w.q, pk = w.k, pv = w.v, po = w.out;
  const bool has_out = !po.empty();
  MhaResult r = make_output(d, w.output_dim());
  std::shared_ptr<float> ctx_buf = has_out && !cache ? ScratchPool::get(d.N * d.T * Ev) : nullptr;
  if (cache) {
    cache->probs.reset(), cache->probs_ld = 0, cache->probs_tile_max = nullptr, cache->probs_key_width = 0;
    cache->row_lse = Tensor({d.N, NH, d.T});
    cache->context = has_out ? Tensor({d.N, d.T, Ev}) : Tensor();
  }
  float* ctx = !has_out ? r.output.data() : cache ? cache->context.data() : ctx_buf.get();  // [N*T, Ev]
  float* lse = cache ? cache->row_lse.data() : nullptr;
  const int64_t rows = d.N * d.T;
  const bool self_attention = is_self_attention(w, q, k, v);
  std::shared_ptr<const MhaPackedWeights> packed;
  // (inference only: training changes the weights every step, and each task packing its own block of
  // the weight keeps both threads busy, where one pack before the team would leave one idle)
  if (!cache && !w.lowp() && (gemm_packed_matches(rows) || gemm_packed_matches(d.N * d.S)))
    packed = w.packed ? w.packed(self_attention) : nullptr;
  // the packed weight b for a projection of r rows, or null (ops::gemm packs it)
  auto packed_for = [&](const GemmPackedB MhaPackedWeights::*b, int64_t r) {
    return packed && gemm_packed_matches(r) ? packed->of((*packed).*b) : nullptr;
  };
  using W = MhaPackedWeights;
  const GemmPackedB* out_packed = packed_for(&W::out, rows);
  if (self_attention) {
    // Q, K, V side by side in one [N*T, P] buffer (heads read in place, row stride P), each
    // projection writing its column slice. Without a cache (whose Q is [N, T, 2E + Ev]) P is padded to an odd
    // number of cache lines, so that P V reads V's rows as they lie (ops::values_row_stride).
    const int64_t P = cache ? 2 * E + Ev : values_row_stride(2 * E + Ev), in = pq.in;
    std::shared_ptr<float> qkv_buf = cache ? nullptr : ScratchPool::get(rows * P);
    if (cache) cache->Q = Tensor({d.N, d.T, P}), cache->K = Tensor(), cache->V = Tensor();
    float* QKV = cache ? cache->Q.data() : qkv_buf.get();
    const SdpaProblem p = heads_problem(QKV, P, QKV + E, P, QKV + 2 * E, P, d, NH, E / NH, Ev / NH, o, ctx);
    std::optional<TiledKvPanels> keys;
    if (tiled(o, naive)) keys.emplace(p);
    const std::optional<Projection> pqkv = joined_projection(pq, pk, pv);
    std::vector<LinearJob> jobs;
    if (pqkv) {
      jobs.push_back(LinearJob{q.data(), rows, in, *pqkv, QKV, P, packed_for(&W::qkv, rows)});
    } else {
      jobs.push_back(LinearJob{q.data(), rows, in, pq, QKV, P, packed_for(&W::q, rows)});
      jobs.push_back(LinearJob{q.data(), rows, in, pk, QKV + E, P, packed_for(&W::k, rows)});
      jobs.push_back(LinearJob{q.data(), rows, in, pv, QKV + 2 * E, P, packed_for(&W::v, rows)});
    }
    // jobs.back() writes V, and with pqkv K too
    const bool keys_packed = pack_in_projections(keys, d.S, pqkv ? jobs[0] : jobs[1], jobs.back());
    attend(p, {linear_stage(std::move(jobs))}, keys ? &*keys : nullptr, keys_packed, d, o, naive, ctx, po, out_packed,
           r, lse, op, cache);
  } else {
    std::shared_ptr<float> Qb, Kb, Vb;
    if (!cache) Qb = ScratchPool::get(d.N * d.T * E), Kb = ScratchPool::get(d.N * d.S * E), Vb = ScratchPool::get(d.N * d.S * Ev);
    if (cache) cache->Q = Tensor({d.N, d.T, E}), cache->K = Tensor({d.N, d.S, E}), cache->V = Tensor({d.N, d.S, Ev});
    float* Q = cache ? cache->Q.data() : Qb.get();  // [N*T, E]
    float* K = cache ? cache->K.data() : Kb.get();  // [N*S, E]
    float* V = cache ? cache->V.data() : Vb.get();  // [N*S, Ev]
    const SdpaProblem p = heads_problem(Q, E, K, E, V, Ev, d, NH, E / NH, Ev / NH, o, ctx);
    std::optional<TiledKvPanels> keys;
    if (tiled(o, naive)) keys.emplace(p);
    std::vector<LinearJob> jobs{LinearJob{q.data(), rows, pq.in, pq, Q, E, packed_for(&W::q, rows)},
                                LinearJob{k.data(), d.N * d.S, pk.in, pk, K, E, packed_for(&W::k, d.N * d.S)},
                                LinearJob{v.data(), d.N * d.S, pv.in, pv, V, Ev, packed_for(&W::v, d.N * d.S)}};
    const bool keys_packed = pack_in_projections(keys, d.S, jobs[1], jobs[2]);
    attend(p, {linear_stage(std::move(jobs))}, keys ? &*keys : nullptr, keys_packed, d, o, naive, ctx, po, out_packed,
           r, lse, op, cache);
  }
  if (cache && !has_out) cache->context = r.output.reshaped({d.N, d.T, Ev});
  return r;
}

}  // namespace

// ---- forward ----

MhaResult multihead_attention_forward(const MhaWeights& w, const Tensor& query, const Tensor& key,
                                      const Tensor& value, const MhaOptions& options, MhaCache* cache) {
  return mha(w, query, key, value, options, false, cache);
}

MhaResult multihead_attention_forward_naive(const MhaWeights& w, const Tensor& query, const Tensor& key,
                                            const Tensor& value, const MhaOptions& options) {
  return mha(w, query, key, value, options, true, nullptr);
}

Tensor project(const Projection& p, const Tensor& x, std::string_view what) {
  AK_CHECK(x.rank() >= 1 && x.dim(-1) == p.in, "{}: input has shape {}, expected [.., {}]", what, x.shape_str(), p.in);
  Shape s = x.shape();
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < s.size(); ++i) rows *= s[i];
  s.back() = p.out;
  Tensor y(s);  // [.., out]
  project_rows(p, x.data(), rows, p.in, y.data(), p.out, GemmThreads::Policy);
  return y;
}

MhaResult heads_attention_forward(const Tensor& Q, const Tensor& K, const Tensor& V, int64_t num_heads,
                                  const MhaOptions& o, Tensor* row_lse, std::string_view op, int64_t kv_rows) {
  Dims d = check_inputs(Q, K, V, op);
  const int64_t kv_stride = d.S;  // rows per batch element in K and V
  if (kv_rows >= 0) {
    AK_CHECK(kv_rows <= d.S, "{}: {} key rows asked of keys {}", op, kv_rows, K.shape_str());
    d.S = kv_rows;
  }
  const int64_t E = Q.dim(-1), Ev = V.dim(-1), NH = num_heads;
  AK_CHECK(NH >= 1, "{}: the number of heads must be at least 1, not {}", op, NH);
  AK_CHECK(K.dim(-1) == E, "{}: key {} and query {} disagree on the feature size", op, K.shape_str(), Q.shape_str());
  AK_CHECK(E % NH == 0, "{}: NH = {} heads do not divide the feature size E = {} of query {}", op, NH, E,
           Q.shape_str());
  AK_CHECK(Ev % NH == 0, "{}: NH = {} heads do not divide the feature size {} of value {}", op, NH, Ev,
           V.shape_str());
  check_mask(o.mask, d.N, NH, d.T, d.S, op);
  MhaResult r = make_output(d, Ev);  // the heads' contexts, concatenated [.., T, Ev]
  const SdpaProblem p =
      heads_problem(Q.data(), E, K.data(), E, V.data(), Ev, d, NH, E / NH, Ev / NH, o, r.output.data(), kv_stride);
  if (row_lse) *row_lse = Tensor({d.N, NH, d.T});
  float* lse = row_lse ? row_lse->data() : nullptr;
  if (o.weights == HeadWeights::None) sdpa_tiled(p, lse);
  else r.weights = head_weights(p, d, o, false, lse, op);
  return r;
}

MhaResult multihead_attention_forward_ops(const MhaWeights& w, const Tensor& query, const Tensor& key,
                                          const Tensor& value, const MhaOptions& options) {
  constexpr std::string_view op = "multi-head attention";
  check_inputs(query, key, value, op);
  check_projection_inputs(w, query, key, value, op);
  const Tensor Q = project(w.q, query, "query projection");  // [.., T, E]
  const Tensor K = project(w.k, key, "key projection");      // [.., S, E]
  const Tensor V = project(w.v, value, "value projection");  // [.., S, Ev]
  MhaResult r = heads_attention_forward(Q, K, V, w.num_heads, options, nullptr, op);  // [.., T, Ev]
  if (!w.out.empty()) r.output = project(w.out, r.output, "output projection");  // [.., T, Eo]
  return r;
}

MhaResult multihead_attention_forward_projected(const MhaWeights& w, const Tensor& query, const Tensor& K,
                                                const Tensor& V, const MhaOptions& options, int64_t kv_rows) {
  constexpr std::string_view op = "multi-head attention";
  check_feature(query, "query", w.q, "query projection", op);
  AK_CHECK(K.rank() >= 1 && K.dim(-1) == w.embed_dim(), "{}: projected keys have shape {}, expected [.., S, E] with E = {}",
           op, K.shape_str(), w.embed_dim());
  AK_CHECK(V.rank() >= 1 && V.dim(-1) == w.value_dim(),
           "{}: projected values have shape {}, expected [.., S, Ev] with Ev = {}", op, V.shape_str(), w.value_dim());
  const Tensor Q = project(w.q, query, "query projection");  // [.., T, E]
  MhaResult r = heads_attention_forward(Q, K, V, w.num_heads, options, nullptr, op, kv_rows);  // [.., T, Ev]
  if (!w.out.empty()) r.output = project(w.out, r.output, "output projection");  // [.., T, Eo]
  return r;
}

namespace {

void check_split(const Tensor& query, const Tensor& key, const Tensor& value, int64_t num_heads, std::string_view op) {
  const int64_t Dq = query.dim(-1), Dk = key.dim(-1), Dv = value.dim(-1);
  AK_CHECK(num_heads >= 1, "{}: the number of heads must be at least 1, not {}", op, num_heads);
  AK_CHECK(Dq == Dk, "{}: key {} and query {} disagree on the feature size", op, key.shape_str(), query.shape_str());
  AK_CHECK(Dq % num_heads == 0, "{}: NH = {} heads do not divide the feature size E = {} of query {}", op, num_heads,
           Dq, query.shape_str());
  AK_CHECK(Dv % num_heads == 0, "{}: NH = {} heads do not divide the feature size {} of value {}", op, num_heads, Dv,
           value.shape_str());
}

}  // namespace

MhaResult split_heads_attention_forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                        int64_t num_heads, const MhaOptions& options, MhaCache* cache) {
  constexpr std::string_view op = "split-heads attention";
  const Dims d = check_inputs(query, key, value, op);
  check_split(query, key, value, num_heads, op);
  MhaResult r = heads_attention_forward(query, key, value, num_heads, options, cache ? &cache->row_lse : nullptr, op);
  if (cache) {
    cache->Q = cache->K = cache->V = Tensor();
    cache->probs.reset(), cache->probs_ld = 0, cache->probs_tile_max = nullptr, cache->probs_key_width = 0;
    cache->context = r.output.reshaped({d.N, d.T, value.dim(-1)});
  }
  return r;
}

namespace {

void check_grad_buffer(const Tensor* g, const Tensor& x, const char* name, std::string_view op) {
  if (g)
    AK_CHECK(g->shape() == x.shape(), "{}: the gradient buffer of {} has shape {}, expected {}", op, name,
             g->shape_str(), x.shape_str());
}

// The sdpa backward behind both layers: tiled, reading the probabilities the forward kept (cache.probs)
// or recomputing them tile by tile from row_lse (never a T x S matrix: O(T) memory).
void sdpa_backward(const SdpaProblem& p, const MhaCache& cache, StridedIn dout, const SdpaGrads& g) {
  sdpa_backward_tiled(p, cache.row_lse.data(), dout, g, cache.kept_probs());
}

StridedOut strided(float* data, int64_t L, int64_t HS, int64_t ld) { return {data, L * ld, HS, ld}; }

void add_into(Tensor& dst, const Tensor& src) {
  float* d = dst.data();
  const float* s = src.data();
  for (int64_t i = 0, n = dst.numel(); i < n; ++i) d[i] += s[i];
}

}  // namespace

// ---- backward ----

void multihead_attention_backward(const MhaWeights& w, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const MhaOptions& o, const MhaCache& cache, const Tensor& dY, Tensor* dq, Tensor* dk,
                                  Tensor* dv, const MhaParamGrads& grads) {
  constexpr std::string_view op = "multi-head attention backward";
  const Dims d = check_inputs(q, k, v, op);
  check_projection_inputs(w, q, k, v, op);
  check_no_lowp(w, op);
  const int64_t NH = w.num_heads, E = w.embed_dim(), Ev = w.value_dim(), Eo = w.output_dim();
  const int64_t N = d.N, T = d.T, S = d.S, rows = N * T, HS = E / NH, HSv = Ev / NH, P = 2 * E + Ev;
  const Shape out_shape = d.batched ? Shape{N, T, Eo} : Shape{T, Eo};
  AK_CHECK(dY.shape() == out_shape, "{}: the output gradient has shape {}, expected the output's shape {}", op,
           dY.shape_str(), shape_str(out_shape));
  check_grad_buffer(dq, q, "query", op), check_grad_buffer(dk, k, "key", op), check_grad_buffer(dv, v, "value", op);
  const bool self = is_self_attention(w, q, k, v);
  bool cache_fits = cache.row_lse.numel() == N * NH * T && cache.context.numel() == rows * Ev &&
                          (self ? cache.Q.numel() == rows * P
                                : cache.Q.numel() == rows * E && cache.K.numel() == N * S * E && cache.V.numel() == N * S * Ev);
  cache_fits = cache_fits && (!cache.probs || cache.probs_ld >= S);
  AK_CHECK(cache_fits, "{}: the cache (Q {}, K {}, V {}, context {}, row_lse {}) is not from a forward with these inputs",
           op, cache.Q.shape_str(), cache.K.shape_str(), cache.V.shape_str(), cache.context.shape_str(),
           cache.row_lse.shape_str());
  check_mask(o.mask, N, NH, T, S, op);

  float *gWq = grads.Wq, *gWk = grads.Wk, *gWv = grads.Wv, *gbq = grads.bq, *gbk = grads.bk, *gbv = grads.bv;
  float *gWo = grads.Wo, *gbo = grads.bo;

  // One team for the lot, stage after stage (run_stages: a barrier that sleeps after kStageSpin, where
  // OpenMP's spins for milliseconds; one fork, where the threaded products forked two teams per projection).
  std::vector<Stage> stages;
  double work = 0;

  // output = context Wo^T + bo:  dcontext = doutput Wo, dWo += doutput^T context, dbo += sum doutput
  const Projection po = w.out;
  std::shared_ptr<float> dctx_buf;
  const float* dctx = dY.data();  // [N*T, Ev]
  if (!po.empty()) {
    dctx_buf = ScratchPool::get(rows * Ev);  // written whole by the stage (fresh)
    ProjBackward out{po, cache.context.data(), rows, dY.data(), Eo, dctx_buf.get(), gWo, gbo};
    out.fresh = true;
    work += out.flops();
    stages.push_back(backward_stage({out}));
    dctx = dctx_buf.get();
  }

  // context = concat_h softmax(Q_h K_h^T / sqrt(HS)) V_h:  dQ, dK, dV through the tiled backward
  const float *Q, *K, *V;
  int64_t ldq = E, ldk = E, ldv = Ev;
  std::shared_ptr<float> dQKV, dK_buf, dV_buf;  // zero-filled scratch
  float *dQ, *dK, *dV;
  if (self) {  // Q | K | V side by side [N*T, P], and their gradients likewise
    Q = cache.Q.data(), K = Q + E, V = Q + 2 * E;
    ldq = ldk = ldv = P;
    dQKV = zeroed_scratch(rows * P);  // [N*T, P]
    dQ = dQKV.get(), dK = dQ + E, dV = dQ + 2 * E;
  } else {
    Q = cache.Q.data(), K = cache.K.data(), V = cache.V.data();
    dQKV = zeroed_scratch(rows * E), dK_buf = zeroed_scratch(N * S * E), dV_buf = zeroed_scratch(N * S * Ev);
    dQ = dQKV.get(), dK = dK_buf.get(), dV = dV_buf.get();  // [N*T, E], [N*S, E], [N*S, Ev]
  }
  const SdpaProblem p =
      heads_problem(Q, ldq, K, ldk, V, ldv, d, NH, HS, HSv, o, const_cast<float*>(cache.context.data()));
  SdpaGrads g;
  g.dq = strided(dQ, T, HS, ldq), g.dk = strided(dK, S, HS, ldk), g.dv = strided(dV, S, HSv, ldv);

  // Q = q Wq^T + bq, K = k Wk^T + bk, V = v Wv^T + bv (or x W): each projection's backward
  const std::vector<ProjBackward> in_jobs{
      ProjBackward{w.q, q.data(), rows, dQ, ldq, dq ? dq->data() : nullptr, gWq, gbq},
      ProjBackward{w.k, k.data(), N * S, dK, ldk, dk ? dk->data() : nullptr, gWk, gbk},
      ProjBackward{w.v, v.data(), N * S, dV, ldv, dv ? dv->data() : nullptr, gWv, gbv}};
  for (const ProjBackward& j : in_jobs) work += j.flops();
  const int team = std::max(TiledBackward::team_for_problem(p), attnkit::detail::team_for(8, work));
  TiledBackward attention(p, cache.row_lse.data(), StridedIn{dctx, T * Ev, HSv, Ev}, g, team,
                          cache.kept_probs());  // allocated before the team
  stages.push_back({attention.row_tasks(), [&](int, int64_t t) { attention.run_rows(t); }});
  stages.push_back({attention.tile_tasks(), [&](int id, int64_t t) { attention.run_tile(id, t); }});
  stages.push_back({attention.reduce_tasks(), [&](int, int64_t t) { attention.run_reduce(t); }});
  stages.push_back(backward_stage(in_jobs));
  run_stages(stages, team);
}

void split_heads_attention_backward(const Tensor& query, const Tensor& key, const Tensor& value, int64_t num_heads,
                                    const MhaOptions& o, const MhaCache& cache, const Tensor& dY, Tensor* dq,
                                    Tensor* dk, Tensor* dv) {
  constexpr std::string_view op = "split-heads attention backward";
  const Dims d = check_inputs(query, key, value, op);
  check_split(query, key, value, num_heads, op);
  const int64_t N = d.N, T = d.T, S = d.S, NH = num_heads, Dq = query.dim(-1), Dv = value.dim(-1);
  const Shape out_shape = d.batched ? Shape{N, T, Dv} : Shape{T, Dv};
  AK_CHECK(dY.shape() == out_shape, "{}: the output gradient has shape {}, expected the output's shape {}", op,
           dY.shape_str(), shape_str(out_shape));
  check_grad_buffer(dq, query, "query", op), check_grad_buffer(dk, key, "key", op),
      check_grad_buffer(dv, value, "value", op);
  AK_CHECK(cache.row_lse.numel() == N * NH * T && cache.context.numel() == N * T * Dv,
           "{}: the cache (context {}, row_lse {}) is not from a forward with these inputs", op,
           cache.context.shape_str(), cache.row_lse.shape_str());
  check_mask(o.mask, N, NH, T, S, op);
  // One input tensor in several roles (self-attention): each role's gradient into its own buffer
  // (the kernel may run roles in parallel), then added.
  const bool alias = (dq && (dq == dk || dq == dv)) || (dk && dk == dv);
  Tensor tq, tk, tv;
  float* gq = dq ? dq->data() : nullptr;
  float* gk = dk ? dk->data() : nullptr;
  float* gv = dv ? dv->data() : nullptr;
  if (alias) {
    if (dq) tq = Tensor(query.shape()), gq = tq.data();
    if (dk) tk = Tensor(key.shape()), gk = tk.data();
    if (dv) tv = Tensor(value.shape()), gv = tv.data();
  }
  const SdpaProblem p = heads_problem(query.data(), Dq, key.data(), Dq, value.data(), Dv, d, NH, Dq / NH, Dv / NH,
                                      o, const_cast<float*>(cache.context.data()));
  SdpaGrads g;
  g.dq = strided(gq, T, Dq / NH, Dq), g.dk = strided(gk, S, Dq / NH, Dq), g.dv = strided(gv, S, Dv / NH, Dv);
  // context = concat_h softmax(q_h k_h^T / sqrt(HS)) v_h
  sdpa_backward(p, cache, StridedIn{dY.data(), T * Dv, Dv / NH, Dv}, g);
  if (alias) {
    if (dq) add_into(*dq, tq);
    if (dk) add_into(*dk, tk);
    if (dv) add_into(*dv, tv);
  }
}

}  // namespace attnkit::ops
