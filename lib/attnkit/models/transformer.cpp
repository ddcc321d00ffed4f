#include "attnkit/models/transformer.hpp"

#include <algorithm>
#include <cmath>

#include "attnkit/autograd/functional.hpp"
#include "attnkit/autograd/layers.hpp"
#include "attnkit/models/fields.hpp"
#include "attnkit/nn/state_dict.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/models/tokens.hpp"

namespace attnkit::models {

using autograd::Var;

namespace {

// xavier_uniform_ of a [out, in] matrix.
void xavier(Parameter& p, Rng& rng) {
  const int64_t out = p.value.dim(0), in = p.value.dim(1);
  const float bound = static_cast<float>(std::sqrt(6.0 / double(in + out)));
  p.value = rand_uniform(p.value.shape(), rng, -bound, bound);
  p.touch();
}

TransformerConfig checked(const TransformerConfig& c) {
  c.validate();
  return c;
}

}  // namespace

nn::TransformerLayerOptions TransformerConfig::layer_options() const {
  nn::TransformerLayerOptions o;
  o.d_model = d_model;
  o.heads = heads;
  o.dim_feedforward = ff;
  o.dropout = dropout;
  o.activation = activation;
  o.norm_first = norm_first;
  return o;
}

void TransformerConfig::validate() const {
  AK_CHECK(src_vocab > kNumSpecials && tgt_vocab > kNumSpecials,
           "transformer: vocabularies of {} and {} tokens (each needs the 4 special tokens and at least one more)",
           src_vocab, tgt_vocab);
  AK_CHECK(encoder_layers >= 1 && decoder_layers >= 1, "transformer: {} encoder and {} decoder layers (need >= 1)",
           encoder_layers, decoder_layers);
  layer_options().validate("transformer");
  AK_CHECK(positional != nn::PositionalKind::Learned || max_positions >= 1,
           "transformer: a learned position table of {} positions", max_positions);
  AK_CHECK(!shared_embeddings || src_vocab == tgt_vocab,
           "transformer: shared embeddings need one vocabulary, but the source has {} tokens and the target {}",
           src_vocab, tgt_vocab);
  for (int64_t id : {pad_id, bos_id, eos_id})
    AK_CHECK(id >= 0 && id < std::min(src_vocab, tgt_vocab), "transformer: special token id {} is outside the vocabularies",
             id);
  AK_CHECK(bos_id != eos_id && pad_id != eos_id, "transformer: <pad> {}, <bos> {} and <eos> {} must differ (<bos> from <eos>)",
           pad_id, bos_id, eos_id);
}

io::Value TransformerConfig::to_value() const {
  io::Value v;
  auto n = [](int64_t x) { return text_value(std::to_string(x)); };
  auto b = [](bool x) { return text_value(x ? "true" : "false"); };
  v.set("family", text_value("transformer"));
  v.set("src_vocab", n(src_vocab));
  v.set("tgt_vocab", n(tgt_vocab));
  v.set("encoder_layers", n(encoder_layers));
  v.set("decoder_layers", n(decoder_layers));
  v.set("heads", n(heads));
  v.set("d_model", n(d_model));
  v.set("ff", n(ff));
  v.set("dropout", text_value(fmt::format("{}", dropout)));
  v.set("norm_first", b(norm_first));
  v.set("activation", text_value(std::string(nn::ffn_activation_name(activation))));
  v.set("positional", text_value(std::string(nn::positional_kind_name(positional))));
  v.set("max_positions", n(max_positions));
  v.set("shared_embeddings", b(shared_embeddings));
  v.set("tied_output", b(tied_output));
  v.set("pad_id", n(pad_id));
  v.set("bos_id", n(bos_id));
  v.set("eos_id", n(eos_id));
  return v;
}

TransformerConfig TransformerConfig::from_value(const io::Value& value, std::string_view what) {
  AK_CHECK(value.is_bundle(), "{}: the model config must be an object", what);
  const Fields f(value, std::string(what), "config ");
  const std::string family = f.text("family", "transformer");
  AK_CHECK(family == "transformer", "{}: the model config is for a \"{}\" model, not a transformer", what, family);
  TransformerConfig c;
  constexpr int64_t kMaxSize = int64_t{1} << 16, kMaxVocab = int64_t{1} << 24;
  c.src_vocab = f.integer("src_vocab", 1, kMaxVocab);
  c.tgt_vocab = f.integer("tgt_vocab", 1, kMaxVocab);
  const int64_t layers = f.integer("layers", 6, 1, 64);  // both sides, unless given apart
  c.encoder_layers = f.integer("encoder_layers", layers, 1, 64);
  c.decoder_layers = f.integer("decoder_layers", layers, 1, 64);
  c.heads = f.integer("heads", 1, 1024);  // no default: the weights' shapes do not tell it
  c.d_model = f.integer("d_model", 512, 1, kMaxSize);
  c.ff = f.integer("ff", 2048, 1, 4 * kMaxSize);
  c.dropout = f.real32("dropout", 0.1f);
  c.norm_first = f.boolean("norm_first", false);
  c.max_positions = f.integer("max_positions", 1024, 1, kMaxVocab);
  c.shared_embeddings = f.boolean("shared_embeddings", false);
  c.tied_output = f.boolean("tied_output", false);
  c.pad_id = f.integer("pad_id", kPad, 0, kMaxVocab);
  c.bos_id = f.integer("bos_id", kBos, 0, kMaxVocab);
  c.eos_id = f.integer("eos_id", kEos, 0, kMaxVocab);
  c.activation = f.choice("activation", "relu", nn::parse_ffn_activation);
  c.positional = f.choice("positional", "sinusoidal", nn::parse_positional_kind);
  try {
    c.validate();
  } catch (const Error& e) {
    f.rethrow_where(e);
  }
  return c;
}

Transformer::Transformer(const TransformerConfig& config, Rng& rng)
    : config_(checked(config)),
      src_embed_(config.src_vocab, config.d_model, rng, config.pad_id, "src_embed"),
      pos_(config.positional, config.d_model, config.max_positions, rng, "pos_embed"),
      encoder_(config.layer_options(), config.encoder_layers, rng, "encoder."),
      decoder_(config.layer_options(), config.decoder_layers, rng, "decoder.") {
  if (!config.shared_embeddings) tgt_embed_.emplace(config.tgt_vocab, config.d_model, rng, config.pad_id, "tgt_embed");
  if (config.tied_output) {
    output_bias_ = Parameter("output.bias", Tensor({config.tgt_vocab}));  // [Vt]
  } else {
    output_.emplace(config.d_model, config.tgt_vocab, rng, true, "output");
    xavier(output_->weight, rng);
  }
  for (nn::Embedding* e : {&src_embed_, tgt_embed_ ? &*tgt_embed_ : nullptr}) {
    if (!e) continue;
    xavier(e->weight, rng);
    std::fill_n(e->weight.value.data() + config.pad_id * config.d_model, config.d_model, 0.0f);  // <pad> row
  }
  if (config.positional == nn::PositionalKind::Learned) xavier(pos_.weight, rng);
}

std::vector<Parameter*> Transformer::named_parameters() {
  std::vector<Parameter*> out;
  auto add = [&](nn::Module& m) {
    for (Parameter* p : m.named_parameters()) out.push_back(p);
  };
  add(src_embed_);
  if (tgt_embed_) add(*tgt_embed_);
  add(pos_);
  add(encoder_);
  add(decoder_);
  if (output_) add(*output_);
  else out.push_back(&output_bias_);
  return out;
}

io::Value Transformer::parameters_value() const {
  io::Value v;
  for (const Parameter* p : named_parameters()) {
    const size_t dot = p->name.find('.');
    v.set_path({p->name.substr(0, dot), p->name.substr(dot + 1)}, p->value);
  }
  return v;
}

void Transformer::load_parameters(const io::Value& bundle, std::string_view what) {
  nn::load_parameters(*this, bundle, what);
}

nn::DropoutContext Transformer::dropout_context() {
  nn::DropoutContext d;
  d.training = training_ && autograd::grad_enabled() && config_.dropout > 0.0f;
  d.rng = &dropout_rng_;
  return d;
}

Var Transformer::embed(nn::Embedding& table, const std::vector<int64_t>& ids, int64_t N, int64_t T, int64_t offset) {
  Var e = table.forward(ids, {N, T});                                           // [N, T, E]
  e = autograd::scale(e, std::sqrt(static_cast<float>(config_.d_model)));      // * sqrt(E)
  e = pos_.forward(e, offset);                                                  // + PE[offset .. offset + T)
  const nn::DropoutContext d = dropout_context();
  if (!d.active(config_.dropout)) return e;
  ops::DropoutOptions o;
  o.p = config_.dropout;
  return autograd::dropout(e, o, *d.rng);
}

Var Transformer::embed_target(const std::vector<int64_t>& ids, int64_t N, int64_t T, int64_t offset) {
  return embed(target_table(), ids, N, T, offset);
}

Var Transformer::encode(const SourceBatch& batch) {
  ops::MaskSpec pad;
  pad.key_lengths = batch.src_lengths;
  Var x = embed(src_embed_, batch.src, batch.N, batch.S, 0);  // [N, S, E]
  return encoder_.forward(x, pad, dropout_context());         // [N, S, E]
}

Var Transformer::project(const Var& h) {
  if (output_) return output_->forward(h);  // [N, T', Vt]
  if (std::shared_ptr<const ops::LowpWeights> lowp = tied_lowp())
    return autograd::linear(h, Var::param(target_table().weight), Var::param(output_bias_), {}, nullptr, lowp);
  return autograd::linear(h, Var::param(target_table().weight), Var::param(output_bias_));  // tied: h W_emb^T + b
}

std::shared_ptr<const ops::LowpWeights> Transformer::tied_lowp() const {
  if (tied_precision_ == ops::Precision::Fp32) return nullptr;
  const Parameter& w = config_.shared_embeddings ? src_embed_.weight : tgt_embed_->weight;  // [Vt, E]
  return tied_lowp_.get({&w}, [&] {
    return ops::make_lowp_weights(w.value.data(), w.value.dim(0), w.value.dim(1), tied_precision_, w.name);
  });
}

void Transformer::set_precision(nn::PrecisionPlan& plan) {
  encoder_.set_precision(plan);
  decoder_.set_precision(plan);
  if (output_) return output_->set_precision(plan);
  const Parameter& w = target_table().weight;
  tied_precision_ = plan.for_weight(w.name, w.value.dim(0), w.value.dim(1), true);
  tied_lowp_ = DerivedSlot<ops::LowpWeights>();
  if (const ops::LowpWeights* s = plan.stored(w.name, tied_precision_, w.value.dim(0), w.value.dim(1)))
    tied_lowp_.get({&w}, [&] { return *s; });
  tied_lowp();  // made now: a weight the precision cannot hold is refused here
}

ForwardResult Transformer::forward(const TeacherForcedBatch& batch, const LossOptions& options) {
  AK_CHECK(options.dropout == 0.0f, "transformer: dropout {} in the forward options: the rate is the config's "
           "(dropout {})", options.dropout, config_.dropout);
  AK_CHECK(options.teacher_forcing == 1.0f, "transformer: teacher forcing {}: scheduled sampling is not supported "
           "(the decoder reads the whole reference target at once)", options.teacher_forcing);
  uint64_t key = dropout_seed_ * 0x9E3779B97F4A7C15ull + uint64_t(batch.epoch);  // the batch's own mask stream
  for (int64_t i : batch.index) key = (key ^ uint64_t(i)) * 0x100000001B3ull;
  dropout_rng_ = Rng(key);
  Var memory = encode(batch);                                         // [N, S, E]
  Var y = embed_target(batch.tgt_in, batch.N, batch.T);               // [N, T, E]
  ops::MaskSpec self_mask, memory_mask;
  self_mask.causal = ops::CausalKind::UpperLeft;
  memory_mask.key_lengths = batch.src_lengths;
  Var h = decoder_.forward(y, memory, self_mask, memory_mask, dropout_context());  // [N, T, E]
  ForwardResult out;
  out.logits = project(h);                                            // [N, T, Vt]
  ops::CrossEntropyOptions ce;
  ce.ignore_index = config_.pad_id;
  ce.label_smoothing = options.label_smoothing;
  out.loss = autograd::cross_entropy(out.logits, batch.tgt_out, ce);  // scalar
  return out;
}

std::vector<std::vector<int64_t>> Transformer::greedy(const SourceBatch& batch, int64_t max_len) {
  autograd::NoGrad no_grad;
  const int64_t N = batch.N;
  std::unique_ptr<DecoderState> state = start_decoding(batch, true);
  std::vector<int64_t> prev(static_cast<size_t>(N), config_.bos_id);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(N));
  std::vector<int64_t> row_of(static_cast<size_t>(N));  // the state's row r decodes batch row row_of[r]
  for (int64_t n = 0; n < N; ++n) row_of[size_t(n)] = n;
  for (int64_t t = 0; t < max_len && !row_of.empty(); ++t) {
    const Tensor lp = state->step(prev);  // [R, Vt]
    const int64_t V = lp.dim(1);
    std::vector<int64_t> keep, next, kept_rows;
    for (size_t r = 0; r < row_of.size(); ++r) {
      const int64_t best = best_output_token(lp.data() + int64_t(r) * V, V, config_.pad_id, config_.bos_id);
      if (best == config_.eos_id) continue;  // finished: dropped from the state
      out[size_t(row_of[r])].push_back(best);
      keep.push_back(int64_t(r));
      next.push_back(best);
      kept_rows.push_back(row_of[r]);
    }
    if (keep.size() != row_of.size() && !keep.empty()) state->select_rows(keep);
    row_of = std::move(kept_rows);
    prev = std::move(next);
  }
  return out;
}

}  // namespace attnkit::models
