// Legend: N batch, T queries, S keys, Dq/Dk/Dv feature sizes, A additive size, NH heads.
#include "attnkit/ops/attention.hpp"

// GCC 12 warns about Eigen's AVX-512 intrinsics (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <limits>

#include <fmt/format.h>
#include <immintrin.h>
#include <omp.h>

#include "attnkit/ops/matmul.hpp"
#include "attnkit/tensor/parallel_errors.hpp"
#include "attnkit/ops/softmax.hpp"
#include "attnkit/ops/vector_exp.hpp"
#include "attnkit/tensor/eigen_bridge.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/ops/linear.hpp"
#include "attnkit/tensor/scratch_pool.hpp"
#include "attnkit/tensor/threads.hpp"

namespace attnkit::ops {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kRowChunk = 16;  // the online softmax's rows per pass (32 KB of scores at a key tile of 512)
constexpr int64_t kFusedRows = 12;  // the tiled kernel's rows per pass through Q K^T, softmax, P V (rounded up to mr)
using StrideRM = Eigen::OuterStride<>;
using ConstStridedMap = Eigen::Map<const MatrixRM, Eigen::Unaligned, StrideRM>;
using StridedMap = Eigen::Map<MatrixRM, Eigen::Unaligned, StrideRM>;

TileSizes g_tiles;
// Tiles' row stride is their width plus this: a [256, 256] tile with rows exactly 1 KB apart, read
// down its columns in place by the GEMM (P^T dO, dS^T Q), keeps falling into the same few L1 sets.
constexpr int64_t kTilePad = 16;

// Keys [0, limit) pass the causal and key-length masks for query t of batch element n.
int64_t row_limit(const SdpaProblem& p, int64_t n, int64_t t) {
  int64_t lim = p.S;
  if (!p.mask) return lim;
  if (p.mask->causal == CausalKind::UpperLeft) lim = std::min(lim, t + 1);
  if (p.mask->causal == CausalKind::LowerRight) lim = std::min(lim, t + (p.S - p.T) + 1);
  if (!p.mask->key_lengths.empty()) lim = std::min(lim, p.mask->key_lengths[static_cast<size_t>(n)]);
  return std::max<int64_t>(lim, 0);
}

// The explicit mask's row [S] for (n, h, t), or null.
const float* mask_row(const SdpaProblem& p, int64_t n, int64_t h, int64_t t) {
  if (!p.mask || p.mask->mask.empty()) return nullptr;
  const Tensor& m = p.mask->mask;
  const int64_t TS = p.T * p.S;
  switch (m.rank()) {
    case 2: return m.data() + t * p.S;
    case 3: return m.data() + n * TS + t * p.S;
    default: return m.data() + (n * p.NH + h) * TS + t * p.S;
  }
}

StridedMap out_map(const StridedOut& a, int64_t n, int64_t h, int64_t r0, int64_t rows, int64_t cols) {
  return StridedMap(a.data + n * a.batch + h * a.head + r0 * a.row, rows, cols, StrideRM(a.row));
}

// Sets masked entries of a score row (keys s0 .. s0+len) to -inf.
void mask_scores(float* e, int64_t s0, int64_t len, int64_t limit, const float* mrow) {
  for (int64_t c = std::max<int64_t>(limit - s0, 0); c < len; ++c) e[c] = kNegInf;
  if (mrow)
    for (int64_t c = 0; c < std::min(len, limit - s0); ++c)
      if (mrow[s0 + c] == 0.0f) e[c] = kNegInf;
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

ScoreKind parse_score_kind(std::string_view name) {
  if (name == "dot") return ScoreKind::Dot;
  if (name == "scaled-dot") return ScoreKind::ScaledDot;
  if (name == "general") return ScoreKind::General;
  if (name == "additive") return ScoreKind::Additive;
  fail("attention: unknown score \"{}\" (expected dot, scaled-dot, general or additive)", name);
}

std::string_view score_kind_name(ScoreKind kind) {
  switch (kind) {
    case ScoreKind::Dot: return "dot";
    case ScoreKind::ScaledDot: return "scaled-dot";
    case ScoreKind::General: return "general";
    default: return "additive";
  }
}

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

// ---- flash-attention style: query tile x key tiles, online softmax ----
namespace {
int64_t query_tile(const SdpaProblem& p) { return std::min<int64_t>(g_tiles.query, std::max<int64_t>(p.T, 1)); }
// Key tiles of 512 against 256: T = 4096 0.972, T = 1024 0.985 (AVX-512, Zen 5; paired runs)
int64_t key_tile(const SdpaProblem& p) {
  const int64_t key = g_tiles.key > 0 ? g_tiles.key : gemm_panel_shape().max_depth >= 512 ? 512 : 256;
  return std::min<int64_t>(key, std::max<int64_t>(p.S, 1));
}

// The tiled kernel's tasks: query tiles of Br rows, head by head, except that each head's last tile (when the
// head has several and the tile at least kPieces kSplitRows rows) is cut in kPieces, and those pieces come
// last: the team's last tasks are short, so its threads finish close together (T = 1024, 8 heads: one thread
// waited 0.2-0.4 ms for the other's last tile; 15-90 us with quarters). A row's values do not depend on its tile.
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
// (values_row_stride) and Dv is whole panels: packing V's panels was half of the projection stage's packing,
// 1.4% of a T = 1024 forward with K^T's.
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
// key by key cost 0.8% of a T = 1024 forward.
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
  // they are written (each row a few lines, 10% of the tile stage at N = 16, T = 256); the next stage reads them.
  // Paired calls: the attention forward 0.985-0.996 (T = 1024, and the encoder layer's at T = 256).
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
    // products ran at half the rate); a pass takes Fr / mr consecutive blocks
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
        // on their scores computed again (the same bits). Row max and rescale were 2.7% of a T = 4096 forward.
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
        // compute (written after the last pass, the stores' misses were 0.8% of a T = 1024 forward)
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

// Multiply-adds of the two products (Q K^T, P V), times 2: what decides whether a team pays.
namespace {
double sdpa_flops(const SdpaProblem& p) { return 2.0 * p.N * p.NH * p.T * p.S * (p.Dk + p.Dv); }
}  // namespace

void sdpa_tiled(const SdpaProblem& p, float* row_lse) {
  const int64_t tasks = TiledWorker::tasks(p);
  const int team = team_for(tasks, sdpa_flops(p));
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

// ---- scores and weights materialised: one [br, S] block per query tile ----
// The block's rows: about 128 K floats (S = 1024: 128 rows), so that the block Q_i K^T writes stays
// near L2 while each of its rows is softmaxed (in L1) and P V reads it back, and K's packed panels
// serve enough rows (64, 128 and 256 rows measured alike within the machine's noise, one thread).
int64_t FullWorker::block_rows(const SdpaProblem& p) {
  const int64_t fit = std::max<int64_t>(16, (int64_t{1} << 17) / std::max<int64_t>(p.S, 1));
  return std::min<int64_t>({g_tiles.query, fit, std::max<int64_t>(p.T, 1)});
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
  const int team = team_for(tasks, sdpa_flops(p));
  std::vector<FullWorker> workers;  // allocated before the team: nothing throws inside it
  for (int i = 0; i < team; ++i) workers.emplace_back(p, weights, p.S, scores);
  std::atomic<int64_t> next{0};
#pragma omp parallel num_threads(team) if (team > 1)
  {
    FullWorker& w = workers[static_cast<size_t>(omp_get_thread_num())];
    for (int64_t task; (task = next.fetch_add(1, std::memory_order_relaxed)) < tasks;) w.run(task, row_lse);
  }
}

// ---- reference: plain loops, double precision ----
namespace {
// Given raw scores e [S] (double) of query (n, h, t): mask, softmax, context. Writes the outputs.
void naive_finish(const SdpaProblem& p, int64_t n, int64_t h, int64_t t, std::vector<double>& e, float* scores,
                  float* weights, float* row_lse) {
  const int64_t nh = n * p.NH + h;
  const int64_t lim = row_limit(p, n, t);
  const float* mrow = mask_row(p, n, h, t);
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t s = 0; s < p.S; ++s) {
    if (s >= lim || (mrow && mrow[s] == 0.0f)) e[s] = -std::numeric_limits<double>::infinity();
    mx = std::max(mx, e[s]);
  }
  double sum = 0;
  std::vector<double> a(static_cast<size_t>(p.S), 0.0);
  if (mx > -std::numeric_limits<double>::infinity()) {
    for (int64_t s = 0; s < p.S; ++s) sum += (a[s] = std::exp(e[s] - mx));
    for (int64_t s = 0; s < p.S; ++s) a[s] /= sum;
  }
  for (int64_t s = 0; s < p.S; ++s) {
    if (scores) scores[(nh * p.T + t) * p.S + s] = static_cast<float>(e[s]);
    if (weights) weights[(nh * p.T + t) * p.S + s] = static_cast<float>(a[s]);
  }
  if (row_lse) row_lse[nh * p.T + t] = sum > 0 ? static_cast<float>(mx + std::log(sum)) : kNegInf;
  for (int64_t j = 0; j < p.Dv; ++j) {
    double c = 0;
    for (int64_t s = 0; s < p.S; ++s) c += a[s] * p.v.data[n * p.v.batch + h * p.v.head + s * p.v.row + j];
    p.out.data[n * p.out.batch + h * p.out.head + t * p.out.row + j] = static_cast<float>(c);
  }
}
}  // namespace

void sdpa_naive(const SdpaProblem& p, float* scores, float* weights, float* row_lse) {
  std::vector<double> e(static_cast<size_t>(p.S));
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t h = 0; h < p.NH; ++h)
      for (int64_t t = 0; t < p.T; ++t) {
        for (int64_t s = 0; s < p.S; ++s) {
          double d = 0;
          for (int64_t j = 0; j < p.Dk; ++j)
            d += double(p.q.data[n * p.q.batch + h * p.q.head + t * p.q.row + j]) *
                 p.k.data[n * p.k.batch + h * p.k.head + s * p.k.row + j];
          e[s] = d * p.scale;
        }
        naive_finish(p, n, h, t, e, scores, weights, row_lse);
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
  // Buffers uninitialised (ScratchPool), each written before it is read: zero-filling them cost a
  // serial memset before the team (2-3% of a T = 1024 MHA backward on 2 threads).
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
  return team_for(p.N * p.NH * TiledWorker::key_tiles(p), 2.5 * sdpa_flops(p));  // five products
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

// ---- backward reference: plain loops, double precision ----
// Recomputes the softmax and the output in double from q, k, v (row_lse is not read, so the
// reference does not inherit a forward's rounding), then for every (n, h):
//   forward: e = scale q.k (masked: -inf);  P = softmax(e);  out_t = sum_s P[t, s] v_s
//   D_t = dout_t . out_t;  dP[t, s] = dout_t . v_s;  dE = P (dP - D)
//   dv_s += sum_t P[t, s] dout_t;  dq_t += scale sum_s dE[t, s] k_s;  dk_s += scale sum_t dE[t, s] q_t
// A fully masked row has P = 0, so it contributes nothing (zero gradients, never NaN).
void sdpa_backward_naive(const SdpaProblem& p, const float* /*row_lse*/, StridedIn dout, const SdpaGrads& grads) {
  const double ninf = -std::numeric_limits<double>::infinity();
  auto at = [](const auto& a, int64_t n, int64_t h, int64_t i, int64_t j) -> auto& {
    return a.data[n * a.batch + h * a.head + i * a.row + j];
  };
  std::vector<double> P(static_cast<size_t>(p.T * p.S)), dq(static_cast<size_t>(p.T * p.Dk)),
      dk(static_cast<size_t>(p.S * p.Dk)), dv(static_cast<size_t>(p.S * p.Dv));
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t h = 0; h < p.NH; ++h) {
      std::fill(dq.begin(), dq.end(), 0.0), std::fill(dk.begin(), dk.end(), 0.0), std::fill(dv.begin(), dv.end(), 0.0);
      for (int64_t t = 0; t < p.T; ++t) {
        double* Pt = &P[static_cast<size_t>(t * p.S)];
        const int64_t lim = row_limit(p, n, t);
        const float* mrow = mask_row(p, n, h, t);
        double mx = ninf;
        for (int64_t s = 0; s < p.S; ++s) {  // e = scale q.k, masked -inf   [S]
          double d = 0;
          for (int64_t j = 0; j < p.Dk; ++j) d += double(at(p.q, n, h, t, j)) * at(p.k, n, h, s, j);
          Pt[s] = (s >= lim || (mrow && mrow[s] == 0.0f)) ? ninf : d * p.scale;
          mx = std::max(mx, Pt[s]);
        }
        double sum = 0;  // P = softmax(e); a fully masked row stays all zero
        for (int64_t s = 0; s < p.S; ++s) sum += (Pt[s] = mx == ninf ? 0.0 : std::exp(Pt[s] - mx));
        if (sum > 0)
          for (int64_t s = 0; s < p.S; ++s) Pt[s] /= sum;
        double D = 0;  // D_t = dout_t . out_t, out_t = sum_s P v_s
        for (int64_t j = 0; j < p.Dv; ++j) {
          double o = 0;
          for (int64_t s = 0; s < p.S; ++s) o += Pt[s] * at(p.v, n, h, s, j);
          D += double(at(dout, n, h, t, j)) * o;
        }
        for (int64_t s = 0; s < p.S; ++s) {
          if (Pt[s] == 0.0) continue;
          double dP = 0;  // dP[t, s] = dout_t . v_s
          for (int64_t j = 0; j < p.Dv; ++j) {
            dP += double(at(dout, n, h, t, j)) * at(p.v, n, h, s, j);
            dv[static_cast<size_t>(s * p.Dv + j)] += Pt[s] * at(dout, n, h, t, j);  // dv_s += P dout_t
          }
          const double dE = Pt[s] * (dP - D) * p.scale;  // dE = P (dP - D), times the score's scale
          for (int64_t j = 0; j < p.Dk; ++j) {
            dq[static_cast<size_t>(t * p.Dk + j)] += dE * at(p.k, n, h, s, j);
            dk[static_cast<size_t>(s * p.Dk + j)] += dE * at(p.q, n, h, t, j);
          }
        }
      }
      auto add = [&](const StridedOut& g, const std::vector<double>& src, int64_t rows, int64_t cols) {
        if (!g.data) return;
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j) at(g, n, h, i, j) += static_cast<float>(src[static_cast<size_t>(i * cols + j)]);
      };
      add(grads.dq, dq, p.T, p.Dk), add(grads.dk, dk, p.S, p.Dk), add(grads.dv, dv, p.S, p.Dv);
    }
}

// ---- attention_forward: the score kinds on [T, D] / [N, T, D] tensors ----
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

namespace {

struct Dims : QkvDims {
  int64_t Dq = 0, Dk = 0, Dv = 0;
};

Dims check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  Dims d;
  static_cast<QkvDims&>(d) = check_qkv(q, k, v, "attention", "Dq");
  d.Dq = q.dim(-1), d.Dk = k.dim(-1), d.Dv = v.dim(-1);
  const ScoreWeights& w = o.weights;
  switch (o.score) {
    case ScoreKind::Dot:
    case ScoreKind::ScaledDot:
      AK_CHECK(d.Dk == d.Dq, "attention: keys {} and query {} disagree on the feature size ({} score needs Dq == Dk)",
               k.shape_str(), q.shape_str(), score_kind_name(o.score));
      break;
    case ScoreKind::General:
      AK_CHECK(!w.W.empty(), "attention: the general score needs a weight W [Dq, Dk] = [{}, {}]", d.Dq, d.Dk);
      AK_CHECK(w.W.shape() == (Shape{d.Dq, d.Dk}), "attention: W has shape {}, expected [Dq, Dk] = [{}, {}]",
               w.W.shape_str(), d.Dq, d.Dk);
      break;
    case ScoreKind::Additive: {
      AK_CHECK(!w.W_q.empty() && !w.W_k.empty() && !w.v.empty(),
               "attention: the additive score needs weights W_q [Dq, A], W_k [Dk, A] and v [A]{}",
               w.W_q.empty() ? " (W_q is missing)" : w.W_k.empty() ? " (W_k is missing)" : " (v is missing)");
      AK_CHECK(w.W_q.rank() == 2 && w.W_q.dim(0) == d.Dq, "attention: W_q has shape {}, expected [Dq, A] with Dq = {}",
               w.W_q.shape_str(), d.Dq);
      const int64_t A = w.W_q.dim(1);
      AK_CHECK(w.W_k.shape() == (Shape{d.Dk, A}), "attention: W_k has shape {}, expected [Dk, A] = [{}, {}]",
               w.W_k.shape_str(), d.Dk, A);
      AK_CHECK(w.v.shape() == Shape{A}, "attention: v has shape {}, expected [A] = [{}]", w.v.shape_str(), A);
      AK_CHECK(w.b.empty() || w.b.shape() == Shape{A}, "attention: b has shape {}, expected [A] = [{}]",
               w.b.shape_str(), A);
      break;
    }
  }
  check_mask(o.mask, d.N, 1, d.T, d.S, "attention");
  return d;
}

// The problem over [N, T, D] contiguous buffers.
SdpaProblem make_problem(const Dims& d, const float* q, int64_t dq, const float* k, const float* v, float* out,
                         const MaskSpec& mask, float scale) {
  SdpaProblem p;
  p.N = d.N, p.NH = 1, p.T = d.T, p.S = d.S, p.Dk = dq, p.Dv = d.Dv, p.scale = scale;
  p.q = {q, d.T * dq, 0, dq};
  p.k = {k, d.S * dq, 0, dq};
  p.v = {v, d.S * d.Dv, 0, d.Dv};
  p.out = {out, d.T * d.Dv, 0, d.Dv};
  p.mask = &mask;
  return p;
}

AttentionResult shaped(AttentionResult r, const Dims& d) {
  auto shape = [&](Shape s) {
    if (!d.batched) s.erase(s.begin());
    return s;
  };
  r.context.reshape(shape({d.N, d.T, d.Dv}));
  r.row_logsumexp.reshape(shape({d.N, d.T}));
  if (!r.weights.empty()) r.weights.reshape(shape({d.N, d.T, d.S}));
  if (!r.scores.empty()) r.scores.reshape(shape({d.N, d.T, d.S}));
  return r;
}

// Bahdanau scores row by row: e[s] = v . tanh(Qp[t] + Kp[s]), never more than [S, A] at a time.
AttentionResult additive_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o,
                                 const Dims& d) {
  const ScoreWeights& w = o.weights;
  const int64_t A = w.W_q.dim(1);
  // The same products as additive_backward's (ops::gemm), so its recomputed Z is the forward's, bit for bit.
  MatrixRM Qp(d.N * d.T, A), Kp(d.N * d.S, A);
  gemm(Trans::No, Trans::No, d.N * d.T, A, d.Dq, 1.0f, q.data(), d.Dq, w.W_q.data(), A, 0.0f, Qp.data(), A);  // [N*T, A]
  gemm(Trans::No, Trans::No, d.N * d.S, A, d.Dk, 1.0f, k.data(), d.Dk, w.W_k.data(), A, 0.0f, Kp.data(), A);  // [N*S, A]
  if (!w.b.empty()) Kp.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(w.b.data(), A);
  AttentionResult r;
  r.context = Tensor({d.N, d.T, d.Dv});
  r.row_logsumexp = Tensor({d.N, d.T});
  const bool keep = o.keep == KeepWeights::Yes;
  if (keep) r.scores = Tensor({d.N, d.T, d.S}), r.weights = Tensor({d.N, d.T, d.S});
  SdpaProblem p = make_problem(d, q.data(), d.Dq, k.data(), v.data(), r.context.data(), o.mask, 1.0f);
  const int team = team_for(d.N * d.T, 4.0 * d.N * d.T * d.S * (A + d.Dv));  // tanh(Qp + Kp) . v, P V
  // Allocated before the team: each thread's M [S, A] and e [S].
  std::vector<MatrixRM> Ms(static_cast<size_t>(team), MatrixRM(d.S, A));
  std::vector<Eigen::VectorXf> es(static_cast<size_t>(team), Eigen::VectorXf(d.S));
  ParallelErrors errors;
#pragma omp parallel num_threads(team) if (team > 1)
  {
    MatrixRM& M = Ms[static_cast<size_t>(omp_get_thread_num())];
    Eigen::VectorXf& e = es[static_cast<size_t>(omp_get_thread_num())];
#pragma omp for schedule(static)
    for (int64_t nt = 0; nt < d.N * d.T; ++nt) {
      errors.run([&] {
        const int64_t n = nt / d.T, t = nt % d.T;
        M = Kp.middleRows(n * d.S, d.S);
        M.rowwise() += Qp.row(nt);
        M.array() = M.array().tanh();  // [S, A]; tanh in its own pass stays vectorised
        // e^T [1, S] = v^T [1, A] M^T: one row of C, ops::gemm's unpacked dot-product path (as the backward)
        gemm(Trans::No, Trans::Yes, 1, d.S, A, 1.0f, w.v.data(), A, M.data(), A, 0.0f, e.data(), d.S, GemmThreads::This);
        mask_scores(e.data(), 0, d.S, row_limit(p, n, t), mask_row(p, n, 0, t));
        if (keep) std::copy(e.data(), e.data() + d.S, r.scores.data() + nt * d.S);
        float mx = 0, sum = 0;
        softmax_rows(e.data(), 1, d.S, &mx, &sum);
        if (keep) std::copy(e.data(), e.data() + d.S, r.weights.data() + nt * d.S);
        r.row_logsumexp[nt] = sum > 0 ? mx + std::log(sum) : kNegInf;
        // context_t [1, Dv] = P [1, S] V[n] [S, Dv] (one row of C: streamed, nothing packed)
        gemm(Trans::No, Trans::No, 1, d.Dv, d.S, 1.0f, e.data(), d.S, v.data() + n * d.S * d.Dv, d.Dv, 0.0f,
             r.context.data() + nt * d.Dv, d.Dv, GemmThreads::This);
      });
    }
  }
  errors.rethrow();
  return r;
}

}  // namespace

