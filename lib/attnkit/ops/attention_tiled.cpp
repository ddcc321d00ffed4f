// The tiled (flash-attention style) kernels: sdpa_tiled's forward over query tiles x key tiles with an
// online softmax, and sdpa_backward_tiled beside it (key tiles own their dK / dV rows).
// Legend: N batch, T queries, S keys, Dk/Dv feature sizes, NH heads.
#include "attnkit/ops/attention.hpp"

// GCC 12 warns about Eigen's AVX-512 intrinsics (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include <immintrin.h>
#include <omp.h>

#include "attnkit/ops/attention_detail.hpp"
#include "attnkit/ops/gemm_panels.hpp"
#include "attnkit/ops/matmul.hpp"
#include "attnkit/ops/softmax.hpp"
#include "attnkit/ops/vector_exp.hpp"
#include "attnkit/tensor/eigen_bridge.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/scratch_pool.hpp"
#include "attnkit/tensor/threads.hpp"

namespace attnkit::ops {
using namespace detail;
namespace {

constexpr int64_t kRowChunk = 16;  // the online softmax's rows per pass (32 KB of scores at a key tile of 512)
constexpr int64_t kFusedRows = 12;  // the tiled kernel's rows per pass through Q K^T, softmax, P V (rounded up to mr)
using StrideRM = Eigen::OuterStride<>;
using ConstStridedMap = Eigen::Map<const MatrixRM, Eigen::Unaligned, StrideRM>;
using StridedMap = Eigen::Map<MatrixRM, Eigen::Unaligned, StrideRM>;

TileSizes g_tiles;
// Tiles' row stride is their width plus this: a [256, 256] tile with rows exactly 1 KB apart, read
// down its columns in place by the GEMM (P^T dO, dS^T Q), keeps falling into the same few L1 sets.
constexpr int64_t kTilePad = 16;


StridedMap out_map(const StridedOut& a, int64_t n, int64_t h, int64_t r0, int64_t rows, int64_t cols) {
  return StridedMap(a.data + n * a.batch + h * a.head + r0 * a.row, rows, cols, StrideRM(a.row));
}

// dst[0, n) = src[0, n) * scale with streaming stores where dst is 16-byte aligned and n a multiple of 4 (else
// plain ones): the same products either way.
void scaled_row_streaming(float* dst, const float* src, int64_t n, float scale) {
  if (reinterpret_cast<uintptr_t>(dst) % 16 != 0 || n % 4 != 0) {
    for (int64_t j = 0; j < n; ++j) dst[j] = src[j] * scale;
    return;
  }
  const __m128 s = _mm_set1_ps(scale);
  for (int64_t j = 0; j < n; j += 4) _mm_stream_ps(dst + j, _mm_mul_ps(_mm_loadu_ps(src + j), s));
}

}  // namespace

void set_tile_sizes(TileSizes sizes) {
  AK_CHECK(sizes.query >= 1 && sizes.key >= 0, "attention: tile sizes must be positive (key 0: the default)");
  g_tiles = sizes;
}
TileSizes tile_sizes() { return g_tiles; }

// ---- flash-attention style: query tile x key tiles, online softmax ----
namespace {
int64_t query_tile(const SdpaProblem& p) { return std::min<int64_t>(g_tiles.query, std::max<int64_t>(p.T, 1)); }
// Key tiles of 512 where the GEMM's depth block holds them (AVX-512), else 256.
int64_t key_tile(const SdpaProblem& p) {
  const int64_t key = g_tiles.key > 0 ? g_tiles.key : gemm_panel_shape().max_depth >= 512 ? 512 : 256;
  return std::min<int64_t>(key, std::max<int64_t>(p.S, 1));
}

// The tiled kernel's tasks: query tiles of Br rows, head by head, except that each head's last tile (when the
// head has several and the tile at least kPieces kSplitRows rows) is cut in kPieces, and those pieces come
// last: the team's last tasks are short, so its threads finish close together (with whole last tiles one thread
// would wait for the other's). A row's values do not depend on its tile.
constexpr int64_t kSplitRows = 32, kPieces = 4;
struct QueryTask {
  int64_t nh, t0, br;  // head (n * NH + h), first row, rows
};
// A head's tiles taken whole (all of them, or all but the last when that one is cut).
int64_t whole_tiles(const SdpaProblem& p) {
  const int64_t Br = query_tile(p), tiles = (p.T + Br - 1) / Br;
  const bool split = tiles >= 2 && p.T - (tiles - 1) * Br >= kPieces * kSplitRows;
  return split ? tiles - 1 : tiles;
}
int64_t query_tasks(const SdpaProblem& p) {
  const int64_t Br = query_tile(p), whole = whole_tiles(p);
  return p.N * p.NH * (whole + (whole * Br < p.T ? kPieces : 0));
}
QueryTask query_task(const SdpaProblem& p, int64_t task) {
  const int64_t Br = query_tile(p), per_head = whole_tiles(p), whole = p.N * p.NH * per_head;
  if (task < whole) {
    const int64_t t0 = task % per_head * Br;
    return {task / per_head, t0, std::min(Br, p.T - t0)};
  }
  const int64_t last = per_head * Br, rows = p.T - last, piece = (task - whole) % kPieces;
  const int64_t a = last + rows * piece / kPieces, b = last + rows * (piece + 1) / kPieces;
  return {(task - whole) / kPieces, a, b - a};
}
}  // namespace

int64_t values_row_stride(int64_t floats) { return floats % 16 == 0 && (floats / 16) % 2 == 0 ? floats + 16 : floats; }

// P V reads V as it lies (gemm_in_place) where its rows are an odd number of cache lines apart
// (values_row_stride) and Dv is whole panels: packing V's panels was half of the projection stage's packing.
static bool values_in_place(const SdpaProblem& p) {
  const PanelShape s = gemm_panel_shape();
  return s.mr > 0 && p.Dv > 0 && p.Dv % s.nr == 0 && key_tile(p) <= s.max_depth && p.v.row % 16 == 0 &&
         values_row_stride(p.v.row) == p.v.row;
}

// Panels where the kernel has them, K fits one block, key tiles start on panel boundaries, and a head
// has several query tiles (with one, each key tile is packed once either way).
TiledKvPanels::TiledKvPanels(const SdpaProblem& p) : p_(p) {
  const PanelShape s = gemm_panel_shape();
  const int64_t Bc = key_tile(p);
  if (s.mr == 0 || p.Dk < 1 || p.Dk > s.max_depth || p.S < 1 || p.T <= query_tile(p) || (Bc % s.nr && Bc < p.S))
    return;
  k_size_ = panels_size(p.S, p.Dk, s.nr);
  // V's tiles too when a key tile is one K block of P_j V_j and V is not read in place (dv_ 0: in place, or each
  // query tile packs them, ops::gemm)
  dv_ = Bc <= s.max_depth && !values_in_place(p) ? panels_size(p.Dv, 1, s.nr) : 0;  // Dv rounded up to whole panels
  per_head_ = k_size_ + p.S * dv_;
  buf_ = ScratchPool::get(p.N * p.NH * per_head_);
  const int64_t counters = p.N * ((p.S + s.nr - 1) / s.nr);
  keys_in_panel_ = std::make_unique<std::atomic<int32_t>[]>(static_cast<size_t>(counters));
  for (int64_t i = 0; i < counters; ++i) keys_in_panel_[i].store(0, std::memory_order_relaxed);
}

void TiledKvPanels::pack(int64_t task) { pack_head(task / p_.NH, task % p_.NH, 0, p_.S, true, true); }

// A panel of K^T only partly in [s_begin, s_end) (a projection task's rows end inside it) is packed whole,
// every head, by the call that projects its last keys: each call counts the panel's keys it brings, and the
// one that completes the count packs it (its acquire sees the other calls' keys). Transposing the parts
// key by key would cost more.
void TiledKvPanels::pack_keys(int64_t n, int64_t s_begin, int64_t s_end, bool keys, bool values) {
  if (!buf_) return;
  const int64_t nr = gemm_panel_shape().nr;
  auto completes = [&](int64_t q0) {  // q0: a panel partly in the range
    const int64_t brought = std::min(q0 + nr, s_end) - std::max(q0, s_begin), width = std::min(nr, p_.S - q0);
    std::atomic<int32_t>& count = keys_in_panel_[n * ((p_.S + nr - 1) / nr) + q0 / nr];
    return count.fetch_add(int32_t(brought), std::memory_order_acq_rel) + brought == width;
  };
  const int64_t first = s_begin / nr * nr, last = (s_end - 1) / nr * nr;
  const bool first_part = s_begin != first, last_part = s_end != std::min(last + nr, p_.S);
  int64_t completed[2];  // panels this call completes (nothing allocated: called inside a team's tasks)
  int done = 0;
  if (keys && first_part && completes(first)) completed[done++] = first;
  if (keys && last_part && (last != first || !first_part) && completes(last)) completed[done++] = last;
  for (int64_t h = 0; h < p_.NH; ++h) {
    pack_head(n, h, s_begin, s_end, keys, values);
    for (int i = 0; i < done; ++i) pack_key_panel(n, h, completed[i]);
  }
}

// K^T's panel of keys [q0, q0 + nr) of head (n, h), whole (the columns past S zeroed).
void TiledKvPanels::pack_key_panel(int64_t n, int64_t h, int64_t q0) {
  // op(B) = K^T [Dk, S]: panel q0 (keys q0 .. q0 + nr) at q0 * Dk, (d, c) at d * nr + c
  const float* K = p_.k.data + n * p_.k.batch + h * p_.k.head;
  const int64_t nr = gemm_panel_shape().nr;
  pack_b_panels(Trans::Yes, p_.Dk, std::min(nr, p_.S - q0), K + q0 * p_.k.row, p_.k.row,
                buf_.get() + (n * p_.NH + h) * per_head_ + q0 * p_.Dk);
}

// Keys [s_begin, s_end) of head (n, h): K^T's panels whole in the range (a panel partly in it is left to
// pack_keys) and V's rows.
void TiledKvPanels::pack_head(int64_t n, int64_t h, int64_t s_begin, int64_t s_end, bool keys, bool values) {
  const int64_t nr = gemm_panel_shape().nr, Bc = key_tile(p_);
  float* dst = buf_.get() + (n * p_.NH + h) * per_head_;
  if (keys)
    for (int64_t q0 = (s_begin + nr - 1) / nr * nr; q0 < s_end && std::min(q0 + nr, p_.S) <= s_end; q0 += nr)
      pack_key_panel(n, h, q0);
  if (values && dv_ > 0) {  // per key tile j0, op(B) = V_j [bc, Dv]: panel c0 at c0 * bc, (k, c) at k * nr + c
    const float* V = p_.v.data + n * p_.v.batch + h * p_.v.head;
    const int64_t ldv = p_.v.row;
    for (int64_t j0 = s_begin / Bc * Bc; j0 < s_end; j0 += Bc) {
      const int64_t a = std::max(j0, s_begin), b = std::min(j0 + Bc, s_end), bc = std::min(Bc, p_.S - j0);
      float* tile = dst + k_size_ + j0 * dv_;
      for (int64_t c0 = 0; c0 < p_.Dv; c0 += nr)
        pack_b_panels(Trans::No, b - a, std::min(nr, p_.Dv - c0), V + a * ldv + c0, ldv, tile + c0 * bc + (a - j0) * nr);
    }
  }
}

struct TiledWorker::Impl {
  const SdpaProblem& p;
  const TiledKvPanels* keys;  // null or without tasks: each tile packs its own operands (ops::gemm)
  float* kept_probs;           // null, or [N, NH, T, kept_ld]: exp(E - m_j) of every tile computed
  int64_t kept_ld;
  float* kept_tile_max;        // [N, NH, T, key_tiles]: m_j
  int64_t Br, Bc, ldE, key_tiles;
  int64_t Fr;     // rows per pass through Q K^T, softmax and P V: whole panels of Q (kFusedRows), or the tile
  MatrixRM E, O;  // [Fr, ldE] scores -> probabilities (row stride ldE = Bc + kTilePad; none when the
                  // tiles are computed where they are kept), [Br, Dv] output
  Eigen::ArrayXf m, l, alpha;         // [Br] running max (the exponentials' shift), running sum, rescale
  Eigen::ArrayXf tile_sum, tile_shift;  // [Br] a key tile's sums and shifts, until the whole tile passed
  std::vector<int64_t> limit;         // [Br] keys [0, limit) pass causal / key length
  std::vector<float> q_panels;        // the query tile Q_i [br, Dk] in the kernel's panels
  // Contexts of 1 MB and more (more than L2 holds) go out with streaming stores: not read into the cache before
  // they are written (each row a few lines); the next stage reads them.
  bool stream_out;

