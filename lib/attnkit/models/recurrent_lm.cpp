#include "attnkit/models/recurrent_lm.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "attnkit/autograd/functional.hpp"
#include "attnkit/autograd/layers.hpp"
#include "attnkit/models/fields.hpp"
#include "attnkit/models/seq2seq.hpp"
#include "attnkit/models/tokens.hpp"
#include "attnkit/nn/state_dict.hpp"
#include "attnkit/ops/softmax.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::models {

using autograd::Var;

namespace {

RecurrentLMConfig checked(const RecurrentLMConfig& c) {
  c.validate();
  return c;
}

// One L-layer stack whose parameters are named "decoder.weight_ih_l0", ... (PyTorch's, under "decoder.").
nn::Recurrent make_stack(const RecurrentLMConfig& c, Rng& rng) {
  ops::RecurrentConfig rc;
  rc.cell = c.cell;
  rc.input_size = c.embed;
  rc.hidden_size = c.hidden;
  rc.layers = c.layers;
  nn::Recurrent r = nn::Recurrent::random(rc, rng);
  for (Parameter* p : r.named_parameters()) p->name = "decoder." + p->name;
  return r;
}

constexpr const char* kWho = "recurrent-lm decoding";

}  // namespace

void RecurrentLMConfig::validate() const {
  AK_CHECK(vocab > kNumSpecials, "recurrent-lm: a vocabulary of {} tokens (it needs the 4 special tokens and at least "
           "one more)", vocab);
  AK_CHECK(embed >= 1 && hidden >= 1 && layers >= 1, "recurrent-lm: embed {}, hidden {}, layers {} (each >= 1)", embed,
           hidden, layers);
  AK_CHECK(dropout >= 0.0f && dropout < 1.0f, "recurrent-lm: dropout {} must be in [0, 1)", dropout);
  AK_CHECK(!tied_output || embed == hidden, "recurrent-lm: a tied output needs embed {} = hidden {}", embed, hidden);
  AK_CHECK(pad_id >= 0 && pad_id < vocab, "recurrent-lm: <pad> id {} is outside the vocabulary of {}", pad_id, vocab);
}

io::Value RecurrentLMConfig::to_value() const {
  io::Value v;
  auto n = [](int64_t x) { return text_value(std::to_string(x)); };
  v.set("family", text_value("recurrent-lm"));
  v.set("cell", text_value(std::string(cell_kind_name(cell))));
  v.set("vocab", n(vocab));
  v.set("embed", n(embed));
  v.set("hidden", n(hidden));
  v.set("layers", n(layers));
  v.set("dropout", text_value(fmt::format("{}", dropout)));
  v.set("tied_output", text_value(tied_output ? "true" : "false"));
  v.set("pad_id", n(pad_id));
  return v;
}

RecurrentLMConfig RecurrentLMConfig::from_value(const io::Value& value, std::string_view what) {
  AK_CHECK(value.is_bundle(), "{}: the model config must be an object", what);
  const Fields f(value, std::string(what), "config ");
  const std::string family = f.text("family", "recurrent-lm");
  AK_CHECK(family == "recurrent-lm", "{}: the model config is for a \"{}\" model, not a recurrent-lm", what, family);
  RecurrentLMConfig c;
  constexpr int64_t kMaxSize = int64_t{1} << 16, kMaxVocab = int64_t{1} << 24;
  c.cell = f.choice("cell", parse_cell_kind);
  c.vocab = f.integer("vocab", 1, kMaxVocab);
  c.embed = f.integer("embed", 1, kMaxSize);
  c.hidden = f.integer("hidden", 1, kMaxSize);
  c.layers = static_cast<int>(f.integer("layers", 1, 64));
  c.dropout = f.real32("dropout", 0.0f);
  c.tied_output = f.boolean("tied_output", false);
  c.pad_id = f.integer("pad_id", kPad, 0, kMaxVocab);
  try {
    c.validate();
  } catch (const Error& e) {
    f.rethrow_where(e);
  }
  return c;
}

RecurrentLM::RecurrentLM(const RecurrentLMConfig& config, Rng& rng)
    : config_(checked(config)),
      embed_(config.vocab, config.embed, rng, std::nullopt, "embed"),
      decoder_(make_stack(config, rng)) {
  if (config.tied_output) output_bias_ = Parameter("output.bias", Tensor({config.vocab}));  // [V]
  else output_.emplace(config.hidden, config.vocab, rng, true, "output");
}

std::vector<Parameter*> RecurrentLM::named_parameters() {
  std::vector<Parameter*> out = embed_.named_parameters();
  for (Parameter* p : decoder_.named_parameters()) out.push_back(p);
  if (output_)
    for (Parameter* p : output_->named_parameters()) out.push_back(p);
  else
    out.push_back(&output_bias_);
  return out;
}