AttentionResult attention_forward(const Tensor& query, const Tensor& keys, const Tensor& values,
                                  const AttentionOptions& options) {
  const Dims d = check_inputs(query, keys, values, options);
  if (options.score == ScoreKind::Additive) return shaped(additive_forward(query, keys, values, options, d), d);
  // general: q' = q W [N, T, Dk], then the dot score
  Tensor projected;
  const float* q = query.data();
  if (options.score == ScoreKind::General) {
    projected = Tensor({d.N, d.T, d.Dk});
    as_matrix(projected).noalias() = as_matrix(query.data(), d.N * d.T, d.Dq) * as_matrix(options.weights.W);
    q = projected.data();
  }
  const float scale = options.score == ScoreKind::ScaledDot ? 1.0f / std::sqrt(static_cast<float>(d.Dk)) : 1.0f;
  AttentionResult r;
  r.context = Tensor({d.N, d.T, d.Dv});
  r.row_logsumexp = Tensor({d.N, d.T});
  if (d.N * d.T == 0 || d.S == 0) {
    // No queries, or no keys: a row with no key to attend to is a fully masked row (zeros).
    r.row_logsumexp = Tensor::filled({d.N, d.T}, -std::numeric_limits<float>::infinity());
    r = shaped(std::move(r), d);
    if (options.keep == KeepWeights::Yes) {  // empty: shaped() leaves them alone
      const Shape s = d.batched ? Shape{d.N, d.T, d.S} : Shape{d.T, d.S};
      r.scores = Tensor(s), r.weights = Tensor(s);
    }
    return r;
  }
  SdpaProblem p = make_problem(d, q, d.Dk, keys.data(), values.data(), r.context.data(), options.mask, scale);
  if (options.keep == KeepWeights::Yes) {
    AK_CHECK(d.N * d.T * d.S <= kMaxWeightElements,
             "attention: the scores and weights would be [N, T, S] = {} ({:.1f} GiB each); ask for the context only",
             shape_str({d.N, d.T, d.S}), d.N * d.T * d.S * 4.0 / (1 << 30));
    r.scores = Tensor({d.N, d.T, d.S});
    r.weights = Tensor({d.N, d.T, d.S});
    sdpa_full(p, r.scores.data(), r.weights.data(), r.row_logsumexp.data());
  } else {
    sdpa_tiled(p, r.row_logsumexp.data());
  }
  return shaped(std::move(r), d);
}