  Impl(const SdpaProblem& problem, const TiledKvPanels* key_panels, float* probs, int64_t ld, float* tile_max)
      : p(problem),
        keys(key_panels && key_panels->tasks() > 0 ? key_panels : nullptr),
        kept_probs(probs),
        kept_ld(ld),
        kept_tile_max(tile_max),
        Br(query_tile(p)),
        Bc(key_tile(p)),
        ldE(Bc + kTilePad),
        key_tiles(TiledWorker::key_tiles(p)),
        Fr(keys ? std::min(Br, (kFusedRows + gemm_panel_shape().mr - 1) / gemm_panel_shape().mr * gemm_panel_shape().mr) : Br),
        E(kept_probs ? 0 : Fr, ldE), O(Br, p.Dv), m(Br), l(Br), alpha(Br), tile_sum(Br), tile_shift(Br), limit(static_cast<size_t>(Br)),
        stream_out(double(p.N) * p.NH * p.T * p.Dv * sizeof(float) >= double(1 << 20)) {
    if (keys) q_panels.resize(static_cast<size_t>(panels_size(Br, p.Dk, gemm_panel_shape().mr)));
    AK_CHECK(!kept_probs || (kept_ld >= p.S && kept_tile_max),
             "attention: kept probabilities need rows of at least S = {} and their tile maxes", p.S);
  }

