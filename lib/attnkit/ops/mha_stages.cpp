// The multi-head attention kernels' thread-team machinery: the projections' tasks, the stages' team, the
// packed projection weights.
// Legend: N batch, T queries, S keys, E model size, Ev value projection size.
#include "attnkit/ops/mha_stages.hpp"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // Eigen AVX-512, GCC 12 false positive

#include <omp.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>

#include "attnkit/tensor/barrier.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/scratch_pool.hpp"

namespace attnkit::ops {
namespace detail {

// y [rows, out] (row stride ldy) = x [rows, in] (row stride ldx) W^T + b  (or x W)
void project_rows(const Projection& p, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                  GemmThreads threads, int64_t c0, int64_t cols) {
  if (p.lowp) {  // (threads: the lower-precision kernels' own policy, one thread inside a team)
    AK_CHECK(c0 == 0 && (cols < 0 || cols == p.out) && p.lowp->out == p.out && p.lowp->in == p.in,
             "projection: {} weights [{}, {}] for a product of columns {} .. {} of [{}, {}]",
             precision_name(p.lowp->precision), p.lowp->out, p.lowp->in, c0, cols < 0 ? p.out : c0 + cols, p.out,
             p.in);
    lowp_linear(*p.lowp, x, rows, ldx, p.b, y, ldy);
    return;
  }
  if (cols < 0) cols = p.out;
  GemmEpilogue bias;  // + b as the product stores
  bias.bias = p.b ? p.b + c0 : nullptr;
  if (p.in_out)  // W [in, out]: columns c0 .. c0 + cols
    gemm(Trans::No, Trans::No, rows, cols, p.in, 1.0f, x, ldx, p.W + c0, p.out, 0.0f, y + c0, ldy, threads, bias);
  else  // W [out, in]: rows c0 .. c0 + cols
    gemm(Trans::No, Trans::Yes, rows, cols, p.in, 1.0f, x, ldx, p.W + c0 * p.in, p.in, 0.0f, y + c0, ldy, threads,
         bias);
}

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

std::shared_ptr<float> zeroed_scratch(int64_t floats) {
  std::shared_ptr<float> b = ScratchPool::get(floats);
  std::fill(b.get(), b.get() + floats, 0.0f);
  return b;
}

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

// (see the header)
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

}  // namespace detail

namespace {
// The weight of p as op(B) [in, out] for ops::gemm_packed (empty for an empty projection).
GemmPackedB pack_projection(const Projection& p) {
  if (p.empty()) return {};
  if (p.in_out) return GemmPackedB(Trans::No, p.in, p.out, p.W, p.out);  // y = x W
  return GemmPackedB(Trans::Yes, p.in, p.out, p.W, p.in);               // y = x W^T
}
}  // namespace

std::optional<Projection> joined_projection(const Projection& q, const Projection& k, const Projection& v) {
  if (q.lowp || k.lowp || v.lowp) return std::nullopt;
  const bool rows_follow = !q.in_out && !k.in_out && !v.in_out && q.in == k.in && k.in == v.in &&
                           k.W == q.W + q.out * q.in && v.W == k.W + k.out * k.in;
  const bool bias_follows = (!q.b && !k.b && !v.b) || (q.b && k.b == q.b + q.out && v.b == k.b + k.out);
  if (!rows_follow || !bias_follows) return std::nullopt;
  Projection p = q;
  p.out = q.out + k.out + v.out;
  return p;
}

MhaPackedWeights pack_mha_weights(const Projection& q, const Projection& k, const Projection& v, const Projection& out,
                                  bool self_attention) {
  const std::optional<Projection> qkv = self_attention ? joined_projection(q, k, v) : std::nullopt;
  MhaPackedWeights w;
  if (qkv) w.qkv = pack_projection(*qkv);
  else w.q = pack_projection(q), w.k = pack_projection(k), w.v = pack_projection(v);
  w.out = pack_projection(out);
  return w;
}

MhaParamGrads MhaGradSlots::in(const std::vector<Tensor*>& grads) const {
  auto at = [&](const Slot& s) -> float* {
    if (s.index < 0) return nullptr;
    Tensor* g = grads[static_cast<size_t>(s.index)];
    return g ? g->data() + s.offset : nullptr;
  };
  return {at(Wq), at(Wk), at(Wv), at(bq), at(bk), at(bv), at(Wo), at(bo)};
}

}  // namespace attnkit::ops