AttentionResult attention_forward_naive(const Tensor& query, const Tensor& keys, const Tensor& values,
                                        const AttentionOptions& options) {
  const Dims d = check_inputs(query, keys, values, options);
  AttentionResult r;
  r.context = Tensor({d.N, d.T, d.Dv});
  r.row_logsumexp = Tensor({d.N, d.T});
  r.scores = Tensor({d.N, d.T, d.S});
  r.weights = Tensor({d.N, d.T, d.S});
  SdpaProblem p = make_problem(d, query.data(), d.Dq, keys.data(), values.data(), r.context.data(), options.mask, 1.0f);
  const ScoreWeights& w = options.weights;
  const int64_t A = w.W_q.empty() ? 0 : w.W_q.dim(1);
  std::vector<double> e(static_cast<size_t>(d.S));
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t t = 0; t < d.T; ++t) {
      const float* qt = query.data() + (n * d.T + t) * d.Dq;
      for (int64_t s = 0; s < d.S; ++s) {
        const float* ks = keys.data() + (n * d.S + s) * d.Dk;
        double acc = 0;
        switch (options.score) {
          case ScoreKind::Dot:
          case ScoreKind::ScaledDot:
            for (int64_t j = 0; j < d.Dk; ++j) acc += double(qt[j]) * ks[j];
            if (options.score == ScoreKind::ScaledDot) acc /= std::sqrt(double(d.Dk));
            break;
          case ScoreKind::General:
            for (int64_t i = 0; i < d.Dq; ++i)
              for (int64_t j = 0; j < d.Dk; ++j) acc += double(qt[i]) * w.W[i * d.Dk + j] * ks[j];
            break;
          case ScoreKind::Additive:
            for (int64_t a = 0; a < A; ++a) {
              double z = w.b.empty() ? 0.0 : w.b[a];
              for (int64_t i = 0; i < d.Dq; ++i) z += double(qt[i]) * w.W_q[i * A + a];
              for (int64_t j = 0; j < d.Dk; ++j) z += double(ks[j]) * w.W_k[j * A + a];
              acc += w.v[a] * std::tanh(z);
            }
            break;
        }
        e[s] = acc;
      }
      naive_finish(p, n, 0, t, e, r.scores.data(), r.weights.data(), r.row_logsumexp.data());
    }
  return shaped(std::move(r), d);
}


