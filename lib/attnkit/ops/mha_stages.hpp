// Internal (include from .cpp files only): the multi-head attention kernels' thread-team machinery
// (ops/mha.cpp): stages of independent tasks run by one team (run_stages), the projections as such tasks
// (LinearJob forward, ProjBackward backward). Not part of the library's interface.
// Legend: N batch, T queries, S keys, E model size, Ev value projection size.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "attnkit/ops/gemm_panels.hpp"
#include "attnkit/ops/matmul.hpp"
#include "attnkit/ops/mha.hpp"
#include "attnkit/tensor/threads.hpp"

namespace attnkit::ops::detail {

// y [rows, out] (row stride ldy) = x [rows, in] (row stride ldx) W^T + b  (or x W); columns c0 .. c0 + cols
// (cols < 0: all). With p.lowp the columns are all of them (the lower-precision kernels take whole rows).
void project_rows(const Projection& p, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                  GemmThreads threads, int64_t c0 = 0, int64_t cols = -1);

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
      gemm(Trans::No, Trans::Yes, r1 - r0, p.in, p.out, 1.0f, dy + r0 * ldy, ldy, p.W, p.out, beta, dx + r0 * p.in,
           p.in, GemmThreads::This);
    else
      gemm(Trans::No, Trans::No, r1 - r0, p.in, p.out, 1.0f, dy + r0 * ldy, ldy, p.W, p.in, beta, dx + r0 * p.in,
           p.in, GemmThreads::This);
  }
  // y = x W^T:  dW [out, in] += dy^T x;  y = x W:  dW [in, out] += x^T dy
  void dw() const {
    if (!dW) return;
    if (p.in_out)
      gemm(Trans::Yes, Trans::No, p.in, p.out, rows, 1.0f, x, p.in, dy, ldy, 1.0f, dW, p.out, GemmThreads::This);
    else
      gemm(Trans::Yes, Trans::No, p.out, p.in, rows, 1.0f, dy, ldy, x, p.in, 1.0f, dW, p.in, GemmThreads::This);
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
// enough for that many tasks (1024 x 1536 on 2 threads: 4 tasks of 512 x 768; 512 x 384 blocks of
// Q, K and V apart would pack more of the weight and of x again).
//
// With the weight pre-packed (`packed`, MhaWeights::packed) a task packs only its rows
// of x, so tasks are blocks of whole rows: guided shares of the register blocks (threads.hpp), big first,
// down to 2 blocks last (1024 rows on 2 threads: 264, 192, 144, .. 24 rows). With equal blocks one thread
// waits at the stage's end whenever the other runs a little slower.
//
// With lower-precision weights (p.lowp) tasks are blocks of kLowpRows whole rows, each one product of the
// lower-precision kernels (which quantize the block's rows of x once for all its columns).
struct LinearJob {
  const float* x;
  int64_t rows, ldx;
  Projection p;
  float* y;
  int64_t ldy;
  const GemmPackedB* packed = nullptr;  // p's weight as op(B), or null
  // with `packed`: called by the task that wrote rows [r0, r1) of y, right after (they are in its cache)
  std::function<void(int64_t, int64_t)> rows_done = nullptr;
  static constexpr int64_t kRows = 512;
  static constexpr int64_t kLowpRows = 64;
  static int64_t mr() { return std::max<int64_t>(1, gemm_panel_shape().mr); }
  static constexpr int64_t kMinBlocks = 2;  // register blocks in the smallest task of the packed form
  int64_t register_blocks() const { return (rows + mr() - 1) / mr(); }
  int64_t row_blocks() const {
    if (p.lowp) return (rows + kLowpRows - 1) / kLowpRows;
    if (packed) return std::max<int64_t>(1, attnkit::detail::guided_tasks(register_blocks(), std::max(1, num_threads()), kMinBlocks));
    return (rows + kRows - 1) / kRows;
  }
  // first row of task b of the packed form (b = row_blocks(): rows): guided shares of the kernel's register blocks
  int64_t packed_row(int64_t b) const {
    return std::min(rows, attnkit::detail::guided_start(register_blocks(), std::max(1, num_threads()), kMinBlocks, b) * mr());
  }
  int64_t cols() const {  // columns per task: a multiple of 32 (whole panels of either kernel)
    if (packed || p.lowp) return p.out;
    const int64_t want = 2 * std::max(1, num_threads());
    const int64_t col_blocks = std::max<int64_t>(1, (want + row_blocks() - 1) / row_blocks());
    return std::max<int64_t>(32, ((p.out + col_blocks - 1) / col_blocks + 31) / 32 * 32);
  }
  int64_t col_blocks() const { return (p.out + cols() - 1) / cols(); }
  int64_t tasks() const { return row_blocks() * col_blocks(); }
  void run(int64_t task) const {
    if (p.lowp) {
      const int64_t r0 = task * kLowpRows, br = std::min(kLowpRows, rows - r0);
      project_rows(p, x + r0 * ldx, br, ldx, y + r0 * ldy, ldy, GemmThreads::This);
      return;
    }
    if (packed) {
      const int64_t r0 = packed_row(task), br = packed_row(task + 1) - r0;
      GemmEpilogue bias;
      bias.bias = p.b;
      gemm_packed(Trans::No, br, 1.0f, x + r0 * ldx, ldx, *packed, 0.0f, y + r0 * ldy, ldy, GemmThreads::This,
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

// A stage: `tasks` independent tasks; run(thread, task).
struct Stage {
  int64_t tasks = 0;
  std::function<void(int, int64_t)> run;
};

Stage linear_stage(std::vector<LinearJob> jobs);
// The backward of projections as a stage of one team's tasks (in place of two threaded products per
// projection, each forking its own team): first every dW (one product each, the biggest tasks), then
// every db, then dx by blocks of rows, a block's rows of every projection in one task (self-attention's
// dq, dk, dv are one tensor: no two tasks write a row).
Stage backward_stage(std::vector<ProjBackward> jobs);
// Runs the stages in order in ONE OpenMP team: within a stage threads take tasks from a shared
// counter; between stages they meet at a StepBarrier (spins kStageSpin, then sleeps). One team per
// forward rather than one per kernel: libgomp's barriers and idle pool threads spin for
// milliseconds, and on cores shared with other work that spinning can make a 2-thread forward
// slower than a 1-thread one.
// A task that throws (a GEMM's workspace allocation) does not escape the region: the first
// exception is kept, the remaining tasks are skipped, and it is rethrown after the team ends.
// A stage's last tasks end within a fraction of a millisecond of each other (guided shares), and waking a
// sleeper costs both the notifier and the sleeper tens of microseconds: a waiter spins kStageSpin first
// (a few barriers a forward).
void run_stages(const std::vector<Stage>& stages, int team);

// A zero-filled scratch buffer of `floats`.
std::shared_ptr<float> zeroed_scratch(int64_t floats);

}  // namespace attnkit::ops::detail
