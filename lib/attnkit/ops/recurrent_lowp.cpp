// The recurrent stack's forward with lower-precision weights (RecurrentDirection::lowp_ih / lowp_hh,
// recurrent_stack.hpp): per layer and direction, one product x W_ih^T over all the steps, then a time loop of
// h_prev W_hh^T (N rows) and the float32 cell. Inference only: no cache for backward.
// Legend: N batch, T steps, D_k a layer's input size, H hidden size, G gates, GH = G*H blocked columns.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>
#include <vector>

#include "attnkit/ops/matmul.hpp"
#include "attnkit/ops/recurrent_packed.hpp"
#include "attnkit/ops/recurrent_stack.hpp"
#include "attnkit/tensor/barrier.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/parallel_errors.hpp"
#include "attnkit/tensor/threads.hpp"

namespace attnkit::ops {

LowpWeights make_recurrent_lowp(CellKind cell, int64_t H, const Tensor& w, Precision precision,
                                std::string_view what) {
  const int G = gate_count(cell);
  AK_CHECK(w.rank() == 2 && w.dim(0) == G * H, "{}: shape {}, expected [{}, K] ({} gates x {} units)", what,
           w.shape_str(), G * H, G, H);
  const int64_t K = w.dim(1);
  std::vector<float> blocked(static_cast<size_t>(G * H * K));  // [G*H, K], row blocked_column(u, g)
  for (int g = 0; g < G; ++g)
    for (int64_t u = 0; u < H; ++u)
      std::memcpy(blocked.data() + blocked_column(u, g, H, G) * K, w.data() + (g * H + u) * K, sizeof(float) * K);
  return make_lowp_weights(blocked.data(), G * H, K, precision, what);
}

LowpWeights recurrent_lowp_from_stored(CellKind cell, int64_t H, const LowpWeights& stored, std::string_view what) {
  const int G = gate_count(cell);
  AK_CHECK(stored.out == G * H, "{}: {} rows, expected {} ({} gates x {} units)", what, stored.out, G * H, G, H);
  std::vector<int64_t> rows(static_cast<size_t>(G * H));  // blocked row blocked_column(u, g) = stored row g*H + u
  for (int g = 0; g < G; ++g)
    for (int64_t u = 0; u < H; ++u) rows[static_cast<size_t>(blocked_column(u, g, H, G))] = g * H + u;
  return lowp_rows(stored, rows);
}

namespace {

// One thread's share of the products on one weight matrix in lower precision (int8 or bf16): the activations
// taken in once (int8: quantized per row, as ops::q8_linear does), then the thread's run of channel blocks.
class LowpShare {
 public:
  explicit LowpShare(const LowpWeights& w) : w_(&w) {}
  // x [rows, K] (row stride ldx), read until the next take
  void take(const float* x, int64_t rows, int64_t ldx) {
    rows_ = rows;
    if (w_->precision == Precision::Int8) {
      a_.resize(static_cast<size_t>(rows * w_->q8.k4)), t_.resize(static_cast<size_t>(rows));
      q8_prepare_rows(w_->q8, x, rows, ldx, a_.data(), t_.data());
    } else {
      x_ = x, ldx_ = ldx;
    }
  }
  // y's columns of blocks [b0, b1) (16 channels a block) = the rows taken times W^T
  void multiply(int64_t b0, int64_t b1, float* y, int64_t ldy) const {
    if (w_->precision == Precision::Int8)
      q8_linear_blocks(w_->q8, a_.data(), t_.data(), rows_, b0, b1, nullptr, y, ldy);
    else
      bf16_linear_blocks(w_->bf16, x_, rows_, ldx_, b0, b1, y, ldy);
  }