  // The tile products run on ops::gemm's own kernel on this thread: Q K^T on panels packed once (the
  // head's K^T by TiledKvPanels, Q_i once per task) or, without them, packed by ops::gemm per tile;
  // P V reads P in place (C is only Dv wide, see gemm_kernel.inc).
  void run(int64_t task, float* row_lse) {
    const QueryTask tile = query_task(p, task);
    const int64_t nh = tile.nh, n = nh / p.NH, h = nh % p.NH, t0 = tile.t0, br = tile.br;
    auto out = out_map(p.out, n, h, t0, br, p.Dv);
    auto write_rows = [&](int64_t r0, int64_t r1) {  // context = O / l, and the rows' log-sum-exp
      for (int64_t r = r0; r < r1; ++r) {
        if (l[r] > 0.0f && stream_out) scaled_row_streaming(&out(r, 0), O.data() + r * p.Dv, p.Dv, 1.0f / l[r]);
        else if (l[r] > 0.0f) out.row(r) = O.row(r) * (1.0f / l[r]);
        else out.row(r).setZero();  // every key masked: zero context
        if (row_lse) row_lse[nh * p.T + t0 + r] = l[r] > 0.0f ? m[r] + std::log(l[r]) : kNegInf;
      }
    };
    const float* Qi = p.q.data + n * p.q.batch + h * p.q.head + t0 * p.q.row;  // [br, Dk]
    int64_t max_limit = 0;
    for (int64_t r = 0; r < br; ++r) max_limit = std::max(max_limit, limit[r] = row_limit(p, n, t0 + r));
    m.head(br).setConstant(kNegInf);
    l.head(br).setZero();
    auto Ot = O.topRows(br);  // written by the first key tile's P V (beta 0)
    // Q's panels in balanced blocks (256 rows: 14 of 12 and 8 of 11, not 21 of 12 and a pass of 4 rows whose
    // products waste most of the register block); a pass takes Fr / mr consecutive blocks
    const int64_t mr = gemm_panel_shape().mr, per_pass = std::max<int64_t>(1, Fr / std::max<int64_t>(mr, 1));
    if (keys) pack_a_panels(Trans::No, br, p.Dk, Qi, p.q.row, q_panels.data(), RowBlocks::Balanced);
    // pass g: rows [pass_row(g), pass_row(g + 1)), Q's panels from block g * per_pass on
    const int64_t blocks = keys ? (br + mr - 1) / mr : 0;
    const int64_t passes = keys ? (blocks + per_pass - 1) / per_pass : (br + Fr - 1) / Fr;
    auto pass_row = [&](int64_t g) {
      return keys ? balanced_block_start(br, mr, std::min(g * per_pass, blocks)) : std::min(g * Fr, br);
    };
    const int64_t row0 = nh * p.T + t0;  // the tile's first row among the kept ones
    const int64_t ld = kept_probs ? kept_ld : ldE;
    const bool masked = p.mask && p.mask->any();
    // P V on V as it lies (values_in_place) or on V's panels, or (up to 2 rows, or without panels) ops::gemm
    // streaming V_j in place: its sums, its bits
    const bool in_place_pv = keys && values_in_place(p) && br > 2, panels_pv = keys && keys->has_values() && br > 2;
    // With the panels, kFusedRows rows at a time through Q K^T, the softmax and P V: their scores (24 KB at a key
    // tile of 512) stay in L1 from the product that writes them to the one that reads them (the whole tile's
    // 512 KB went out to L2 and back three times). Without, the tile at once (ops::gemm packs per call).
    // Keys past every row's limit are skipped whole (half the work under a causal mask).
    for (int64_t s0 = 0; s0 < max_limit; s0 += Bc) {
      const int64_t bc = std::min(Bc, p.S - s0);
      const float* Kj = p.k.data + n * p.k.batch + h * p.k.head + s0 * p.k.row;  // [bc, Dk]
      const float* Vj = p.v.data + n * p.v.batch + h * p.v.head + s0 * p.v.row;  // [bc, Dv]
      const bool first = s0 == 0;
      const float beta = first ? 0.0f : 1.0f;  // the first key tile's P V overwrites O
      for (int64_t g = 0; g < passes; ++g) {
        const int64_t c0 = pass_row(g), cr = pass_row(g + 1) - c0;
        // E = scale Q K_j^T for rows c0 .. c0 + cr   [cr, bc] (row stride ld): in the worker's tile, or where it is kept
        float* e = kept_probs ? kept_probs + (row0 + c0) * kept_ld + s0 : E.data();
        auto scores = [&] {  // (Q's panels: the pass's blocks from g * per_pass * mr * Dk on)
          if (keys)
            gemm_panels(cr, bc, p.Dk, p.scale, q_panels.data() + g * per_pass * mr * p.Dk, keys->head(nh) + s0 * p.Dk,
                        0.0f, e, ld, RowBlocks::Balanced);
          else gemm(Trans::No, Trans::Yes, cr, bc, p.Dk, p.scale, Qi + c0 * p.q.row, p.q.row, Kj, p.k.row, 0.0f, e, ld, GemmThreads::This);
        };
        scores();
        // P = exp(e - m) shifted by the row's max so far (the softmax is the same for any shift; the max only
        // keeps exp from overflowing): no row max and no rescale of l and O while every sum stays below 2^100
        // (every exponent below 69). A row without a max yet (the first tile, a row masked so far) takes
        // its tile's. A sum past that, infinite or NaN sends the rows through the exact online softmax below
        // on their scores computed again (the same bits). Row max and rescale would cost time on every tile.
        // kRowChunk rows at a time: their scores (kRowChunk bc floats) stay in L1 through mask, max, exp and sum.
        bool shifted = true;
        for (int64_t r0 = c0; r0 < c0 + cr && shifted; r0 += kRowChunk) {
          const int64_t rows = std::min(kRowChunk, c0 + cr - r0);
          for (int64_t r = r0; r < r0 + rows; ++r) {
            float* row = e + (r - c0) * ld;
            if (masked) mask_scores(row, s0, bc, limit[r], mask_row(p, n, h, t0 + r));
            const float shift = m[r] == kNegInf ? detail::row_max(row, bc) : m[r];
            float sum = 0.0f;
            if (shift == kNegInf) std::fill(row, row + bc, 0.0f);  // a row masked so far: zero weights
            else sum = detail::exp_shifted_sum(row, bc, shift);  // masked entries (-inf) give 0
            if (!(sum < 0x1p100f)) {
              shifted = false;
              break;
            }
            tile_sum[r] = sum, tile_shift[r] = shift;
          }
        }
        if (shifted) {
          for (int64_t r = c0; r < c0 + cr; ++r) l[r] += tile_sum[r], m[r] = tile_shift[r];  // l is 0 while m is -inf
        } else {
          scores();
          // m' = max(m, max_s e);  alpha = exp(m - m');  P = exp(e - m');  l = alpha l + sum P;  O = alpha O + P V
          // (the rescale factors of kRowChunk rows take one vector exp)
          for (int64_t r0 = c0; r0 < c0 + cr; r0 += kRowChunk) {
            const int64_t rows = std::min(kRowChunk, c0 + cr - r0);
            float mt[kRowChunk];
            for (int64_t r = r0; r < r0 + rows; ++r) {
              float* row = e + (r - c0) * ld;
              if (masked) mask_scores(row, s0, bc, limit[r], mask_row(p, n, h, t0 + r));
              mt[r - r0] = std::max(m[r], detail::row_max(row, bc));
            }
            detail::rescale_factors(&m[r0], mt, &alpha[r0], rows);
            for (int64_t r = r0; r < r0 + rows; ++r) {
              float* row = e + (r - c0) * ld;
              const float mr = mt[r - r0];
              float sum = 0.0f;
              if (mr == kNegInf) std::fill(row, row + bc, 0.0f);  // a row masked so far: zero weights
              else sum = detail::exp_shifted_sum(row, bc, mr);  // masked entries (-inf) give 0
              l[r] = alpha[r] * l[r] + sum;
              m[r] = mr;
            }
          }
          // O = alpha O in the rows whose max moved (none at the first tile, whose product overwrites O)
          if (!first)
            for (int64_t r = c0; r < c0 + cr; ++r)
              if (alpha[r] != 1.0f) Ot.row(r) *= alpha[r];
        }
        if (kept_probs)
          for (int64_t r = c0; r < c0 + cr; ++r) kept_tile_max[(row0 + r) * key_tiles + s0 / Bc] = m[r];
        // O += P V_j   [cr, Dv]
        float* o = O.data() + c0 * p.Dv;
        if (in_place_pv) gemm_in_place(cr, p.Dv, bc, 1.0f, e, ld, Vj, p.v.row, beta, o, p.Dv);
        else if (panels_pv) gemm_panels_a_in_place(Trans::No, cr, p.Dv, bc, 1.0f, e, ld, keys->values(nh, s0), beta, o, p.Dv);
        else gemm(Trans::No, Trans::No, cr, p.Dv, bc, 1.0f, e, ld, Vj, p.v.row, beta, o, p.Dv, GemmThreads::This);
        // after the last key tile the pass's rows are done: their contexts go out now, while the next passes
        // compute (written after the last pass, the stores' misses would stall)
        if (s0 + Bc >= max_limit) write_rows(c0, c0 + cr);
      }
    }
    if (max_limit == 0) write_rows(0, br);  // every key masked: zero contexts
    if (stream_out) _mm_sfence();  // the streaming stores before whatever the thread does next
  }
};

TiledWorker::TiledWorker(const SdpaProblem& p, const TiledKvPanels* keys, float* kept_probs, int64_t kept_ld,
                         float* kept_tile_max)
    : impl_(std::make_unique<Impl>(p, keys, kept_probs, kept_ld, kept_tile_max)) {}
TiledWorker::TiledWorker(TiledWorker&&) noexcept = default;
TiledWorker::~TiledWorker() = default;
int64_t TiledWorker::tasks(const SdpaProblem& p) { return query_tasks(p); }
int64_t TiledWorker::key_width(const SdpaProblem& p) { return key_tile(p); }
int64_t TiledWorker::key_tiles(const SdpaProblem& p) { return (p.S + key_tile(p) - 1) / key_tile(p); }
int64_t TiledWorker::kept_stride(const SdpaProblem& p) {
  int64_t ld = p.S + kTilePad;
  while (ld % 512 == 0) ld += kTilePad;  // rows 2 KB multiples apart would share L1 sets
  return ld;
}
void TiledWorker::run(int64_t task, float* row_lse) { impl_->run(task, row_lse); }


void sdpa_tiled(const SdpaProblem& p, float* row_lse) {
  const int64_t tasks = TiledWorker::tasks(p);
  const int team = attnkit::detail::team_for(tasks, sdpa_flops(p));
  TiledKvPanels keys(p);
  std::vector<TiledWorker> workers;  // allocated before the team starts: nothing throws inside it
  for (int i = 0; i < team; ++i) workers.emplace_back(p, &keys);
  std::atomic<int64_t> next_head{0}, next{0};
#pragma omp parallel num_threads(team) if (team > 1)
  {
    for (int64_t task; (task = next_head.fetch_add(1, std::memory_order_relaxed)) < keys.tasks();) keys.pack(task);
#pragma omp barrier
    TiledWorker& w = workers[static_cast<size_t>(omp_get_thread_num())];
    for (int64_t task; (task = next.fetch_add(1, std::memory_order_relaxed)) < tasks;) w.run(task, row_lse);
  }
}

// ---- backward, FlashAttention-2 style: key tiles own their dK / dV rows ----
// forward (per head): E = scale Q K^T;  P = exp(E - lse) (masked: 0);  out = P V
// One task = (n, h, key tile j): for each query tile i that can see tile j,
//   E_ij = scale Q_i K_j^T, masked;  P_ij = exp(E_ij - lse_i)           [br, bc]
//   dV_j += P_ij^T dO_i                                                 [bc, Dv]
//   dP_ij = dO_i V_j^T;  dS_ij = P_ij (dP_ij - D_i), D_i = rowsum(dO_i ⊙ O_i)
//   dK_j += scale dS_ij^T Q_i                                           [bc, Dk]
//   dQ_i += scale dS_ij K_j  (into the thread's own partial dQ; summed after the team)
// Memory: two [Br, Bc] tiles per thread, D [N, NH, T], and one partial dQ [N, NH, T, Dk] per
// thread beyond the first (O(T), never T x S).
// With the forward's probabilities (KeptProbs), P_ij is read instead: in place when they are P
// itself (FullWorker's), scaled into the tile by exp(m_j - lse) per row when they are the tiled
// forward's exp(E - m_j). No Q_i K_j^T, no exp (a seventh of the products).
struct TiledBackward::Impl {
  SdpaProblem p;
  const float* row_lse;
  StridedIn dout;
  SdpaGrads grads;
  KeptProbs kept;
  int team;
  int64_t Br, Bc, ldt, key_tiles, tasks, rows, part_size;
  bool masked, want_dq;
  // Buffers uninitialised (ScratchPool), each written before it is read: zero-filling them would cost a
  // serial memset before the team.
  std::shared_ptr<float> D;        // [N, NH, T] D_t = dout_t . out_t
  std::shared_ptr<float> tiles;    // per thread: [Br, ldt] P, [Br, ldt] dP -> dS
  std::shared_ptr<float> partial;  // per thread beyond the first: [N, NH, T, Dk] partial dQ, zeroed by the row stage
  // The GEMM kernel's panels (when it has them and every depth fits one K block), so that nothing is
  // packed once per tile pair: per thread, the key tile's K_j^T, V_j^T and K_j, packed once per task;
  // shared, each query tile's Q_i and dO_i as left operands (a) and as right ones (b), packed by the
  // row stage for every key tile's task.
  bool panels = false;
  int64_t kt_size = 0, vt_size = 0, k_size = 0, panel_floats = 0;
  int64_t query_tiles = 0, qa_size = 0, qb_size = 0, da_size = 0, db_size = 0, query_floats = 0;
  int64_t query_tiles_per_head = 0;
  std::shared_ptr<float> panel_buf, query_buf;
  static constexpr int64_t kRowBlock = 512;

