// The recurrent encoder-decoder (the documents' translation model): attention none, or Luong or Bahdanau style.
// Legend: N batch, S source length, T target length (+1 for <bos>/<eos>), E embedding size, H hidden size,
// dirs 1 or 2 (bidirectional encoder), He = dirs*H the encoder's output size, Hd the decoder's hidden size (He
// unless Seq2SeqConfig::decoder_size says otherwise), A the additive score's size (Hd by default), L layers,
// Vs / Vt vocabularies.
// drop(.) is inverted dropout with probability p (ForwardOptions::dropout; the identity when p = 0 or when
// evaluating), as in PyTorch's nn.LSTM(dropout=p) plus the usual seq2seq recipe (OpenNMT, Luong et al. 2015):
// on both embeddings, between stacked recurrent layers (not after the last), and before the output layer.
//
//   x      = drop(src_embed[src])                             [N, S, E]
//   enc, h_n, c_n = encoder(x, src_lengths)                   enc [N, S, He], h_n [L*dirs, N, H]
//                   (layer k+1 reads drop(layer k's output))
//   s_0    = h_n with each layer's two directions concatenated [L, N, He]  (c_0 likewise, LSTM); when Hd != He
//            s_0 = tanh(bridge_h(s_0)), c_0 = bridge_c(c_0)  [L, N, Hd]
//   y_t    = drop(tgt_embed[y_{t-1}])                         [N, 1, E]    t = 1..T, y_0 = <bos>; teacher forcing:
//            y_{t-1} is the reference token; with ForwardOptions::teacher_forcing r < 1 (scheduled sampling) each
//            row's y_{t-1} is, with probability 1 - r, the model's own argmax of logits_{t-1} instead
//   attention none:  s_t = decoder(y_t, s_{t-1});  logits_t = output(drop(s_t))      [N, 1, Vt]
//                    (the fixed context: only s_0 carries the source, the documents' bottleneck)
//   Luong (the current state attends; with full teacher forcing one decoder call over the whole target):
//     s_t    = decoder(y_t, s_{t-1})                          [N, 1, Hd]
//     c_t    = attention(query s_t, keys enc, values enc, keys past src_lengths masked)   [N, 1, He]
//     h~_t   = tanh(combine([s_t; c_t]))                      [N, 1, Hd]   combine: Linear(Hd + He -> Hd)
//     logits_t = output(drop(h~_t))                           [N, 1, Vt]
//   Bahdanau (the previous state attends, the context feeds the cell; always step by step):
//     c_t    = attention(query s_{t-1} (top layer), keys enc, values enc, masked)      [N, 1, He]
//     s_t    = decoder([y_t; c_t], s_{t-1})                   [N, 1, Hd]   decoder input E + He
//     h~_t   = tanh(combine([s_t; c_t]))                      [N, 1, Hd]
//     logits_t = output(drop(h~_t))                           [N, 1, Vt]
//   logits = [logits_1 .. logits_T]                           [N, T, Vt]
//   loss   = cross_entropy(logits, tgt_out, ignore_index <pad>, label smoothing)   mean over real tokens
//
// Parameters (named_parameters(), this fixed order; state_dict-style names whose first part is the sub-bundle
// a checkpoint stores them under):
//   src_embed.weight [Vs, E] (row <pad> zero, no gradient)
//   encoder.weight_ih_l0 ... (nn::Recurrent's PyTorch names: `lstm-run --weights model.json#encoder` runs it)
//   tgt_embed.weight [Vt, E]
//   decoder.weight_ih_l0 ... (input E, or E + He for Bahdanau; hidden Hd, L layers, one direction)
//   attention.W [Hd, He] (general) | attention.W_q [Hd, A], attention.W_k [He, A], attention.v [A] (additive)
//   combine.weight [Hd, Hd + He], combine.bias [Hd]   (any attention)
//   output.weight [Vt, Hd], output.bias [Vt]
//   bridge_h.weight [Hd, He], bridge_h.bias [Hd], bridge_c.* likewise (LSTM)   (Hd != He)
// Each layer of the encoder and decoder is its own nn::Recurrent (so that dropout can sit between layers);
// the parameter names are those of one L-layer PyTorch module (weight_ih_l1 ...).
//
// Greedy decoding runs the same layers step by step under autograd::NoGrad (one decoder step = the recurrent
// layers on [N, 1, .] with the previous state), batched, until every row has produced <eos> or max_len tokens.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/autograd/var.hpp"
#include "attnkit/io/value.hpp"
#include "attnkit/models/model.hpp"
#include "attnkit/nn/embedding.hpp"
#include "attnkit/nn/linear.hpp"
#include "attnkit/nn/parameter.hpp"
#include "attnkit/nn/recurrent.hpp"
#include "attnkit/ops/attention.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/models/inputs.hpp"

