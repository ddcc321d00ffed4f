// Attention kernels: masks, softmax over keys, context = weights . values, on a strided problem of
// NH heads (the score kinds on plain tensors: ops/attention_scores.hpp).
//
// Legend: N batch, T queries, S keys, Dq query size, Dk key size, Dv value size, NH heads, HS head size.
//
// Scaled dot-product scores e[t, s] = scale q_t . k_s; weights a[t, :] = softmax(e[t, :]) over the
// visible keys; context c_t = sum_s a[t, s] v_s.
//
// Masks (MaskSpec): a key is visible to a query when every given mask allows it.
//   causal upper-left  (PyTorch is_causal):   s <= t
//   causal lower-right (T != S, decoding):    s <= t + (S - T)   (the last query sees every key)
//   key lengths        per batch element n:   s < len[n]
//   explicit mask      1 (true) = ATTEND, 0 (false) = masked    (F.scaled_dot_product_attention's
//                      boolean polarity; nn.MultiheadAttention's attn_mask/key_padding_mask are
//                      the opposite: invert them, `mask = ~torch_mask`)
// A query whose keys are all masked gets zero weights and a zero context (never NaN); its
// masked scores are -inf.
//
// Two fast kernels and a naive reference, all on the same strided problem description:
//   sdpa_tiled         flash-attention style: query tiles x key tiles, online softmax;
//                      memory O(tile), never a T x S matrix (used whenever weights are not asked for)
//   sdpa_full          scores and weights [T, S] per head, GEMM + softmax + GEMM
//   sdpa_naive         plain loops in double precision (tests compare the others to it)
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/tensor/tensor.hpp"