 private:
  const LowpWeights* w_;
  std::vector<int8_t> a_;
  std::vector<float> t_;
  const float* x_ = nullptr;
  int64_t rows_ = 0, ldx_ = 0;
};

// The float32 product of one thread's columns [c0, c1) of the blocked W^T [K, GH].
void multiply_f32(const Tensor& w_t, const float* x, int64_t rows, int64_t K, int64_t ldx, int64_t c0, int64_t c1,
                  float* y, int64_t ldy) {
  if (c0 < c1)
    gemm(Trans::No, Trans::No, rows, c1 - c0, K, 1.0f, x, ldx, w_t.data() + c0, w_t.dim(1), 0.0f, y + c0, ldy);
}

// Steps whose input products are computed together: about 256 rows (N rows a step) per product.
int64_t steps_per_block(int64_t N, int64_t T) {
  return std::clamp<int64_t>((256 + N - 1) / N, 1, std::max<int64_t>(T, 1));
}

}  // namespace

// Per layer and direction one parallel region over the time loop. Each thread owns a run of whole unit blocks:
// their G*w blocked columns (a run of whole panels of the lowered weights) in x_t W_ih^T and h_prev W_hh^T, and
// the cell on those units, so a step's only meeting is a barrier before the next step reads all of h. The input
// products are made a block of steps at a time ([Tb*N, GH], about 256 rows: a product big enough for the tiles,
// a buffer that stays in L2), not all T steps at once (N*T*GH floats written and read back from memory).
RecurrentResult recurrent_stack_forward_lowp(const RecurrentWeights& weights, const RecurrentInputs& in,
                                             const RunOptions& options) {
  const RecurrentConfig& config = weights.config;
  const int dirs = config.directions(), L = config.layers, G = gate_count(config.cell);
  const int64_t H = config.hidden_size, GH = G * H;
  const Tensor& x = *in.x;
  const int64_t N = x.dim(0), T = x.dim(1);
  const bool lstm = config.cell == CellKind::Lstm, gru = config.cell == CellKind::Gru;
  AK_CHECK(!options.keep_cache, "recurrent: weights in lower precision are for inference only; a forward for a "
           "backward pass needs the float32 weights");

  RecurrentResult r;
  r.h_n = Tensor({L * dirs, N, H});
  if (lstm) r.c_n = Tensor({L * dirs, N, H});
  if (options.trace) r.caches.resize(dirs);

  // Threads' shares: groups of `per_group` unit blocks, so that each share's columns are whole panels of blocks.
  const int64_t unit_blocks = (H + kUnitBlock - 1) / kUnitBlock;
  const int64_t panel = lowp_panel_blocks(), per_group = panel / std::gcd<int64_t>(G, panel);
  const int64_t groups = (unit_blocks + per_group - 1) / per_group;
  const int64_t Tb = steps_per_block(N, T);
  std::vector<float> xblock(static_cast<size_t>(Tb * N * GH)), hproj(static_cast<size_t>(N * GH));
  std::vector<float> hbuf(static_cast<size_t>(2 * N * H)), cbuf(static_cast<size_t>(2 * N * H));
  Tensor layer_in;
  for (int k = 0; k < L; ++k) {
    const Tensor& input = k == 0 ? x : layer_in;
    const int64_t Din = input.dim(2);
    Tensor layer_out({N, T, dirs * H});
    const double macs_per_step = double(N) * double(GH) * double(Din + H);
    int team = attnkit::detail::team_for(groups, macs_per_step, 2.0 * double(options.min_macs_per_thread));
    // small steps, few of them: one thread (recurrent_packed.hpp)
    if (team > 1 && T < kMinTeamSteps && macs_per_step / team < double(kSmallStepMacs)) team = 1;
    for (int d = 0; d < dirs; ++d) {
      const int idx = k * dirs + d;
      const RecurrentDirection& dw = weights.directions[size_t(idx)];
      const RecurrentPacked& p = *dw.packed;
      const bool reverse = d == 1;
      RecurrentCache* cache = options.trace && k == 0 ? &r.caches[size_t(d)] : nullptr;
      if (cache) {
        if (!(config.cell == CellKind::RnnTanh || config.cell == CellKind::RnnRelu))
          cache->gates = attnkit::detail::ScratchTensor({T, N, GH});
        cache->pre = attnkit::detail::ScratchTensor({T, N, GH});
        if (lstm) cache->c = attnkit::detail::ScratchTensor({T, N, H}), cache->tanh_c = attnkit::detail::ScratchTensor({T, N, H});
        if (gru) cache->hn = attnkit::detail::ScratchTensor({T, N, H});
        cache->h = attnkit::detail::ScratchTensor({T, N, H});
      }
      // the initial state into slot 1 (step i reads slot (i + 1) & 1, writes slot i & 1)
      float* h_init = hbuf.data() + N * H;
      float* c_init = cbuf.data() + N * H;
      if (in.h0) std::memcpy(h_init, in.h0->data() + idx * N * H, sizeof(float) * N * H);
      else std::fill_n(h_init, N * H, 0.0f);
      if (in.c0) std::memcpy(c_init, in.c0->data() + idx * N * H, sizeof(float) * N * H);
      else std::fill_n(c_init, N * H, 0.0f);

      StepBarrier barrier(team);
      ParallelErrors errors;
#pragma omp parallel num_threads(team)
      {
        const int th = omp_get_thread_num(), nt = omp_get_num_threads();
#pragma omp single
        barrier.resize(nt);
        {
          // this thread's units [u0, u1) and their columns [c0, c1), blocks [c0 / 16, ...)
          const int64_t g0 = groups * th / nt, g1 = groups * (th + 1) / nt;
          const int64_t u0 = std::min(H, g0 * per_group * kUnitBlock), u1 = std::min(H, g1 * per_group * kUnitBlock);
          const int64_t c0 = G * u0, c1 = G * u1;
          const int64_t b0 = c0 / 16, b1 = u1 == H ? (GH + 15) / 16 : c1 / 16;
          std::optional<LowpShare> ih, hh;
          if (dw.lowp_ih) ih.emplace(*dw.lowp_ih);
          if (dw.lowp_hh) hh.emplace(*dw.lowp_hh);
          std::vector<float> xg;  // a block's input rows, step-major: row j*N + n = input[n, t0 + j]
          int64_t t0 = 0, t1 = 0;  // the steps in xblock
          for (int64_t i = 0; i < T; ++i) {
            errors.run([&] {
              const int64_t t = reverse ? T - 1 - i : i;
              if (t < t0 || t >= t1) {  // the next block of input products, this thread's columns
                t0 = reverse ? std::max<int64_t>(0, t + 1 - Tb) : t;
                t1 = reverse ? t + 1 : std::min(T, t + Tb);
                const int64_t rows = (t1 - t0) * N;
                xg.resize(static_cast<size_t>(rows * Din));
                for (int64_t j = 0; j < t1 - t0; ++j)
                  for (int64_t n = 0; n < N; ++n)
                    std::memcpy(xg.data() + (j * N + n) * Din, input.data() + (n * T + t0 + j) * Din,
                                sizeof(float) * Din);
                if (ih) {
                  ih->take(xg.data(), rows, Din);
                  if (u0 < u1) ih->multiply(b0, b1, xblock.data(), GH);
                } else {
                  multiply_f32(p.wx, xg.data(), rows, Din, Din, c0, c1, xblock.data(), GH);
                }
              }
              const float* h_prev = hbuf.data() + ((i + 1) & 1) * N * H;
              float* h = hbuf.data() + (i & 1) * N * H;
              if (hh) {  // [N, GH] h_prev W_hh^T, this thread's columns
                hh->take(h_prev, N, H);
                if (u0 < u1) hh->multiply(b0, b1, hproj.data(), GH);
              } else {
                multiply_f32(p.wh, h_prev, N, H, H, c0, c1, hproj.data(), GH);
              }
              if (u0 < u1) {
                CellStep s;
                s.cell = config.cell;
                s.rows = N, s.hidden = H, s.unit_begin = u0, s.unit_end = u1;
                s.lengths = in.lengths ? in.lengths->data() : nullptr;
                s.t = t;
                s.xproj = xblock.data() + (t - t0) * N * GH, s.xproj_stride = GH;
                s.hproj = hproj.data(), s.hproj_stride = GH;
                s.bias = p.bias.data();
                s.b_hn = gru ? p.b_hn.data() : nullptr;
                s.h_prev = h_prev, s.h_prev_stride = H;
                s.h = h, s.h_stride = H;
                if (lstm) {
                  s.c_prev = cbuf.data() + ((i + 1) & 1) * N * H, s.c_prev_stride = H;
                  s.c = cbuf.data() + (i & 1) * N * H, s.c_stride = H;
                }
                s.out = layer_out.data() + t * dirs * H + d * H, s.out_stride = T * dirs * H;
                if (cache) {
                  if (!cache->gates.empty()) s.gates = cache->gates.data() + t * N * GH, s.gates_stride = GH;
                  s.pre = cache->pre.data() + t * N * GH, s.pre_stride = GH;
                  if (lstm) s.tanh_c = cache->tanh_c.data() + t * N * H, s.tanh_c_stride = H;
                  if (gru) s.hn = cache->hn.data() + t * N * H, s.hn_stride = H;
                }
                cell_forward(s);
                if (cache)
                  for (int64_t n = 0; n < N; ++n) {
                    std::memcpy(cache->h.data() + (t * N + n) * H + u0, h + n * H + u0, sizeof(float) * (u1 - u0));
                    if (lstm)
                      std::memcpy(cache->c.data() + (t * N + n) * H + u0, s.c + n * H + u0, sizeof(float) * (u1 - u0));
                  }
              }
            });
            barrier.wait();  // every unit's h of step i written before step i + 1 reads them (a failed step
                             // skips its work, never the barrier)
          }
        }
      }
      errors.rethrow();
      const int64_t last = T == 0 ? 1 : (T - 1) & 1;  // T = 0: the initial state
      std::memcpy(r.h_n.data() + idx * N * H, hbuf.data() + last * N * H, sizeof(float) * N * H);
      if (lstm) std::memcpy(r.c_n.data() + idx * N * H, cbuf.data() + last * N * H, sizeof(float) * N * H);
    }
    layer_in = std::move(layer_out);
  }
  r.output = std::move(layer_in);
  return r;
}

}  // namespace attnkit::ops
