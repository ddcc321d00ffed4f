#include "attnkit/models/transformer_lm.hpp"

#include <algorithm>

#include "attnkit/autograd/functional.hpp"
#include "attnkit/autograd/layers.hpp"
#include "attnkit/models/fields.hpp"
#include "attnkit/models/tokens.hpp"
#include "attnkit/nn/state_dict.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::models {

using autograd::Var;

namespace {

// GPT-2's initialisation of embeddings and the output matrix: N(0, 0.02).
void gpt_normal(Parameter& p, Rng& rng) {
  p.value = rand_normal(p.value.shape(), rng, 0.0f, 0.02f);
  p.touch();
}

TransformerLMConfig checked(const TransformerLMConfig& c) {
  c.validate();
  return c;
}

}  // namespace

nn::TransformerLayerOptions TransformerLMConfig::layer_options() const {
  nn::TransformerLayerOptions o;
  o.d_model = d_model;
  o.heads = heads;
  o.dim_feedforward = ff;
  o.dropout = dropout;
  o.activation = activation;
  o.norm_first = norm_first;
  return o;
}

void TransformerLMConfig::validate() const {
  AK_CHECK(vocab > kNumSpecials, "transformer-lm: a vocabulary of {} tokens (it needs the 4 special tokens and at least "
           "one more)", vocab);
  AK_CHECK(layers >= 1, "transformer-lm: {} layers (need >= 1)", layers);
  layer_options().validate("transformer-lm");
  AK_CHECK(max_positions >= 1, "transformer-lm: max_positions {} (need >= 1)", max_positions);
  AK_CHECK(pad_id >= 0 && pad_id < vocab, "transformer-lm: <pad> id {} is outside the vocabulary of {}", pad_id, vocab);
}

io::Value TransformerLMConfig::to_value() const {
  io::Value v;
  auto n = [](int64_t x) { return text_value(std::to_string(x)); };
  auto b = [](bool x) { return text_value(x ? "true" : "false"); };
  v.set("family", text_value("transformer-lm"));
  v.set("vocab", n(vocab));
  v.set("layers", n(layers));
  v.set("heads", n(heads));
  v.set("d_model", n(d_model));
  v.set("ff", n(ff));
  v.set("dropout", text_value(fmt::format("{}", dropout)));
  v.set("norm_first", b(norm_first));
  v.set("activation", text_value(std::string(nn::ffn_activation_name(activation))));
  v.set("positional", text_value(std::string(nn::positional_kind_name(positional))));
  v.set("max_positions", n(max_positions));
  v.set("tied_output", b(tied_output));
  v.set("pad_id", n(pad_id));
  return v;
}

TransformerLMConfig TransformerLMConfig::from_value(const io::Value& value, std::string_view what) {
  AK_CHECK(value.is_bundle(), "{}: the model config must be an object", what);
  const Fields f(value, std::string(what), "config ");
  const std::string family = f.text("family", "transformer-lm");
  AK_CHECK(family == "transformer-lm", "{}: the model config is for a \"{}\" model, not a transformer-lm", what, family);
  TransformerLMConfig c;
  constexpr int64_t kMaxSize = int64_t{1} << 16, kMaxVocab = int64_t{1} << 24;
  c.vocab = f.integer("vocab", 1, kMaxVocab);
  c.layers = f.integer("layers", 4, 1, 64);
  c.heads = f.integer("heads", 1, 1024);  // no default: the weights' shapes do not tell it
  c.d_model = f.integer("d_model", 128, 1, kMaxSize);
  c.ff = f.integer("ff", 512, 1, 4 * kMaxSize);
  c.dropout = f.real32("dropout", 0.0f);
  c.norm_first = f.boolean("norm_first", true);
  c.activation = f.choice("activation", "gelu", nn::parse_ffn_activation);
  c.positional = f.choice("positional", "learned", nn::parse_positional_kind);
  c.max_positions = f.integer("max_positions", 256, 1, kMaxVocab);
  c.tied_output = f.boolean("tied_output", false);
  c.pad_id = f.integer("pad_id", kPad, 0, kMaxVocab);
  try {
    c.validate();
  } catch (const Error& e) {
    f.rethrow_where(e);
  }
  return c;
}

TransformerLM::TransformerLM(const TransformerLMConfig& config, Rng& rng)
    : config_(checked(config)),
      embed_(config.vocab, config.d_model, rng, std::nullopt, "embed"),
      pos_(config.positional, config.d_model, config.max_positions, rng, "pos_embed"),
      decoder_(config.layer_options(), config.layers, rng, "decoder.") {
  if (config.tied_output) {
    output_bias_ = Parameter("output.bias", Tensor({config.vocab}));  // [V]
  } else {
    output_.emplace(config.d_model, config.vocab, rng, true, "output");
    gpt_normal(output_->weight, rng);
    std::fill_n(output_->bias.value.data(), config.vocab, 0.0f);
    output_->bias.touch();
  }
  gpt_normal(embed_.weight, rng);
  if (config.positional == nn::PositionalKind::Learned) gpt_normal(pos_.weight, rng);
}

std::vector<Parameter*> TransformerLM::named_parameters() {
  std::vector<Parameter*> out;
  auto add = [&](nn::Module& m) {
    for (Parameter* p : m.named_parameters()) out.push_back(p);
  };
  add(embed_);
  add(pos_);
  add(decoder_);
  if (output_) add(*output_);
  else out.push_back(&output_bias_);
  return out;
}