namespace attnkit::ops {

enum class CausalKind { None, UpperLeft, LowerRight };

struct MaskSpec {
  CausalKind causal = CausalKind::None;
  // Valid keys per batch element: keys [0, len[n]) are visible. Empty: every key.
  std::vector<int64_t> key_lengths;
  // 1 = attend, 0 = masked. Shape [T, S] (every batch element and head), [N, T, S] (every head),
  // or [N, NH, T, S]. Empty: none.
  Tensor mask;
  bool any() const { return causal != CausalKind::None || !key_lengths.empty() || !mask.empty(); }
};

// Largest scores/weights tensor the kernels will materialise (2^30 floats = 4 GiB).
constexpr int64_t kMaxWeightElements = int64_t{1} << 30;

// What the caller wants back besides the context.
enum class KeepWeights { No, Yes };

// The sizes every attention entry shares, checked in one place: query [T, F] or [N, T, F]; keys and
// values of the same rank, the same N, and S rows each. `feature` names F in messages ("Dq", "E");
// `keys` / `values` name those inputs ("keys" or "key").
struct QkvDims {
  bool batched = false;
  int64_t N = 1, T = 0, S = 0;
};
QkvDims check_qkv(const Tensor& q, const Tensor& k, const Tensor& v, std::string_view op, std::string_view feature,
                  std::string_view keys = "keys", std::string_view values = "values");

// Validates `mask` against the problem sizes; `op` and the names in messages: "attention: mask
// has shape [3, 5], expected [T, S] = [3, 4], [N, T, S] = [2, 3, 4] or [N, NH, T, S] = ...".
void check_mask(const MaskSpec& mask, int64_t N, int64_t NH, int64_t T, int64_t S, std::string_view op);

// ---- the strided core, shared with ops/mha.hpp (multi-head attention reads heads in place) ----
// Element (n, h, i, j) of a matrix operand sits at data[n*batch + h*head + i*row + j].
struct StridedIn {
  const float* data = nullptr;
  int64_t batch = 0, head = 0, row = 0;
};
struct StridedOut {
  float* data = nullptr;
  int64_t batch = 0, head = 0, row = 0;
};
struct SdpaProblem {
  int64_t N = 1, NH = 1, T = 0, S = 0, Dk = 0, Dv = 0;
  float scale = 1.0f;
  StridedIn q, k, v;  // [N, NH, T, Dk], [N, NH, S, Dk], [N, NH, S, Dv]
  StridedOut out;     // [N, NH, T, Dv]
  const MaskSpec* mask = nullptr;  // checked with check_mask beforehand
};

// Scaled dot-product attention, three implementations of one contract. scores / weights are
// contiguous [N, NH, T, S] (sdpa_full: weights required, scores may be null); row_lse [N, NH, T]
// may be null.
void sdpa_tiled(const SdpaProblem& p, float* row_lse);
void sdpa_full(const SdpaProblem& p, float* scores, float* weights, float* row_lse);
void sdpa_naive(const SdpaProblem& p, float* scores, float* weights, float* row_lse);

// ---- backward (ops/attention_tiled.cpp beside the tiled forward; the reference in ops/attention_reference.cpp) ----
// Gradients of the strided core, added (+=) into dq, dk, dv (same strides as q, k, v; a null data
// pointer skips one). dout [N, NH, T, Dv] is the upstream gradient of p.out; p.out must hold the
// forward's output and row_lse its log-sum-exp [N, NH, T] (from any of the three forwards).
//   D_t = dout_t . out_t;  P = exp(e - lse);  dV += P^T dout;  dP = dout V^T;  dE = P (dP - D);
//   dQ += scale dE K;  dK += scale dE^T Q
// Masked keys get P = 0 and a fully masked query (lse = -inf) contributes nothing: zero
// gradients, never NaN.
struct SdpaGrads {
  StridedOut dq, dk, dv;
};
// FlashAttention-2 style: tasks (batch, head, key tile) own their dK / dV rows; P is recomputed
// per [query tile, key tile] from row_lse; dQ goes through per-thread partial buffers allocated
// before the team. Memory beyond inputs and grads: two tiles per thread, [N, NH, T] for D and,
// with more than one thread, (threads - 1) x [N, NH, T, Dk] partial dQ; never a T x S matrix.
// Key tiles no query can see (causal, key lengths) are skipped. Threads: num_threads().
// Probabilities a forward keeps for its backward, [N, NH, T, S] with row stride ld >= S, so that the
// backward reads them instead of recomputing Q K^T and its exponentials.
// Without tile_max they are P itself (FullWorker's weights; row_lse is then not read). With it they
// are the tiled forward's exp(E - m_j), m_j the shift of key tile j (tiles of key_width keys: the row's
// max over tiles 0 .. j, or over fewer while the sums stay below 2^100), tile_max [N, NH, T,
// ceil(S / key_width)] those shifts: P = probs exp(m_j - lse).
// Tiles the forward skipped (past every row's causal / key-length limit) are never read.
struct KeptProbs {
  const float* probs = nullptr;
  int64_t ld = 0;
  const float* tile_max = nullptr;
  int64_t key_width = 0;
};
void sdpa_backward_tiled(const SdpaProblem& p, const float* row_lse, StridedIn dout, const SdpaGrads& grads,
                         const KeptProbs& kept = {});
// Plain loops in double precision (the reference the tests compare against). It recomputes the
// softmax and the output from q, k, v itself: row_lse and p.out are not read (row_lse may be null).
void sdpa_backward_naive(const SdpaProblem& p, const float* row_lse, StridedIn dout, const SdpaGrads& grads);

// sdpa_tiled as independent tasks (batch element x head x query tile), for callers that run it
// inside their own thread team (ops/mha.cpp: projections and attention in one team, no
// OpenMP barrier between them): make one TiledWorker per thread before the team starts (it holds
// the thread's tiles; `p` must outlive it), then let each thread run() the tasks it takes.
// run() allocates nothing.
//
// With several query tiles per head, each head's K^T and its V tiles are packed once into the GEMM
// kernel's panels (TiledKvPanels: its pack(task) for every task in [0, tasks()) as a stage of its own,
// after K and V are written and before the workers run, or pack_keys on each block as it is written)
// instead of once per query tile, and each worker packs its query
// tile once instead of once per key tile. The same sums as ops::gemm's register blocks.
// The row stride, from `floats` on, at which the tiled kernel's P V reads V as it lies instead of packing it:
// an odd number of cache lines (16 floats), whose rows spread over every cache set. floats itself unless it is an
// even number of whole lines (then one line more). The fused self-attention lays out its Q | K | V rows so.
int64_t values_row_stride(int64_t floats);

class TiledKvPanels {
 public:
  explicit TiledKvPanels(const SdpaProblem& p);  // allocates; no tasks where panels do not apply
  int64_t tasks() const { return buf_ ? p_.N * p_.NH : 0; }
  void pack(int64_t task);  // head task = n * NH + h
  // Keys [s_begin, s_end) of batch element n, every head: K^T's columns (with `keys`) and V's rows (with
  // `values`), for a caller that packs each block of keys right after projecting it (while it is in cache)
  // instead of running pack() as a stage. Calls on disjoint ranges may run at once; together they must cover
  // [0, S) of every n exactly once (a K^T panel two calls share is packed by the one that completes it).
  void pack_keys(int64_t n, int64_t s_begin, int64_t s_end, bool keys, bool values);
  const float* head(int64_t task) const { return buf_.get() + task * per_head_; }  // K^T [Dk, S]
  bool has_values() const { return dv_ > 0; }
  // V's rows [s0, s0 + key tile) of head `task` as op(B) [bc, Dv] panels (s0 a multiple of the key tile)
  const float* values(int64_t task, int64_t s0) const { return buf_.get() + task * per_head_ + k_size_ + s0 * dv_; }

