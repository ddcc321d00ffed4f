// The Transformer language model's incremental decoding (models/decoding.hpp).
// Legend: R rows, S prompt length, E d_model, L layers, t tokens so far (prompt and generated), T' rows fed
// (S at the start, then 1 with the cache; t without).
//
//   start:  x = embed(prompts, 0) [R, S, E]; per layer (pre-LN shown; post-LN normalises after each residual,
//           as nn::TransformerEncoderLayer does):
//             h = norm1(x);  K_l |= h Wk^T + bk,  V_l |= h Wv^T + bv      [R, t, E] (rows appended)
//             x = x + self_attn_projected(h, K_l, V_l, causal lower-right)
//             x = x + ff(norm2(x))
//           lp = log_softmax(output(decoder.norm(x[:, T'-1])))             [R, V], kept for the first step
//   step:   the first returns lp (its tokens stand for the prompt); later ones feed the previous token at
//           position t - 1, [R, 1, E], through the same layers. Without the cache every step runs the whole
//           sequence through the model's own forward (causal upper-left) and takes the last row.
//   past the context (learned positions, t > P): each prediction reads the last P tokens at positions 0 .. P-1,
//           as nanoGPT's generate crops its input; the positions of the window move at every token, so nothing
//           cached still holds and the window runs whole through the forward (with or without the cache).
//   select: the cached keys and values gathered along their row dimension (models::gather_rows).
//   attention (keep_attention()): each layer's self-attention weights of the newest query over the tokens so
//           far, [R, NH, t] (the window's, placed at its positions); a window run without the cache goes
//           through the same layers on a fresh cache so that its weights exist.
#include <algorithm>
#include <utility>

#include "attnkit/autograd/functional.hpp"
#include "attnkit/autograd/layers.hpp"
#include "attnkit/models/transformer_lm.hpp"
#include "attnkit/ops/softmax.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::models {

using autograd::Var;

namespace {

// Writes more [R, b, E] after the first `rows` rows of each batch element of cache [R, cap, E]; a full cache
// doubles its capacity (the history copied once per doubling, not once per step).
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

constexpr const char* kWho = "transformer-lm decoding";

}  // namespace

class TransformerLMState : public DecoderState {
 public:
  TransformerLMState(TransformerLM& model, const SourceBatch& prompts, bool use_cache)
      : model_(model), use_cache_(use_cache) {
    check_decoding_sources(prompts, kWho);
    for (int64_t n = 0; n < prompts.N; ++n)
      AK_CHECK(prompts.src_lengths[size_t(n)] == prompts.S,
               "{}: prompt {} has {} tokens and prompt 1 {}: the prompts decoded together must have one length",
               kWho, n + 1, prompts.src_lengths[size_t(n)], prompts.src_lengths[0]);
    rows_ = prompts.N;
    history_.resize(size_t(rows_));
    for (int64_t n = 0; n < rows_; ++n)
      history_[size_t(n)].assign(prompts.src.begin() + n * prompts.S, prompts.src.begin() + (n + 1) * prompts.S);
    layers_.resize(model_.decoder_.layers.size());
    weights_.resize(layers_.size());
    first_ = run(prompts.src, prompts.S);
  }

  void keep_attention() override {
    if (keep_) return;
    keep_ = true;
    AK_CHECK(!first_.empty(), "{}: keep_attention after the first step", kWho);
    for (Layer& c : layers_) c = Layer();
    std::vector<int64_t> prompts;  // [R, S]: the rows as selected so far
    for (const auto& h : history_) prompts.insert(prompts.end(), h.begin(), h.end());
    first_ = run(prompts, static_cast<int64_t>(history_[0].size()));  // the prompts again, their weights kept
  }

  int64_t rows() const override { return rows_; }