io::Value RecurrentLM::parameters_value() const {
  io::Value v;
  for (const Parameter* p : named_parameters()) {
    const size_t dot = p->name.find('.');
    v.set_path({p->name.substr(0, dot), p->name.substr(dot + 1)}, p->value);
  }
  return v;
}

void RecurrentLM::load_parameters(const io::Value& bundle, std::string_view what) {
  nn::load_parameters(*this, bundle, what);
}

void RecurrentLM::set_state(Tensor h, Tensor c) {
  const bool lstm = config_.cell == nn::CellKind::Lstm;
  AK_CHECK(h.empty() || (h.rank() == 3 && h.dim(0) == config_.layers && h.dim(2) == config_.hidden),
           "recurrent-lm: state h {} must be [{}, N, {}]", h.shape_str(), config_.layers, config_.hidden);
  AK_CHECK(lstm ? c.shape() == h.shape() : c.empty(), "recurrent-lm: state c {} must be {} (h is {})", c.shape_str(),
           lstm ? "h's shape" : "empty for a " + std::string(cell_kind_name(config_.cell)), h.shape_str());
  h_ = std::move(h);
  c_ = std::move(c);
}

autograd::RecurrentVars RecurrentLM::run(const std::vector<int64_t>& ids, int64_t N, int64_t T, const Tensor& h0,
                                         const Tensor& c0, Rng* rng) {
  const bool drop = training_ && rng && autograd::grad_enabled() && config_.dropout > 0.0f;
  ops::DropoutOptions d;
  d.p = config_.dropout;
  Var x = embed_.forward(ids, {N, T});  // [N, T, E]
  if (drop) x = autograd::dropout(x, d, *rng);
  autograd::RecurrentVars r =
      decoder_.forward(x, h0.empty() ? Var() : Var(h0), c0.empty() ? Var() : Var(c0));  // output [N, T, H]
  if (drop) r.output = autograd::dropout(r.output, d, *rng);
  return r;
}

void RecurrentLM::set_precision(nn::PrecisionPlan& plan) {
  decoder_.set_precision(plan);
  if (output_) {
    output_->set_precision(plan);
    return;
  }
  const Parameter& w = embed_.weight;  // [V, E]
  tied_precision_ = plan.for_weight(w.name, w.value.dim(0), w.value.dim(1), true);
  tied_lowp_ = DerivedSlot<ops::LowpWeights>();
  if (const ops::LowpWeights* s = plan.stored(w.name, tied_precision_, w.value.dim(0), w.value.dim(1)))
    tied_lowp_.get({&w}, [&] { return *s; });  // the stored copy, kept while the embedding is unchanged
}

Var RecurrentLM::project(const Var& h) {
  if (output_) return output_->forward(h);  // [N, T, V]
  if (tied_precision_ != ops::Precision::Fp32) {  // tied, the product in lower precision (inference only)
    const Tensor& w = embed_.weight.value;  // [V, E]
    const std::shared_ptr<const ops::LowpWeights> lowp = tied_lowp_.get({&embed_.weight}, [&] {
      return ops::make_lowp_weights(w.data(), w.dim(0), w.dim(1), tied_precision_, embed_.weight.name);
    });
    return autograd::linear(h, Var::param(embed_.weight), Var::param(output_bias_), {}, {}, lowp);
  }
  return autograd::linear(h, Var::param(embed_.weight), Var::param(output_bias_));  // tied: h W_emb^T + b
}

ForwardResult RecurrentLM::forward(const TeacherForcedBatch& batch, const ForwardOptions& options) {
  AK_CHECK(options.dropout == 0.0f && options.teacher_forcing == 1.0f,
           "recurrent-lm: dropout {} and teacher forcing {} in the forward options: the dropout is the config's, and "
           "a language model reads the whole window", options.dropout, options.teacher_forcing);
  AK_CHECK(batch.S == 0, "recurrent-lm: a batch with sources ({} positions): a language model reads tgt_in only",
           batch.S);
  AK_CHECK(batch.N >= 1 && batch.T >= 1 && batch.tgt_in.size() == size_t(batch.N * batch.T) &&
               batch.tgt_out.size() == batch.tgt_in.size(),
           "recurrent-lm: a batch of {} rows of {} tokens needs {} inputs and targets", batch.N, batch.T,
           batch.N * batch.T);
  const bool carried = carry_ && !h_.empty() && h_.dim(1) == batch.N;
  autograd::RecurrentVars r = run(batch.tgt_in, batch.N, batch.T, carried ? h_ : Tensor(), carried ? c_ : Tensor(),
                                  options.rng);
  if (carry_) {  // the next window starts here; its gradients stop here (truncated BPTT)
    h_ = r.h_n.value();
    c_ = r.c_n.defined() ? r.c_n.value() : Tensor();
  }
  ForwardResult out;
  out.logits = project(r.output);  // [N, T, V]
  ops::CrossEntropyOptions ce;
  ce.ignore_index = config_.pad_id;
  ce.label_smoothing = options.label_smoothing;
  out.loss = autograd::cross_entropy(out.logits, batch.tgt_out, ce);
  return out;
}

