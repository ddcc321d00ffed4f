// Legend: N batch, T queries, S keys, E model size, Ev value projection size, Eo output size,
// NH heads, HS head size, P = 2E + Ev (the fused Q | K | V row).
#include "attnkit/nn/attention.hpp"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // Eigen AVX-512, GCC 12 false positive

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "attnkit/io/bundle_lookup.hpp"
#include "attnkit/io/weight_checks.hpp"
#include "attnkit/ops/matmul.hpp"
#include "attnkit/tensor/barrier.hpp"
#include "attnkit/tensor/eigen_bridge.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/large_buffer.hpp"
#include "attnkit/tensor/scratch_pool.hpp"
#include "attnkit/tensor/threads.hpp"

namespace attnkit::nn {

struct MultiheadAttention::PackedWeights {
  ops::GemmPackedB qkv;         // the joined Q | K | V projection (self-attention with in_proj_weight), or empty
  ops::GemmPackedB q, k, v;     // apart (empty when qkv holds them)
  ops::GemmPackedB out;         // empty without an output projection
  const ops::GemmPackedB* of(const ops::GemmPackedB& b) const { return b.cols() > 0 && b.rows() > 0 ? &b : nullptr; }
};

namespace {

using ops::GemmThreads;
using ops::Trans;

using Dims = ops::QkvDims;

Dims check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, std::string_view op) {
  return ops::check_qkv(q, k, v, op, "E", "key", "value");
}

void check_feature(const Tensor& x, const char* name, const Projection& p, const char* proj, std::string_view op) {
  AK_CHECK(x.dim(-1) == p.in, "{}: {} has shape {}, expected feature size {} ({} input size)", op, name, x.shape_str(),
           p.in, proj);
}

// ---- projections through ops::gemm ----

// y [rows, out] (row stride ldy) = x [rows, in] (row stride ldx) W^T + b  (or x W)
void project_rows(const Projection& p, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                  GemmThreads threads, int64_t c0 = 0, int64_t cols = -1) {
  if (cols < 0) cols = p.out;
  ops::GemmEpilogue bias;  // + b as the product stores
  bias.bias = p.b ? p.b + c0 : nullptr;
  if (p.in_out)  // W [in, out]: columns c0 .. c0 + cols
    ops::gemm(Trans::No, Trans::No, rows, cols, p.in, 1.0f, x, ldx, p.W + c0, p.out, 0.0f, y + c0, ldy, threads, bias);
  else  // W [out, in]: rows c0 .. c0 + cols
    ops::gemm(Trans::No, Trans::Yes, rows, cols, p.in, 1.0f, x, ldx, p.W + c0 * p.in, p.in, 0.0f, y + c0, ldy, threads,
              bias);
}

// Backward of y = x W^T + b (or x W) for dy [rows, out] (row stride ldy): adds into dx [rows, in]
// (or writes it, `fresh`), dW (W's layout and size) and db [out]; null pointers skip one. In pieces
// that tasks of one thread team run on their own thread: dx by blocks of rows, dW whole (one
// product: x is packed once), db.
struct ProjBackward {
  Projection p;
  const float* x;
  int64_t rows;
  const float* dy;
  int64_t ldy;
  float *dx, *dW, *db;
  bool fresh = false;  // dx holds nothing yet: written, not added to
  // dx[r0:r1] += dy[r0:r1] W [.., in]  (y = x W: dy W^T)
  void dx_rows(int64_t r0, int64_t r1) const {
    r1 = std::min(r1, rows);
    if (!dx || r0 >= r1) return;
    const float beta = fresh ? 0.0f : 1.0f;
    if (p.in_out)
      ops::gemm(Trans::No, Trans::Yes, r1 - r0, p.in, p.out, 1.0f, dy + r0 * ldy, ldy, p.W, p.out, beta, dx + r0 * p.in,
                p.in, GemmThreads::This);
    else
      ops::gemm(Trans::No, Trans::No, r1 - r0, p.in, p.out, 1.0f, dy + r0 * ldy, ldy, p.W, p.in, beta, dx + r0 * p.in,
                p.in, GemmThreads::This);
  }
  // y = x W^T:  dW [out, in] += dy^T x;  y = x W:  dW [in, out] += x^T dy
  void dw() const {
    if (!dW) return;
    if (p.in_out)
      ops::gemm(Trans::Yes, Trans::No, p.in, p.out, rows, 1.0f, x, p.in, dy, ldy, 1.0f, dW, p.out, GemmThreads::This);
    else
      ops::gemm(Trans::Yes, Trans::No, p.out, p.in, rows, 1.0f, dy, ldy, x, p.in, 1.0f, dW, p.in, GemmThreads::This);
  }
  // y += b:  db += sum over rows of dy
  void dbias() const {
    if (!db || !p.b) return;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < p.out; ++c) db[c] += dy[r * ldy + c];
  }
  double flops() const { return 4.0 * rows * p.in * p.out; }
};