  Impl(const SdpaProblem& p_, const float* row_lse_, StridedIn dout_, const SdpaGrads& grads_, int team_,
       const KeptProbs& kept_)
      : p(p_), row_lse(row_lse_), dout(dout_), grads(grads_), kept(kept_), team(std::max(team_, 1)) {
    AK_CHECK(row_lse != nullptr || (kept.probs != nullptr && kept.tile_max == nullptr),
             "attention backward: the tiled kernel needs the forward's row log-sum-exp or its probabilities");
    AK_CHECK(!kept.probs || kept.ld >= p.S, "attention backward: the probabilities' row stride {} is less than S = {}",
             kept.ld, p.S);
    const bool empty = p.N * p.NH * p.T == 0 || p.S == 0;
    Br = query_tile(p);
    Bc = key_tile(p);
    // Kept tiles of exp(E - m_j) are read tile for tile: the same key tiles as the forward's.
    if (kept.tile_max)
      AK_CHECK(kept.key_width == Bc, "attention backward: the kept probabilities come in key tiles of {}, this "
               "backward's are {} (tile sizes changed between forward and backward)", kept.key_width, Bc);
    ldt = Bc + kTilePad;
    key_tiles = TiledWorker::key_tiles(p);
    tasks = empty ? 0 : p.N * p.NH * key_tiles;
    rows = empty ? 0 : p.N * p.NH * p.T;
    masked = p.mask && p.mask->any();
    want_dq = grads.dq.data != nullptr;
    part_size = p.N * p.NH * p.T * p.Dk;
    if (empty) return;
    D = ScratchPool::get(rows);
    tiles = ScratchPool::get(team * 2 * Br * ldt);
    if (want_dq && team > 1) partial = ScratchPool::get((team - 1) * part_size);
    const PanelShape ps = gemm_panel_shape();
    panels = ps.mr > 0 && p.Dk <= ps.max_depth && p.Dv <= ps.max_depth && Bc <= ps.max_depth && Br <= ps.max_depth;
    if (panels) {
      kt_size = panels_size(Bc, p.Dk, ps.nr), vt_size = panels_size(Bc, p.Dv, ps.nr), k_size = panels_size(p.Dk, Bc, ps.nr);
      panel_floats = kt_size + vt_size + k_size;
      panel_buf = ScratchPool::get(team * panel_floats);
      query_tiles_per_head = (p.T + Br - 1) / Br;
      query_tiles = p.N * p.NH * query_tiles_per_head;
      qa_size = panels_size(Br, p.Dk, ps.mr), qb_size = panels_size(p.Dk, Br, ps.nr);
      da_size = panels_size(Br, p.Dv, ps.mr), db_size = panels_size(p.Dv, Br, ps.nr);
      query_floats = qa_size + qb_size + da_size + db_size;
      query_buf = ScratchPool::get(query_tiles * query_floats);
    }
  }

