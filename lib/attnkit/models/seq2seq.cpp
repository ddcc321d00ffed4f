#include "attnkit/models/seq2seq.hpp"

#include <algorithm>
#include <cmath>

#include "attnkit/autograd/attention.hpp"
#include "attnkit/autograd/functional.hpp"
#include "attnkit/autograd/layers.hpp"
#include "attnkit/models/fields.hpp"
#include "attnkit/nn/state_dict.hpp"
#include "attnkit/tensor/enum_names.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/models/tokens.hpp"

namespace attnkit::models {

using autograd::Var;

namespace {

// h_n [L*dirs, N, H] -> [L, N, dirs*H]: each layer's directions side by side (the decoder's initial state).
Var merge_directions(const Var& h_n, int layers, bool bidirectional) {
  if (!bidirectional) return h_n;  // [L, N, H]
  std::vector<Var> per_layer;
  for (int l = 0; l < layers; ++l)
    per_layer.push_back(autograd::concat({autograd::slice(h_n, 0, 2 * l, 2 * l + 1),         // [1, N, H]
                                          autograd::slice(h_n, 0, 2 * l + 1, 2 * l + 2)},     // [1, N, H]
                                         2));                                                  // [1, N, 2H]
  return per_layer.size() == 1 ? per_layer[0] : autograd::concat(per_layer, 0);              // [L, N, 2H]
}

constexpr EnumName<AttentionKind> kAttentionKindNames[] = {{AttentionKind::None, "none"},
                                                           {AttentionKind::Dot, "dot"},
                                                           {AttentionKind::ScaledDot, "scaled-dot"},
                                                           {AttentionKind::General, "general"},
                                                           {AttentionKind::Additive, "additive"}};
constexpr EnumName<AttentionStyle> kAttentionStyleNames[] = {{AttentionStyle::Luong, "luong"},
                                                             {AttentionStyle::Bahdanau, "bahdanau"}};

}  // namespace

AttentionKind parse_attention_kind(std::string_view name) {
  if (const std::optional<AttentionKind> kind = parse_name(kAttentionKindNames, name)) return *kind;
  fail("unknown attention \"{}\" (expected {})", name, names_or(kAttentionKindNames));
}

std::string_view attention_kind_name(AttentionKind kind) { return name_of(kAttentionKindNames, kind); }

AttentionStyle parse_attention_style(std::string_view name) {
  if (const std::optional<AttentionStyle> style = parse_name(kAttentionStyleNames, name)) return *style;
  fail("unknown attention style \"{}\" (expected {})", name, names_or(kAttentionStyleNames));
}

std::string_view attention_style_name(AttentionStyle style) { return name_of(kAttentionStyleNames, style); }

// The seq2seq model takes every cell but rnn-relu.
nn::CellKind parse_cell_kind(std::string_view name) {
  const std::optional<nn::CellKind> cell = parse_name(ops::kCellNames, name);
  if (cell && *cell != nn::CellKind::RnnRelu) return *cell;
  fail("unknown cell \"{}\" (expected rnn, lstm or gru)", name);
}

std::string_view cell_kind_name(nn::CellKind kind) { return ops::cell_name(kind); }

void Seq2SeqConfig::validate() const {
  AK_CHECK(cell == nn::CellKind::RnnTanh || cell == nn::CellKind::Lstm || cell == nn::CellKind::Gru,
           "seq2seq: cell {} is not supported (rnn, lstm, gru)", ops::cell_name(cell));
  AK_CHECK(src_vocab > kNumSpecials && tgt_vocab > kNumSpecials,
           "seq2seq: vocabularies of {} and {} tokens (each needs the 4 special tokens and at least one more)",
           src_vocab, tgt_vocab);
  AK_CHECK(embed >= 1 && hidden >= 1 && layers >= 1, "seq2seq: embed {}, hidden {} and layers {} must be >= 1", embed,
           hidden, layers);
  AK_CHECK(style == AttentionStyle::Luong || attention != AttentionKind::None,
           "seq2seq: Bahdanau-style attention needs an attention score (dot, scaled-dot, general or additive), not none");
  AK_CHECK(attention_dim >= 0, "seq2seq: attention_dim {} must be >= 1 (or 0: the decoder's hidden size)",
           attention_dim);
  AK_CHECK(decoder_size >= 0, "seq2seq: decoder_hidden {} must be >= 1 (or 0: the encoder's output size)",
           decoder_size);
  AK_CHECK(!bridged() || (attention != AttentionKind::Dot && attention != AttentionKind::ScaledDot),
           "seq2seq: a decoder of {} units and an encoder output of {}: the {} score needs the two sizes equal "
           "(general and additive take any)",
           decoder_hidden(), encoder_output(), attention_kind_name(attention));
  AK_CHECK(attention_dim == 0 || attention == AttentionKind::Additive,
           "seq2seq: an attention size ({}) goes with additive attention only, not {}", attention_dim,
           attention_kind_name(attention));
}

io::Value Seq2SeqConfig::to_value() const {
  io::Value v;
  v.set("cell", text_value(cell_kind_name(cell)));
  v.set("attention", text_value(attention_kind_name(attention)));
  v.set("attention_style", text_value(attention_style_name(style)));
  v.set("src_vocab", text_value(std::to_string(src_vocab)));
  v.set("tgt_vocab", text_value(std::to_string(tgt_vocab)));
  v.set("embed", text_value(std::to_string(embed)));
  v.set("hidden", text_value(std::to_string(hidden)));
  v.set("layers", text_value(std::to_string(layers)));
  v.set("bidirectional", text_value(bidirectional ? "true" : "false"));
  if (attention_dim > 0 && attention_dim != decoder_hidden())
    v.set("attention_dim", text_value(std::to_string(attention_dim)));
  if (bridged()) v.set("decoder_hidden", text_value(std::to_string(decoder_hidden())));
  return v;
}

Seq2SeqConfig Seq2SeqConfig::from_value(const io::Value& value, std::string_view what) {
  AK_CHECK(value.is_bundle(), "{}: the model config must be an object", what);
  const Fields f(value, std::string(what), "config ");
  Seq2SeqConfig c;
  c.cell = f.choice("cell", parse_cell_kind);
  c.attention = f.choice("attention", parse_attention_kind);
  c.style = f.choice("attention_style", "luong", parse_attention_style);
  constexpr int64_t kMaxSize = int64_t{1} << 16, kMaxVocab = int64_t{1} << 24;
  c.src_vocab = f.integer("src_vocab", 1, kMaxVocab);
  c.tgt_vocab = f.integer("tgt_vocab", 1, kMaxVocab);
  c.embed = f.integer("embed", 1, kMaxSize);
  c.hidden = f.integer("hidden", 1, kMaxSize);
  c.layers = static_cast<int>(f.integer("layers", 1, 64));
  c.bidirectional = f.boolean("bidirectional");
  c.attention_dim = f.integer("attention_dim", 0, 1, kMaxSize);
  c.decoder_size = f.integer("decoder_hidden", 0, 1, kMaxSize);
  try {
    c.validate();
  } catch (const Error& e) {
    fail("{}: {}", what, e.what());
  }
  return c;
}

namespace {

// L one-layer modules whose parameters are named as those of one L-layer PyTorch module under `prefix`
// ("encoder.weight_ih_l1_reverse"); drawn in that module's state_dict order, so the initialisation is the same.
std::vector<nn::Recurrent> make_layers(nn::CellKind cell, int64_t input, int64_t hidden, int layers, bool bidirectional,
                                       Rng& rng, const std::string& prefix) {
  std::vector<nn::Recurrent> out;
  for (int k = 0; k < layers; ++k) {
    ops::RecurrentConfig rc;
    rc.cell = cell;
    rc.input_size = k == 0 ? input : (bidirectional ? 2 : 1) * hidden;
    rc.hidden_size = hidden;
    rc.layers = 1;
    rc.bidirectional = bidirectional;
    out.push_back(nn::Recurrent::random(rc, rng));
    for (Parameter* p : out.back().named_parameters()) {
      std::string name = p->name;  // "weight_ih_l0[_reverse]"
      const size_t at = name.find("_l0");
      if (at != std::string::npos) name.replace(at, 3, "_l" + std::to_string(k));
      p->name = prefix + "." + name;
    }
  }
  return out;
}

Seq2SeqConfig checked(const Seq2SeqConfig& c) {
  c.validate();
  return c;
}

}  // namespace

Seq2Seq::Seq2Seq(const Seq2SeqConfig& config, Rng& rng)
    : config_(checked(config)),
      src_embed_(config.src_vocab, config.embed, rng, kPad, "src_embed"),
      encoder_(make_layers(config.cell, config.embed, config.hidden, config.layers, config.bidirectional, rng,
                           "encoder")),
      tgt_embed_(config.tgt_vocab, config.embed, rng, kPad, "tgt_embed"),
      decoder_(make_layers(config.cell,
                           config.embed + (config.style == AttentionStyle::Bahdanau ? config.encoder_output() : 0),
                           config.decoder_hidden(), config.layers, false, rng, "decoder")),
      output_(config.decoder_hidden(), config.tgt_vocab, rng, true, "output") {
  const int64_t Hd = config.decoder_hidden(), He = config.encoder_output(), A = config.attention_size();
  const float bound = 1.0f / std::sqrt(static_cast<float>(Hd));
  if (config.attention == AttentionKind::General) {
    att_W_ = Parameter("attention.W", rand_uniform({Hd, He}, rng, -bound, bound));  // [Hd, He]
  } else if (config.attention == AttentionKind::Additive) {
    att_W_q_ = Parameter("attention.W_q", rand_uniform({Hd, A}, rng, -bound, bound));  // [Hd, A]
    att_W_k_ = Parameter("attention.W_k", rand_uniform({He, A}, rng, -bound, bound));  // [He, A]
    att_v_ = Parameter("attention.v", rand_uniform({A}, rng, -bound, bound));          // [A]
  }
  if (config.attention != AttentionKind::None) combine_.emplace(Hd + He, Hd, rng, true, "combine");
  if (config.bridged()) {  // drawn last: a model without a bridge initialises as before
    bridge_h_.emplace(He, Hd, rng, true, "bridge_h");
    if (config.cell == nn::CellKind::Lstm) bridge_c_.emplace(He, Hd, rng, true, "bridge_c");
  }
}

std::vector<Parameter*> Seq2Seq::named_parameters() {
  std::vector<Parameter*> out;
  auto add = [&](nn::Module& m) {
    for (Parameter* p : m.named_parameters()) out.push_back(p);
  };
  add(src_embed_);
  for (nn::Recurrent& r : encoder_) add(r);
  add(tgt_embed_);
  for (nn::Recurrent& r : decoder_) add(r);
  if (config_.attention == AttentionKind::General) out.push_back(&att_W_);
  if (config_.attention == AttentionKind::Additive) {
    out.push_back(&att_W_q_);
    out.push_back(&att_W_k_);
    out.push_back(&att_v_);
  }
  if (combine_) add(*combine_);
  add(output_);
  if (bridge_h_) add(*bridge_h_);
  if (bridge_c_) add(*bridge_c_);
  return out;
}

io::Value Seq2Seq::parameters_value() const {
  io::Value v;
  for (const Parameter* p : named_parameters()) {
    const size_t dot = p->name.find('.');
    v.set_path({p->name.substr(0, dot), p->name.substr(dot + 1)}, p->value);
  }
  return v;
}

void Seq2Seq::load_parameters(const io::Value& bundle, std::string_view what) {
  nn::load_parameters(*this, bundle, what);
}

void Seq2Seq::set_precision(nn::PrecisionPlan& plan) {
  for (nn::Recurrent& r : encoder_) r.set_precision(plan);
  for (nn::Recurrent& r : decoder_) r.set_precision(plan);
  if (combine_) combine_->set_precision(plan);
  output_.set_precision(plan);
}

Var Seq2Seq::drop(const Var& x, const ForwardOptions& o) {
  if (o.dropout <= 0.0f) return x;
  AK_CHECK(o.rng != nullptr, "seq2seq: dropout {} needs a random number generator", o.dropout);
  ops::DropoutOptions d;
  d.p = o.dropout;
  return autograd::dropout(x, d, *o.rng);  // same shape
}

Seq2Seq::StackResult Seq2Seq::run_stack(std::vector<nn::Recurrent>& layers, const Var& x, const Var& h0,
                                        const Var& c0, const std::vector<int64_t>* lengths,
                                        const ForwardOptions& o) {
  const int L = static_cast<int>(layers.size());
  if (L == 1) {
    auto r = layers[0].forward(x, h0, c0, lengths);
    return {r.output, r.h_n, r.c_n};
  }
  const int dirs = layers[0].config().directions();
  std::vector<Var> hs, cs;
  Var in = x;  // [N, T', D]
  for (int k = 0; k < L; ++k) {
    const Var h0k = h0.defined() ? autograd::slice(h0, 0, k * dirs, (k + 1) * dirs) : Var();  // [dirs, N, H']
    const Var c0k = c0.defined() ? autograd::slice(c0, 0, k * dirs, (k + 1) * dirs) : Var();
    auto r = layers[size_t(k)].forward(in, h0k, c0k, lengths);  // output [N, T', dirs*H']
    hs.push_back(r.h_n);
    if (r.c_n.defined()) cs.push_back(r.c_n);
    in = k + 1 < L ? drop(r.output, o) : r.output;
  }
  StackResult out;
  out.output = in;                                      // [N, T', dirs*H']
  out.h_n = autograd::concat(hs, 0);                    // [L*dirs, N, H']
  if (!cs.empty()) out.c_n = autograd::concat(cs, 0);
  return out;
}

Seq2Seq::Encoded Seq2Seq::encode(const SourceBatch& batch, const ForwardOptions& o) {
  Encoded e;
  Var x = drop(src_embed_.forward(batch.src, {batch.N, batch.S}), o);     // [N, S, E]
  auto r = run_stack(encoder_, x, {}, {}, &batch.src_lengths, o);          // output [N, S, He]
  e.states = r.output;
  e.h0 = merge_directions(r.h_n, config_.layers, config_.bidirectional);    // [L, N, He]
  if (config_.cell == nn::CellKind::Lstm) e.c0 = merge_directions(r.c_n, config_.layers, config_.bidirectional);
  if (bridge_h_) {
    e.h0 = autograd::tanh(bridge_h_->forward(e.h0));  // [L, N, He] -> [L, N, Hd]
    if (bridge_c_) e.c0 = bridge_c_->forward(e.c0);   // [L, N, He] -> [L, N, Hd]
  }
  if (config_.attention == AttentionKind::Additive) {
    const int64_t He = config_.encoder_output();
    e.keys = autograd::reshape(autograd::matmul(autograd::reshape(e.states, {batch.N * batch.S, He}),
                                                Var::param(att_W_k_)),
                               {batch.N, batch.S, att_W_k_.value.dim(1)});  // [N*S, He] x [He, A] -> [N, S, A]
  }
  return e;
}

Var Seq2Seq::attend(const Var& query, const Encoded& enc, const std::vector<int64_t>& src_lengths, Tensor* weights) {
  autograd::AttentionOptions a;
  switch (config_.attention) {
    case AttentionKind::Dot: a.score = ops::ScoreKind::Dot; break;
    case AttentionKind::ScaledDot: a.score = ops::ScoreKind::ScaledDot; break;
    case AttentionKind::General:
      a.score = ops::ScoreKind::General;
      a.weights.W = Var::param(att_W_);
      break;
    case AttentionKind::Additive:
      a.score = ops::ScoreKind::Additive;
      a.weights.W_q = Var::param(att_W_q_);
      a.weights.v = Var::param(att_v_);  // W_k: enc.keys are projected already
      break;
    case AttentionKind::None: fail("seq2seq: attend without attention");
  }
  a.mask.key_lengths = src_lengths;
  if (weights != nullptr) a.keep = ops::KeepWeights::Yes;
  const Var& keys = config_.attention == AttentionKind::Additive ? enc.keys : enc.states;  // [N, S, A] / [N, S, He]
  autograd::AttentionOutput out = autograd::attention(query, keys, enc.states, a);
  if (weights != nullptr) *weights = std::move(out.weights);  // [N, T', S]
  return out.context;                                          // [N, T', He]
}

Var Seq2Seq::project(const Var& s, const Var& c, const ForwardOptions& o) {
  if (config_.attention == AttentionKind::None) return output_.forward(drop(s, o));  // [N, T', Vt]
  Var h = autograd::tanh(combine_->forward(autograd::concat({s, c}, 2)));  // [N, T', Hd + He] -> [N, T', Hd]
  return output_.forward(drop(h, o));                                     // [N, T', Vt]
}

Var Seq2Seq::step(const Var& y, Var& h, Var& c, const Encoded& enc, const std::vector<int64_t>& src_lengths,
                  const ForwardOptions& o, Tensor* weights) {
  const int L = config_.layers;
  if (config_.style == AttentionStyle::Bahdanau) {
    const int64_t N = y.value().dim(0), Hd = config_.decoder_hidden();
    const Var top = L == 1 ? h : autograd::slice(h, 0, L - 1, L);                // [1, N, Hd]
    const Var ctx = attend(autograd::reshape(top, {N, 1, Hd}), enc, src_lengths, weights);  // [N, 1, He]
    auto r = run_stack(decoder_, autograd::concat({y, ctx}, 2), h, c, nullptr, o);  // [N, 1, E + He] -> [N, 1, Hd]
    h = r.h_n;  // [L, N, Hd]
    c = r.c_n;
    return project(r.output, ctx, o);  // [N, 1, Vt]
  }
  auto r = run_stack(decoder_, y, h, c, nullptr, o);  // output [N, 1, Hd]
  h = r.h_n;
  c = r.c_n;
  const Var ctx =
      config_.attention == AttentionKind::None ? Var() : attend(r.output, enc, src_lengths, weights);  // [N, 1, He]
  return project(r.output, ctx, o);  // [N, 1, Vt]
}

ForwardResult Seq2Seq::forward(const TeacherForcedBatch& batch, const ForwardOptions& options) {
  AK_CHECK(options.dropout >= 0.0f && options.dropout < 1.0f, "seq2seq: dropout {} must be in [0, 1)",
           options.dropout);
  AK_CHECK(options.teacher_forcing >= 0.0f && options.teacher_forcing <= 1.0f,
           "seq2seq: teacher forcing ratio {} must be in [0, 1]", options.teacher_forcing);
  const bool sampling = options.teacher_forcing < 1.0f;
  AK_CHECK(!sampling || options.rng != nullptr, "seq2seq: scheduled sampling needs a random number generator");
  Encoded enc = encode(batch, options);
  ForwardResult out;
  if (config_.style == AttentionStyle::Luong && !sampling) {
    // Teacher forcing throughout: every decoder input is known, so one call over the whole target.
    Var y = drop(tgt_embed_.forward(batch.tgt_in, {batch.N, batch.T}), options);            // [N, T, E]
    auto r = run_stack(decoder_, y, enc.h0, enc.c0, &batch.tgt_lengths, options);          // output [N, T, Hd]
    const Var ctx = config_.attention == AttentionKind::None ? Var() : attend(r.output, enc, batch.src_lengths);
    out.logits = project(r.output, ctx, options);                                           // [N, T, Vt]
  } else {
    // Step by step: Bahdanau's cell input needs c_t, and scheduled sampling needs logits_{t-1}.
    const int64_t N = batch.N, T = batch.T, V = config_.tgt_vocab;
    Var h = enc.h0, c = enc.c0;
    std::vector<Var> logits;
    std::vector<int64_t> ids(static_cast<size_t>(N));
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t n = 0; n < N; ++n) {
        int64_t id = batch.tgt_in[size_t(n * T + t)];
        // Scheduled sampling: one draw per row and step after the first, in row order.
        if (sampling && t > 0 && options.rng->uniform() >= options.teacher_forcing) {
          const float* row = logits.back().value().data() + n * V;
          id = std::max_element(row, row + V) - row;
        }
        ids[size_t(n)] = id;
      }
      const Var y = drop(tgt_embed_.forward(ids, {N, 1}), options);  // [N, 1, E]
      logits.push_back(step(y, h, c, enc, batch.src_lengths, options));  // [N, 1, Vt]
    }
    out.logits = T == 1 ? logits[0] : autograd::concat(logits, 1);  // [N, T, Vt]
  }
  ops::CrossEntropyOptions ce;
  ce.ignore_index = kPad;
  ce.label_smoothing = options.label_smoothing;
  out.loss = autograd::cross_entropy(out.logits, batch.tgt_out, ce);  // scalar
  return out;
}

