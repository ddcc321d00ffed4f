// The attention kernels' common checks (masks, query/key/value sizes) and the full kernel: scores and
// weights materialised, one [br, S] block per query tile (sdpa_full, FullWorker).
// Legend: N batch, T queries, S keys, Dk/Dv feature sizes, NH heads.
#include "attnkit/ops/attention.hpp"

// GCC 12 warns about Eigen's AVX-512 intrinsics (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <atomic>
#include <cmath>

#include <fmt/format.h>
#include <omp.h>

#include "attnkit/ops/attention_detail.hpp"
#include "attnkit/ops/matmul.hpp"
#include "attnkit/ops/softmax.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/threads.hpp"

namespace attnkit::ops {
using namespace detail;

void check_mask(const MaskSpec& mask, int64_t N, int64_t NH, int64_t T, int64_t S, std::string_view op) {
  if (!mask.key_lengths.empty()) {
    AK_CHECK(static_cast<int64_t>(mask.key_lengths.size()) == N,
             "{}: key lengths has {} entries, expected one per batch element (N = {})", op, mask.key_lengths.size(), N);
    for (size_t i = 0; i < mask.key_lengths.size(); ++i)
      AK_CHECK(mask.key_lengths[i] >= 0 && mask.key_lengths[i] <= S,
               "{}: key length {} at [{}] is outside [0, S] = [0, {}]", op, mask.key_lengths[i], i, S);
  }
  if (mask.mask.empty()) return;
  const Tensor& m = mask.mask;
  const bool ok = (m.rank() == 2 && m.shape() == Shape{T, S}) || (m.rank() == 3 && m.shape() == Shape{N, T, S}) ||
                  (m.rank() == 4 && m.shape() == Shape{N, NH, T, S});
  if (!ok) {
    std::string expected = fmt::format("[T, S] = {} or [N, T, S] = {}", shape_str({T, S}), shape_str({N, T, S}));
    if (NH > 1) expected += fmt::format(" or [N, NH, T, S] = {}", shape_str({N, NH, T, S}));
    fail("{}: mask has shape {}, expected {}", op, m.shape_str(), expected);
  }
  for (int64_t i = 0; i < m.numel(); ++i)
    AK_CHECK(m[i] == 0.0f || m[i] == 1.0f, "{}: mask {} has {} at {}, expected 0 (masked) or 1 (attend)", op,
             m.shape_str(), m[i], shape_str(unravel_index(i, m.shape())));
}

// ---- the sizes every attention entry shares ----
QkvDims check_qkv(const Tensor& q, const Tensor& k, const Tensor& v, std::string_view op, std::string_view feature,
                  std::string_view keys, std::string_view values) {
  auto verb = [](std::string_view name) { return name.back() == 's' ? "have" : "has"; };
  AK_CHECK(q.rank() == 2 || q.rank() == 3, "{}: query has shape {}, expected [T, {}] or [N, T, {}]", op, q.shape_str(),
           feature, feature);
  AK_CHECK(k.rank() == q.rank(), "{}: {} {} shape {}, expected rank {} like query {}", op, keys, verb(keys),
           k.shape_str(), q.rank(), q.shape_str());
  AK_CHECK(v.rank() == q.rank(), "{}: {} {} shape {}, expected rank {} like query {}", op, values, verb(values),
           v.shape_str(), q.rank(), q.shape_str());
  QkvDims d;
  d.batched = q.rank() == 3;
  d.N = d.batched ? q.dim(0) : 1;
  d.T = q.dim(-2), d.S = k.dim(-2);
  if (d.batched) {
    AK_CHECK(k.dim(0) == d.N, "{}: {} {} and query {} disagree on the batch size", op, keys, k.shape_str(), q.shape_str());
    AK_CHECK(v.dim(0) == d.N, "{}: {} {} and query {} disagree on the batch size", op, values, v.shape_str(),
             q.shape_str());
  }
  AK_CHECK(v.dim(-2) == d.S, "{}: {} {} and {} {} disagree on the number of keys S", op, values, v.shape_str(), keys,
           k.shape_str());
  return d;
}

// ---- scores and weights materialised: one [br, S] block per query tile ----
// The block's rows: about 128 K floats (S = 1024: 128 rows), so that the block Q_i K^T writes stays
// near L2 while each of its rows is softmaxed (in L1) and P V reads it back, and K's packed panels
// serve enough rows (64 and 256 rows do about as well).
int64_t FullWorker::block_rows(const SdpaProblem& p) {
  const int64_t fit = std::max<int64_t>(16, (int64_t{1} << 17) / std::max<int64_t>(p.S, 1));
  return std::min<int64_t>({tile_sizes().query, fit, std::max<int64_t>(p.T, 1)});
}

int64_t FullWorker::tasks(const SdpaProblem& p) {
  const int64_t Br = block_rows(p);
  return p.N * p.NH * ((p.T + Br - 1) / Br);
}

FullWorker::FullWorker(const SdpaProblem& p, float* weights, int64_t ld, float* scores)
    : p_(p), weights_(weights), scores_(scores), ld_(ld), Br_(block_rows(p)), stats_(static_cast<size_t>(2 * Br_)) {
  AK_CHECK(weights != nullptr && ld >= p.S, "attention: the full kernel needs a weights buffer with rows of at least S");
}

void FullWorker::run(int64_t task, float* row_lse) {
  const SdpaProblem& p = p_;
  const int64_t tiles_per_head = (p.T + Br_ - 1) / Br_;
  const int64_t nh = task / tiles_per_head, n = nh / p.NH, h = nh % p.NH;
  const int64_t t0 = (task % tiles_per_head) * Br_, br = std::min(Br_, p.T - t0);
  float* wblock = weights_ + (nh * p.T + t0) * ld_;  // [br, S] (row stride ld)
  const float* Qi = p.q.data + n * p.q.batch + h * p.q.head + t0 * p.q.row;  // [br, Dk]
  // W = scale Q_i K^T   [br, S]
  gemm(Trans::No, Trans::Yes, br, p.S, p.Dk, p.scale, Qi, p.q.row, p.k.data + n * p.k.batch + h * p.k.head, p.k.row,
       0.0f, wblock, ld_, GemmThreads::This);
  if (p.mask && p.mask->any())
    for (int64_t r = 0; r < br; ++r)
      mask_scores(wblock + r * ld_, 0, p.S, row_limit(p, n, t0 + r), mask_row(p, n, h, t0 + r));
  float* mx = stats_.data();  // [br]
  float* sum = mx + Br_;      // [br]
  for (int64_t r = 0; r < br; ++r) {
    float* w = wblock + r * ld_;
    if (scores_) std::copy(w, w + p.S, scores_ + (nh * p.T + t0 + r) * p.S);
    softmax_rows(w, 1, p.S, mx + r, sum + r);
  }
  if (row_lse)
    for (int64_t r = 0; r < br; ++r) row_lse[nh * p.T + t0 + r] = sum[r] > 0 ? mx[r] + std::log(sum[r]) : kNegInf;
  // out_i = W V   [br, Dv]
  gemm(Trans::No, Trans::No, br, p.Dv, p.S, 1.0f, wblock, ld_, p.v.data + n * p.v.batch + h * p.v.head, p.v.row, 0.0f,
       p.out.data + n * p.out.batch + h * p.out.head + t0 * p.out.row, p.out.row, GemmThreads::This);
}

void sdpa_full(const SdpaProblem& p, float* scores, float* weights, float* row_lse) {
  AK_CHECK(weights != nullptr, "attention: sdpa_full needs a weights buffer");
  const int64_t tasks = FullWorker::tasks(p);
  const int team = attnkit::detail::team_for(tasks, sdpa_flops(p));
  std::vector<FullWorker> workers;  // allocated before the team: nothing throws inside it
  for (int i = 0; i < team; ++i) workers.emplace_back(p, weights, p.S, scores);
  std::atomic<int64_t> next{0};
#pragma omp parallel num_threads(team) if (team > 1)
  {
    FullWorker& w = workers[static_cast<size_t>(omp_get_thread_num())];
    for (int64_t task; (task = next.fetch_add(1, std::memory_order_relaxed)) < tasks;) w.run(task, row_lse);
  }
}

}  // namespace attnkit::ops