// ---- attention_backward: the score kinds on [T, D] / [N, T, D] tensors ----
namespace {

// The strided core's gradients from the forward's weights W [N, T, S] (KeepWeights::Yes), for
// attention_forward's single-head problems (make_problem: NH = 1): per batch element n,
//   forward: out = W V;  W = softmax(E);  E = scale Q K^T
//   dV += W^T dout;  dW = dout V^T;  dE = W (dW - D), D_t = dout_t . out_t;
//   dQ += scale dE K;  dK += scale dE^T Q
void sdpa_backward_from_weights(const SdpaProblem& p, const float* weights, StridedIn dout, const SdpaGrads& g) {
  std::vector<float> dE(static_cast<size_t>(p.T * p.S));  // [T, S], one batch element at a time
  const int team = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(num_threads(), p.T)));
  for (int64_t n = 0; n < p.N; ++n) {
    const float* W = weights + n * p.T * p.S;  // [T, S]
    const float* Q = p.q.data + n * p.q.batch;
    const float* K = p.k.data + n * p.k.batch;
    const float* V = p.v.data + n * p.v.batch;
    const float* dO = dout.data + n * dout.batch;
    const float* O = p.out.data + n * p.out.batch;
    // dV += W^T dout   [S, Dv]
    if (g.dv.data) gemm(Trans::Yes, Trans::No, p.S, p.Dv, p.T, 1.0f, W, p.S, dO, dout.row, 1.0f, g.dv.data + n * g.dv.batch, g.dv.row);
    if (!g.dq.data && !g.dk.data) continue;
    // dW = dout V^T   [T, S]
    gemm(Trans::No, Trans::Yes, p.T, p.S, p.Dv, 1.0f, dO, dout.row, V, p.v.row, 0.0f, dE.data(), p.S);
    // dE = W (dW - D)
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1 && p.T * p.S > 4096)
    for (int64_t t = 0; t < p.T; ++t) {
      float D = 0;
      for (int64_t j = 0; j < p.Dv; ++j) D += dO[t * dout.row + j] * O[t * p.out.row + j];
      for (int64_t s = 0; s < p.S; ++s) dE[t * p.S + s] = W[t * p.S + s] * (dE[t * p.S + s] - D);
    }
    // dQ += scale dE K   [T, Dk];  dK += scale dE^T Q   [S, Dk]
    if (g.dq.data)
      gemm(Trans::No, Trans::No, p.T, p.Dk, p.S, p.scale, dE.data(), p.S, K, p.k.row, 1.0f, g.dq.data + n * g.dq.batch, g.dq.row);
    if (g.dk.data)
      gemm(Trans::Yes, Trans::No, p.S, p.Dk, p.T, p.scale, dE.data(), p.S, Q, p.q.row, 1.0f, g.dk.data + n * g.dk.batch, g.dk.row);
  }
}

