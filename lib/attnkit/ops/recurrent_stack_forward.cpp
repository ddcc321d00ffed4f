// The recurrent stack's forward (recurrent_stack.hpp): the time loop of every layer and direction, on
// one thread, on a team over the hidden units, side by side (two directions or two runs of rows), or
// with a second thread projecting ahead (a batch of one).
// Legend: N batch, T steps, D input size, H hidden size, L layers, G gates, dirs 1 or 2.
// GCC 12 reports false "may be used uninitialized" inside Eigen's AVX-512 packet code.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <thread>

#include "attnkit/ops/gemm_panels.hpp"
#include "attnkit/ops/matmul.hpp"
#include "attnkit/ops/recurrent_packed.hpp"
#include "attnkit/ops/recurrent_stack.hpp"
#include "attnkit/tensor/barrier.hpp"
#include "attnkit/tensor/eigen_bridge.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/parallel_errors.hpp"
#include "attnkit/tensor/threads.hpp"

namespace attnkit::ops {

namespace {

// The steps of a job that runs beside others (run_side_by_side) as tickets: ticket i * chunks + k is chunk k
// of step i (FusedSteps: a run of units, its products and its cell). The job's thread takes them in order;
// a thread whose own job is done takes them too (one helper at a time), so the two threads end together
// instead of one waiting for the other: equal row parts do not end together on shared cores, and which
// part is late changes from process to process. A chunk's values do not
// depend on the thread that computes it.
struct ChunkTickets {
  alignas(64) std::atomic<int64_t> next{0};  // the next ticket to take
  alignas(64) std::atomic<int64_t> done{0};  // tickets finished
  alignas(64) std::atomic<int> helpers{0};
  std::atomic<const std::function<void(int)>*> help{nullptr};  // while the job runs: take tickets (into buffer slot 1)
  void wait_done(int64_t tickets) const {  // until `tickets` are finished (their writes then visible)
    spin_until([&] { return done.load(std::memory_order_acquire) >= tickets; });
  }
  // From another thread, once its own job is done: helps while the job runs and no other thread does.
  void join() {
    if (helpers.fetch_add(1) == 0)
      if (const std::function<void(int)>* f = help.load()) (*f)(1);
    helpers.fetch_sub(1);
  }
  // The job's thread, after its last ticket: no helper enters from now on; until the ones inside have left.
  void close() {
    help.store(nullptr);
    spin_until([&] { return helpers.load() == 0; });
  }

