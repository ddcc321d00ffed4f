// Multi-head attention and split-heads attention kernels: forward, backward, and the pieces they are made of.
//
// Legend: N batch, T queries, S keys, E model size (query/key projection size), Ev value projection
// size, Eo output size, NH heads, HS = E / NH head size, Dq/Dk/Dv input sizes of query, key, value.
// Inputs are batch-first: [N, T, Dq] or unbatched [T, Dq] (nn.MultiheadAttention(..., batch_first=True)).
//
//   Q = q Wq^T + bq [N, T, E]   K = k Wk^T + bk [N, S, E]   V = v Wv^T + bv [N, S, Ev]    (project)
//   head h: O_h = softmax(Q_h K_h^T / sqrt(HS) + mask) V_h   (Q_h = columns h*HS .. (h+1)*HS)
//   context = concat_h(O_h) [N, T, Ev]                                                   (heads_attention)
//   output = context Wo^T + bo [N, T, Eo]                                                (project)
//
// The kernels read the weights through a plain view (MhaWeights: the four projections read in place,
// the head count, the packed weights, where the parameter gradients go); the module that owns them
// (parameters, loading, checks) lives a floor up, in nn/attention.hpp, and builds the view.
//
// The split-heads variant (the second document's "multi-head by splitting") has no weights:
// Q, K, V are the inputs themselves, cut into NH equal column blocks; the output is the
// concatenation of the heads' contexts (heads_attention on the inputs).
//
// Two forward paths, one result: multihead_attention_forward runs the projections, the tiled
// attention and the output projection as stages of one thread team (fastest: see
// docs/benchmarks.md); multihead_attention_forward_ops runs them op by op from the public pieces
// (project, heads_attention_forward). Without weights requested the tiled kernel runs: no
// NH x T x S matrix is ever held, in the forward or (sdpa_backward_tiled) in the backward, except
// in training when the probabilities fit MhaOptions::saved_probs_budget (kept from the forward for
// the backward, as PyTorch keeps its softmax's output: T = 4096 with 8 heads, 516 MiB; T = 8192 and
// longer stay O(T)).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "attnkit/ops/attention.hpp"
#include "attnkit/ops/lowp_weights.hpp"
#include "attnkit/ops/matmul.hpp"
#include "attnkit/tensor/tensor.hpp"

