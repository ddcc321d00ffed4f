// The Transformer's incremental decoding (models/decoding.hpp).
// Legend: R rows, S source length, E d_model, NH heads, L decoder layers, t tokens fed so far, T' rows fed this step
// (1 with the cache, t without).
//
//   start:    memory = encode(sources) [R, S, E]; with the cache, per layer l: Kc_l = memory Wk^T + bk,
//             Vc_l = memory Wv^T + bv [R, S, E] (multihead_attn's key / value projections, once per source)
//   step:     x = embed_target(tokens, offset) [R, T', E]        (cache: the last token at position t - 1;
//                                                                none: the whole prefix from position 0)
//             per layer (post-LN shown; pre-LN normalises each block's input instead, as the layer does):
//               h = x;  Ks_l |= h Wk^T + bk, Vs_l |= h Wv^T + bv    [R, t, E]   (cache: one row appended
//                                                into spare capacity; none: the prefix's rows)
//               x = norm1(x + self_attn_projected(h, Ks_l, Vs_l, causal lower-right))
//               x = norm2(x + multihead_attn_projected(x, Kc_l, Vc_l, source key lengths))   (weights kept)
//               x = feed_forward(x)                             (norm3(x + ff(x)))
//             logits = output(decoder.norm(x[:, T'-1])) [R, 1, Vt] -> log_softmax [R, Vt]
//   select:   every cached tensor gathered along its row dimension (models::gather_rows).
#include <algorithm>
#include <utility>

#include "attnkit/autograd/functional.hpp"
#include "attnkit/models/transformer.hpp"
#include "attnkit/ops/softmax.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::models {

using autograd::Var;

namespace {

// Writes more [R, b, E] after the first `rows` rows of each batch element of cache [R, cap, E]; a full
// cache doubles its capacity (copying the history once per doubling, not once per step).
void append_rows(Tensor& cache, int64_t rows, const Tensor& more) {
  const int64_t R = more.dim(0), b = more.dim(1), E = more.dim(2);
  const int64_t cap = cache.empty() ? 0 : cache.dim(1);
  if (rows + b > cap) {
    const int64_t grown = std::max<int64_t>(rows + b, std::max<int64_t>(16, 2 * cap));
    Tensor bigger({R, grown, E});  // [R, grown, E]
    for (int64_t r = 0; r < R && rows > 0; ++r)
      std::copy_n(cache.data() + r * cap * E, rows * E, bigger.data() + r * grown * E);
    cache = std::move(bigger);
  }
  const int64_t c = cache.dim(1);
  for (int64_t r = 0; r < R; ++r) std::copy_n(more.data() + r * b * E, b * E, cache.data() + (r * c + rows) * E);
}

}  // namespace

class TransformerDecoderState : public DecoderState {
 public:
  TransformerDecoderState(Transformer& model, const SourceBatch& sources, bool use_cache)
      : model_(model), use_cache_(use_cache) {
    check_decoding_sources(sources, "transformer decoding");
    autograd::NoGrad no_grad;
    memory_ = model_.encode(sources).value();  // [R, S, E]
    src_lengths_ = sources.src_lengths;
    rows_ = sources.N;
    const size_t L = model_.decoder_.layers.size();
    layers_.resize(L);
    if (use_cache_)
      for (size_t l = 0; l < L; ++l) project_memory(l);
    history_.assign(size_t(rows_), {});
  }

  int64_t rows() const override { return rows_; }

  Tensor step(const std::vector<int64_t>& prev) override {
    const int64_t V = model_.config_.tgt_vocab;
    check_previous_tokens(prev, rows_, V, "transformer decoding");
    autograd::NoGrad no_grad;
    for (int64_t i = 0; i < rows_; ++i) history_[size_t(i)].push_back(prev[size_t(i)]);
    const int64_t t = static_cast<int64_t>(history_[0].size());
    Var x;  // [R, T', E]
    if (use_cache_) {
      x = model_.embed_target(prev, rows_, 1, t - 1);  // [R, 1, E] at position t - 1
    } else {
      std::vector<int64_t> ids;
      ids.reserve(size_t(rows_ * t));
      for (const auto& h : history_) ids.insert(ids.end(), h.begin(), h.end());  // [R, t]
      x = model_.embed_target(ids, rows_, t, 0);                                  // [R, t, E]
      for (size_t l = 0; l < layers_.size(); ++l) {
        layers_[l].Ks = layers_[l].Vs = Tensor();  // recomputed from the prefix
        layers_[l].rows = 0;
        project_memory(l);                         // and the memory projected again
      }
    }
    const int64_t Tq = x.shape()[1];
    for (size_t l = 0; l < layers_.size(); ++l) x = run_layer(l, x);  // [R, T', E]
    Var h = model_.decoder_.norm.forward(autograd::slice(x, 1, Tq - 1, Tq));  // [R, 1, E]
    const Var logits = model_.project(h);                                     // [R, 1, Vt]
    return ops::log_softmax_forward(logits.value().reshaped({rows_, V}));     // [R, Vt]
  }

  void select_rows(const std::vector<int64_t>& rows) override {
    src_lengths_ = select_list(src_lengths_, rows, "transformer decoding");  // checks every row first
    auto gather = [&](Tensor& x) {
      if (!x.empty()) x = gather_rows(x, 0, rows);
    };
    gather(memory_);  // [R', S, E]
    for (Layer& c : layers_) {
      gather(c.Kc), gather(c.Vc), gather(c.Ks), gather(c.Vs);  // [R', S or t, E]
      gather(c.weights);                                       // [R', NH, 1, S]
    }
    history_ = select_list(history_, rows, "transformer decoding");
    rows_ = static_cast<int64_t>(rows.size());
  }