namespace attnkit::models {

enum class AttentionKind { None, Dot, ScaledDot, General, Additive };
enum class AttentionStyle { Luong, Bahdanau };
// "luong", "bahdanau".
AttentionStyle parse_attention_style(std::string_view name);
std::string_view attention_style_name(AttentionStyle style);
// "none", "dot", "scaled-dot", "general", "additive"; anything else is an attnkit::Error listing them.
AttentionKind parse_attention_kind(std::string_view name);
std::string_view attention_kind_name(AttentionKind kind);
// "rnn", "lstm", "gru".
nn::CellKind parse_cell_kind(std::string_view name);
std::string_view cell_kind_name(nn::CellKind kind);

struct Seq2SeqConfig {
  nn::CellKind cell = nn::CellKind::Lstm;
  AttentionKind attention = AttentionKind::Additive;
  AttentionStyle style = AttentionStyle::Luong;  // Bahdanau needs an attention kind other than none
  int64_t src_vocab = 0;  // Vs
  int64_t tgt_vocab = 0;  // Vt
  int64_t embed = 32;     // E
  int64_t hidden = 64;    // H (per direction)
  int layers = 1;         // L
  bool bidirectional = false;
  // A: the additive score's projection size (W_q [Hd, A], W_k [He, A], v [A]); 0 means Hd. Only additive
  // attention has one: validate() refuses it with another kind.
  int64_t attention_dim = 0;
  // Hd: the decoder's hidden size; 0 means the encoder's output size He = dirs * H. Another size puts a bridge
  // between them (s_0 = tanh(bridge_h(h_enc)), c_0 = bridge_c(c_enc)); dot scores need Hd = He.
  int64_t decoder_size = 0;
  int64_t encoder_output() const { return (bidirectional ? 2 : 1) * hidden; }                    // He
  int64_t decoder_hidden() const { return decoder_size > 0 ? decoder_size : encoder_output(); }  // Hd
  bool bridged() const { return decoder_hidden() != encoder_output(); }
  int64_t attention_size() const { return attention_dim > 0 ? attention_dim : decoder_hidden(); }  // A

  // {"cell": "lstm", "attention": "additive", "src_vocab": 14, ...} (numbers as decimal strings, so that
  // they read back exactly); from_value checks every member and the ranges, naming `what` in messages
  // ("attention_style" may be absent: luong, as in checkpoints written before it existed; "attention_dim" and
  // "decoder_hidden" are written only when they are not the defaults, Hd and He, which their absence means).
  io::Value to_value() const;
  static Seq2SeqConfig from_value(const io::Value& value, std::string_view what);
  void validate() const;  // sizes >= 1, layers >= 1
};


class Seq2Seq : public TranslationModel {
 public:
  // Initialised from `rng`: embeddings N(0, 1) (the <pad> rows zero), recurrent layers and linears as PyTorch
  // (U(-1/sqrt(fan), 1/sqrt(fan))), general / additive score weights U(-1/sqrt(Hd), 1/sqrt(Hd)).
  Seq2Seq(const Seq2SeqConfig& config, Rng& rng);
  Seq2Seq(const Seq2Seq&) = delete;
  Seq2Seq& operator=(const Seq2Seq&) = delete;

  const Seq2SeqConfig& config() const { return config_; }

