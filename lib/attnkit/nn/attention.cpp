// Legend: N batch, T queries, S keys, E model size, Ev value projection size, NH heads, HS head size.
#include "attnkit/nn/attention.hpp"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // Eigen AVX-512, GCC 12 false positive

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "attnkit/io/weight_checks.hpp"
#include "attnkit/tensor/barrier.hpp"
#include "attnkit/tensor/eigen_bridge.hpp"
#include "attnkit/tensor/large_buffer.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::nn {
namespace {


// A member of the bundle by its state_dict name, also found nested ("out_proj.weight" or out_proj/weight).
const Tensor* member(const io::Value& bundle, const std::string& name, std::string_view op) {
  const io::Value* v = bundle.find(name);
  if (!v) {
    const size_t dot = name.find('.');
    if (dot != std::string::npos) {
      const io::Value* outer = bundle.find(name.substr(0, dot));
      if (outer && outer->is_bundle()) v = outer->find(name.substr(dot + 1));
    }
  }
  if (!v) return nullptr;
  AK_CHECK(v->is_tensor(), "{}: weights member {} is not a tensor: {}", op, name, v->why());
  return &v->tensor();
}

void expect_shape(const Tensor& t, const std::string& name, const Shape& expected, const std::string& legend,
                  std::string_view op) {
  AK_CHECK(t.shape() == expected, "{}: {} has shape {}, expected {} = {}", op, name, t.shape_str(), legend,
           shape_str(expected));
}

Tensor transposed2(const Tensor& w) {
  Tensor t({w.dim(1), w.dim(0)});
  as_matrix(t) = as_matrix(w).transpose();
  return t;
}

Tensor rows_of(const Tensor& w, int64_t r0, int64_t rows) {
  const int64_t cols = w.rank() == 2 ? w.dim(1) : 1;
  Tensor t(w.rank() == 2 ? Shape{rows, cols} : Shape{rows});
  std::copy(w.data() + r0 * cols, w.data() + (r0 + rows) * cols, t.data());
  return t;
}

struct Dims {
  bool batched = false;
  int64_t N = 1, T = 0, S = 0;
};

Dims check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, std::string_view op) {
  AK_CHECK(q.rank() == 2 || q.rank() == 3, "{}: query has shape {}, expected [T, E] or [N, T, E]", op, q.shape_str());
  AK_CHECK(k.rank() == q.rank(), "{}: key has shape {}, expected rank {} like query {}", op, k.shape_str(), q.rank(),
           q.shape_str());
  AK_CHECK(v.rank() == q.rank(), "{}: value has shape {}, expected rank {} like query {}", op, v.shape_str(), q.rank(),
           q.shape_str());
  Dims d;
  d.batched = q.rank() == 3;
  d.N = d.batched ? q.dim(0) : 1;
  d.T = q.dim(-2);
  d.S = k.dim(-2);
  if (d.batched) {
    AK_CHECK(k.dim(0) == d.N, "{}: key {} and query {} disagree on the batch size", op, k.shape_str(), q.shape_str());
    AK_CHECK(v.dim(0) == d.N, "{}: value {} and query {} disagree on the batch size", op, v.shape_str(), q.shape_str());
  }
  AK_CHECK(v.dim(-2) == d.S, "{}: value {} and key {} disagree on the number of keys S", op, v.shape_str(),
           k.shape_str());
  return d;
}

// y [rows, out] (row stride ldy) = x [rows, in] W^T + b for W [out, in], as tasks: blocks of rows
// x output columns, each an independent single-threaded GEMM (Eigen's own parallel GEMM makes its
// threads wait on each other's packed panels).
struct Linear {
  const float* x;
  int64_t rows, in;
  const float* W;
  int64_t out;
  const float* b;  // may be null
  float* y;
  int64_t ldy;
  static constexpr int64_t kRows = 512, kCols = 384;
  int64_t col_blocks() const { return (out + kCols - 1) / kCols; }
  int64_t tasks() const { return (rows + kRows - 1) / kRows * col_blocks(); }
  void run(int64_t task) const {
    using StridedMap = Eigen::Map<MatrixRM, Eigen::Unaligned, Eigen::OuterStride<>>;
    const int64_t r0 = (task / col_blocks()) * kRows, c0 = (task % col_blocks()) * kCols;
    const int64_t br = std::min(kRows, rows - r0), bc = std::min(kCols, out - c0);
    StridedMap yb(y + r0 * ldy + c0, br, bc, Eigen::OuterStride<>(ldy));
    yb.noalias() = as_matrix(x + r0 * in, br, in) * as_matrix(W + c0 * in, bc, in).transpose();
    if (b) yb.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(b + c0, bc);
  }
};