// Bahdanau: forward e[t, s] = v . tanh(Qp[t] + Kp[s]), Qp = q W_q [N*T, A], Kp = k W_k + b [N*S, A].
// Row by row (never more than [S, A] per thread), with Z = tanh(Qp[t] + Kp[n]) [S, A]:
//   P = weights row, or exp(e - lse);  dP = V dc_t [S];  dE = P (dP - D_t)
//   dv += Z^T dE;  G = (1 - Z^2) ⊙ (dE v^T) [S, A];  dQp[t] = colsum G;  dKp[n] += G
// then dvalues[n] += P[n]^T dC[n] (one product per batch row over its T rows of P, kept in Pall [N*T, S]),
// dq = dQp W_q^T, dW_q = q^T dQp, dk = dKp W_k^T, dW_k = k^T dKp, db = colsum dKp.
// The row's matrix-vector products are posed as one row of C (M = 1: ops::gemm's dot_rows / axpy_rows paths,
// nothing packed; as [S, 1] columns they were padded to 16-wide panels and packing took ~14% of a G2P step).
// dKp and dv are shared across rows: each thread sums into its own, reduced after.
void additive_backward(const Tensor& q, const Tensor& k, const Tensor& values, const AttentionOptions& o, const Dims& d,
                       const AttentionResult& fwd, const Tensor& dc, AttentionGrads& g) {
  const ScoreWeights& w = o.weights;
  const int64_t A = w.W_q.dim(1), NT = d.N * d.T, NS = d.N * d.S;
  Tensor Qp({NT, A}), Kp({NS, A});
  gemm(Trans::No, Trans::No, NT, A, d.Dq, 1.0f, q.data(), d.Dq, w.W_q.data(), A, 0.0f, Qp.data(), A);  // [N*T, A]
  gemm(Trans::No, Trans::No, NS, A, d.Dk, 1.0f, k.data(), d.Dk, w.W_k.data(), A, 0.0f, Kp.data(), A);  // [N*S, A]
  if (!w.b.empty()) as_matrix(Kp).rowwise() += Eigen::Map<const Eigen::RowVectorXf>(w.b.data(), A);  // [N*S, A]
  const bool keep = !fwd.weights.empty();
  SdpaProblem p = make_problem(d, q.data(), d.Dq, k.data(), values.data(), nullptr, o.mask, 1.0f);
  const int team = team_for(NT, 8.0 * NT * d.S * (A + d.Dv));  // Z, e, dP, dv, G: about twice the forward's
  // Allocated before the team. Per thread: Z [S, A], dE [S], dP [S]; partial dKp [N*S, A] and dv [A] (zeroed).
  // Pall [N*T, S]: every row's P (the forward's weights when kept).
  std::vector<MatrixRM> Zs(static_cast<size_t>(team), MatrixRM(d.S, A));
  std::vector<Eigen::ArrayXf> es(static_cast<size_t>(team), Eigen::ArrayXf(d.S)), dps(es);
  const int64_t part = NS * A + A;
  std::vector<float> parts(static_cast<size_t>(team * part), 0.0f);
  Tensor dQp({NT, A});
  Tensor Pall;
  if (!keep) Pall = Tensor({NT, d.S});  // [N*T, S]
  const float* P_all = keep ? fwd.weights.data() : Pall.data();
  const Eigen::Map<const Eigen::VectorXf> vv(w.v.data(), A);
  ParallelErrors errors;
#pragma omp parallel num_threads(team) if (team > 1)
  {
    const int id = omp_get_thread_num();
    MatrixRM& Z = Zs[static_cast<size_t>(id)];
    Eigen::ArrayXf& e = es[static_cast<size_t>(id)];
    Eigen::ArrayXf& dP = dps[static_cast<size_t>(id)];
    float* dKp = parts.data() + id * part;  // [N*S, A]
    float* dv = dKp + NS * A;               // [A]
#pragma omp for schedule(static)
    for (int64_t nt = 0; nt < NT; ++nt) {
      errors.run([&] {
        const int64_t n = nt / d.T, t = nt % d.T;
        // Z = tanh(Qp[t] + Kp[n])   [S, A]
        Z = as_matrix(Kp.data() + n * d.S * A, d.S, A);
        Z.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(Qp.data() + nt * A, A);
        Z.array() = Z.array().tanh();
        // P: the forward's weights row, or exp(e - lse) with e = Z v masked   [S]
        if (keep) {
          e = Eigen::Map<const Eigen::ArrayXf>(fwd.weights.data() + nt * d.S, d.S);
        } else {
          const float lse = fwd.row_logsumexp[nt];
          if (lse == kNegInf) {
            e.setZero();
          } else {
            // e^T [1, S] = v^T [1, A] Z^T
            gemm(Trans::No, Trans::Yes, 1, d.S, A, 1.0f, w.v.data(), A, Z.data(), A, 0.0f, e.data(), d.S,
                 GemmThreads::This);
            mask_scores(e.data(), 0, d.S, row_limit(p, n, t), mask_row(p, n, 0, t));
            detail::exp_shifted_sum(e.data(), d.S, lse);  // masked entries (-inf) give 0
          }
          std::copy(e.data(), e.data() + d.S, Pall.data() + nt * d.S);
        }
        const float* dct = dc.data() + nt * d.Dv;
        // dP = V[n] dc_t [S]:  dP^T [1, S] = dc_t^T [1, Dv] V[n]^T;  dE = P (dP - D_t), D_t = dc_t . c_t
        gemm(Trans::No, Trans::Yes, 1, d.S, d.Dv, 1.0f, dct, d.Dv, values.data() + n * d.S * d.Dv, d.Dv, 0.0f,
             dP.data(), d.S, GemmThreads::This);
        float D = 0;
        for (int64_t j = 0; j < d.Dv; ++j) D += dct[j] * fwd.context[nt * d.Dv + j];
        e = e * (dP - D);  // e now holds dE
        // dv += Z^T dE [A]:  dv^T [1, A] += dE^T [1, S] Z
        gemm(Trans::No, Trans::No, 1, A, d.S, 1.0f, e.data(), d.S, Z.data(), A, 1.0f, dv, A, GemmThreads::This);
        // G = (1 - Z^2) ⊙ (dE v^T)   [S, A]
        Z.array() = 1.0f - Z.array().square();
        Z.array().colwise() *= e;
        Z.array().rowwise() *= vv.transpose().array();
        column_sums(Z.data(), d.S, A, dQp.data() + nt * A);  // dQp[t] = colsum G   [A]
        as_matrix(dKp + n * d.S * A, d.S, A) += Z;                       // dKp[n] += G
      });
    }
  }
  errors.rethrow();
  // reduce the partials into thread 0's
  for (int th = 1; th < team; ++th)
    for (int64_t i = 0; i < part; ++i) parts[static_cast<size_t>(i)] += parts[static_cast<size_t>(th * part + i)];
  const float* dKp = parts.data();
  const float* dv = dKp + NS * A;
  // context_t = P_t V[n]:  dvalues[n] += P[n]^T dC[n]   [S, Dv] = [S, T] x [T, Dv], one product per batch row
  for (int64_t n = 0; n < d.N; ++n)
    gemm(Trans::Yes, Trans::No, d.S, d.Dv, d.T, 1.0f, P_all + n * d.T * d.S, d.S, dc.data() + n * d.T * d.Dv, d.Dv, 1.0f,
         g.values.data() + n * d.S * d.Dv, d.Dv);
  // Qp = q W_q:  dq += dQp W_q^T [N*T, Dq];  dW_q = q^T dQp [Dq, A]
  gemm(Trans::No, Trans::Yes, NT, d.Dq, A, 1.0f, dQp.data(), A, w.W_q.data(), A, 1.0f, g.query.data(), d.Dq);
  gemm(Trans::Yes, Trans::No, d.Dq, A, NT, 1.0f, q.data(), d.Dq, dQp.data(), A, 0.0f, g.weights.W_q.data(), A);
  // Kp = k W_k + b:  dk += dKp W_k^T [N*S, Dk];  dW_k = k^T dKp [Dk, A];  db = colsum dKp [A]
  gemm(Trans::No, Trans::Yes, NS, d.Dk, A, 1.0f, dKp, A, w.W_k.data(), A, 1.0f, g.keys.data(), d.Dk);
  gemm(Trans::Yes, Trans::No, d.Dk, A, NS, 1.0f, k.data(), d.Dk, dKp, A, 0.0f, g.weights.W_k.data(), A);
  std::copy(dv, dv + A, g.weights.v.data());
  if (!w.b.empty()) column_sums(dKp, NS, A, g.weights.b.data());
}

}  // namespace