// y [rows, out] = x [rows, in] W^T + b as tasks for one thread team: blocks of rows x output
// columns, each an independent single-threaded GEMM (a threaded GEMM's threads would wait on each
// other's packed panels). Each task packs its block of x and its columns of W: a task of R rows and
// C columns packs R*in + C*in floats for R*C*in multiply-adds, so blocks are as wide as the team
// allows: whole rows of y when there are two row blocks per thread, else the columns split just
// enough for that many tasks (1024 x 1536 on 2 threads: 4 tasks of 512 x 768, where 512 x 384
// blocks of Q, K and V apart packed 60% more and spent 12% of the forward packing).
//
// With the weight pre-packed (`packed`, MultiheadAttention::packed_weights) a task packs only its rows
// of x, so tasks are blocks of whole rows: guided shares of the register blocks (threads.hpp), big first,
// down to 2 blocks last (1024 rows on 2 threads: 264, 192, 144, .. 24 rows). Eight equal blocks of 128 rows
// left one thread waiting 0.3-0.5 ms at the stage's end whenever the other ran a few percent slower.
struct LinearJob {
  const float* x;
  int64_t rows, ldx;
  Projection p;
  float* y;
  int64_t ldy;
  const ops::GemmPackedB* packed = nullptr;  // p's weight as op(B), or null
  // with `packed`: called by the task that wrote rows [r0, r1) of y, right after (they are in its cache)
  std::function<void(int64_t, int64_t)> rows_done = nullptr;
  static constexpr int64_t kRows = 512;
  static int64_t mr() { return std::max<int64_t>(1, ops::gemm_panel_shape().mr); }
  static constexpr int64_t kMinBlocks = 2;  // register blocks in the smallest task of the packed form
  int64_t register_blocks() const { return (rows + mr() - 1) / mr(); }
  int64_t row_blocks() const {
    if (packed) return std::max<int64_t>(1, guided_tasks(register_blocks(), std::max(1, num_threads()), kMinBlocks));
    return (rows + kRows - 1) / kRows;
  }
  // first row of task b of the packed form (b = row_blocks(): rows): guided shares of the kernel's register blocks
  int64_t packed_row(int64_t b) const {
    return std::min(rows, guided_start(register_blocks(), std::max(1, num_threads()), kMinBlocks, b) * mr());
  }
  int64_t cols() const {  // columns per task: a multiple of 32 (whole panels of either kernel)
    if (packed) return p.out;
    const int64_t want = 2 * std::max(1, num_threads());
    const int64_t col_blocks = std::max<int64_t>(1, (want + row_blocks() - 1) / row_blocks());
    return std::max<int64_t>(32, ((p.out + col_blocks - 1) / col_blocks + 31) / 32 * 32);
  }
  int64_t col_blocks() const { return (p.out + cols() - 1) / cols(); }
  int64_t tasks() const { return row_blocks() * col_blocks(); }
  void run(int64_t task) const {
    if (packed) {
      const int64_t r0 = packed_row(task), br = packed_row(task + 1) - r0;
      ops::GemmEpilogue bias;
      bias.bias = p.b;
      ops::gemm_packed(Trans::No, br, 1.0f, x + r0 * ldx, ldx, *packed, 0.0f, y + r0 * ldy, ldy, GemmThreads::This,
                       bias);
      if (rows_done) rows_done(r0, r0 + br);
      return;
    }
    const int64_t C = cols(), blocks = col_blocks();
    const int64_t r0 = (task / blocks) * kRows, c0 = (task % blocks) * C;
    const int64_t br = std::min(kRows, rows - r0), bc = std::min(C, p.out - c0);
    project_rows(p, x + r0 * ldx, br, ldx, y + r0 * ldy, ldy, GemmThreads::This, c0, bc);
  }
};

// The weight of p as op(B) [in, out] for ops::gemm_packed (empty for an empty projection).
ops::GemmPackedB pack_projection(const Projection& p) {
  if (p.empty()) return {};
  if (p.in_out) return ops::GemmPackedB(Trans::No, p.in, p.out, p.W, p.out);  // y = x W
  return ops::GemmPackedB(Trans::Yes, p.in, p.out, p.W, p.in);               // y = x W^T
}

// The Q, K and V projections as one when their weights are consecutive rows of one [out, in] matrix
// and their biases consecutive too (PyTorch's in_proj_weight [3E, E] and in_proj_bias): one product
// [rows, 3E] instead of three, so each block of x is packed once for all three.
std::optional<Projection> joined(const Projection& q, const Projection& k, const Projection& v) {
  const bool rows_follow = !q.in_out && !k.in_out && !v.in_out && q.in == k.in && k.in == v.in &&
                           k.W == q.W + q.out * q.in && v.W == k.W + k.out * k.in;
  const bool bias_follows = (!q.b && !k.b && !v.b) || (q.b && k.b == q.b + q.out && v.b == k.b + k.out);
  if (!rows_follow || !bias_follows) return std::nullopt;
  Projection p = q;
  p.out = q.out + k.out + v.out;
  return p;
}

// A stage: `tasks` independent tasks; run(thread, task).
struct Stage {
  int64_t tasks = 0;
  std::function<void(int, int64_t)> run;
};

Stage linear_stage(std::vector<LinearJob> jobs) {
  Stage st;
  for (const LinearJob& j : jobs) st.tasks += j.tasks();
  st.run = [jobs = std::move(jobs)](int, int64_t task) {
    for (const LinearJob& j : jobs) {
      if (task < j.tasks()) return j.run(task);
      task -= j.tasks();
    }
  };
  return st;
}