  // The row stage: D (and the partial dQ's rows zeroed) by blocks of rows, then (with panels) each
  // query tile's panels.
  int64_t d_tasks() const { return (rows + kRowBlock - 1) / kRowBlock; }
  int64_t row_tasks() const { return d_tasks() + query_tiles; }
  // Panels of query tile i of head nh: Q_i as a (rows of the left operand), Q_i as b, dO_i as a, dO_i as b.
  float* query_panels(int64_t nh, int64_t i) {
    return query_buf.get() + (nh * query_tiles_per_head + i) * query_floats;
  }
  void pack_query_tile(int64_t tile) {
    const int64_t nh = tile / query_tiles_per_head, i = tile % query_tiles_per_head;
    const int64_t n = nh / p.NH, h = nh % p.NH, t0 = i * Br, br = std::min(Br, p.T - t0);
    const float* Qi = p.q.data + n * p.q.batch + h * p.q.head + t0 * p.q.row;       // [br, Dk]
    const float* dOi = dout.data + n * dout.batch + h * dout.head + t0 * dout.row;  // [br, Dv]
    float* qa = query_panels(nh, i);
    if (!kept.probs) pack_a_panels(Trans::No, br, p.Dk, Qi, p.q.row, qa);  // for E = scale Q_i K_j^T, unless P is kept
    pack_b_panels(Trans::No, br, p.Dk, Qi, p.q.row, qa + qa_size);
    pack_a_panels(Trans::No, br, p.Dv, dOi, dout.row, qa + qa_size + qb_size);
    pack_b_panels(Trans::No, br, p.Dv, dOi, dout.row, qa + qa_size + qb_size + da_size);
  }
  void run_rows(int64_t task) {
    if (task >= d_tasks()) return pack_query_tile(task - d_tasks());
    const int64_t row0 = task * kRowBlock, row1 = std::min(rows, row0 + kRowBlock);
    if (partial)
      for (int th = 0; th + 1 < team; ++th)
        std::fill(partial.get() + th * part_size + row0 * p.Dk, partial.get() + th * part_size + row1 * p.Dk, 0.0f);
    for (int64_t row = row0; row < row1; ++row) {
      const int64_t nh = row / p.T, n = nh / p.NH, h = nh % p.NH, t = row % p.T;
      const float* o = p.out.data + n * p.out.batch + h * p.out.head + t * p.out.row;
      const float* g = dout.data + n * dout.batch + h * dout.head + t * dout.row;
      float acc = 0;
      for (int64_t j = 0; j < p.Dv; ++j) acc += o[j] * g[j];
      D.get()[row] = acc;
    }
  }