io::Value TransformerLM::parameters_value() const {
  io::Value v;
  for (const Parameter* p : named_parameters()) {
    const size_t dot = p->name.find('.');
    v.set_path({p->name.substr(0, dot), p->name.substr(dot + 1)}, p->value);
  }
  return v;
}

void TransformerLM::load_parameters(const io::Value& bundle, std::string_view what) {
  nn::load_parameters(*this, bundle, what);
}

Var TransformerLM::embed(const std::vector<int64_t>& ids, int64_t N, int64_t T, int64_t offset, Rng* rng) {
  AK_CHECK(config_.positional != nn::PositionalKind::Learned || offset + T <= config_.max_positions,
           "transformer-lm: position {} is past the model's {} learned positions (its context)", offset + T - 1,
           config_.max_positions);
  Var e = embed_.forward(ids, {N, T});  // [N, T, E]
  e = pos_.forward(e, offset);          // + PE[offset .. offset + T)
  if (!(training_ && rng && autograd::grad_enabled() && config_.dropout > 0.0f)) return e;
  ops::DropoutOptions o;
  o.p = config_.dropout;
  return autograd::dropout(e, o, *rng);
}

Var TransformerLM::project(const Var& h) {
  if (output_) return output_->forward(h);  // [N, T', V]
  if (std::shared_ptr<const ops::LowpWeights> lowp = tied_lowp())
    return autograd::linear(h, Var::param(embed_.weight), Var::param(output_bias_), {}, nullptr, lowp);
  return autograd::linear(h, Var::param(embed_.weight), Var::param(output_bias_));  // tied: h W_emb^T + b
}

std::shared_ptr<const ops::LowpWeights> TransformerLM::tied_lowp() const {
  if (tied_precision_ == ops::Precision::Fp32) return nullptr;
  const Parameter& w = embed_.weight;  // [V, E]
  return tied_lowp_.get({&w}, [&] {
    return ops::make_lowp_weights(w.value.data(), w.value.dim(0), w.value.dim(1), tied_precision_, w.name);
  });
}

void TransformerLM::set_precision(nn::PrecisionPlan& plan) {
  decoder_.set_precision(plan);
  if (output_) return output_->set_precision(plan);
  const Parameter& w = embed_.weight;  // [V, E]
  tied_precision_ = plan.for_weight(w.name, w.value.dim(0), w.value.dim(1), true);
  tied_lowp_ = DerivedSlot<ops::LowpWeights>();
  if (const ops::LowpWeights* s = plan.stored(w.name, tied_precision_, w.value.dim(0), w.value.dim(1)))
    tied_lowp_.get({&w}, [&] { return *s; });  // the stored copy, kept while the embedding is unchanged
  tied_lowp();  // made now: a weight the precision cannot hold is refused here
}

ForwardResult TransformerLM::forward(const TeacherForcedBatch& batch, const ForwardOptions& options) {
  AK_CHECK(options.dropout == 0.0f, "transformer-lm: dropout {} in the forward options: the rate is the config's "
           "(dropout {})", options.dropout, config_.dropout);
  AK_CHECK(options.teacher_forcing == 1.0f, "transformer-lm: teacher forcing {}: a language model reads the whole "
           "window at once", options.teacher_forcing);
  AK_CHECK(batch.S == 0, "transformer-lm: a batch with sources ({} positions): a language model reads tgt_in only",
           batch.S);
  AK_CHECK(batch.N >= 1 && batch.T >= 1 && batch.tgt_in.size() == size_t(batch.N * batch.T) &&
               batch.tgt_out.size() == batch.tgt_in.size(),
           "transformer-lm: a batch of {} rows of {} tokens needs {} inputs and targets (got {} and {})", batch.N,
           batch.T, batch.N * batch.T, batch.tgt_in.size(), batch.tgt_out.size());
  nn::DropoutContext d;
  d.training = training_ && autograd::grad_enabled() && config_.dropout > 0.0f;
  d.rng = options.rng;
  AK_CHECK(!d.training || d.rng, "transformer-lm: dropout {} needs a generator in the forward options",
           config_.dropout);
  Var x = embed(batch.tgt_in, batch.N, batch.T, 0, options.rng);  // [N, T, E]
  ops::MaskSpec causal;
  causal.causal = ops::CausalKind::UpperLeft;
  Var h = decoder_.forward(x, causal, d);  // [N, T, E]
  ForwardResult out;
  out.logits = project(h);                 // [N, T, V]
  ops::CrossEntropyOptions ce;
  ce.ignore_index = config_.pad_id;
  ce.label_smoothing = options.label_smoothing;
  out.loss = autograd::cross_entropy(out.logits, batch.tgt_out, ce);  // scalar
  return out;
}

std::vector<std::vector<int64_t>> TransformerLM::greedy(const SourceBatch& batch, int64_t max_len) {
  autograd::NoGrad no_grad;
  std::unique_ptr<DecoderState> state = start_decoding(batch, true);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(batch.N));
  std::vector<int64_t> prev(static_cast<size_t>(batch.N), kBos);
  for (int64_t t = 0; t < max_len; ++t) {
    const Tensor lp = state->step(prev);  // [N, V]
    const int64_t V = lp.dim(1);
    for (int64_t n = 0; n < batch.N; ++n) {
      prev[size_t(n)] = best_output_token(lp.data() + n * V, V, config_.pad_id);
      out[size_t(n)].push_back(prev[size_t(n)]);
    }
  }
  return out;
}

}  // namespace attnkit::models