  // TranslationModel (models/model.hpp).
  std::string_view family() const override { return "recurrent"; }
  io::Value config_value() const override { return config_.to_value(); }
  ForwardResult forward(const TeacherForcedBatch& batch, const ForwardOptions& options = {}) override;
  std::vector<std::vector<int64_t>> greedy(const SourceBatch& batch, int64_t max_len) override;
  // One decoder step (step() below, either style) from the carried state (cache), or all the steps of the
  // prefix again from s0 (no cache); cross_attention(-1 or 0, -1 or 0): the attention's weights.
  std::unique_ptr<DecoderState> start_decoding(const SourceBatch& sources, bool use_cache) override;

  std::vector<Parameter*> named_parameters() override;
  using Module::named_parameters;

  // Parameters as sub-bundles: {"encoder": {"weight_ih_l0": ...}, "src_embed": {"weight": ...}, ...}.
  io::Value parameters_value() const override;
  void load_parameters(const io::Value& bundle, std::string_view what) override;
  // The encoder's and decoder's W_ih and W_hh, combine.weight and output.weight in the plan's precision. The
  // attention's score weights (attention.W, attention.W_q, attention.W_k, attention.v), the embeddings and the
  // biases stay float32.
  void set_precision(nn::PrecisionPlan& plan) override;

  // Layer k of the encoder / decoder (one nn::Recurrent each, named as layer k of an L-layer module).
  nn::Recurrent& encoder_layer(int k) { return encoder_.at(size_t(k)); }
  nn::Recurrent& decoder_layer(int k) { return decoder_.at(size_t(k)); }

 private:
  struct Encoded {
    autograd::Var states;  // [N, S, He]
    autograd::Var h0, c0;  // [L, N, Hd] (c0: LSTM), through the bridge when Hd != He
    // Additive attention: the keys projected once, states W_k [N, S, A], for every decoder step's scores
    // (a step-by-step decoder would otherwise project them again at each step, forward and backward).
    autograd::Var keys;
  };
  struct StackResult {
    autograd::Var output;    // [N, T', dirs*H'] the last layer's
    autograd::Var h_n, c_n;  // [L*dirs, N, H']
  };
  // The layers in turn, drop(.) between them; h0 / c0 [L*dirs, N, H'] or undefined.
  StackResult run_stack(std::vector<nn::Recurrent>& layers, const autograd::Var& x, const autograd::Var& h0,
                        const autograd::Var& c0, const std::vector<int64_t>* lengths, const ForwardOptions& o);
  Encoded encode(const SourceBatch& batch, const ForwardOptions& o);
  // weights (when given): the attention weights [N, T', S].
  autograd::Var attend(const autograd::Var& query, const Encoded& enc, const std::vector<int64_t>& src_lengths,
                       Tensor* weights = nullptr);
  // Decoder states s [N, T', Hd] and their contexts c (undefined for none) -> logits [N, T', Vt].
  autograd::Var project(const autograd::Var& s, const autograd::Var& c, const ForwardOptions& o);
  // One decoder step: y [N, 1, E] (embedded, dropped), state h, c [L, N, Hd] updated -> logits [N, 1, Vt].
  autograd::Var step(const autograd::Var& y, autograd::Var& h, autograd::Var& c, const Encoded& enc,
                     const std::vector<int64_t>& src_lengths, const ForwardOptions& o, Tensor* weights = nullptr);
  autograd::Var drop(const autograd::Var& x, const ForwardOptions& o);
  friend class Seq2SeqDecoderState;  // models/seq2seq_decoding.cpp

  Seq2SeqConfig config_;
  nn::Embedding src_embed_;
  std::vector<nn::Recurrent> encoder_;  // L layers
  nn::Embedding tgt_embed_;
  std::vector<nn::Recurrent> decoder_;  // L layers
  Parameter att_W_, att_W_q_, att_W_k_, att_v_;  // used as the attention kind needs
  std::optional<nn::Linear> bridge_h_, bridge_c_;  // Hd != He: He -> Hd (bridge_c: LSTM)
  std::optional<nn::Linear> combine_;
  nn::Linear output_;
};

}  // namespace attnkit::models