  void run_tile(int id, int64_t task) {
    float* E = tiles.get() + static_cast<size_t>(id) * 2 * Br * ldt;  // [Br, Bc] P (row stride ldt)
    float* dP = E + Br * ldt;                                           // [Br, Bc] dP -> dS
    StridedOut dq = grads.dq;
    if (id > 0 && want_dq)
      dq = {partial.get() + static_cast<size_t>(id - 1) * part_size, p.NH * p.T * p.Dk, p.T * p.Dk, p.Dk};
    const int64_t nh = task / key_tiles, n = nh / p.NH, h = nh % p.NH;
    const int64_t s0 = (task % key_tiles) * Bc, bc = std::min(Bc, p.S - s0);
    const float* Kj = p.k.data + n * p.k.batch + h * p.k.head + s0 * p.k.row;  // [bc, Dk]
    const float* Vj = p.v.data + n * p.v.batch + h * p.v.head + s0 * p.v.row;  // [bc, Dv]
    float* kt_panels = panels ? panel_buf.get() + static_cast<size_t>(id) * panel_floats : nullptr;
    float* vt_panels = kt_panels + kt_size;
    float* k_panels = vt_panels + vt_size;
    if (panels) {
      if (!kept.probs) pack_b_panels(Trans::Yes, p.Dk, bc, Kj, p.k.row, kt_panels);  // K_j^T [Dk, bc]
      pack_b_panels(Trans::Yes, p.Dv, bc, Vj, p.v.row, vt_panels);                // V_j^T [Dv, bc]
      if (want_dq) pack_b_panels(Trans::No, bc, p.Dk, Kj, p.k.row, k_panels);     // K_j [bc, Dk]
    }
    for (int64_t t0 = 0; t0 < p.T; t0 += Br) {
      const int64_t br = std::min(Br, p.T - t0);
      // Limits grow with t: when the tile's last query sees no key of tile j, none does.
      if (row_limit(p, n, t0 + br - 1) <= s0) continue;
      const float* Qi = p.q.data + n * p.q.batch + h * p.q.head + t0 * p.q.row;   // [br, Dk]
      const float* dOi = dout.data + n * dout.batch + h * dout.head + t0 * dout.row;  // [br, Dv]
      const float* qa = panels ? query_panels(nh, t0 / Br) : nullptr;  // Q_i as a, then as b
      const float* qb = qa + (panels ? qa_size : 0);
      const float* da = qb + (panels ? qb_size : 0);                     // dO_i as a, then as b
      const float* db = da + (panels ? da_size : 0);
      const float* Pij = E;  // [br, bc] (row stride ldp)
      int64_t ldp = ldt;
      if (kept.probs && !kept.tile_max) {
        Pij = kept.probs + (nh * p.T + t0) * kept.ld + s0, ldp = kept.ld;
      } else if (kept.probs) {
        for (int64_t r = 0; r < br; ++r) {  // P = exp(E - m_j) exp(m_j - lse); fully masked rows 0
          const int64_t row = nh * p.T + t0 + r;
          const float lse = row_lse[row];
          const float c = lse == kNegInf ? 0.0f : std::exp(kept.tile_max[row * key_tiles + s0 / Bc] - lse);
          Eigen::Map<Eigen::ArrayXf>(E + r * ldt, bc) = Eigen::Map<const Eigen::ArrayXf>(kept.probs + row * kept.ld + s0, bc) * c;
        }
      } else {
        // E = scale Q_i K_j^T   [br, bc]
        if (panels) gemm_panels(br, bc, p.Dk, p.scale, qa, kt_panels, 0.0f, E, ldt);
        else gemm(Trans::No, Trans::Yes, br, bc, p.Dk, p.scale, Qi, p.q.row, Kj, p.k.row, 0.0f, E, ldt, GemmThreads::This);
        for (int64_t r = 0; r < br; ++r) {  // P = exp(E - lse), masked and fully masked rows 0
          float* e = E + r * ldt;
          if (masked) mask_scores(e, s0, bc, row_limit(p, n, t0 + r), mask_row(p, n, h, t0 + r));
          const float lse = row_lse[nh * p.T + t0 + r];
          if (lse == kNegInf) std::fill(e, e + bc, 0.0f);
          else detail::exp_shifted_sum(e, bc, lse);  // masked entries (-inf) give 0
        }
      }
      // dV_j += P^T dO_i   [bc, Dv]
      float* dVj = grads.dv.data ? grads.dv.data + n * grads.dv.batch + h * grads.dv.head + s0 * grads.dv.row : nullptr;
      if (grads.dv.data && panels)
        gemm_panels_a_in_place(Trans::Yes, bc, p.Dv, br, 1.0f, Pij, ldp, db, 1.0f, dVj, grads.dv.row);
      else if (grads.dv.data)
        gemm(Trans::Yes, Trans::No, bc, p.Dv, br, 1.0f, Pij, ldp, dOi, dout.row, 1.0f, dVj, grads.dv.row, GemmThreads::This);
      if (!want_dq && !grads.dk.data) continue;
      // dP = dO_i V_j^T   [br, bc];  dS = P (dP - D)
      if (panels) gemm_panels(br, bc, p.Dv, 1.0f, da, vt_panels, 0.0f, dP, ldt);
      else gemm(Trans::No, Trans::Yes, br, bc, p.Dv, 1.0f, dOi, dout.row, Vj, p.v.row, 0.0f, dP, ldt, GemmThreads::This);
      for (int64_t r = 0; r < br; ++r) {
        Eigen::Map<Eigen::ArrayXf> dS(dP + r * ldt, bc);
        dS = Eigen::Map<const Eigen::ArrayXf>(Pij + r * ldp, bc) * (dS - D.get()[nh * p.T + t0 + r]);
      }
      // dK_j += scale dS^T Q_i   [bc, Dk]
      float* dKj = grads.dk.data ? grads.dk.data + n * grads.dk.batch + h * grads.dk.head + s0 * grads.dk.row : nullptr;
      if (grads.dk.data && panels)
        gemm_panels_a_in_place(Trans::Yes, bc, p.Dk, br, p.scale, dP, ldt, qb, 1.0f, dKj, grads.dk.row);
      else if (grads.dk.data)
        gemm(Trans::Yes, Trans::No, bc, p.Dk, br, p.scale, dP, ldt, Qi, p.q.row, 1.0f, dKj, grads.dk.row, GemmThreads::This);
      // dQ_i += scale dS K_j   [br, Dk]
      if (want_dq && panels)
        gemm_panels_a_in_place(Trans::No, br, p.Dk, bc, p.scale, dP, ldt, k_panels, 1.0f,
                               dq.data + n * dq.batch + h * dq.head + t0 * dq.row, dq.row);
      else if (want_dq)
        gemm(Trans::No, Trans::No, br, p.Dk, bc, p.scale, dP, ldt, Kj, p.k.row, 1.0f,
             dq.data + n * dq.batch + h * dq.head + t0 * dq.row, dq.row, GemmThreads::This);
    }
  }