// A stage: `tasks` independent tasks; run(thread, task).
struct Stage {
  int64_t tasks = 0;
  std::function<void(int, int64_t)> run;
};

Stage linear_stage(std::vector<Linear> jobs) {
  Stage st;
  for (const Linear& j : jobs) st.tasks += j.tasks();
  st.run = [jobs = std::move(jobs)](int, int64_t task) {
    for (const Linear& j : jobs) {
      if (task < j.tasks()) return j.run(task);
      task -= j.tasks();
    }
  };
  return st;
}

// Runs the stages in order in ONE OpenMP team: within a stage threads take tasks from a shared
// counter; between stages they meet at a StepBarrier (spins ~30 us, then sleeps). One team per
// forward rather than one per kernel: libgomp's barriers and idle pool threads spin for
// milliseconds, and on cores shared with other work that spinning made a 2-thread forward slower
// than a 1-thread one (T = 1024: 96 ms against 59 ms; with OMP_WAIT_POLICY=passive 59 ms).
void run_stages(const std::vector<Stage>& stages, int team) {
  if (team <= 1) {
    for (const Stage& st : stages)
      for (int64_t t = 0; t < st.tasks; ++t) st.run(0, t);
    return;
  }
  std::vector<std::atomic<int64_t>> next(stages.size());
  for (auto& c : next) c.store(0);
  StepBarrier barrier(team);
#pragma omp parallel num_threads(team)
  {
#pragma omp single
    barrier.resize(omp_get_num_threads());  // OpenMP may give fewer threads
    const int id = omp_get_thread_num();
    for (size_t i = 0; i < stages.size(); ++i) {
      if (i) barrier.wait();
      for (int64_t t; (t = next[i].fetch_add(1, std::memory_order_relaxed)) < stages[i].tasks;) stages[i].run(id, t);
    }
  }
}

// The attention problem over NH heads read in place from [N*T, ld] buffers, writing the
// concatenated contexts into ctx [N*T, NH*HSv] (row stride NH*HSv).
ops::SdpaProblem heads_problem(const float* Q, int64_t ldq, const float* K, int64_t ldk, const float* V, int64_t ldv,
                               const Dims& d, int64_t NH, int64_t HSk, int64_t HSv, const MhaOptions& o, float* ctx) {
  ops::SdpaProblem p;
  p.N = d.N, p.NH = NH, p.T = d.T, p.S = d.S, p.Dk = HSk, p.Dv = HSv;
  p.scale = 1.0f / std::sqrt(static_cast<float>(HSk));
  p.q = {Q, d.T * ldq, HSk, ldq};
  p.k = {K, d.S * ldk, HSk, ldk};
  p.v = {V, d.S * ldv, HSv, ldv};
  p.out = {ctx, d.T * NH * HSv, HSv, NH * HSv};
  p.mask = &o.mask;
  return p;
}

