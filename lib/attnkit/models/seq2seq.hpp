// The recurrent encoder-decoder (the documents' translation model), Luong-style attention or none.
// Legend: N batch, S source length, T target length (+1 for <bos>/<eos>), E embedding size, H hidden size,
// dirs 1 or 2 (bidirectional encoder), Hd = dirs*H the decoder's hidden size, L layers, Vs / Vt vocabularies.
//
//   x      = src_embed[src]                                   [N, S, E]
//   enc, h_n, c_n = encoder(x, src_lengths)                   enc [N, S, Hd], h_n [L*dirs, N, H]
//   s0     = h_n with each layer's two directions concatenated [L, N, Hd]  (c0 likewise, LSTM)
//   y      = tgt_embed[tgt_in]                                [N, T, E]    (<bos> y_1 .. y_m: teacher forcing)
//   s      = decoder(y, s0, c0)                               [N, T, Hd]   (one call over the whole target)
//   attention none:  logits = output(s)                       [N, T, Vt]   (the fixed context: only s0 carries
//                                                                            the source, the documents' bottleneck)
//   attention dot | scaled-dot | general | additive (Luong: the current state s_t attends):
//     c      = attention(query s, keys enc, values enc, keys past src_lengths masked)   [N, T, Hd]
//     h~     = tanh(combine([s; c]))                          [N, T, Hd]   combine: Linear(2 Hd -> Hd)
//     logits = output(h~)                                     [N, T, Vt]
//   loss   = cross_entropy(logits, tgt_out, ignore_index <pad>, label smoothing)   mean over real tokens
//
// Parameters (named_parameters(), this fixed order; state_dict-style names whose first part is the sub-bundle
// a checkpoint stores them under):
//   src_embed.weight [Vs, E] (row <pad> zero, no gradient)
//   encoder.weight_ih_l0 ... (nn::Recurrent's PyTorch names: `lstm-run --weights model.json#encoder` runs it)
//   tgt_embed.weight [Vt, E]
//   decoder.weight_ih_l0 ... (input E, hidden Hd, L layers, one direction)
//   attention.W [Hd, Hd] (general) | attention.W_q [Hd, Hd], attention.W_k [Hd, Hd], attention.v [Hd] (additive)
//   combine.weight [Hd, 2 Hd], combine.bias [Hd]   (any attention)
//   output.weight [Vt, Hd], output.bias [Vt]
//
// Greedy decoding runs the same layers step by step under autograd::NoGrad (one decoder step = the recurrent
// layer on [N, 1, E] with the previous state), batched, until every row has produced <eos> or max_len tokens.
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
#include "attnkit/train/batch.hpp"

namespace attnkit::models {

enum class AttentionKind { None, Dot, ScaledDot, General, Additive };
// "none", "dot", "scaled-dot", "general", "additive"; anything else is an attnkit::Error listing them.
AttentionKind parse_attention_kind(std::string_view name);
std::string_view attention_kind_name(AttentionKind kind);
// "rnn", "lstm", "gru".
nn::CellKind parse_cell_kind(std::string_view name);
std::string_view cell_kind_name(nn::CellKind kind);

struct Seq2SeqConfig {
  nn::CellKind cell = nn::CellKind::Lstm;
  AttentionKind attention = AttentionKind::Additive;
  int64_t src_vocab = 0;  // Vs
  int64_t tgt_vocab = 0;  // Vt
  int64_t embed = 32;     // E
  int64_t hidden = 64;    // H (per direction)
  int layers = 1;         // L
  bool bidirectional = false;
  int64_t decoder_hidden() const { return (bidirectional ? 2 : 1) * hidden; }  // Hd

  // {"cell": "lstm", "attention": "additive", "src_vocab": 14, ...} (numbers as decimal strings, so that
  // they read back exactly); from_value checks every member and the ranges, naming `what` in messages.
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

  std::string_view family() const override { return "recurrent"; }
  io::Value config_value() const override { return config_.to_value(); }
  // TranslationModel (models/model.hpp).
  ForwardResult forward(const train::Batch& batch, const LossOptions& options = {}) override;
  std::vector<std::vector<int64_t>> greedy(const train::Batch& batch, int64_t max_len) override;
  // One decoder step = the recurrent layer on [R, 1, E] from the carried state (cache), or on the whole
  // prefix [R, t, E] from s0 (no cache); cross_attention(-1 or 0, -1 or 0): the Luong attention's weights.
  std::unique_ptr<DecoderState> start_decoding(const train::Batch& sources, bool use_cache) override;

  std::vector<nn::Parameter*> named_parameters() override;
  using Module::named_parameters;

  // Parameters as sub-bundles: {"encoder": {"weight_ih_l0": ...}, "src_embed": {"weight": ...}, ...}.
  io::Value parameters_value() const override;
  void load_parameters(const io::Value& bundle, std::string_view what) override;

  nn::Recurrent& encoder() { return encoder_; }
  nn::Recurrent& decoder() { return decoder_; }

 private:
  struct Encoded {
    autograd::Var states;  // [N, S, Hd]
    autograd::Var h0, c0;  // [L, N, Hd] (c0: LSTM)
  };
  Encoded encode(const train::Batch& batch);
  // Decoder states s [N, T', Hd] -> logits [N, T', Vt] (attention, combine, output).
  // weights (when given): the attention weights [N, T', S] (left empty without attention).
  autograd::Var project(const autograd::Var& s, const Encoded& enc, const std::vector<int64_t>& src_lengths,
                        Tensor* weights = nullptr);
  friend class Seq2SeqDecoderState;  // models/seq2seq_decoding.cpp

  Seq2SeqConfig config_;
  nn::Embedding src_embed_;
  nn::Recurrent encoder_;
  nn::Embedding tgt_embed_;
  nn::Recurrent decoder_;
  nn::Parameter att_W_, att_W_q_, att_W_k_, att_v_;  // used as the attention kind needs
  std::optional<nn::Linear> combine_;
  nn::Linear output_;
};

}  // namespace attnkit::models