 private:
  template <typename F>
  static void spin_until(F&& ready) {
    for (int i = 1; !ready(); ++i) {
      _mm_pause();
      if (i % 256 == 0) std::this_thread::yield();  // a descheduled helper: not this core's time slice
    }
  }
};

// One layer and direction over the whole batch.
struct DirectionJob {
  const RecurrentPacked* packed = nullptr;
  CellKind cell = CellKind::Lstm;
  int64_t N = 0, T = 0, Din = 0, H = 0;
  bool reverse = false;
  const float* x = nullptr;  // [N, T, Din]
  const int64_t* lengths = nullptr;
  const float* h0 = nullptr;  // [N, H] or nullptr
  const float* c0 = nullptr;
  float* out = nullptr;  // column dir*H of [N, T, dirs*H]
  int64_t out_width = 0;  // dirs*H
  float* h_n = nullptr;  // [N, H]
  float* c_n = nullptr;
  RecurrentCache* cache = nullptr;
  bool keep_pre = false;
  bool watch_team = false;   // a small-step loop on a team: report how the team fared (TeamWatch)
  bool watch_alone = false;  // a small-step loop on one thread: report its time (TeamWatch)
  bool project_ahead = false;  // N = 1 on one thread: a second one projects x W_ih ahead of the steps
};

// run at once. On cores shared with other work a descheduled thread costs the others a wait at the
// region's end (milliseconds, longer than a small loop), or its steps run on another core (StepClaims).
// So such a loop reports how its team fared; after a bad run the next small-step loops of the
// process run on one thread (its work is the same and gives the same bits), for a number of calls
// that doubles with every bad run in a row (2 .. 256: a single hiccup on an idle machine costs
// little, steady load soon keeps the loops on one thread), then the team is tried again.
// A team run is bad too when it took longer than the last one-thread run of the same work: where
// the cores are far apart (a VM's vCPUs), handing the state over at every step can cost more than
// half a small step saves.
// Before the first team run of a step size, one loop runs on one thread to measure that.
struct TeamWatch {
  // Watched: steps of [2^14, 2^18) multiply-adds per thread, the ones a team runs since StepClaims
  // (smaller ones run on a team only when asked, RunOptions::min_macs_per_thread: tests do, and
  // they must see the team).
  static constexpr int64_t kWatchFrom = int64_t(1) << 14, kSmallStep = kSmallStepMacs;
  static constexpr int64_t kMinSteps = kMinTeamSteps;  // fewer steps of that size: one thread
  std::atomic<int> skip{0};     // small-step loops still to run on one thread
  std::atomic<int> penalty{1};  // the next bad run's skip is twice this (2, 4 .. 256)
  std::atomic<int64_t> alone_work{-1}, alone_ns{0};  // the last one-thread run: multiply-adds a step, time a step
  bool use_team(int64_t work) {
    int s = skip.load(std::memory_order_relaxed);
    while (s > 0)
      if (skip.compare_exchange_weak(s, s - 1, std::memory_order_relaxed)) return false;
    return alone_work.load(std::memory_order_relaxed) == work;  // else measure one thread first
  }
  void report_alone(int64_t work, int64_t ns_per_step) {
    alone_ns.store(ns_per_step, std::memory_order_relaxed);
    alone_work.store(work, std::memory_order_relaxed);
  }
  void report(bool good, int64_t work, int64_t ns_per_step) {
    if (alone_work.load(std::memory_order_relaxed) == work && ns_per_step > alone_ns.load(std::memory_order_relaxed))
      good = false;
    if (good) {
      penalty.store(1, std::memory_order_relaxed);
      return;
    }
    const int p = std::min(128, penalty.load(std::memory_order_relaxed)) * 2;
    penalty.store(p, std::memory_order_relaxed);
    skip.store(p, std::memory_order_relaxed);
  }
};
TeamWatch team_watch;

// Between time steps the forward's team meets through StepClaims, the backward's at a StepBarrier
// (tensor/barrier.hpp): both spin briefly (the threads' halves of a step are even, so on an idle
// machine the other arrives within microseconds), then sleep.

// A time step that computes its own input product x_t W_ih beside h_prev W_hh, a few columns at a
// time, each followed at once by the cell on their units. The hoisted projection (one GEMM before the
// loop) wrote N*T*G*H pre-activations (tens of MB for a big batch) that every step read back from
// memory, its rows 800 KB apart, and the cell again from L2; here a step's x_t and h_prev are packed
// once and each chunk of columns goes from the micro-kernel to the cell in L2 (64 KB of products: 512
// columns at 32 rows, rather than chunks of 64 columns in L1, whose cell would run one 16-unit block a
// row a call). The same products in the same order (x_t W_ih stored, then +
// h_prev W_hh): the same bits.
// Taken from kMinRows rows on (fewer: a step's input product of few rows runs below the hoisted GEMM's
// rate), when both weights are one block of the panel kernel (D, H <= max_depth), and not when one
// thread's loop would fork the hoisted projection.
struct FusedSteps {
  static constexpr int64_t kMinRows = 16;
  static constexpr int64_t kChunkFloats = int64_t(1) << 14;  // a chunk's products: 64 KB (L2)
  FusedSteps(const DirectionJob& job, const TeamParts& parts, bool forks) : parts_(&parts) {
    const PanelShape ps = gemm_panel_shape();
    G_ = gate_count(job.cell), gru_ = job.cell == CellKind::Gru;
    N_ = job.N, Din_ = job.Din, H_ = job.H;
    if (N_ < kMinRows || forks || ps.mr == 0) return;
    for (size_t c = 0; c < parts.units.size(); ++c)
      if (parts.units[c].first < parts.units[c].second &&
          (!parts.input[c].has_panels() || !parts.columns[c].has_panels()))
        return;
    // Whole panels of columns, at least 64, and about kChunkFloats products unless that is past H; a team over
    // the units (a small batch) keeps the least (more columns a chunk leave the team's threads unevenly loaded).
    auto fits = [&](int64_t units) { return (G_ * units) % ps.nr == 0 && G_ * units >= 64; };
    const int64_t products = parts.units.size() > 1 ? 0 : kChunkFloats;
    chunk_units_ = kUnitBlock;
    while (!fits(chunk_units_) || (N_ * G_ * chunk_units_ < products && chunk_units_ < H_))
      chunk_units_ += kUnitBlock;
    ld_ = G_ * chunk_units_;
    auto lines = [](int64_t floats) { return (floats + 15) / 16 * 16; };
    pax_ = lines(panels_size(N_, Din_, ps.mr)), pah_ = lines(panels_size(N_, H_, ps.mr));
    part_floats = pax_ + pah_ + N_ * ld_ * (gru_ ? 2 : 1);
  }
  explicit operator bool() const { return part_floats > 0; }
  int64_t part_floats = 0;  // each part's buffers: x_t and h_prev packed, a chunk's products
  float* buffers = nullptr;  // [parts][part_floats], 64-byte aligned (set before the loop)