// Weights [N, NH, T, S] through sdpa_full (or sdpa_naive), kept per head or averaged as asked.
Tensor head_weights(const ops::SdpaProblem& p, const Dims& d, const MhaOptions& o, bool naive, std::string_view op) {
  const int64_t NH = p.NH;
  AK_CHECK(d.N * NH * d.T * d.S <= ops::kMaxWeightElements,
           "{}: the attention weights would be [N, NH, T, S] = {} ({:.1f} GiB); ask for no weights (the tiled kernel "
           "never holds them)", op, shape_str({d.N, NH, d.T, d.S}), d.N * NH * d.T * d.S * 4.0 / (1 << 30));
  Tensor per_head({d.N, NH, d.T, d.S});
  if (naive) ops::sdpa_naive(p, nullptr, per_head.data(), nullptr);
  else ops::sdpa_full(p, nullptr, per_head.data(), nullptr);
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

// Attention on Q, K, V buffers into ctx, then (if given) the output projection from ctx into
// r.output: one team for the lot when no weights are asked for (the tiled kernel), else the
// weights kernels between the projections. Without an output projection ctx is r.output's data.
void attend(const ops::SdpaProblem& p, std::vector<Stage> stages, const Dims& d, const MhaOptions& o, bool naive,
            const float* ctx, const Tensor& out_weight, const Tensor& out_bias, MhaResult& r, std::string_view op) {
  ops::check_mask(o.mask, d.N, p.NH, d.T, d.S, op);
  Stage out_stage;
  if (!out_weight.empty())
    out_stage = linear_stage({Linear{ctx, d.N * d.T, out_weight.dim(1), out_weight.data(), out_weight.dim(0),
                                     out_bias.empty() ? nullptr : out_bias.data(), r.output.data(), out_weight.dim(0)}});
  const int team = static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>(omp_get_max_threads(), ops::TiledWorker::tasks(p))));
  if (o.weights == HeadWeights::None && !naive) {
    std::vector<ops::TiledWorker> workers;  // allocated before the team: nothing throws inside it
    for (int i = 0; i < team; ++i) workers.emplace_back(p);
    stages.push_back({ops::TiledWorker::tasks(p), [&](int id, int64_t t) { workers[static_cast<size_t>(id)].run(t, nullptr); }});
    stages.push_back(std::move(out_stage));
    run_stages(stages, team);
  } else {
    run_stages(stages, team);
    r.weights = head_weights(p, d, o, naive, op);
    run_stages({out_stage}, team);
  }
}

// The result with its output [.., T, cols] allocated.
MhaResult make_output(const Dims& d, int64_t cols) {
  MhaResult r;
  r.output = Tensor(d.batched ? Shape{d.N, d.T, cols} : Shape{d.T, cols});
  return r;
}

MhaResult mha(const MultiheadAttention& m, const Tensor& q, const Tensor& k, const Tensor& v, const MhaOptions& o,
              bool naive) {
  constexpr std::string_view op = "multi-head attention";
  const Dims d = check_inputs(q, k, v, op);
  AK_CHECK(q.dim(-1) == m.q_weight.dim(1), "{}: query has shape {}, expected feature size {} (query projection {})",
           op, q.shape_str(), m.q_weight.dim(1), m.q_weight.shape_str());
  AK_CHECK(k.dim(-1) == m.k_weight.dim(1), "{}: key has shape {}, expected feature size {} (key projection {})", op,
           k.shape_str(), m.k_weight.dim(1), m.k_weight.shape_str());
  AK_CHECK(v.dim(-1) == m.v_weight.dim(1), "{}: value has shape {}, expected feature size {} (value projection {})",
           op, v.shape_str(), m.v_weight.dim(1), m.v_weight.shape_str());
  const int64_t NH = m.num_heads, E = m.embed_dim(), Ev = m.value_dim();
  auto bias = [](const Tensor& b) { return b.empty() ? nullptr : b.data(); };
  const bool has_out = !m.out_weight.empty();
  MhaResult r = make_output(d, has_out ? m.out_weight.dim(0) : Ev);
  LargeBuffer ctx_buf(has_out ? d.N * d.T * Ev : 0);
  float* ctx = has_out ? ctx_buf.data() : r.output.data();  // [N*T, Ev] heads concatenated
  const bool self_attention = q.data() == k.data() && k.data() == v.data() && m.q_weight.dim(1) == m.k_weight.dim(1) &&
                              m.k_weight.dim(1) == m.v_weight.dim(1);
  if (self_attention) {
    // Q, K, V side by side in one [N*T, 2E + Ev] buffer (heads read in place, row stride P), each
    // projection writing its column slice: no concatenated copy of the weights per call.
    const int64_t P = 2 * E + Ev, rows = d.N * d.T, in = m.q_weight.dim(1);
    LargeBuffer QKV(rows * P);
    const ops::SdpaProblem p =
        heads_problem(QKV.data(), P, QKV.data() + E, P, QKV.data() + 2 * E, P, d, NH, E / NH, Ev / NH, o, ctx);
    attend(p,
           {linear_stage({Linear{q.data(), rows, in, m.q_weight.data(), E, bias(m.q_bias), QKV.data(), P},
                          Linear{q.data(), rows, in, m.k_weight.data(), E, bias(m.k_bias), QKV.data() + E, P},
                          Linear{q.data(), rows, in, m.v_weight.data(), Ev, bias(m.v_bias), QKV.data() + 2 * E, P}})},
           d, o, naive, ctx, m.out_weight, m.out_bias, r, op);
    return r;
  }
  LargeBuffer Q(d.N * d.T * E), K(d.N * d.S * E), V(d.N * d.S * Ev);  // [N*T, E], [N*S, E], [N*S, Ev]
  const ops::SdpaProblem p = heads_problem(Q.data(), E, K.data(), E, V.data(), Ev, d, NH, E / NH, Ev / NH, o, ctx);
  attend(p,
         {linear_stage({Linear{q.data(), d.N * d.T, m.q_weight.dim(1), m.q_weight.data(), E, bias(m.q_bias), Q.data(), E},
                        Linear{k.data(), d.N * d.S, m.k_weight.dim(1), m.k_weight.data(), E, bias(m.k_bias), K.data(), E},
                        Linear{v.data(), d.N * d.S, m.v_weight.dim(1), m.v_weight.data(), Ev, bias(m.v_bias), V.data(), Ev}})},
         d, o, naive, ctx, m.out_weight, m.out_bias, r, op);
  return r;
}

}  // namespace