  int64_t reduce_tasks() const { return want_dq && team > 1 ? d_tasks() : 0; }
  void run_reduce(int64_t task) {
    for (int64_t row = task * kRowBlock; row < std::min(rows, (task + 1) * kRowBlock); ++row) {
      const int64_t nh = row / p.T, n = nh / p.NH, h = nh % p.NH, t = row % p.T;
      float* g = grads.dq.data + n * grads.dq.batch + h * grads.dq.head + t * grads.dq.row;
      for (int th = 0; th + 1 < team; ++th) {
        const float* src = partial.get() + static_cast<size_t>(th) * part_size + row * p.Dk;
        for (int64_t j = 0; j < p.Dk; ++j) g[j] += src[j];
      }
    }
  }
};

TiledBackward::TiledBackward(const SdpaProblem& p, const float* row_lse, StridedIn dout, const SdpaGrads& grads,
                             int team, const KeptProbs& kept)
    : impl_(std::make_unique<Impl>(p, row_lse, dout, grads, team, kept)) {}
TiledBackward::~TiledBackward() = default;
int TiledBackward::team_for_problem(const SdpaProblem& p) {
  return attnkit::detail::team_for(p.N * p.NH * TiledWorker::key_tiles(p), 2.5 * sdpa_flops(p));  // five products
}
int64_t TiledBackward::row_tasks() const { return impl_->row_tasks(); }
void TiledBackward::run_rows(int64_t task) { impl_->run_rows(task); }
int64_t TiledBackward::tile_tasks() const { return impl_->tasks; }
void TiledBackward::run_tile(int thread, int64_t task) { impl_->run_tile(thread, task); }
int64_t TiledBackward::reduce_tasks() const { return impl_->reduce_tasks(); }
void TiledBackward::run_reduce(int64_t task) { impl_->run_reduce(task); }

void sdpa_backward_tiled(const SdpaProblem& p, const float* row_lse, StridedIn dout, const SdpaGrads& grads,
                         const KeptProbs& kept) {
  const int team = TiledBackward::team_for_problem(p);
  TiledBackward b(p, row_lse, dout, grads, team, kept);  // allocates: before the team
#pragma omp parallel num_threads(team) if (team > 1)
  {
#pragma omp for schedule(static)
    for (int64_t t = 0; t < b.row_tasks(); ++t) b.run_rows(t);
    // implicit barrier: D is complete
    const int id = omp_get_thread_num();
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < b.tile_tasks(); ++t) b.run_tile(id, t);
    // implicit barrier: every partial dQ is complete
#pragma omp for schedule(static)
    for (int64_t t = 0; t < b.reduce_tasks(); ++t) b.run_reduce(t);
  }
}

}  // namespace attnkit::ops