  // Chunks of part c's units in a step (each chunk_units_ units, the last maybe fewer).
  int64_t chunks(int c) const {
    const auto [u0, u1] = parts_->units[size_t(c)];
    return (u1 - u0 + chunk_units_ - 1) / chunk_units_;
  }
  // Into buffer slot `slot`: a step's rows x [rows, Din] (row stride ldx) and h_prev [rows, H] packed
  // (h_prev nullptr: a zero state, not packed).
  void pack(int slot, int64_t rows, const float* x, int64_t ldx, const float* h_prev) const {
    float* pax = buffers + slot * part_floats;
    pack_a_panels(Trans::No, rows, Din_, x, ldx, pax, RowBlocks::Balanced);
    if (h_prev) pack_a_panels(Trans::No, rows, H_, h_prev, H_, pax + pax_, RowBlocks::Balanced);
  }
  // Chunk k of part c from the rows packed in `slot`: its products (h_prev W_hh only `with_h`: else h_prev is
  // zero and the product exactly +0), then cell(u0, u1, xproj, ldx, hproj, ldh, col0) on the units [u0, u1)
  // with their gate arguments from column col0 on.
  template <typename Cell>
  void chunk(int slot, int c, int64_t k, int64_t rows, bool with_h, Cell&& cell) const {
    const auto [u0, u1] = parts_->units[size_t(c)];
    float* pax = buffers + slot * part_floats;
    const float* pah = pax + pax_;
    float* xp = pax + pax_ + pah_;  // [rows, ld_] x_t W_ih (+ h_prev W_hh but for GRU)
    float* hp = gru_ ? xp + N_ * ld_ : nullptr;               // GRU: [rows, ld_] h_prev W_hh
    const PackedColumns &wx = parts_->input[size_t(c)], &wh = parts_->columns[size_t(c)];
    const int64_t a = u0 + k * chunk_units_, b = std::min(u1, a + chunk_units_), j0 = G_ * (a - u0), j1 = G_ * (b - u0);
    wx.multiply_panels(pax, rows, j0, j1, 0.0f, xp, ld_);
    if (hp) {  // zeroed, then added into: as the hoisted path (an exact zero's sign included)
      for (int64_t n = 0; n < rows; ++n) std::fill_n(hp + n * ld_, j1 - j0, 0.0f);
      if (with_h) wh.multiply_panels(pah, rows, j0, j1, 1.0f, hp, ld_);
    } else if (with_h) {
      wh.multiply_panels(pah, rows, j0, j1, 1.0f, xp, ld_);
    }
    cell(a, b, xp, ld_, hp, ld_, G_ * a);
  }
  // Part c of a step, in its own slot c: pack, then every chunk (h_prev nullptr: a zero state).
  template <typename Cell>
  void step(int c, int64_t rows, const float* x, int64_t ldx, const float* h_prev, Cell&& cell) const {
    pack(c, rows, x, ldx, h_prev);
    for (int64_t k = 0, n = chunks(c); k < n; ++k) chunk(c, c, k, rows, h_prev != nullptr, cell);
  }

 private:
  const TeamParts* parts_;
  int G_ = 1;
  bool gru_ = false;
  int64_t N_ = 0, Din_ = 0, H_ = 0, chunk_units_ = 0, ld_ = 0, pax_ = 0, pah_ = 0;
};

// side: the job runs beside others (run_side_by_side), whose threads may take chunks of its steps.
void run_direction(const DirectionJob& job, const TeamParts& parts, ChunkTickets* side = nullptr) {
  const int G = gate_count(job.cell);
  const int64_t N = job.N, T = job.T, H = job.H, GH = G * H;
  const RecurrentPacked& p = *job.packed;
  const bool gru = job.cell == CellKind::Gru;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point began = Clock::now();
  auto ns_per_step = [&](Clock::time_point end) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(end - began).count() / std::max<int64_t>(T, 1);
  };