MultiheadAttention MultiheadAttention::from_bundle(const io::Value& bundle, int64_t num_heads, std::string_view op) {
  AK_CHECK(bundle.is_bundle(), "{}: the weights are not a bundle of named tensors{}", op,
           bundle.is_tensor() ? "" : ": " + bundle.why());
  AK_CHECK(num_heads >= 1, "{}: the number of heads must be at least 1, not {}", op, num_heads);
  MultiheadAttention m;
  m.num_heads = num_heads;
  std::set<std::string> used;  // every tensor member must be one of these (check_no_extra_weights)
  auto get = [&](const char* name) {
    const Tensor* t = member(bundle, name, op);
    if (t) {
      used.insert(name);
    }
    return t;
  };
  for (const char* unsupported : {"bias_k", "bias_v"})
    AK_CHECK(!get(unsupported), "{}: weights member {} (add_bias_kv=True) is not supported", op, unsupported);
  if (const Tensor* w = get("in_proj_weight")) {
    AK_CHECK(w->rank() == 2 && w->dim(0) % 3 == 0 && w->dim(0) == 3 * w->dim(1),
             "{}: in_proj_weight has shape {}, expected [3E, E] (rows: q, k, v projections)", op, w->shape_str());
    const int64_t E = w->dim(1);
    m.q_weight = rows_of(*w, 0, E), m.k_weight = rows_of(*w, E, E), m.v_weight = rows_of(*w, 2 * E, E);
  } else if (const Tensor* wq = get("q_proj_weight")) {
    const Tensor* wk = get("k_proj_weight");
    const Tensor* wv = get("v_proj_weight");
    AK_CHECK(wk && wv, "{}: q_proj_weight needs k_proj_weight and v_proj_weight too ({} is missing)", op,
             wk ? "v_proj_weight" : "k_proj_weight");
    AK_CHECK(wq->rank() == 2 && wq->dim(0) == wq->dim(1), "{}: q_proj_weight has shape {}, expected [E, E]", op,
             wq->shape_str());
    const int64_t E = wq->dim(0);
    AK_CHECK(wk->rank() == 2 && wk->dim(0) == E, "{}: k_proj_weight has shape {}, expected [E, kdim] with E = {}", op,
             wk->shape_str(), E);
    AK_CHECK(wv->rank() == 2 && wv->dim(0) == E, "{}: v_proj_weight has shape {}, expected [E, vdim] with E = {}", op,
             wv->shape_str(), E);
    m.q_weight = *wq, m.k_weight = *wk, m.v_weight = *wv;
  } else if (const Tensor* wq = get("W_Q")) {
    const Tensor* wk = get("W_K");
    const Tensor* wv = get("W_V");
    AK_CHECK(wk && wv, "{}: W_Q needs W_K and W_V too ({} is missing)", op, wk ? "W_V" : "W_K");
    AK_CHECK(wq->rank() == 2, "{}: W_Q has shape {}, expected [Dq, E]", op, wq->shape_str());
    const int64_t E = wq->dim(1);
    AK_CHECK(wk->rank() == 2 && wk->dim(1) == E, "{}: W_K has shape {}, expected [Dk, E] with E = {} (from W_Q {})",
             op, wk->shape_str(), E, wq->shape_str());
    AK_CHECK(wv->rank() == 2 && wv->dim(0) == wk->dim(0), "{}: W_V has shape {}, expected [Dk, Ev] with Dk = {} (from W_K {})",
             op, wv->shape_str(), wk->dim(0), wk->shape_str());
    m.q_weight = transposed2(*wq), m.k_weight = transposed2(*wk), m.v_weight = transposed2(*wv);
    if (const Tensor* wo = get("W_O")) {
      AK_CHECK(wo->rank() == 2 && wo->dim(0) == wv->dim(1), "{}: W_O has shape {}, expected [Ev, Eo] with Ev = {}", op,
               wo->shape_str(), wv->dim(1));
      m.out_weight = transposed2(*wo);
    }
  } else {
    std::string names;
    for (const auto& n : bundle.names()) names += (names.empty() ? "" : ", ") + n;
    fail("{}: the weights have none of in_proj_weight, q_proj_weight or W_Q (members: {})", op,
         names.empty() ? "none" : names);
  }
  const int64_t E = m.embed_dim(), Ev = m.value_dim();
  if (const Tensor* b = get("in_proj_bias")) {
    expect_shape(*b, "in_proj_bias", {3 * E}, "[3E]", op);
    m.q_bias = rows_of(*b, 0, E), m.k_bias = rows_of(*b, E, E), m.v_bias = rows_of(*b, 2 * E, E);
  }
  if (!get("W_Q")) {
    const Tensor* wo = get("out_proj.weight");
    AK_CHECK(wo, "{}: out_proj.weight [E, E] = [{}, {}] is missing", op, E, E);
    expect_shape(*wo, "out_proj.weight", {E, E}, "[E, E]", op);
    m.out_weight = *wo;
    if (const Tensor* bo = get("out_proj.bias")) {
      expect_shape(*bo, "out_proj.bias", {E}, "[E]", op);
      m.out_bias = *bo;
    }
  }
  AK_CHECK(E % num_heads == 0, "{}: NH = {} heads do not divide the embedding size E = {}", op, num_heads, E);
  AK_CHECK(Ev % num_heads == 0, "{}: NH = {} heads do not divide the value size Ev = {}", op, num_heads, Ev);
  io::check_no_extra_weights(bundle, used, op);
  return m;
}