  Tensor step(const std::vector<int64_t>& prev) override {
    check_previous_tokens(prev, rows_, model_.config_.vocab, kWho);
    if (!first_.empty()) return std::exchange(first_, Tensor());  // the prediction after the prompt
    for (int64_t r = 0; r < rows_; ++r) history_[size_t(r)].push_back(prev[size_t(r)]);
    return run(prev, 1);
  }

  void select_rows(const std::vector<int64_t>& rows) override {
    history_ = select_list(history_, rows, kWho);  // checks every row first
    for (Layer& c : layers_)
      for (Tensor* x : {&c.K, &c.V})
        if (!x->empty()) *x = gather_rows(*x, 0, rows);
    for (Tensor& w : weights_)
      if (!w.empty()) w = gather_rows(w, 0, rows);
    if (!first_.empty()) first_ = gather_rows(first_, 0, rows);
    rows_ = static_cast<int64_t>(rows.size());
  }

  // [R, t]: the newest token's self-attention over the tokens so far (the prompt's last at the first step);
  // zeros before a window.
  Tensor cross_attention(int layer, int head) const override {
    const int L = static_cast<int>(layers_.size());
    const int64_t NH = model_.config_.heads;
    AK_CHECK(keep_, "{}: attention weights were not asked for (keep_attention)", kWho);
    AK_CHECK(layer >= -1 && layer < L, "{}: attention layer {}: the model has {} layers (0 .. {})", kWho, layer, L,
             L - 1);
    AK_CHECK(head >= -1 && head < NH, "{}: attention head {}: the layers have {} heads (0 .. {})", kWho, head, NH,
             NH - 1);
    const Tensor& w = weights_[size_t(layer < 0 ? L - 1 : layer)];  // [R, NH, w]
    const int64_t t = static_cast<int64_t>(history_.empty() ? 0 : history_[0].size()), W = w.empty() ? 0 : w.dim(2);
    Tensor out({rows_, t});  // [R, t]
    for (int64_t r = 0; r < rows_; ++r)
      for (int64_t h = 0; h < NH; ++h) {
        if (head >= 0 && h != head) continue;
        const float scale = head >= 0 ? 1.0f : 1.0f / float(NH);
        for (int64_t s = 0; s < W; ++s) out[r * t + t - W + s] += scale * w[(r * NH + h) * W + s];
      }
    return out;
  }

 private:
  struct Layer {
    Tensor K, V;       // [R, cap, E]: the first `rows` rows are the keys and values so far
    int64_t rows = 0;  // t
  };

  // The log-probabilities after the last of `ids` [R, T'] (the cache: the newest T' tokens; none: the whole
  // history, `ids` unused).
  Tensor run(const std::vector<int64_t>& ids, int64_t Tn) {
    autograd::NoGrad no_grad;
    const int64_t V = model_.config_.vocab;
    const int64_t t = static_cast<int64_t>(history_[0].size());
    const int64_t P = model_.config_.positional == nn::PositionalKind::Learned ? model_.config_.max_positions : t;
    Var x;
    if (use_cache_ && t <= P) {  // the newest T' tokens through the cache
      x = model_.embed(ids, rows_, Tn, t - Tn);  // [R, T', E] at positions t - T' .. t - 1
      for (size_t l = 0; l < layers_.size(); ++l) x = run_layer(l, x);
      x = model_.decoder_.norm.forward(autograd::slice(x, 1, Tn - 1, Tn));  // [R, 1, E]
    } else {
      const int64_t w = std::min(t, P);  // the window: the last w tokens
      std::vector<int64_t> all;
      all.reserve(size_t(rows_ * w));
      for (const auto& h : history_) all.insert(all.end(), h.end() - w, h.end());  // [R, w]
      if (keep_) {  // the layers on a fresh cache, for their weights
        std::vector<Layer> fresh(layers_.size());
        std::swap(layers_, fresh);
        x = model_.embed(all, rows_, w, 0);  // [R, w, E]
        for (size_t l = 0; l < layers_.size(); ++l) x = run_layer(l, x);
        std::swap(layers_, fresh);
        x = model_.decoder_.norm.forward(autograd::slice(x, 1, w - 1, w));  // [R, 1, E]
        const Var logits = model_.project(x);                                // [R, 1, V]
        return ops::log_softmax_forward(logits.value().reshaped({rows_, V}));
      }
      ops::MaskSpec causal;
      causal.causal = ops::CausalKind::UpperLeft;
      x = model_.decoder_.forward(model_.embed(all, rows_, w, 0), causal);  // [R, w, E]
      x = autograd::slice(x, 1, w - 1, w);                                  // [R, 1, E]
    }
    const Var logits = model_.project(x);                                   // [R, 1, V]
    return ops::log_softmax_forward(logits.value().reshaped({rows_, V}));  // [R, V]
  }

