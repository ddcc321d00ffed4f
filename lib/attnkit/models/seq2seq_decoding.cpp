// Seq2Seq's incremental decoding (models/decoding.hpp).
// Legend: R rows, S source length, L layers, Hd decoder hidden size, E embedding size, t tokens fed so far.
//
//   start:  enc = encode(sources)            states [R, S, Hd], s0 / c0 [L, R, Hd]
//   cache:  logits = Seq2Seq::step(tgt_embed[prev] [R, 1, E], (h, c))    (h, c) carried, [L, R, Hd]
//   none:   (h, c) = (s0, c0); logits = step(...) for every token fed so far, from the first one again
//   then:   log_softmax(logits [R, 1, Vt]) -> [R, Vt]; the last step's attention weights [R, 1, S] kept
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
  Seq2SeqDecoderState(Seq2Seq& model, const SourceBatch& sources, bool use_cache)
      : model_(model), use_cache_(use_cache) {
    check_decoding_sources(sources, "seq2seq decoding");
    autograd::NoGrad no_grad;
    enc_ = model_.encode(sources, ForwardOptions{});  // states [R, S, Hd], h0 / c0 [L, R, Hd]
    h_ = enc_.h0;
    c_ = enc_.c0;
    src_lengths_ = sources.src_lengths;
    rows_ = sources.N;
    history_.assign(size_t(rows_), {});
  }

  int64_t rows() const override { return rows_; }

  Tensor step(const std::vector<int64_t>& prev) override {
    const int64_t V = model_.config_.tgt_vocab;
    check_previous_tokens(prev, rows_, V, "seq2seq decoding");
    autograd::NoGrad no_grad;
    const ForwardOptions eval;  // no dropout, the tokens given
    const bool attention = model_.config_.attention != AttentionKind::None;
    Tensor weights;
    auto step_once = [&](const std::vector<int64_t>& tokens) {  // [R] -> logits [R, 1, Vt]
      const Var y = model_.tgt_embed_.forward(tokens, {rows_, 1});  // [R, 1, E]
      return model_.step(y, h_, c_, enc_, src_lengths_, eval, attention ? &weights : nullptr);
    };
    Var logits;
    if (use_cache_) {
      logits = step_once(prev);
    } else {
      for (int64_t i = 0; i < rows_; ++i) history_[size_t(i)].push_back(prev[size_t(i)]);
      h_ = enc_.h0;
      c_ = enc_.c0;
      std::vector<int64_t> tokens(static_cast<size_t>(rows_));
      for (size_t t = 0; t < history_[0].size(); ++t) {
        for (int64_t i = 0; i < rows_; ++i) tokens[size_t(i)] = history_[size_t(i)][t];
        logits = step_once(tokens);
      }
    }
    if (attention) weights_ = weights.reshaped({rows_, weights.dim(-1)});  // [R, S]
    return ops::log_softmax_forward(logits.value().reshaped({rows_, V}));  // [R, Vt]
  }

  void select_rows(const std::vector<int64_t>& rows) override {
    src_lengths_ = select_list(src_lengths_, rows, "seq2seq decoding");  // checks every row first
    auto gather = [&](Var& v, int dim) {
      if (v.defined()) v = Var(gather_rows(v.value(), dim, rows));
    };
    gather(enc_.states, 0);  // [R', S, Hd]
    gather(enc_.keys, 0);    // [R', S, A] (additive attention)
    gather(enc_.h0, 1);      // [L, R', Hd]
    gather(enc_.c0, 1);
    gather(h_, 1);
    gather(c_, 1);
    if (!weights_.empty()) weights_ = gather_rows(weights_, 0, rows);  // [R', S]
    history_ = select_list(history_, rows, "seq2seq decoding");
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

std::unique_ptr<DecoderState> Seq2Seq::start_decoding(const SourceBatch& sources, bool use_cache) {
  return std::make_unique<Seq2SeqDecoderState>(*this, sources, use_cache);
}

}  // namespace attnkit::models