  // Input projection for every step at once: one GEMM, hoisted out of the time loop, on W_ih packed
  // once with the model (PackCache). For LSTM and RNN the hidden products are then added into it in
  // place (GRU keeps them apart: r ⊙ (W_hn h)). A team computes it inside the time loop's parallel
  // region, each part its own columns (those its steps read), so no fork and no barrier of its own.
  // A batch of many rows takes FusedSteps instead: each step its own input product.
  const int team = static_cast<int>(parts.units.size());
  // One thread's loop: a big projection may still fork (the thread policy decides), a small one
  // stays on this thread: forking costs more than it saves (far more on shared cores).
  const bool big = N * T * job.Din * GH >= (int64_t(1) << 25);
  const bool forks = team <= 1 && big && attnkit::detail::team_for(num_threads(), 2.0 * double(N * T * job.Din * GH)) > 1;
  FusedSteps fused(job, parts, forks);
  const bool ahead = team <= 1 && job.project_ahead && !fused;  // one row: the projection runs beside the steps
  const bool tickets = team <= 1 && side && fused;  // chunks by ticket: a helper packs into slot 1
  RecurrentScratch xproj_buf(fused ? size_t(tickets ? 2 : team) * size_t(fused.part_floats) : size_t(N * T * GH), 0);
  fused.buffers = xproj_buf.data();
  MapRM xproj(xproj_buf.data(), fused ? 0 : N * T, GH);  // [N*T, G*H] row n*T + t, blocked columns
  auto project = [&](int c, GemmThreads threads) {
    if (fused) return;  // each step computes its own
    parts.input[size_t(c)].multiply(job.x, N * T, job.Din, xproj.data(), GH, threads);  // [N*T, cols of c]
  };
  if (team <= 1 && !ahead) project(0, big ? GemmThreads::Policy : GemmThreads::This);

  // The initial state, the double-buffered state and GRU's hidden products, each on whole cache lines.
  const int64_t state = (2 * N * H + 15) / 16 * 16;
  RecurrentScratch state_buf(size_t(3 * state + (gru && !fused ? N * GH : 0)), 1);
  MapRM init(state_buf.data(), 2 * N, H);              // h0; c0 (rows N..2N)
  MapRM hbuf(state_buf.data() + state, 2 * N, H);      // [N, H] x 2
  MapRM cbuf(state_buf.data() + 2 * state, 2 * N, H);  // [N, H] x 2
  MapRM hproj(state_buf.data() + 3 * state, gru && !fused ? N : 0, GH);  // GRU: [N, G*H] W_hh h_prev, blocked columns
  if (job.h0) init.topRows(N) = as_matrix(job.h0, N, H);
  else init.topRows(N).setZero();
  if (job.c0) init.bottomRows(N) = as_matrix(job.c0, N, H);
  else init.bottomRows(N).setZero();
  // A zero initial h (the default) and a finite W_hh: step 0's h_prev W_hh is exactly +0 (every sum starts at +0
  // and adds only zeros), and adding +0 changes no gate argument (none is -0: a sum from +0 never is), so that
  // product is skipped: the same bits. A W_hh with an inf or a NaN gives NaN there, as PyTorch's does.
  const bool zero_start = p.wh_finite && (init.topRows(N).array() == 0.0f).all();

  RecurrentCache* cache = job.cache;
  if (cache) {
    if (job.cell != CellKind::RnnTanh && job.cell != CellKind::RnnRelu) cache->gates = attnkit::detail::ScratchTensor({T, N, GH});
    if (job.keep_pre) cache->pre = attnkit::detail::ScratchTensor({T, N, GH});
    if (job.cell == CellKind::Lstm) cache->c = attnkit::detail::ScratchTensor({T, N, H}), cache->tanh_c = attnkit::detail::ScratchTensor({T, N, H});
    if (gru) cache->hn = attnkit::detail::ScratchTensor({T, N, H});
    cache->h = attnkit::detail::ScratchTensor({T, N, H});
  }
  // State after step i (i = -1: the initial state). With a cache, the states live in it.
  auto time_of = [&](int64_t i) { return job.reverse ? T - 1 - i : i; };
  auto h_at = [&](int64_t i) -> float* {
    if (i < 0) return init.data();
    return cache ? cache->h.data() + time_of(i) * N * H : hbuf.data() + (i & 1) * N * H;
  };
  // h_prev of step i for its product with W_hh, or nullptr where that product is skipped (step 0 of a zero_start)
  auto h_prev_of = [&](int64_t i) -> const float* { return i == 0 && zero_start ? nullptr : h_at(i - 1); };
  auto c_at = [&](int64_t i) -> float* {
    if (i < 0) return init.data() + N * H;
    return cache && job.cell == CellKind::Lstm ? cache->c.data() + time_of(i) * N * H : cbuf.data() + (i & 1) * N * H;
  };