std::vector<std::vector<int64_t>> RecurrentLM::greedy(const SourceBatch& batch, int64_t max_len) {
  autograd::NoGrad no_grad;
  std::unique_ptr<DecoderState> state = start_decoding(batch, true);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(batch.N));
  std::vector<int64_t> prev(static_cast<size_t>(batch.N), kBos);
  for (int64_t t = 0; t < max_len; ++t) {
    const Tensor lp = state->step(prev);  // [N, V]
    for (int64_t n = 0; n < batch.N; ++n) {
      prev[size_t(n)] = best_output_token(lp.data() + n * lp.dim(1), lp.dim(1), config_.pad_id);
      out[size_t(n)].push_back(prev[size_t(n)]);
    }
  }
  return out;
}

// The decoding state: the state [L, R, H] after the tokens so far (without the cache: recomputed from all of them
// at every step).
class RecurrentLMState : public DecoderState {
 public:
  RecurrentLMState(RecurrentLM& model, const SourceBatch& prompts, bool use_cache)
      : model_(model), use_cache_(use_cache) {
    check_decoding_sources(prompts, kWho);
    for (int64_t n = 0; n < prompts.N; ++n)
      AK_CHECK(prompts.src_lengths[size_t(n)] == prompts.S,
               "{}: prompt {} has {} tokens and prompt 1 {}: the prompts decoded together must have one length", kWho,
               n + 1, prompts.src_lengths[size_t(n)], prompts.src_lengths[0]);
    rows_ = prompts.N;
    for (int64_t n = 0; n < rows_; ++n)
      history_.emplace_back(prompts.src.begin() + n * prompts.S, prompts.src.begin() + (n + 1) * prompts.S);
    first_ = advance(prompts.src, prompts.S);
  }

  int64_t rows() const override { return rows_; }

  Tensor step(const std::vector<int64_t>& prev) override {
    check_previous_tokens(prev, rows_, model_.config().vocab, kWho);
    if (!first_.empty()) return std::exchange(first_, Tensor());
    for (int64_t r = 0; r < rows_; ++r) history_[size_t(r)].push_back(prev[size_t(r)]);
    return advance(prev, 1);
  }

  void select_rows(const std::vector<int64_t>& rows) override {
    history_ = select_list(history_, rows, kWho);
    for (Tensor* x : {&h_, &c_})
      if (!x->empty()) *x = gather_rows(*x, 1, rows);  // [L, R', H]
    if (!first_.empty()) first_ = gather_rows(first_, 0, rows);
    rows_ = static_cast<int64_t>(rows.size());
  }

  Tensor cross_attention(int, int) const override { fail("{}: a language model has no source to attend over", kWho); }

 private:
  Tensor advance(const std::vector<int64_t>& ids, int64_t Tn) {
    autograd::NoGrad no_grad;
    autograd::RecurrentVars r;
    if (use_cache_) {
      r = model_.run(ids, rows_, Tn, h_, c_);
    } else {
      const int64_t t = static_cast<int64_t>(history_[0].size());
      std::vector<int64_t> all;
      for (const auto& h : history_) all.insert(all.end(), h.begin(), h.end());  // [R, t]
      r = model_.run(all, rows_, t, Tensor(), Tensor());
      Tn = t;
    }
    h_ = r.h_n.value();
    c_ = r.c_n.defined() ? r.c_n.value() : Tensor();
    const Var logits = model_.project(autograd::slice(r.output, 1, Tn - 1, Tn));  // [R, 1, V]
    return ops::log_softmax_forward(logits.value().reshaped({rows_, model_.config().vocab}));
  }

  RecurrentLM& model_;
  bool use_cache_;
  std::vector<std::vector<int64_t>> history_;
  Tensor h_, c_, first_;
  int64_t rows_ = 0;
};

std::unique_ptr<DecoderState> RecurrentLM::start_decoding(const SourceBatch& prompts, bool use_cache) {
  return std::make_unique<RecurrentLMState>(*this, prompts, use_cache);
}

}  // namespace attnkit::models