// Runs the stages in order in ONE OpenMP team: within a stage threads take tasks from a shared
// counter; between stages they meet at a StepBarrier (spins kStageSpin, then sleeps). One team per
// forward rather than one per kernel: libgomp's barriers and idle pool threads spin for
// milliseconds, and on cores shared with other work that spinning made a 2-thread forward slower
// than a 1-thread one (T = 1024: 96 ms against 59 ms; with OMP_WAIT_POLICY=passive 59 ms).
// A task that throws (a GEMM's workspace allocation) does not escape the region: the first
// exception is kept, the remaining tasks are skipped, and it is rethrown after the team ends.
// A stage's last tasks end within a fraction of a millisecond of each other (guided shares); on a VM a
// sleeper woke 50-100 us after the notify, which cost the notifier 40 us: a waiter spins 200 us first
// (a few barriers a forward).
constexpr std::chrono::microseconds kStageSpin{200};
void run_stages(const std::vector<Stage>& stages, int team) {
  if (team <= 1) {
    for (const Stage& st : stages)
      for (int64_t t = 0; t < st.tasks; ++t) st.run(0, t);
    return;
  }
  std::vector<std::atomic<int64_t>> next(stages.size());
  for (auto& c : next) c.store(0);
  StepBarrier barrier(team, kStageSpin);
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
#pragma omp parallel num_threads(team)
  {
#pragma omp single
    barrier.resize(omp_get_num_threads());  // OpenMP may give fewer threads
    const int id = omp_get_thread_num();
    for (size_t i = 0; i < stages.size(); ++i) {
      if (i) barrier.wait();
      for (int64_t t; (t = next[i].fetch_add(1, std::memory_order_relaxed)) < stages[i].tasks;) {
        if (failed.load(std::memory_order_relaxed)) continue;
        try {
          stages[i].run(id, t);
        } catch (...) {
          std::lock_guard<std::mutex> lock(error_mutex);
          if (!error) error = std::current_exception();
          failed.store(true);
        }
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

// The attention problem over NH heads read in place from [N*T, ld] buffers, writing the
// concatenated contexts into ctx [N*T, NH*HSv] (row stride NH*HSv).
// Keys and values of batch element n start kv_stride rows apart (d.S unless a cache keeps spare rows).
ops::SdpaProblem heads_problem(const float* Q, int64_t ldq, const float* K, int64_t ldk, const float* V, int64_t ldv,
                               const Dims& d, int64_t NH, int64_t HSk, int64_t HSv, const MhaOptions& o, float* ctx,
                               int64_t kv_stride = -1) {
  if (kv_stride < 0) kv_stride = d.S;
  ops::SdpaProblem p;
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
Tensor head_weights(const ops::SdpaProblem& p, const Dims& d, const MhaOptions& o, bool naive, float* row_lse,
                    std::string_view op) {
  const int64_t NH = p.NH;
  AK_CHECK(d.N * NH * d.T * d.S <= ops::kMaxWeightElements,
           "{}: the attention weights would be [N, NH, T, S] = {} ({:.1f} GiB); ask for no weights (the tiled kernel "
           "never holds them)", op, shape_str({d.N, NH, d.T, d.S}), d.N * NH * d.T * d.S * 4.0 / (1 << 30));
  Tensor per_head({d.N, NH, d.T, d.S});
  if (naive) ops::sdpa_naive(p, nullptr, per_head.data(), row_lse);
  else ops::sdpa_full(p, nullptr, per_head.data(), row_lse);
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

// A zero-filled scratch buffer of `floats`.
std::shared_ptr<float> zeroed_scratch(int64_t floats) {
  std::shared_ptr<float> b = ScratchPool::get(floats);
  std::fill(b.get(), b.get() + floats, 0.0f);
  return b;
}

// The backward of projections as a stage of one team's tasks (in place of two threaded products per
// projection, each forking its own team): first every dW (one product each, the biggest tasks), then
// every db, then dx by blocks of rows, a block's rows of every projection in one task (self-attention's
// dq, dk, dv are one tensor: no two tasks write a row).
Stage backward_stage(std::vector<ProjBackward> jobs) {
  constexpr int64_t kRows = 128;
  int64_t max_rows = 0;
  for (const ProjBackward& j : jobs) max_rows = std::max(max_rows, j.rows);
  const int64_t nj = static_cast<int64_t>(jobs.size());
  Stage st;
  st.tasks = 2 * nj + (max_rows + kRows - 1) / kRows;
  st.run = [jobs = std::move(jobs), nj](int, int64_t t) {
    if (t < nj) return jobs[static_cast<size_t>(t)].dw();
    if (t < 2 * nj) return jobs[static_cast<size_t>(t - nj)].dbias();
    const int64_t r0 = (t - 2 * nj) * kRows;
    for (const ProjBackward& j : jobs) j.dx_rows(r0, r0 + kRows);
  };
  return st;
}

// Whether attend() runs the tiled kernel (then it needs the problem's TiledKvPanels).
bool tiled(const MhaOptions& o, bool naive) { return o.weights == HeadWeights::None && !naive; }

// A LinearJob's rows_done that packs the keys and values it projected (rows n * S + s of a [N*S, ..] buffer).
std::function<void(int64_t, int64_t)> pack_projected(ops::TiledKvPanels& keys, int64_t S, bool k, bool v) {
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
bool pack_in_projections(std::optional<ops::TiledKvPanels>& keys, int64_t S, LinearJob& kjob, LinearJob& vjob) {
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
void attend(const ops::SdpaProblem& p, std::vector<Stage> stages, ops::TiledKvPanels* keys, bool keys_packed,
            const Dims& d, const MhaOptions& o, bool naive, const float* ctx, const Projection& out,
            const ops::GemmPackedB* out_packed, MhaResult& r, float* row_lse, std::string_view op, MhaCache* cache) {
  ops::check_mask(o.mask, d.N, p.NH, d.T, d.S, op);
  Stage out_stage;
  if (!out.empty())
    out_stage = linear_stage({LinearJob{ctx, d.N * d.T, p.NH * p.Dv, out, r.output.data(), out.out, out_packed}});
  const int64_t kept_ld = ops::TiledWorker::kept_stride(p);
  const int64_t kept_row = kept_ld + ops::TiledWorker::key_tiles(p);  // floats kept per query: P's row, its tile maxes
  const bool keep = cache && tiled(o, naive) && d.N * d.T * d.S > 0 &&
                    double(d.N) * p.NH * d.T * kept_row * sizeof(float) <= double(o.saved_probs_budget);
  const int team = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(num_threads(), ops::TiledWorker::tasks(p))));
  if (tiled(o, naive)) {
    float *probs = nullptr, *tile_max = nullptr;
    if (keep) {  // [N, NH, T, kept_ld] then [N, NH, T, key tiles]; the tiles no row sees stay unwritten
      const int64_t rows = d.N * p.NH * d.T;
      std::shared_ptr<float> buf = ScratchPool::get(rows * kept_row);
      probs = buf.get(), tile_max = probs + rows * kept_ld;
      cache->probs = std::move(buf), cache->probs_ld = kept_ld;
      cache->probs_tile_max = tile_max, cache->probs_key_width = ops::TiledWorker::key_width(p);
    }
    std::vector<ops::TiledWorker> workers;  // allocated before the team: nothing throws inside it
    for (int i = 0; i < team; ++i) workers.emplace_back(p, keys, probs, kept_ld, tile_max);
    if (keys->tasks() > 0 && !keys_packed) stages.push_back({keys->tasks(), [&](int, int64_t t) { keys->pack(t); }});
    stages.push_back({ops::TiledWorker::tasks(p),
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
bool is_self_attention(const MultiheadAttention& m, const Tensor& q, const Tensor& k, const Tensor& v) {
  return q.data() == k.data() && k.data() == v.data() && m.q_projection().in == m.k_projection().in &&
         m.k_projection().in == m.v_projection().in;
}

void check_projection_inputs(const MultiheadAttention& m, const Tensor& q, const Tensor& k, const Tensor& v,
                             std::string_view op) {
  check_feature(q, "query", m.q_projection(), "query projection", op);
  check_feature(k, "key", m.k_projection(), "key projection", op);
  check_feature(v, "value", m.v_projection(), "value projection", op);
}

MhaResult mha(const MultiheadAttention& m, const Tensor& q, const Tensor& k, const Tensor& v, const MhaOptions& o,
              bool naive, MhaCache* cache) {
  constexpr std::string_view op = "multi-head attention";
  m.check(op);
  const Dims d = check_inputs(q, k, v, op);
  check_projection_inputs(m, q, k, v, op);
  const int64_t NH = m.num_heads, E = m.embed_dim(), Ev = m.value_dim();
  const Projection pq = m.q_projection(), pk = m.k_projection(), pv = m.v_projection(), po = m.out_projection();
  const bool has_out = !po.empty();
  MhaResult r = make_output(d, m.output_dim());
  std::shared_ptr<float> ctx_buf = has_out && !cache ? ScratchPool::get(d.N * d.T * Ev) : nullptr;
  if (cache) {
    cache->probs.reset(), cache->probs_ld = 0, cache->probs_tile_max = nullptr, cache->probs_key_width = 0;
    cache->row_lse = Tensor({d.N, NH, d.T});
    cache->context = has_out ? Tensor({d.N, d.T, Ev}) : Tensor();
  }
  float* ctx = !has_out ? r.output.data() : cache ? cache->context.data() : ctx_buf.get();  // [N*T, Ev]
  float* lse = cache ? cache->row_lse.data() : nullptr;
  const int64_t rows = d.N * d.T;
  const bool self_attention = is_self_attention(m, q, k, v);
  std::shared_ptr<const MultiheadAttention::PackedWeights> packed;
  // (inference only: training changes the weights every step, and each task packing its own block of
  // the weight keeps both threads busy, where one pack before the team would leave one idle)
  if (!cache && (ops::gemm_packed_matches(rows) || ops::gemm_packed_matches(d.N * d.S)))
    packed = m.packed_weights(self_attention);
  // the packed weight b for a projection of r rows, or null (ops::gemm packs it)
  auto packed_for = [&](const ops::GemmPackedB MultiheadAttention::PackedWeights::*b, int64_t r) {
    return packed && ops::gemm_packed_matches(r) ? packed->of((*packed).*b) : nullptr;
  };
  using W = MultiheadAttention::PackedWeights;
  const ops::GemmPackedB* out_packed = packed_for(&W::out, rows);
  if (self_attention) {
    // Q, K, V side by side in one [N*T, P] buffer (heads read in place, row stride P), each
    // projection writing its column slice. Without a cache (whose Q is [N, T, 2E + Ev]) P is padded to an odd
    // number of cache lines, so that P V reads V's rows as they lie (ops::values_row_stride).
    const int64_t P = cache ? 2 * E + Ev : ops::values_row_stride(2 * E + Ev), in = pq.in;
    std::shared_ptr<float> qkv_buf = cache ? nullptr : ScratchPool::get(rows * P);
    if (cache) cache->Q = Tensor({d.N, d.T, P}), cache->K = Tensor(), cache->V = Tensor();
    float* QKV = cache ? cache->Q.data() : qkv_buf.get();
    const ops::SdpaProblem p = heads_problem(QKV, P, QKV + E, P, QKV + 2 * E, P, d, NH, E / NH, Ev / NH, o, ctx);
    std::optional<ops::TiledKvPanels> keys;
    if (tiled(o, naive)) keys.emplace(p);
    const std::optional<Projection> pqkv = joined(pq, pk, pv);
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
    const ops::SdpaProblem p = heads_problem(Q, E, K, E, V, Ev, d, NH, E / NH, Ev / NH, o, ctx);
    std::optional<ops::TiledKvPanels> keys;
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

// Rows r0 .. r0 + rows of a PyTorch weight [out, in], bias from b0 in b (may be empty).
Projection pytorch_rows(const Parameter& w, int64_t r0, int64_t rows, const Parameter& b, int64_t b0) {
  Projection p;
  p.W = w.value.data() + r0 * w.value.dim(1);
  p.out = rows;
  p.in = w.value.dim(1);
  p.b = b.value.empty() ? nullptr : b.value.data() + b0;
  return p;
}

Projection documents(const Parameter& w) {
  Projection p;
  p.W = w.value.data();
  p.in = w.value.dim(0);
  p.out = w.value.dim(1);
  p.in_out = true;
  return p;
}

void expect_shape(const Tensor& t, const std::string& name, const Shape& expected, const std::string& legend,
                  std::string_view op) {
  AK_CHECK(t.shape() == expected, "{}: {} has shape {}, expected {} = {}", op, name, t.shape_str(), legend,
           shape_str(expected));
}

}  // namespace

// ---- the module ----

std::shared_ptr<const MultiheadAttention::PackedWeights> MultiheadAttention::packed_weights(bool self_attention) const {
  const std::optional<Projection> qkv =
      self_attention ? joined(q_projection(), k_projection(), v_projection()) : std::nullopt;
  return (qkv ? packed_joined_ : packed_apart_).get(named_parameters(), [&] {
    PackedWeights w;
    if (qkv) w.qkv = pack_projection(*qkv);
    else w.q = pack_projection(q_projection()), w.k = pack_projection(k_projection()), w.v = pack_projection(v_projection());
    w.out = pack_projection(out_projection());
    return w;
  });
}

std::vector<Parameter*> MultiheadAttention::named_parameters() {
  std::vector<Parameter*> out;
  auto add = [&](Parameter& p) {
    if (!p.value.empty()) out.push_back(&p);
  };
  switch (form) {
    case MhaWeightForm::InProj: add(in_proj_weight); break;
    case MhaWeightForm::SeparateProj: add(q_proj_weight), add(k_proj_weight), add(v_proj_weight); break;
    case MhaWeightForm::Documents: add(W_Q), add(W_K), add(W_V), add(W_O); return out;
  }
  add(in_proj_bias), add(out_proj_weight), add(out_proj_bias);
  return out;
}

Projection MultiheadAttention::q_projection() const {
  switch (form) {
    case MhaWeightForm::InProj: return pytorch_rows(in_proj_weight, 0, in_proj_weight.value.dim(1), in_proj_bias, 0);
    case MhaWeightForm::SeparateProj: return pytorch_rows(q_proj_weight, 0, q_proj_weight.value.dim(0), in_proj_bias, 0);
    case MhaWeightForm::Documents: break;
  }
  return documents(W_Q);
}

Projection MultiheadAttention::k_projection() const {
  switch (form) {
    case MhaWeightForm::InProj: {
      const int64_t E = in_proj_weight.value.dim(1);
      return pytorch_rows(in_proj_weight, E, E, in_proj_bias, E);
    }
    case MhaWeightForm::SeparateProj: {
      const int64_t E = k_proj_weight.value.dim(0);
      return pytorch_rows(k_proj_weight, 0, E, in_proj_bias, E);
    }
    case MhaWeightForm::Documents: break;
  }
  return documents(W_K);
}

Projection MultiheadAttention::v_projection() const {
  switch (form) {
    case MhaWeightForm::InProj: {
      const int64_t E = in_proj_weight.value.dim(1);
      return pytorch_rows(in_proj_weight, 2 * E, E, in_proj_bias, 2 * E);
    }
    case MhaWeightForm::SeparateProj: {
      const int64_t E = v_proj_weight.value.dim(0);
      return pytorch_rows(v_proj_weight, 0, E, in_proj_bias, 2 * E);
    }
    case MhaWeightForm::Documents: break;
  }
  return documents(W_V);
}

Projection MultiheadAttention::out_projection() const {
  if (form == MhaWeightForm::Documents) return W_O.value.empty() ? Projection{} : documents(W_O);
  if (out_proj_weight.value.empty()) return {};
  return pytorch_rows(out_proj_weight, 0, out_proj_weight.value.dim(0), out_proj_bias, 0);
}

void MultiheadAttention::check(std::string_view op) const {
  AK_CHECK(num_heads >= 1, "{}: the number of heads must be at least 1, not {}", op, num_heads);
  int64_t E = 0, Ev = 0;
  switch (form) {
    case MhaWeightForm::InProj: {
      const Tensor& w = in_proj_weight.value;
      AK_CHECK(w.rank() == 2 && w.dim(0) == 3 * w.dim(1),
               "{}: in_proj_weight has shape {}, expected [3E, E] (rows: q, k, v projections)", op, w.shape_str());
      E = Ev = w.dim(1);
      break;
    }
    case MhaWeightForm::SeparateProj: {
      const Tensor &wq = q_proj_weight.value, &wk = k_proj_weight.value, &wv = v_proj_weight.value;
      AK_CHECK(wq.rank() == 2 && wq.dim(0) == wq.dim(1), "{}: q_proj_weight has shape {}, expected [E, E]", op,
               wq.shape_str());
      E = Ev = wq.dim(0);
      AK_CHECK(wk.rank() == 2 && wk.dim(0) == E, "{}: k_proj_weight has shape {}, expected [E, kdim] with E = {}", op,
               wk.shape_str(), E);
      AK_CHECK(wv.rank() == 2 && wv.dim(0) == E, "{}: v_proj_weight has shape {}, expected [E, vdim] with E = {}", op,
               wv.shape_str(), E);
      break;
    }
    case MhaWeightForm::Documents: {
      const Tensor &wq = W_Q.value, &wk = W_K.value, &wv = W_V.value, &wo = W_O.value;
      AK_CHECK(wq.rank() == 2, "{}: W_Q has shape {}, expected [Dq, E]", op, wq.shape_str());
      E = wq.dim(1);
      AK_CHECK(wk.rank() == 2 && wk.dim(1) == E, "{}: W_K has shape {}, expected [Dk, E] with E = {} (from W_Q {})", op,
               wk.shape_str(), E, wq.shape_str());
      AK_CHECK(wv.rank() == 2 && wv.dim(0) == wk.dim(0),
               "{}: W_V has shape {}, expected [Dk, Ev] with Dk = {} (from W_K {})", op, wv.shape_str(), wk.dim(0),
               wk.shape_str());
      Ev = wv.dim(1);
      if (!wo.empty())
        AK_CHECK(wo.rank() == 2 && wo.dim(0) == Ev, "{}: W_O has shape {}, expected [Ev, Eo] with Ev = {}", op,
                 wo.shape_str(), Ev);
      break;
    }
  }
  if (form != MhaWeightForm::Documents) {
    if (!in_proj_bias.value.empty()) expect_shape(in_proj_bias.value, "in_proj_bias", {3 * E}, "[3E]", op);
    AK_CHECK(!out_proj_weight.value.empty(), "{}: out_proj.weight [E, E] = [{}, {}] is missing", op, E, E);
    expect_shape(out_proj_weight.value, "out_proj.weight", {E, E}, "[E, E]", op);
    if (!out_proj_bias.value.empty()) expect_shape(out_proj_bias.value, "out_proj.bias", {E}, "[E]", op);
  }
  AK_CHECK(E % num_heads == 0, "{}: NH = {} heads do not divide the embedding size E = {}", op, num_heads, E);
  AK_CHECK(Ev % num_heads == 0, "{}: NH = {} heads do not divide the value size Ev = {}", op, num_heads, Ev);
}

MultiheadAttention MultiheadAttention::from_bundle(const io::Value& bundle, int64_t num_heads, std::string_view op) {
  AK_CHECK(bundle.is_bundle(), "{}: the weights are not a bundle of named tensors{}", op,
           bundle.is_tensor() ? "" : ": " + bundle.why());
  AK_CHECK(num_heads >= 1, "{}: the number of heads must be at least 1, not {}", op, num_heads);
  MultiheadAttention m;
  m.num_heads = num_heads;
  std::set<std::string> used;  // every tensor member must be one of these (check_no_extra_weights)
  auto get = [&](const char* name) {
    const Tensor* t = io::find_tensor(bundle, name, op);
    if (t) used.insert(name);
    return t;
  };
  for (const char* unsupported : {"bias_k", "bias_v"})
    AK_CHECK(!get(unsupported), "{}: weights member {} (add_bias_kv=True) is not supported", op, unsupported);
  if (const Tensor* w = get("in_proj_weight")) {
    m.form = MhaWeightForm::InProj;
    m.in_proj_weight.value = *w;
  } else if (const Tensor* wq = get("q_proj_weight")) {
    const Tensor* wk = get("k_proj_weight");
    const Tensor* wv = get("v_proj_weight");
    AK_CHECK(wk && wv, "{}: q_proj_weight needs k_proj_weight and v_proj_weight too ({} is missing)", op,
             wk ? "v_proj_weight" : "k_proj_weight");
    m.form = MhaWeightForm::SeparateProj;
    m.q_proj_weight.value = *wq, m.k_proj_weight.value = *wk, m.v_proj_weight.value = *wv;
  } else if (const Tensor* wq = get("W_Q")) {
    const Tensor* wk = get("W_K");
    const Tensor* wv = get("W_V");
    AK_CHECK(wk && wv, "{}: W_Q needs W_K and W_V too ({} is missing)", op, wk ? "W_V" : "W_K");
    m.form = MhaWeightForm::Documents;
    m.W_Q.value = *wq, m.W_K.value = *wk, m.W_V.value = *wv;
    if (const Tensor* wo = get("W_O")) m.W_O.value = *wo;
  } else {
    std::string names;
    for (const auto& n : bundle.names()) names += (names.empty() ? "" : ", ") + n;
    fail("{}: the weights have none of in_proj_weight, q_proj_weight or W_Q (members: {})", op,
         names.empty() ? "none" : names);
  }
  if (m.form != MhaWeightForm::Documents) {
    if (const Tensor* b = get("in_proj_bias")) m.in_proj_bias.value = *b;
    if (const Tensor* w = get("out_proj.weight")) m.out_proj_weight.value = *w;
    if (const Tensor* b = get("out_proj.bias")) m.out_proj_bias.value = *b;
  }
  m.check(op);
  io::check_no_extra_weights(bundle, used, op);
  return m;
}

// ---- forward ----

MhaResult multihead_attention_forward(const MultiheadAttention& m, const Tensor& query, const Tensor& key,
                                      const Tensor& value, const MhaOptions& options, MhaCache* cache) {
  return mha(m, query, key, value, options, false, cache);
}

MhaResult multihead_attention_forward_naive(const MultiheadAttention& m, const Tensor& query, const Tensor& key,
                                            const Tensor& value, const MhaOptions& options) {
  return mha(m, query, key, value, options, true, nullptr);
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
  ops::check_mask(o.mask, d.N, NH, d.T, d.S, op);
  MhaResult r = make_output(d, Ev);  // the heads' contexts, concatenated [.., T, Ev]
  const ops::SdpaProblem p =
      heads_problem(Q.data(), E, K.data(), E, V.data(), Ev, d, NH, E / NH, Ev / NH, o, r.output.data(), kv_stride);
  if (row_lse) *row_lse = Tensor({d.N, NH, d.T});
  float* lse = row_lse ? row_lse->data() : nullptr;
  if (o.weights == HeadWeights::None) ops::sdpa_tiled(p, lse);
  else r.weights = head_weights(p, d, o, false, lse, op);
  return r;
}

MhaResult multihead_attention_forward_ops(const MultiheadAttention& m, const Tensor& query, const Tensor& key,
                                          const Tensor& value, const MhaOptions& options) {
  constexpr std::string_view op = "multi-head attention";
  m.check(op);
  check_inputs(query, key, value, op);
  check_projection_inputs(m, query, key, value, op);
  const Tensor Q = project(m.q_projection(), query, "query projection");  // [.., T, E]
  const Tensor K = project(m.k_projection(), key, "key projection");      // [.., S, E]
  const Tensor V = project(m.v_projection(), value, "value projection");  // [.., S, Ev]
  MhaResult r = heads_attention_forward(Q, K, V, m.num_heads, options, nullptr, op);  // [.., T, Ev]
  if (!m.out_projection().empty()) r.output = project(m.out_projection(), r.output, "output projection");  // [.., T, Eo]
  return r;
}

MhaResult multihead_attention_forward_projected(const MultiheadAttention& m, const Tensor& query, const Tensor& K,
                                                const Tensor& V, const MhaOptions& options, int64_t kv_rows) {
  constexpr std::string_view op = "multi-head attention";
  m.check(op);
  check_feature(query, "query", m.q_projection(), "query projection", op);
  AK_CHECK(K.rank() >= 1 && K.dim(-1) == m.embed_dim(), "{}: projected keys have shape {}, expected [.., S, E] with E = {}",
           op, K.shape_str(), m.embed_dim());
  AK_CHECK(V.rank() >= 1 && V.dim(-1) == m.value_dim(),
           "{}: projected values have shape {}, expected [.., S, Ev] with Ev = {}", op, V.shape_str(), m.value_dim());
  const Tensor Q = project(m.q_projection(), query, "query projection");  // [.., T, E]
  MhaResult r = heads_attention_forward(Q, K, V, m.num_heads, options, nullptr, op, kv_rows);  // [.., T, Ev]
  if (!m.out_projection().empty()) r.output = project(m.out_projection(), r.output, "output projection");  // [.., T, Eo]
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
void sdpa_backward(const ops::SdpaProblem& p, const MhaCache& cache, ops::StridedIn dout, const ops::SdpaGrads& g) {
  ops::sdpa_backward_tiled(p, cache.row_lse.data(), dout, g, cache.kept_probs());
}

ops::StridedOut strided(float* data, int64_t L, int64_t HS, int64_t ld) { return {data, L * ld, HS, ld}; }

void add_into(Tensor& dst, const Tensor& src) {
  float* d = dst.data();
  const float* s = src.data();
  for (int64_t i = 0, n = dst.numel(); i < n; ++i) d[i] += s[i];
}

}  // namespace

// ---- backward ----

void multihead_attention_backward(MultiheadAttention& m, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const MhaOptions& o, const MhaCache& cache, const Tensor& dY, Tensor* dq, Tensor* dk,
                                  Tensor* dv, const std::vector<Tensor*>& dparams) {
  constexpr std::string_view op = "multi-head attention backward";
  m.check(op);
  const Dims d = check_inputs(q, k, v, op);
  check_projection_inputs(m, q, k, v, op);
  const int64_t NH = m.num_heads, E = m.embed_dim(), Ev = m.value_dim(), Eo = m.output_dim();
  const int64_t N = d.N, T = d.T, S = d.S, rows = N * T, HS = E / NH, HSv = Ev / NH, P = 2 * E + Ev;
  const Shape out_shape = d.batched ? Shape{N, T, Eo} : Shape{T, Eo};
  AK_CHECK(dY.shape() == out_shape, "{}: the output gradient has shape {}, expected the output's shape {}", op,
           dY.shape_str(), shape_str(out_shape));
  check_grad_buffer(dq, q, "query", op), check_grad_buffer(dk, k, "key", op), check_grad_buffer(dv, v, "value", op);
  const bool self = is_self_attention(m, q, k, v);
  bool cache_fits = cache.row_lse.numel() == N * NH * T && cache.context.numel() == rows * Ev &&
                          (self ? cache.Q.numel() == rows * P
                                : cache.Q.numel() == rows * E && cache.K.numel() == N * S * E && cache.V.numel() == N * S * Ev);
  cache_fits = cache_fits && (!cache.probs || cache.probs_ld >= S);
  AK_CHECK(cache_fits, "{}: the cache (Q {}, K {}, V {}, context {}, row_lse {}) is not from a forward with these inputs",
           op, cache.Q.shape_str(), cache.K.shape_str(), cache.V.shape_str(), cache.context.shape_str(),
           cache.row_lse.shape_str());
  ops::check_mask(o.mask, N, NH, T, S, op);

  // Where each parameter's gradient goes.
  const std::vector<Parameter*> params = m.named_parameters();
  AK_CHECK(dparams.empty() || dparams.size() == params.size(), "{}: {} parameter gradients given for {} parameters", op,
           dparams.size(), params.size());
  auto grad_of = [&](Parameter& p) -> float* {
    for (size_t i = 0; i < params.size(); ++i) {
      if (params[i] != &p) continue;
      Tensor* g = dparams.empty() ? &p.grad_buffer() : dparams[i];
      if (!g) return nullptr;
      AK_CHECK(g->shape() == p.value.shape(), "{}: the gradient of {} has shape {}, expected {}", op, p.name,
               g->shape_str(), p.value.shape_str());
      return g->data();
    }
    return nullptr;  // absent (an optional bias)
  };
  float *gWq = nullptr, *gWk = nullptr, *gWv = nullptr, *gbq = nullptr, *gbk = nullptr, *gbv = nullptr;
  float *gWo = nullptr, *gbo = nullptr;
  if (m.form == MhaWeightForm::Documents) {
    gWq = grad_of(m.W_Q), gWk = grad_of(m.W_K), gWv = grad_of(m.W_V), gWo = grad_of(m.W_O);
  } else {
    if (m.form == MhaWeightForm::InProj) {
      float* g = grad_of(m.in_proj_weight);  // [3E, E]: rows q, k, v
      if (g) gWq = g, gWk = g + E * E, gWv = g + 2 * E * E;
    } else {
      gWq = grad_of(m.q_proj_weight), gWk = grad_of(m.k_proj_weight), gWv = grad_of(m.v_proj_weight);
    }
    if (float* g = grad_of(m.in_proj_bias)) gbq = g, gbk = g + E, gbv = g + 2 * E;  // [3E]
    gWo = grad_of(m.out_proj_weight), gbo = grad_of(m.out_proj_bias);
  }

  // One team for the lot, stage after stage (run_stages: a barrier that sleeps after kStageSpin, where
  // OpenMP's spins for milliseconds; one fork, where the threaded products forked two teams per projection).
  std::vector<Stage> stages;
  double work = 0;

  // output = context Wo^T + bo:  dcontext = doutput Wo, dWo += doutput^T context, dbo += sum doutput
  const Projection po = m.out_projection();
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
  const ops::SdpaProblem p =
      heads_problem(Q, ldq, K, ldk, V, ldv, d, NH, HS, HSv, o, const_cast<float*>(cache.context.data()));
  ops::SdpaGrads g;
  g.dq = strided(dQ, T, HS, ldq), g.dk = strided(dK, S, HS, ldk), g.dv = strided(dV, S, HSv, ldv);

  // Q = q Wq^T + bq, K = k Wk^T + bk, V = v Wv^T + bv (or x W): each projection's backward
  const std::vector<ProjBackward> in_jobs{
      ProjBackward{m.q_projection(), q.data(), rows, dQ, ldq, dq ? dq->data() : nullptr, gWq, gbq},
      ProjBackward{m.k_projection(), k.data(), N * S, dK, ldk, dk ? dk->data() : nullptr, gWk, gbk},
      ProjBackward{m.v_projection(), v.data(), N * S, dV, ldv, dv ? dv->data() : nullptr, gWv, gbv}};
  for (const ProjBackward& j : in_jobs) work += j.flops();
  const int team = std::max(ops::TiledBackward::team_for_problem(p), team_for(8, work));
  ops::TiledBackward attention(p, cache.row_lse.data(), ops::StridedIn{dctx, T * Ev, HSv, Ev}, g, team,
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
  ops::check_mask(o.mask, N, NH, T, S, op);
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
  const ops::SdpaProblem p = heads_problem(query.data(), Dq, key.data(), Dq, value.data(), Dv, d, NH, Dq / NH, Dv / NH,
                                           o, const_cast<float*>(cache.context.data()));
  ops::SdpaGrads g;
  g.dq = strided(gq, T, Dq / NH, Dq), g.dk = strided(gk, S, Dq / NH, Dq), g.dv = strided(gv, S, Dv / NH, Dv);
  // context = concat_h softmax(q_h k_h^T / sqrt(HS)) v_h
  sdpa_backward(p, cache, ops::StridedIn{dY.data(), T * Dv, Dv / NH, Dv}, g);
  if (alias) {
    if (dq) add_into(*dq, tq);
    if (dk) add_into(*dk, tk);
    if (dv) add_into(*dv, tv);
  }
}

}  // namespace attnkit::nn