  // Step i for the units [u0, u1): h_prev times their columns of W_hh, then the cell on them.
  // Lengths sorted longest first (PyTorch's enforce_sorted order): the rows still running at step
  // t are a prefix, and the hidden product skips the finished ones (the cell carries their state).
  const bool sorted = job.lengths && std::is_sorted(job.lengths, job.lengths + N, std::greater<int64_t>());
  auto running = [&](int64_t t) {
    if (!sorted) return N;
    return static_cast<int64_t>(std::partition_point(job.lengths, job.lengths + N, [&](int64_t l) { return l > t; }) -
                                job.lengths);
  };
  // The cell of step i on the units [u0, u1), their gate arguments in xproj (+ hproj for GRU) from
  // the blocked column col0 on.
  auto cell = [&](int64_t i, int64_t u0, int64_t u1, const float* xp, int64_t ldx, const float* hp, int64_t ldh,
                  int64_t col0) {
    const int64_t t = time_of(i);
    CellStep s;
    s.cell = job.cell;
    s.rows = N, s.hidden = H, s.unit_begin = u0, s.unit_end = u1;
    s.lengths = job.lengths, s.t = t;
    s.xproj = xp, s.xproj_stride = ldx;
    s.hproj = hp, s.hproj_stride = ldh;
    s.proj_col0 = col0;
    s.bias = p.bias.data();
    s.b_hn = p.b_hn.data();
    s.h_prev = h_at(i - 1), s.h_prev_stride = H;
    s.h = h_at(i), s.h_stride = H;
    if (job.cell == CellKind::Lstm) {
      s.c_prev = c_at(i - 1), s.c_prev_stride = H;
      s.c = c_at(i), s.c_stride = H;
    }
    s.out = job.out + t * job.out_width, s.out_stride = T * job.out_width;
    if (cache) {
      if (!cache->gates.empty()) s.gates = cache->gates.data() + t * N * GH, s.gates_stride = GH;
      if (!cache->pre.empty()) s.pre = cache->pre.data() + t * N * GH, s.pre_stride = GH;
      if (!cache->tanh_c.empty()) s.tanh_c = cache->tanh_c.data() + t * N * H, s.tanh_c_stride = H;
      if (!cache->hn.empty()) s.hn = cache->hn.data() + t * N * H, s.hn_stride = H;
    }
    cell_forward(s);
  };
  auto step = [&](int c, int64_t i) {
    const int64_t t = time_of(i);
    const auto [u0, u1] = parts.units[c];
    if (u0 >= u1) return;
    const int64_t rows = running(t);
    const float* h_prev = h_prev_of(i);
    if (fused) {  // rows n*T + t of x
      fused.step(c, rows, job.x + t * job.Din, T * job.Din, h_prev, [&](auto... a) { cell(i, a...); });
      return;
    }
    const PackedColumns& wh = parts.columns[c];
    if (gru) {
      hproj.middleCols(G * u0, G * (u1 - u0)).setZero();
      if (h_prev) wh.multiply_add(h_prev, rows, hproj.data(), GH);
      cell(i, u0, u1, xproj.data() + t * GH, T * GH, hproj.data(), GH, 0);
    } else {
      if (h_prev) wh.multiply_add(h_prev, rows, xproj.data() + t * GH, T * GH);  // rows n*T + t
      cell(i, u0, u1, xproj.data() + t * GH, T * GH, nullptr, 0, 0);
    }
  };

