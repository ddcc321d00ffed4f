// The recurrent stack's derived weight layout (internal: include from .cpp files only; Eigen-free): one
// layer and direction transposed into blocked columns, and W_hh packed once for the library's GEMM
// micro-kernel, split among a team of threads, and cached per team size.
// Legend: N batch, H hidden size, G gates, GH = G*H pre-activation columns (blocked order).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "attnkit/ops/gemm_panels.hpp"
#include "attnkit/ops/matmul.hpp"
#include "attnkit/ops/recurrent.hpp"
#include "attnkit/ops/recurrent_stack.hpp"
#include "attnkit/tensor/tensor.hpp"

namespace attnkit::ops {

// h_prev W_hh^T for a run of columns, with W_hh's columns packed once (GemmPackedB, the panels of the
// library's own GEMM micro-kernel) instead of once per step: only h_prev (small) is packed each step
// (inside gemm_packed, in that thread's buffer), and the product is added in place into the
// pre-activations, so the time loop allocates and copies nothing else.
// Immutable once built: kept with the derived layout (RecurrentPacked) and shared by concurrent calls.
class PackedColumns {
 public:
  // wh [H, GH] row-major; the columns [c0, c0 + nc). (Backward packs W_hh [G*H, H] the same way:
  // H = G*H rows deep, GH = H columns.)
  PackedColumns(const float* wh, int64_t H, int64_t GH, int64_t c0, int64_t nc,
                GemmPackedB::Layout layout = GemmPackedB::Layout::Panels);
  // res[n * ld + c0 + j] += sum_k h[n * ldh + k] * wh[k, c0 + j] for n < N (ldh < 0: H), on the
  // calling thread.
  void multiply_add(const float* h, int64_t N, float* res, int64_t ld, int64_t ldh = -1) const;
  // res[n * ld + c0 + j] = sum_k a[n * lda + k] * wh[k, c0 + j] for n < M (res is not read); on the
  // calling thread, or forking by the thread policy (GemmThreads::Policy, outside a region).
  void multiply(const float* a, int64_t M, int64_t lda, float* res, int64_t ld,
                GemmThreads threads = GemmThreads::This) const;
  // Whether multiply_panels runs: the columns are one block of the panel kernel (GemmPackedB::panels).
  bool has_panels() const { return b_.panels(0) != nullptr; }
  // res[n * ld + j - j0] = beta * res[..] + sum_k pa(n, k) * wh[k, c0 + j] for n < M and j in [j0, j1) (j0 a
  // multiple of the panel width), op(A) [M, H] packed by pack_a_panels with RowBlocks::Balanced: a few
  // columns at a time on operands packed once (the fused time step). The same bits as multiply_add / multiply.
  void multiply_panels(const float* pa, int64_t M, int64_t j0, int64_t j1, float beta, float* res, int64_t ld) const;

 private:
  int64_t H_, c0_;
  GemmPackedB b_;  // wh[:, c0:c0+nc] [H, nc]
};

// A team's split of the hidden units: part c = units [u0, u1) and their packed columns: of W_hh
// (the per-step product) and, in the forward's parts, of W_ih (the input projection, which each
// part computes for its own columns: it then needs nothing from the other parts before step 0).
struct TeamParts {
  std::vector<std::pair<int64_t, int64_t>> units;
  std::vector<PackedColumns> columns;
  std::vector<PackedColumns> input;  // forward only: wx [D_k, G*H], the same columns
};

// The derived layout of one layer and direction (built by pack_recurrent_direction; immutable but for
// the per-team packs, which are built on first use and kept, thread-safely).
struct RecurrentPacked {
  Tensor wx;    // [D_k, G*H] blocked columns
  Tensor wh;    // [H, G*H] blocked columns
  Tensor bias;  // [G*H] blocked: b_ih + b_hh (GRU's n part: b_in only)
  Tensor b_hn;  // [H] GRU
  bool wh_finite = false;  // every W_hh value finite: a zero h_prev then makes h_prev W_hh exactly +0

  // The forward's parts for a team of `team` threads; one_row: W_hh's columns packed for products of
  // one row (a batch of one: GemmPackedB::Layout::Rows).
  const TeamParts& parts(int team, int64_t H, CellKind cell, bool one_row) const;
  // For backward's dh_prev += da_h W_hh: W_hh [G*H, H] (PyTorch layout, the weights this layout was
  // built from) packed by the team's unit runs (part c: the columns of its units), the split of parts().
  const TeamParts& backward_parts(int team, const Tensor& w_hh, int64_t H) const;

 private:
  struct TeamPacks {
    std::mutex mutex;
    std::map<int, TeamParts> forward, forward_rows, backward;  // team size -> parts
  };
  std::unique_ptr<TeamPacks> packs_ = std::make_unique<TeamPacks>();
};

// The derived layout of one direction from its PyTorch-layout weights: w_ih [G*H, D_k], w_hh [G*H, H],
// b_ih and b_hh [G*H] (shapes checked by the caller).
RecurrentPacked pack_recurrent_direction(CellKind cell, int64_t H, const Tensor& w_ih, const Tensor& w_hh,
                                         const Tensor& b_ih, const Tensor& b_hh);

// The forward loops' rule for small steps (below kSmallStepMacs multiply-adds a thread): a team's fork and join
// (microseconds) pay only over kMinTeamSteps steps or more, so fewer such steps (a decoder's one step a call) run
// on one thread.
constexpr int64_t kSmallStepMacs = int64_t(1) << 18;
constexpr int64_t kMinTeamSteps = 8;

// recurrent_stack_forward when a direction has lower-precision weights (RecurrentDirection::lowp_ih, lowp_hh),
// the inputs already checked: per layer and direction a time loop whose team splits the units (recurrent_lowp.cpp).
RecurrentResult recurrent_stack_forward_lowp(const RecurrentWeights& weights, const RecurrentInputs& inputs,
                                             const RunOptions& options);

// Threads worth using for a time loop of N x H x G*H multiply-adds a step.
int recurrent_team_size(int threads, int64_t N, int64_t H, int G, int64_t min_macs);

// A float scratch buffer of the time loops (64-byte aligned, uninitialised): up to 4 MB it is this
// thread's buffer for `slot` (0..2), kept from call to call (the latency case would otherwise map and
// fault fresh pages every call); larger ones come from the recycling ScratchPool
// (tensor/scratch_pool.hpp: tens of MB of pre-activations mapped afresh would cost a forward its page
// zeroing).
class RecurrentScratch {
 public:
  RecurrentScratch(size_t floats, int slot);
  float* data() { return data_; }

 private:
  std::shared_ptr<float> large_;
  float* data_ = nullptr;
};

}  // namespace attnkit::ops