AttentionGrads attention_backward(const Tensor& query, const Tensor& keys, const Tensor& values,
                                  const AttentionOptions& options, const AttentionResult& forward,
                                  const Tensor& dcontext) {
  const Dims d = check_inputs(query, keys, values, options);
  const Shape cshape = d.batched ? Shape{d.N, d.T, d.Dv} : Shape{d.T, d.Dv};
  AK_CHECK(forward.context.shape() == cshape, "attention backward: the forward's context has shape {}, expected {}",
           forward.context.shape_str(), shape_str(cshape));
  AK_CHECK(dcontext.shape() == cshape, "attention backward: the context gradient has shape {}, expected {} like the context",
           dcontext.shape_str(), shape_str(cshape));
  AK_CHECK(forward.row_logsumexp.numel() == d.N * d.T,
           "attention backward: the forward's row log-sum-exp has shape {}, expected [N, T] = [{}, {}]",
           forward.row_logsumexp.shape_str(), d.N, d.T);
  const bool keep = !forward.weights.empty();
  AK_CHECK(!keep || forward.weights.numel() == d.N * d.T * d.S,
           "attention backward: the forward's weights have shape {}, expected [N, T, S] = [{}, {}, {}]",
           forward.weights.shape_str(), d.N, d.T, d.S);
  AttentionGrads g;
  g.query = Tensor(query.shape()), g.keys = Tensor(keys.shape()), g.values = Tensor(values.shape());
  const ScoreWeights& w = options.weights;
  if (options.score == ScoreKind::General) g.weights.W = Tensor(w.W.shape());
  if (options.score == ScoreKind::Additive) {
    g.weights.W_q = Tensor(w.W_q.shape()), g.weights.W_k = Tensor(w.W_k.shape()), g.weights.v = Tensor(w.v.shape());
    if (!w.b.empty()) g.weights.b = Tensor(w.b.shape());
  }
  if (d.N * d.T == 0 || d.S == 0) return g;  // nothing attended: every gradient is zero
  if (options.score == ScoreKind::Additive) {
    additive_backward(query, keys, values, options, d, forward, dcontext, g);
    return g;
  }
  // general: q' = q W [N*T, Dk], then the dot score on q'; its gradient dq' is mapped back below.
  Tensor projected, dprojected;
  const float* q = query.data();
  float* dq = g.query.data();
  if (options.score == ScoreKind::General) {
    projected = Tensor({d.N, d.T, d.Dk}), dprojected = Tensor({d.N, d.T, d.Dk});
    gemm(Trans::No, Trans::No, d.N * d.T, d.Dk, d.Dq, 1.0f, q, d.Dq, w.W.data(), d.Dk, 0.0f, projected.data(), d.Dk);
    q = projected.data(), dq = dprojected.data();
  }
  const float scale = options.score == ScoreKind::ScaledDot ? 1.0f / std::sqrt(static_cast<float>(d.Dk)) : 1.0f;
  // The backward only reads p.out (the forward's context).
  SdpaProblem p = make_problem(d, q, d.Dk, keys.data(), values.data(), const_cast<float*>(forward.context.data()),
                               options.mask, scale);
  const StridedIn dout{dcontext.data(), d.T * d.Dv, 0, d.Dv};
  const SdpaGrads grads{{dq, d.T * d.Dk, 0, d.Dk}, {g.keys.data(), d.S * d.Dk, 0, d.Dk}, {g.values.data(), d.S * d.Dv, 0, d.Dv}};
  if (keep) sdpa_backward_from_weights(p, forward.weights.data(), dout, grads);
  else sdpa_backward_tiled(p, forward.row_logsumexp.data(), dout, grads);
  if (options.score == ScoreKind::General) {
    // q' = q W:  dq += dq' W^T [N*T, Dq];  dW = q^T dq' [Dq, Dk]
    gemm(Trans::No, Trans::Yes, d.N * d.T, d.Dq, d.Dk, 1.0f, dprojected.data(), d.Dk, w.W.data(), d.Dk, 1.0f,
         g.query.data(), d.Dq);
    gemm(Trans::Yes, Trans::No, d.Dq, d.Dk, d.N * d.T, 1.0f, query.data(), d.Dq, dprojected.data(), d.Dk, 0.0f,
         g.weights.W.data(), d.Dk);
  }
  return g;
}

}  // namespace attnkit::ops