  if (ahead) {
    // One row (N = 1): the steps on this thread, x W_ih in chunks of kChunk steps' rows on a second one, ahead
    // of them (the hoisted projection is a large share of a one-row forward). A chunk goes to
    // whichever thread claims it first: the steps' thread takes one itself rather than wait for a late
    // helper, and waits only for a chunk the helper is computing. The rows' values do not depend on the chunks.
    constexpr int64_t kChunk = 8;
    const int64_t chunks = (T + kChunk - 1) / kChunk;
    std::unique_ptr<std::atomic<int>[]> state(new std::atomic<int>[static_cast<size_t>(chunks)]);  // 0 free, 1 taken, 2 done
    for (int64_t c = 0; c < chunks; ++c) state[c].store(0, std::memory_order_relaxed);
    ParallelErrors errors;
    auto take = [&](int64_t c) {  // project chunk c (steps c kChunk ..) if no thread has
      int free = 0;
      if (!state[c].compare_exchange_strong(free, 1, std::memory_order_acq_rel)) return;
      errors.run([&] {
        const int64_t i0 = c * kChunk, i1 = std::min(T, i0 + kChunk);
        const int64_t t0 = job.reverse ? T - i1 : i0, t1 = job.reverse ? T - i0 : i1;  // rows t (N = 1)
        parts.input[0].multiply(job.x + t0 * job.Din, t1 - t0, job.Din, xproj.data() + t0 * GH, GH,
                                GemmThreads::This);
      });
      state[c].store(2, std::memory_order_release);
    };
    Clock::time_point loop_end;
#pragma omp parallel num_threads(2)
    {
      if (omp_get_thread_num() == 0) {
        for (int64_t i = 0; i < T; ++i) {
          const int64_t c = i / kChunk;
          if (i % kChunk == 0) {
            take(c);
            while (state[c].load(std::memory_order_acquire) != 2) _mm_pause();
          }
          errors.run([&] { step(0, i); });
        }
        loop_end = Clock::now();
      } else {
        for (int64_t c = 0; c < chunks; ++c) take(c);
      }
    }
    const Clock::time_point end = Clock::now();
    if (job.watch_team) team_watch.report(4 * (end - loop_end) <= end - began, N * H * GH, ns_per_step(end));
    errors.rethrow();
  } else if (tickets) {
    ChunkTickets& tk = *side;
    const int64_t per_step = fused.chunks(0), total = T * per_step;
    ParallelErrors errors;  // a helper's exception must not leave its thread
    const std::function<void(int)> take = [&](int slot) {  // tickets until none is left
      int64_t packed = -1;  // the step whose rows are in the slot
      for (int64_t ticket; (ticket = tk.next.fetch_add(1, std::memory_order_relaxed)) < total;) {
        const int64_t i = ticket / per_step, t = time_of(i), rows = running(t);
        const float* h_prev = h_prev_of(i);
        if (i != packed) {
          tk.wait_done(i * per_step);  // step i - 1 whole: h_prev
          errors.run([&] { fused.pack(slot, rows, job.x + t * job.Din, T * job.Din, h_prev); });
          packed = i;
        }
        errors.run([&] {
          fused.chunk(slot, 0, ticket % per_step, rows, h_prev != nullptr, [&](auto... a) { cell(i, a...); });
        });
        tk.done.fetch_add(1, std::memory_order_release);
      }
    };
    tk.help.store(&take);
    take(0);
    tk.close();
    tk.wait_done(total);
    errors.rethrow();
  } else if (team <= 1) {
    for (int64_t i = 0; i < T; ++i) step(0, i);
    if (job.watch_alone) team_watch.report_alone(N * H * GH, ns_per_step(Clock::now()));
  } else {
    // One parallel region for the projection and the whole loop: round 0 projects, round i + 1 is
    // step i. Part c (a run of unit blocks) belongs to thread c, whose cache keeps its packed columns
    // of W_ih and W_hh; no barrier: StepClaims lets a thread start round j once every piece of round
    // j - 1 is done, and, when it has waited a few microseconds for a round, run the pieces their
    // owner has not claimed (a descheduled owner on shared cores), so one late thread does not stall
    // the loop step after step.
    // Nothing is allocated inside the region; an exception must not leave it: the first one is kept
    // and rethrown after (the failed piece still counts as done, the rest are skipped).
    StepClaims claims(team);
    std::atomic<int64_t> moved{0};  // pieces run by a thread other than their owner
    const Clock::time_point start = Clock::now();
    Clock::time_point loop_end;  // when thread 0 ran out of pieces
    ParallelErrors errors;
    auto run = [&](int c, int64_t round) {
      errors.run([&] {
        if (round == 0) project(c, GemmThreads::This);
        else step(c, round - 1);
      });
      claims.finish(c, round);
    };
#pragma omp parallel num_threads(team)
    {
      const int id = omp_get_thread_num(), nt = omp_get_num_threads();  // OpenMP may give fewer
      auto take_unclaimed = [&](int64_t round) {  // another thread's pieces, when it is late
        for (int c = 0; c < team; ++c)
          if (c % nt != id && claims.claim(c, round)) {
            run(c, round);
            moved.fetch_add(1, std::memory_order_relaxed);
          }
      };
      for (int64_t round = 0; round <= T + 1; ++round) {  // rounds 0 .. T, then the wait for round T
        if (round > 0) claims.wait_round(round, [&] { take_unclaimed(round - 1); });
        if (round <= T)
          for (int c = id; c < team; c += nt)  // this thread's own parts
            if (claims.claim(c, round)) run(c, round);
      }
      if (id == 0) loop_end = Clock::now();
    }
    if (job.watch_team) {
      // bad: a quarter of the time waiting for a late thread to leave the region, a quarter of the
      // steps run away from their owner's cache, or slower than one thread
      const Clock::time_point end = Clock::now();
      team_watch.report(4 * (end - loop_end) <= end - start && 4 * moved.load() <= T, N * H * GH, ns_per_step(end));
    }
    errors.rethrow();
  }
  const float* hl = h_at(T - 1);
  std::memcpy(job.h_n, hl, sizeof(float) * N * H);
  if (job.c_n) std::memcpy(job.c_n, c_at(T - 1), sizeof(float) * N * H);
}

// Jobs on threads of their own, one each (an exception must not leave an OpenMP region: the first is
// rethrown after); job j runs on `second` if given and j > 0, else on `first`.
void run_side_by_side(const std::vector<DirectionJob>& jobs, const TeamParts& first, const TeamParts* second = nullptr) {
  const int n = static_cast<int>(jobs.size());
  std::vector<std::exception_ptr> failed(jobs.size());
  std::unique_ptr<ChunkTickets[]> tickets(new ChunkTickets[jobs.size()]);
#pragma omp parallel for num_threads(n) schedule(static, 1)
  for (int j = 0; j < n; ++j) {
    try {
      run_direction(jobs[size_t(j)], j > 0 && second ? *second : first, &tickets[j]);
    } catch (...) {
      failed[size_t(j)] = std::current_exception();
    }
    for (int o = 1; o < n; ++o) tickets[(j + o) % n].join();  // then the others' steps, if they still run
  }
  for (auto& e : failed)
    if (e) std::rethrow_exception(e);
}

// `job` cut into `parts` jobs of consecutive rows (a near-equal share each); no cache.
std::vector<DirectionJob> row_parts(const DirectionJob& job, int parts) {
  std::vector<DirectionJob> out;
  const int64_t H = job.H;
  for (int c = 0; c < parts; ++c) {
    const int64_t n0 = job.N * c / parts, n1 = job.N * (c + 1) / parts;
    DirectionJob j = job;
    j.N = n1 - n0;
    j.x = job.x + n0 * job.T * job.Din;
    if (job.lengths) j.lengths = job.lengths + n0;
    if (job.h0) j.h0 = job.h0 + n0 * H;
    if (job.c0) j.c0 = job.c0 + n0 * H;
    j.out = job.out + n0 * job.T * job.out_width;
    j.h_n = job.h_n + n0 * H;
    if (job.c_n) j.c_n = job.c_n + n0 * H;
    out.push_back(j);
  }
  return out;
}

}  // namespace