std::vector<std::vector<int64_t>> Seq2Seq::greedy(const SourceBatch& batch, int64_t max_len) {
  autograd::NoGrad no_grad;
  const int64_t N = batch.N, V = config_.tgt_vocab;
  const ForwardOptions eval;
  Encoded enc = encode(batch, eval);
  Var h = enc.h0, c = enc.c0;
  std::vector<int64_t> prev(static_cast<size_t>(N), kBos);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(N));
  std::vector<char> done(static_cast<size_t>(N), 0);
  int64_t remaining = N;
  for (int64_t t = 0; t < max_len && remaining > 0; ++t) {
    const Var y = tgt_embed_.forward(prev, {N, 1});                               // [N, 1, E]
    const Var step_logits = step(y, h, c, enc, batch.src_lengths, eval);  // [N, 1, V]; kept: value() refers into it
    const Tensor& logits = step_logits.value();                         // [N, 1, V]
    for (int64_t n = 0; n < N; ++n) {
      const int64_t best = best_output_token(logits.data() + n * V, V);
      prev[size_t(n)] = best;
      if (done[size_t(n)]) continue;
      if (best == kEos) {
        done[size_t(n)] = 1;
        --remaining;
      } else {
        out[size_t(n)].push_back(best);
      }
    }
  }
  return out;
}

}  // namespace attnkit::models
