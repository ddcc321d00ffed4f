// Seq2Seq's incremental decoding (models/decoding.hpp).
// Legend: R rows, S source length, L layers, Hd decoder hidden size, E embedding size, t tokens fed so far.
//
//   start:  enc = encode(sources)            states [R, S, Hd], s0 / c0 [L, R, Hd]
//   cache:  y = tgt_embed[prev]  [R, 1, E];  out, (h, c) = decoder(y, (h, c))          out [R, 1, Hd]
//   none:   y = tgt_embed[all tokens fed]  [R, t, E];  out = decoder(y, (s0, c0))[:, t-1]  out [R, 1, Hd]
//   then:   logits = project(out) [R, 1, Vt] (attention weights [R, 1, S] kept);  log_softmax -> [R, Vt]
#include <utility>

#include "attnkit/autograd/functional.hpp"
#include "attnkit/autograd/recurrent.hpp"
#include "attnkit/models/seq2seq.hpp"
#include "attnkit/ops/softmax.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::models {

using autograd::Var;

class Seq2SeqDecoderState : public DecoderState {
 public:
  Seq2SeqDecoderState(Seq2Seq& model, const train::Batch& sources, bool use_cache)
      : model_(model), use_cache_(use_cache) {
    AK_CHECK(sources.N >= 1 && sources.S >= 1 && static_cast<int64_t>(sources.src.size()) == sources.N * sources.S &&
                 static_cast<int64_t>(sources.src_lengths.size()) == sources.N,
             "seq2seq decoding: sources of {} rows and length {} with {} ids and {} lengths", sources.N, sources.S,
             sources.src.size(), sources.src_lengths.size());
    autograd::NoGrad no_grad;
    enc_ = model_.encode(sources);  // states [R, S, Hd], h0 / c0 [L, R, Hd]
    h_ = enc_.h0;
    c_ = enc_.c0;
    src_lengths_ = sources.src_lengths;
    rows_ = sources.N;
    history_.assign(size_t(rows_), {});
  }

  int64_t rows() const override { return rows_; }

  Tensor step(const std::vector<int64_t>& prev) override {
    AK_CHECK(rows_ >= 1, "seq2seq decoding: step with no rows left");
    AK_CHECK(static_cast<int64_t>(prev.size()) == rows_, "seq2seq decoding: {} previous tokens for {} rows",
             prev.size(), rows_);
    const int64_t V = model_.config_.tgt_vocab;
    for (int64_t id : prev)
      AK_CHECK(id >= 0 && id < V, "seq2seq decoding: token id {} outside the target vocabulary [0, {})", id, V);
    autograd::NoGrad no_grad;
    Var out;  // [R, 1, Hd]
    if (use_cache_) {
      Var y = model_.tgt_embed_.forward(prev, {rows_, 1});             // [R, 1, E]
      auto r = autograd::recurrent(model_.decoder_, y, h_, c_);        // output [R, 1, Hd]
      h_ = r.h_n;                                                      // [L, R, Hd]
      c_ = r.c_n;
      out = r.output;
    } else {
      for (int64_t i = 0; i < rows_; ++i) history_[size_t(i)].push_back(prev[size_t(i)]);
      const int64_t t = static_cast<int64_t>(history_[0].size());
      std::vector<int64_t> ids;
      ids.reserve(size_t(rows_ * t));
      for (const auto& h : history_) ids.insert(ids.end(), h.begin(), h.end());  // [R, t]
      Var y = model_.tgt_embed_.forward(std::move(ids), {rows_, t});            // [R, t, E]
      auto r = autograd::recurrent(model_.decoder_, y, enc_.h0, enc_.c0);        // output [R, t, Hd]
      out = autograd::slice(r.output, 1, t - 1, t);                             // [R, 1, Hd]
    }
    const bool attention = model_.config_.attention != AttentionKind::None;
    Tensor weights;
    const Var logits = model_.project(out, enc_, src_lengths_, attention ? &weights : nullptr);  // [R, 1, Vt]
    if (attention) weights_ = weights.reshaped({rows_, weights.dim(-1)});                        // [R, S]
    return ops::log_softmax_forward(logits.value().reshaped({rows_, V}));                        // [R, Vt]
  }

  void select_rows(const std::vector<int64_t>& rows) override {
    for (int64_t r : rows)
      AK_CHECK(r >= 0 && r < rows_, "seq2seq decoding: select_rows: row {} of {}", r, rows_);
    auto gather = [&](Var& v, int dim) {
      if (v.defined()) v = Var(gather_rows(v.value(), dim, rows));
    };
    gather(enc_.states, 0);  // [R', S, Hd]
    gather(enc_.h0, 1);      // [L, R', Hd]
    gather(enc_.c0, 1);
    gather(h_, 1);
    gather(c_, 1);
    if (!weights_.empty()) weights_ = gather_rows(weights_, 0, rows);  // [R', S]
    std::vector<int64_t> lengths;
    std::vector<std::vector<int64_t>> history;
    for (int64_t r : rows) {
      lengths.push_back(src_lengths_[size_t(r)]);
      history.push_back(history_[size_t(r)]);
    }
    src_lengths_ = std::move(lengths);
    history_ = std::move(history);
    rows_ = static_cast<int64_t>(rows.size());
  }

  Tensor cross_attention(int layer, int head) const override {
    AK_CHECK(model_.config_.attention != AttentionKind::None,
             "seq2seq decoding: the model has no attention over the source (attention none)");
    AK_CHECK(layer == -1 || layer == 0, "seq2seq decoding: attention layer {}: the model has one attention (layer 0)",
             layer);
    AK_CHECK(head == -1 || head == 0, "seq2seq decoding: attention head {}: the model's attention has one head (0)",
             head);
    AK_CHECK(!weights_.empty() || rows_ == 0, "seq2seq decoding: cross_attention before the first step");
    return weights_;
  }

 private:
  Seq2Seq& model_;
  bool use_cache_;
  Seq2Seq::Encoded enc_;
  Var h_, c_;                                  // [L, R, Hd] (c: LSTM)
  std::vector<int64_t> src_lengths_;           // [R]
  std::vector<std::vector<int64_t>> history_;  // no cache: the tokens fed so far, per row
  Tensor weights_;                             // [R, S] of the last step
  int64_t rows_ = 0;
};

std::unique_ptr<DecoderState> Seq2Seq::start_decoding(const train::Batch& sources, bool use_cache) {
  return std::make_unique<Seq2SeqDecoderState>(*this, sources, use_cache);
}

}  // namespace attnkit::models
