// Internal to the recurrent layer (included by nn/recurrent*.cpp only; Eigen-free): W_hh packed once
// for the library's GEMM micro-kernel, split among a team of threads, and cached per team size.
// Legend: N batch, H hidden size, G gates, GH = G*H pre-activation columns (blocked order).
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "attnkit/nn/recurrent.hpp"
#include "attnkit/ops/matmul.hpp"

namespace attnkit::nn {

// h_prev W_hh^T for a run of columns, with W_hh's columns packed once (ops::GemmPackedB, the panels
// of the library's own GEMM micro-kernel) instead of once per step: only h_prev (small) is packed
// each step (inside ops::gemm_packed, in that thread's buffer), and the product is added in place
// into the pre-activations, so the time loop allocates and copies nothing else.
// Immutable once built: kept by the model (PackCache) and shared by concurrent forward calls.
class PackedColumns {
 public:
  // wh [H, GH] row-major; the columns [c0, c0 + nc). (Backward packs W_hh [G*H, H] the same way:
  // H = G*H rows deep, GH = H columns.)
  PackedColumns(const float* wh, int64_t H, int64_t GH, int64_t c0, int64_t nc,
                ops::GemmPackedB::Layout layout = ops::GemmPackedB::Layout::Panels);
  // res[n * ld + c0 + j] += sum_k h[n * ldh + k] * wh[k, c0 + j] for n < N (ldh < 0: H), on the
  // calling thread.
  void multiply_add(const float* h, int64_t N, float* res, int64_t ld, int64_t ldh = -1) const;
  // res[n * ld + c0 + j] = sum_k a[n * lda + k] * wh[k, c0 + j] for n < M (res is not read); on the
  // calling thread, or forking by the thread policy (ops::GemmThreads::Policy, outside a region).
  void multiply(const float* a, int64_t M, int64_t lda, float* res, int64_t ld,
                ops::GemmThreads threads = ops::GemmThreads::This) const;
  // Whether multiply_panels runs: the columns are one block of the panel kernel (GemmPackedB::panels).
  bool has_panels() const { return b_.panels(0) != nullptr; }
  // res[n * ld + j - j0] = beta * res[..] + sum_k pa(n, k) * wh[k, c0 + j] for n < M and j in [j0, j1) (j0 a
  // multiple of the panel width), op(A) [M, H] packed by ops::pack_a_panels with RowBlocks::Balanced: a few
  // columns at a time on operands packed once (the fused time step). The same bits as multiply_add / multiply.
  void multiply_panels(const float* pa, int64_t M, int64_t j0, int64_t j1, float beta, float* res, int64_t ld) const;

 private:
  int64_t H_, c0_;
  ops::GemmPackedB b_;  // wh[:, c0:c0+nc] [H, nc]
};

// A team's split of the hidden units: part c = units [u0, u1) and their packed columns: of W_hh
// (the per-step product) and, in the forward's parts, of W_ih (the input projection, which each
// part computes for its own columns: it then needs nothing from the other parts before step 0).
struct TeamParts {
  std::vector<std::pair<int64_t, int64_t>> units;
  std::vector<PackedColumns> columns;
  std::vector<PackedColumns> input;  // forward only: wx [D_k, G*H], the same columns
};
// W_hh's columns in `layout` (Rows for a batch of one); W_ih's always in panels (N*T rows).
TeamParts make_parts(const Recurrent::Packed& p, int64_t H, int G, int team, ops::GemmPackedB::Layout layout);

// The packed W_hh of every layer and direction, per team size, built on first use and kept.
struct PackCache {
  // one_row: W_hh's columns packed for products of one row (a batch of one: GemmPackedB::Layout::Rows)
  const TeamParts& parts(int index, int team, const Recurrent::Packed& p, int64_t H, ops::CellKind cell,
                         bool one_row);
  // For backward's dh_prev += da_h W_hh: W_hh [G*H, H] (PyTorch layout) packed by the team's unit
  // runs (part c: the columns of its units), the same split as parts().
  const TeamParts& backward_parts(int index, int team, const Tensor& w_hh, int64_t H);
  void forget(int index);  // after the weights of `index` changed
  std::mutex mutex;
  std::map<std::pair<int, int>, TeamParts> built;           // (layer*dirs + dir, team) -> parts
  std::map<std::pair<int, int>, TeamParts> built_rows;      // the same with W_hh for a batch of one
  std::map<std::pair<int, int>, TeamParts> built_backward;  // the same for backward
};

// What a Recurrent derives from its parameters (guarded by `mutex`; rebuilt on a version change).
struct Recurrent::Derived {
  std::mutex mutex;
  std::vector<Recurrent::Packed> packed;        // per layer*dirs + dir
  std::vector<std::array<uint64_t, 4>> versions;  // the parameter versions packed[i] was built from
  std::vector<bool> built;
  PackCache cache;
};

}  // namespace attnkit::nn