RecurrentResult recurrent_stack_forward(const RecurrentWeights& weights, const RecurrentInputs& in,
                                        const RunOptions& options) {
  const RecurrentConfig& config = weights.config;
  const int dirs = config.directions(), L = config.layers;
  const int64_t H = config.hidden_size, D = config.input_size;
  AK_CHECK(weights.directions.size() == size_t(L * dirs), "recurrent: {} weight sets for {} layers x {} directions",
           weights.directions.size(), L, dirs);
  AK_CHECK(in.x, "recurrent: no input");
  const Tensor& x = *in.x;
  AK_CHECK(x.rank() == 3 && x.dim(2) == D, "input has shape {}, expected [N, T, {}] (the weights' input size D is {})",
           x.shape_str(), D, D);
  const int64_t N = x.dim(0), T = x.dim(1);
  const Shape state_shape{L * dirs, N, H};
  auto check_state = [&](const Tensor* t, const char* name) {
    AK_CHECK(!t || t->shape() == state_shape, "{} has shape {}, expected {} (layers*dirs, N, H)", name,
             t ? t->shape_str() : "", shape_str(state_shape));
  };
  check_state(in.h0, "h0");
  AK_CHECK(!in.c0 || config.cell == CellKind::Lstm, "c0 is given, but a {} has no cell state (c0 is for lstm)",
           cell_name(config.cell));
  check_state(in.c0, "c0");
  if (in.lengths) {
    AK_CHECK(int64_t(in.lengths->size()) == N, "lengths has {} values, expected {} (one per sequence)",
             in.lengths->size(), N);
    for (size_t n = 0; n < in.lengths->size(); ++n)
      AK_CHECK((*in.lengths)[n] >= 0 && (*in.lengths)[n] <= T, "lengths[{}] is {}, expected 0 <= length <= T = {}",
               n, (*in.lengths)[n], T);
  }

  for (const RecurrentDirection& d : weights.directions)
    if (d.lowp_ih || d.lowp_hh) return recurrent_stack_forward_lowp(weights, in, options);

  const int threads = num_threads();  // the library's one thread policy (set_num_threads)

  RecurrentResult r;
  r.h_n = Tensor(state_shape);
  if (config.cell == CellKind::Lstm) r.c_n = Tensor(state_shape);
  if (options.keep_cache) r.caches.resize(L * dirs);
  else if (options.trace) r.caches.resize(dirs);

  Tensor layer_in, layer_out;
  for (int k = 0; k < L; ++k) {
    const Tensor& input = k == 0 ? x : layer_in;
    layer_out = Tensor::uninitialized({N, T, dirs * H});  // every step writes its rows (zeros past a length)
    std::vector<DirectionJob> jobs(dirs);
    for (int d = 0; d < dirs; ++d) {
      const int idx = k * dirs + d;
      DirectionJob& j = jobs[d];
      j.packed = weights.directions[size_t(idx)].packed.get();
      j.cell = config.cell;
      j.N = N, j.T = T, j.Din = input.dim(2), j.H = H;
      j.reverse = d == 1;
      j.x = input.data();
      j.lengths = in.lengths ? in.lengths->data() : nullptr;
      j.h0 = in.h0 ? in.h0->data() + idx * N * H : nullptr;
      j.c0 = in.c0 ? in.c0->data() + idx * N * H : nullptr;
      j.out = layer_out.data() + d * H, j.out_width = dirs * H;
      j.h_n = r.h_n.data() + idx * N * H;
      j.c_n = config.cell == CellKind::Lstm ? r.c_n.data() + idx * N * H : nullptr;
      if (options.keep_cache) j.cache = &r.caches[idx];
      else if (options.trace && k == 0) j.cache = &r.caches[d];
      j.keep_pre = options.trace && k == 0;
    }
    // The two directions are independent: with 2 threads, one each and no barrier at all.
    const bool side_by_side = dirs == 2 && threads >= 2;
    const int G = gate_count(config.cell);
    int team = side_by_side ? 1 : recurrent_team_size(threads, N, H, G, options.min_macs_per_thread);
    // A batch of many rows and no cache to fill: the team's threads each run the layer alone on their
    // own rows (row_parts), meeting only at the end (so no TeamWatch either). A team over the units meets
    // at every step and packs every step's x_t and h_prev on both threads. The same sums either way (FusedSteps from kMinRows).
    const bool split_rows = dirs == 1 && team >= 2 && N >= team * FusedSteps::kMinRows && !options.keep_cache &&
                            !options.trace;
    const int64_t per_thread = N * H * G * H / std::max(team, 1);
    const bool small_steps =
        !split_rows && team > 1 && per_thread >= TeamWatch::kWatchFrom && per_thread < TeamWatch::kSmallStep;
    // Small steps: a team's fixed cost (the fork and the join, some microseconds) pays only over
    // several steps (not a decoder's one step a call); and not if a recent team run went badly (TeamWatch).
    if (small_steps && (T < TeamWatch::kMinSteps || !team_watch.use_team(N * H * G * H))) team = 1;
    // One row: the team is this thread for the steps and another projecting ahead of them (its units split
    // over two threads would send the state across cores every step, slow where cores are far apart).
    const bool ahead = small_steps && team > 1 && N == 1 && dirs == 1 && !options.keep_cache && !options.trace;
    for (DirectionJob& j : jobs) {
      j.watch_team = small_steps && team > 1;
      j.watch_alone = small_steps && team == 1 && T >= TeamWatch::kMinSteps;
      j.project_ahead = ahead;
    }
    if (ahead) team = 1;
    if (split_rows) {
      run_side_by_side(row_parts(jobs[0], team), weights.directions[size_t(k)].packed->parts(1, H, config.cell, false));
    } else {
      std::vector<const TeamParts*> parts(dirs);
      for (int d = 0; d < dirs; ++d) {
        const int idx = k * dirs + d;
        parts[d] = &weights.directions[size_t(idx)].packed->parts(team, H, config.cell, N == 1);
      }
      if (side_by_side) run_side_by_side(jobs, *parts[0], parts[1]);
      else
        for (int d = 0; d < dirs; ++d) run_direction(jobs[d], *parts[d]);
    }
    layer_in = std::move(layer_out);
    if (options.keep_cache && k + 1 < L) r.layer_inputs.push_back(layer_in);  // layer k+1's input, for backward
  }
  r.output = std::move(layer_in);
  return r;
}

}  // namespace attnkit::ops