namespace attnkit::ops {

// One projection read in place from a weight: y = x W^T + b (W [out, in], PyTorch) or
// y = x W (W [in, out], the documents' form). b may be null.
// With `lowp` (inference only) the product reads W in int8 or bfloat16 instead (ops/lowp_weights.hpp: the copy
// [out, in] of this projection's own rows, whatever W's layout), the bias still float32; a forward that keeps
// a cache for a backward pass, and the backward, refuse it.
struct Projection {
  const float* W = nullptr;
  int64_t out = 0, in = 0;
  bool in_out = false;  // W stored [in, out]
  const float* b = nullptr;
  std::shared_ptr<const LowpWeights> lowp;
  bool empty() const { return W == nullptr; }
};

// The projections' weights packed for the product kernel (ops::GemmPackedB): the forward's projections
// then pack no weight, as ONNX Runtime packs a MatMul's constant weight once at load.
struct MhaPackedWeights {
  GemmPackedB qkv;      // the joined Q | K | V projection (self-attention with in_proj_weight), or empty
  GemmPackedB q, k, v;  // apart (empty when qkv holds them)
  GemmPackedB out;      // empty without an output projection
  const GemmPackedB* of(const GemmPackedB& b) const { return b.cols() > 0 && b.rows() > 0 ? &b : nullptr; }
};
// self_attention: Q | K | V as one product when the weights are one matrix (joined_projection).
MhaPackedWeights pack_mha_weights(const Projection& q, const Projection& k, const Projection& v, const Projection& out,
                                  bool self_attention);
// The Q, K and V projections as one when their weights are consecutive rows of one [out, in] matrix
// and their biases consecutive too (PyTorch's in_proj_weight [3E, E] and in_proj_bias): one product
// [rows, 3E] instead of three, so each block of x is packed once for all three. Not with lower-precision
// weights (each projection holds the copy of its own rows).
std::optional<Projection> joined_projection(const Projection& q, const Projection& k, const Projection& v);

// The parameter gradients of the projections (null skips one): weights in the projections' own layouts.
struct MhaParamGrads {
  float *Wq = nullptr, *Wk = nullptr, *Wv = nullptr, *bq = nullptr, *bk = nullptr, *bv = nullptr;
  float *Wo = nullptr, *bo = nullptr;
};
// Where those gradients lie among the gradient tensors of the owner's parameters (in the owner's order):
// for each, the tensor's index (-1: none) and the offset in it (in_proj_weight's gradient holds Wq, Wk, Wv).
struct MhaGradSlots {
  struct Slot {
    int index = -1;
    int64_t offset = 0;
  };
  Slot Wq, Wk, Wv, bq, bk, bv, Wo, bo;
  // The pointers into `grads` (one per parameter; a null tensor skips its slots).
  MhaParamGrads in(const std::vector<Tensor*>& grads) const;
};

// What the kernels read of a multi-head attention's weights. The pointers stay the owner's: it must
// outlive every forward and backward given the view, and not change the weights in between.
struct MhaWeights {
  Projection q, k, v, out;  // out empty: no output projection
  int64_t num_heads = 1;
  // The packed weights, asked for only by a forward without a cache whose products are big enough for
  // them (the owner keeps them, rebuilt after a weight changes); null: each product packs its own block.
  // Never asked for when a projection has lower-precision weights.
  std::function<std::shared_ptr<const MhaPackedWeights>(bool self_attention)> packed;
  MhaGradSlots grads;  // where the parameter gradients go (autograd)
  int64_t embed_dim() const { return q.out; }  // E
  int64_t value_dim() const { return v.out; }  // Ev
  int64_t output_dim() const { return out.empty() ? value_dim() : out.out; }  // Eo
  bool lowp() const { return q.lowp || k.lowp || v.lowp || out.lowp; }  // any projection in lower precision
};

enum class HeadWeights { None, Averaged, PerHead };

struct MhaOptions {
  HeadWeights weights = HeadWeights::None;
  // Causal kinds, key lengths (key padding, per batch element) and an explicit mask
  // (1 = attend; [T, S], [N, T, S] or [N, NH, T, S]); see ops/attention.hpp.
  MaskSpec mask;
  // Training (a forward given a cache, no weights asked for): when the heads' probabilities
  // [N, NH, T, S] (with their tile maxes, see MhaCache) fit in this many bytes, the forward keeps them
  // and the backward reads them instead of recomputing Q K^T and the exps (a seventh of the
  // attention's products); above it the backward recomputes them (FlashAttention-2 style, from
  // row_lse) and memory stays O(T). 0: never keep them. The default keeps T = S = 4096 with 8 heads
  // (516 MiB; PyTorch keeps as much at any T) and gives up at N = 2 or T = 8192 (O(T) from there).
  int64_t saved_probs_budget = int64_t{1} << 30;
};

struct MhaResult {
  Tensor output;   // [.., T, Eo]
  Tensor weights;  // [.., T, S] averaged over heads, or [.., NH, T, S] per head; empty if not asked
};

// What a backward pass needs from its forward (filled when a forward is given one).
struct MhaCache {
  // Projected Q [N, T, E], K [N, S, E], V [N, S, Ev]. Self-attention (one input tensor): Q holds
  // [N, T, 2E + Ev], Q | K | V side by side, and K, V are empty.
  Tensor Q, K, V;
  Tensor context;  // [N, T, Ev] heads concatenated, before the output projection
  Tensor row_lse;  // [N, NH, T] log-sum-exp of each query's scores (ops::sdpa_*)
  // The heads' probabilities [N, NH, T, S] with row stride probs_ld >= S when they fit the options'
  // saved_probs_budget, else null: the tiled forward's tiles exp(E - m_j), with their row maxes
  // (probs_tile_max, in the same buffer) in key tiles of probs_key_width (ops::KeptProbs).
  std::shared_ptr<const float> probs;
  int64_t probs_ld = 0;
  const float* probs_tile_max = nullptr;
  int64_t probs_key_width = 0;
  KeptProbs kept_probs() const { return {probs.get(), probs_ld, probs_tile_max, probs_key_width}; }
};

// query [T, Dq] / [N, T, Dq]; key [S, Dk] / [N, S, Dk]; value [S, Dv] / [N, S, Dv].
// With `cache`, keeps what multihead_attention_backward needs.
MhaResult multihead_attention_forward(const MhaWeights& w, const Tensor& query, const Tensor& key, const Tensor& value,
                                      const MhaOptions& options, MhaCache* cache = nullptr);
// The same, op by op from the public pieces below (tests compare it with the fused path).
MhaResult multihead_attention_forward_ops(const MhaWeights& w, const Tensor& query, const Tensor& key,
                                          const Tensor& value, const MhaOptions& options);
// The same, every head through ops::sdpa_naive (double precision attention).
MhaResult multihead_attention_forward_naive(const MhaWeights& w, const Tensor& query, const Tensor& key,
                                            const Tensor& value, const MhaOptions& options);
// Cross-attention over keys and values already projected (a decoder's cache): K [.., S, E],
// V [.., S, Ev] as the key/value projections made them; the query is projected here. With
// kv_rows >= 0 only the first kv_rows of the S rows of each batch element are keys (a growing cache
// kept in a buffer with spare rows, so appending a step does not copy the history).
MhaResult multihead_attention_forward_projected(const MhaWeights& w, const Tensor& query, const Tensor& K,
                                                const Tensor& V, const MhaOptions& options, int64_t kv_rows = -1);

// ---- the pieces ----
// y [.., out] = x [.., in] W^T + b (or x W), through ops::gemm. `what` names the projection in messages.
Tensor project(const Projection& p, const Tensor& x, std::string_view what);
// Scaled dot-product attention of NH heads read in place from Q [.., T, E], K [.., S, E],
// V [.., S, Ev] (head h = columns h*HS ..): output = the heads' contexts concatenated [.., T, Ev].
// row_lse (may be null) receives the [N, NH, T] log-sum-exp a backward pass needs.
MhaResult heads_attention_forward(const Tensor& Q, const Tensor& K, const Tensor& V, int64_t num_heads,
                                  const MhaOptions& options, Tensor* row_lse = nullptr, std::string_view op = "attention heads",
                                  int64_t kv_rows = -1);

// No projections: heads are NH equal column blocks of query/key/value (scale 1/sqrt(Dk / NH)).
// With `cache`, keeps the output (as context) and row_lse for split_heads_attention_backward.
MhaResult split_heads_attention_forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                        int64_t num_heads, const MhaOptions& options, MhaCache* cache = nullptr);

// ---- backward ----
// Gradients of multihead_attention_forward for the upstream gradient doutput (shaped like the
// output), through ops::TiledBackward (O(T) memory: no T x S matrix, unless the forward kept the
// probabilities within MhaOptions::saved_probs_budget), all in one thread team. `cache` is what the
// forward with the same weights, inputs and options filled. Adds (+=) into dquery, dkey, dvalue
// (shaped like the inputs; null skips one; they may be one tensor for self-attention) and into
// the parameter gradients `grads`. The returned weights get no gradient.
void multihead_attention_backward(const MhaWeights& w, const Tensor& query, const Tensor& key, const Tensor& value,
                                  const MhaOptions& options, const MhaCache& cache, const Tensor& doutput,
                                  Tensor* dquery, Tensor* dkey, Tensor* dvalue, const MhaParamGrads& grads);
// Gradients of split_heads_attention_forward (cache from it), added into dquery, dkey, dvalue.
void split_heads_attention_backward(const Tensor& query, const Tensor& key, const Tensor& value, int64_t num_heads,
                                    const MhaOptions& options, const MhaCache& cache, const Tensor& doutput,
                                    Tensor* dquery, Tensor* dkey, Tensor* dvalue);

}  // namespace attnkit::ops