  Tensor cross_attention(int layer, int head) const override {
    const int L = static_cast<int>(layers_.size());
    const int64_t NH = model_.config_.heads;
    AK_CHECK(layer >= -1 && layer < L, "transformer decoding: attention layer {}: the decoder has {} layers (0 .. {})",
             layer, L, L - 1);
    AK_CHECK(head >= -1 && head < NH, "transformer decoding: attention head {}: the layers have {} heads (0 .. {})", head,
             NH, NH - 1);
    const Tensor& w = layers_[size_t(layer < 0 ? L - 1 : layer)].weights;  // [R, NH, 1, S]
    AK_CHECK(!w.empty() || rows_ == 0, "transformer decoding: cross_attention before the first step");
    const int64_t S = memory_.dim(1);
    Tensor out({rows_, S});  // [R, S]
    for (int64_t r = 0; r < rows_; ++r)
      for (int64_t h = 0; h < NH; ++h) {
        if (head >= 0 && h != head) continue;
        const float scale = head >= 0 ? 1.0f : 1.0f / float(NH);
        for (int64_t s = 0; s < S; ++s) out[r * S + s] += scale * w[(r * NH + h) * S + s];
      }
    return out;
  }

 private:
  struct Layer {
    Tensor Kc, Vc;   // [R, S, E] the memory's keys and values for the cross-attention
    Tensor Ks, Vs;   // [R, cap, E] the self-attention's keys and values so far: the first `rows` rows
    int64_t rows = 0;  // t
    Tensor weights;  // [R, NH, 1, S] the last step's cross-attention weights (the last query's)
  };

  void project_memory(size_t l) {
    const nn::MultiheadAttention& m = model_.decoder_.layers[l]->multihead_attn;
    layers_[l].Kc = ops::project(m.k_projection(), memory_, "key projection");    // [R, S, E]
    layers_[l].Vc = ops::project(m.v_projection(), memory_, "value projection");  // [R, S, E]
  }

  Var attend_self(size_t l, const Var& h) {
    nn::TransformerDecoderLayer& layer = *model_.decoder_.layers[l];
    Layer& c = layers_[l];
    append_rows(c.Ks, c.rows, ops::project(layer.self_attn.k_projection(), h.value(), "key projection"));  // [R, t, E]
    append_rows(c.Vs, c.rows, ops::project(layer.self_attn.v_projection(), h.value(), "value projection"));
    c.rows += h.shape()[1];
    ops::MhaOptions o;
    o.mask.causal = ops::CausalKind::LowerRight;  // query i of T' sees keys up to t - T' + i
    return Var(nn::multihead_attention_forward_projected(layer.self_attn, h.value(), c.Ks, c.Vs, o, c.rows).output);
  }

  Var attend_memory(size_t l, const Var& h) {
    nn::TransformerDecoderLayer& layer = *model_.decoder_.layers[l];
    Layer& c = layers_[l];
    ops::MhaOptions o;
    o.mask.key_lengths = src_lengths_;
    o.weights = ops::HeadWeights::PerHead;
    ops::MhaResult r = nn::multihead_attention_forward_projected(layer.multihead_attn, h.value(), c.Kc, c.Vc, o);
    const int64_t Tq = h.shape()[1], NH = model_.config_.heads, S = c.Kc.dim(1);
    c.weights = Tensor({rows_, NH, 1, S});  // the last query's weights [R, NH, 1, S]
    for (int64_t rh = 0; rh < rows_ * NH; ++rh)
      std::copy_n(r.weights.data() + (rh * Tq + Tq - 1) * S, S, c.weights.data() + rh * S);
    return Var(std::move(r.output));  // [R, T', E]
  }

  // One decoder layer on x [R, T', E], as nn::TransformerDecoderLayer::forward (dropout off).
  Var run_layer(size_t l, const Var& x) {
    nn::TransformerDecoderLayer& layer = *model_.decoder_.layers[l];
    if (layer.options.norm_first) {
      Var y = autograd::add(x, attend_self(l, layer.norm1.forward(x)));  // x + sa(norm1(x))
      y = autograd::add(y, attend_memory(l, layer.norm2.forward(y)));    // y + mha(norm2(y), memory)
      return layer.feed_forward(y);                                      // y + ff(norm3(y))
    }
    Var y = layer.norm1.forward(autograd::add(x, attend_self(l, x)));    // norm1(x + sa(x))
    y = layer.norm2.forward(autograd::add(y, attend_memory(l, y)));      // norm2(y + mha(y, memory))
    return layer.feed_forward(y);                                        // norm3(y + ff(y))
  }

  Transformer& model_;
  bool use_cache_;
  Tensor memory_;                              // [R, S, E]
  std::vector<Layer> layers_;
  std::vector<int64_t> src_lengths_;           // [R]
  std::vector<std::vector<int64_t>> history_;  // the tokens fed so far, per row
  int64_t rows_ = 0;
};

std::unique_ptr<DecoderState> Transformer::start_decoding(const SourceBatch& sources, bool use_cache) {
  return std::make_unique<TransformerDecoderState>(*this, sources, use_cache);
}

}  // namespace attnkit::models