  Var attend_self(size_t l, const Var& h) {
    nn::TransformerEncoderLayer& layer = *model_.decoder_.layers[l];
    Layer& c = layers_[l];
    append_rows(c.K, c.rows, ops::project(layer.self_attn.k_projection(), h.value(), "key projection"));  // [R, t, E]
    append_rows(c.V, c.rows, ops::project(layer.self_attn.v_projection(), h.value(), "value projection"));
    c.rows += h.shape()[1];
    ops::MhaOptions o;
    o.mask.causal = ops::CausalKind::LowerRight;  // query i of T' sees keys up to t - T' + i
    if (keep_) o.weights = ops::HeadWeights::PerHead;
    ops::MhaResult r = nn::multihead_attention_forward_projected(layer.self_attn, h.value(), c.K, c.V, o, c.rows);
    if (keep_) {  // the newest query's weights [R, NH, t]
      const int64_t Tq = h.shape()[1], NH = model_.config_.heads, t = c.rows;
      Tensor& w = weights_[l];
      w = Tensor({rows_, NH, t});
      for (int64_t rh = 0; rh < rows_ * NH; ++rh)
        std::copy_n(r.weights.data() + (rh * Tq + Tq - 1) * t, t, w.data() + rh * t);
    }
    return Var(std::move(r.output));
  }

  // base + ff(x): linear2(act(linear1(x))) + base.
  static Var ff_residual(nn::TransformerEncoderLayer& layer, const Var& base, const Var& x) {
    if (layer.options.activation == nn::FfnActivation::Relu) return nn::feed_forward(layer.linear1, layer.linear2, x, base);
    const Var h = autograd::gelu(layer.linear1.forward(x));  // [R, T', F]
    return layer.linear2.forward(h, {false, &base});        // [R, T', E]
  }

  // One layer on x [R, T', E], as nn::TransformerEncoderLayer::forward (dropout off).
  Var run_layer(size_t l, const Var& x) {
    nn::TransformerEncoderLayer& layer = *model_.decoder_.layers[l];
    if (layer.options.norm_first) {
      const Var y = autograd::add(x, attend_self(l, layer.norm1.forward(x)));  // x + sa(norm1(x))
      return ff_residual(layer, y, layer.norm2.forward(y));                     // y + ff(norm2(y))
    }
    const Var y = layer.norm1.forward(autograd::add(x, attend_self(l, x)));  // norm1(x + sa(x))
    return layer.norm2.forward(ff_residual(layer, y, y));                     // norm2(y + ff(y))
  }

  TransformerLM& model_;
  bool use_cache_;
  std::vector<Layer> layers_;
  std::vector<std::vector<int64_t>> history_;  // the tokens so far, per row
  bool keep_ = false;                          // keep the attention weights
  std::vector<Tensor> weights_;                // per layer [R, NH, w]: the newest query's weights
  Tensor first_;                               // [R, V] until the first step
  int64_t rows_ = 0;
};

std::unique_ptr<DecoderState> TransformerLM::start_decoding(const SourceBatch& prompts, bool use_cache) {
  return std::make_unique<TransformerLMState>(*this, prompts, use_cache);
}

}  // namespace attnkit::models