MhaResult multihead_attention_forward(const MultiheadAttention& m, const Tensor& query, const Tensor& key,
                                      const Tensor& value, const MhaOptions& options) {
  return mha(m, query, key, value, options, false);
}

MhaResult multihead_attention_forward_naive(const MultiheadAttention& m, const Tensor& query, const Tensor& key,
                                            const Tensor& value, const MhaOptions& options) {
  return mha(m, query, key, value, options, true);
}

MhaResult split_heads_attention_forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                        int64_t num_heads, const MhaOptions& options) {
  constexpr std::string_view op = "split-heads attention";
  const Dims d = check_inputs(query, key, value, op);
  const int64_t Dq = query.dim(-1), Dk = key.dim(-1), Dv = value.dim(-1);
  AK_CHECK(num_heads >= 1, "{}: the number of heads must be at least 1, not {}", op, num_heads);
  AK_CHECK(Dq == Dk, "{}: key {} and query {} disagree on the feature size", op, key.shape_str(), query.shape_str());
  AK_CHECK(Dq % num_heads == 0, "{}: NH = {} heads do not divide the feature size E = {} of query {}", op, num_heads,
           Dq, query.shape_str());
  AK_CHECK(Dv % num_heads == 0, "{}: NH = {} heads do not divide the feature size {} of value {}", op, num_heads, Dv,
           value.shape_str());
  MhaResult r = make_output(d, Dv);  // the heads' contexts, concatenated, are the output
  const ops::SdpaProblem p = heads_problem(query.data(), Dq, key.data(), Dk, value.data(), Dv, d, num_heads,
                                           Dq / num_heads, Dv / num_heads, options, r.output.data());
  attend(p, {}, d, options, false, r.output.data(), Tensor(), Tensor(), r, op);
  return r;
}

}  // namespace attnkit::nn