 private:
  void pack_head(int64_t n, int64_t h, int64_t s_begin, int64_t s_end, bool keys, bool values);
  void pack_key_panel(int64_t n, int64_t h, int64_t q0);
  const SdpaProblem& p_;
  int64_t per_head_ = 0, k_size_ = 0, dv_ = 0;  // dv_: Dv rounded up to whole panels
  std::shared_ptr<float> buf_;  // [N * NH][panels of K^T | per key tile, panels of V_j], null when panels do not apply
  // [N][panels of K^T]: keys of a panel projected so far (pack_keys): the call that completes it packs it
  std::unique_ptr<std::atomic<int32_t>[]> keys_in_panel_;
};

// With kept_probs ([N, NH, T, kept_ld]) and kept_tile_max ([N, NH, T, key_tiles(p)]) each worker also
// writes the tiles of exp(E - m_j) and their row maxes m_j for the backward (KeptProbs with
// key_width(p)): it computes each tile where it is kept (Q K^T stored there, softmaxed in place, read
// there by P V), not in its own tile and then copied. kept_stride(p) is a row stride for them that
// keeps rows off multiples of 2 KB (L1 set conflicts in the products' register blocks).
class TiledWorker {
 public:
  explicit TiledWorker(const SdpaProblem& p, const TiledKvPanels* keys = nullptr, float* kept_probs = nullptr,
                       int64_t kept_ld = 0, float* kept_tile_max = nullptr);
  TiledWorker(TiledWorker&&) noexcept;
  ~TiledWorker();
  static int64_t tasks(const SdpaProblem& p);
  static int64_t key_width(const SdpaProblem& p);  // keys per tile
  static int64_t key_tiles(const SdpaProblem& p);  // tiles per row: ceil(S / key_width)
  static int64_t kept_stride(const SdpaProblem& p);  // S and a pad: rows off multiples of 2 KB
  void run(int64_t task, float* row_lse);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// sdpa_full as independent tasks (batch element x head x block of query rows), like TiledWorker:
// writes the weights (probabilities) [N, NH, T, S] with row stride ld >= S (the columns past S are
// not touched; a padded stride keeps a column walk of a block out of a few L1 sets), the output
// and row_lse (may be null); with `scores`, also the masked scores, contiguous [N, NH, T, S].
// One thread's worker per thread, made before the team; run() allocates nothing.
class FullWorker {
 public:
  FullWorker(const SdpaProblem& p, float* weights, int64_t ld, float* scores = nullptr);
  static int64_t tasks(const SdpaProblem& p);
  static int64_t block_rows(const SdpaProblem& p);
  void run(int64_t task, float* row_lse);

 private:
  SdpaProblem p_;
  float *weights_, *scores_;
  int64_t ld_, Br_;
  std::vector<float> stats_;  // [2, Br] row max, row sum
};

// sdpa_backward_tiled as three stages of tasks, for callers that run them inside their own thread
// team (ops/mha.cpp: the projections' backward and the attention's in one team): construct it
// before the team for `team` threads (it allocates D, the tiles and the partial dQ), then stage 1:
// run_rows (D_t = dout_t . out_t), stage 2: run_tile(thread, task) (thread < team: its own tiles and
// partial dQ), stage 3: run_reduce (the partials into grads.dq), each stage complete before the next.
// Nothing in the stages allocates. team_for_problem: the team sdpa_backward_tiled itself would use.
class TiledBackward {
 public:
  TiledBackward(const SdpaProblem& p, const float* row_lse, StridedIn dout, const SdpaGrads& grads, int team,
                const KeptProbs& kept = {});
  ~TiledBackward();
  static int team_for_problem(const SdpaProblem& p);
  int64_t row_tasks() const;
  void run_rows(int64_t task);
  int64_t tile_tasks() const;
  void run_tile(int thread, int64_t task);
  int64_t reduce_tasks() const;
  void run_reduce(int64_t task);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Tile sizes of sdpa_tiled (tests shrink them to exercise ragged tiles). Key 0: 512 where the GEMM
// kernel multiplies 512 deep in one block (AVX-512: P V of a key tile is one K block), else 256.
struct TileSizes {
  int64_t query = 256;
  int64_t key = 0;
};
void set_tile_sizes(TileSizes sizes);
TileSizes tile_sizes();

}  // namespace attnkit::ops
