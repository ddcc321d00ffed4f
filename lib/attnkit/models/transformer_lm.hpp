// The decoder-only Transformer language model (GPT's shape): the last row predicts the next token.
// Legend: N batch, T context (tokens per row), E d_model, F ff size, NH heads, L layers, V vocabulary,
// P learned positions.
//
//   x      = dropout(embed[ids] + PE[0 .. T))                    [N, T, E]   (no sqrt(E) scale, as GPT)
//   h      = decoder(x, causal self-attention)                   [N, T, E]   (L layers + final norm)
//   logits = output(h) = h W^T + b                              [N, T, V]   (W = embed.weight if tied)
//   loss   = cross_entropy(logits, next ids, ignore_index <pad>)  mean over the tokens predicted
// The layers are nn/transformer.hpp's encoder layers (self-attention and the feed-forward block, no
// cross-attention) under a causal mask: pre-LN by default (GPT-2's), post-LN with norm_first false; ReLU or
// GELU. Positions: a learned table of P = max_positions rows (the default, GPT's) or sinusoidal.
// Dropout (config.dropout, every dropout of the model) applies while gradients are recorded and training(),
// its masks drawn from the Rng of the forward options; under autograd::NoGrad the model is deterministic.
//
// As a TranslationModel: the teacher-forced batch's tgt_in [N, T] are the inputs and tgt_out [N, T] the next
// tokens (<pad> positions ignored); its sources are not read (S must be 0). Decoding: the sources are the
// prompts (models/transformer_lm_decoding.cpp).
//
// Parameters (named_parameters(), this order; the first part of a name is its checkpoint sub-bundle):
//   embed.weight [V, E]   pos_embed.weight [P, E] (learned positions only)
//   decoder.layers.i.{self_attn.in_proj_weight, self_attn.in_proj_bias, self_attn.out_proj.weight,
//                     self_attn.out_proj.bias, linear1.*, linear2.*, norm1.*, norm2.*}, decoder.norm.*
//   output.weight [V, E] (absent with tied_output), output.bias [V]
// Init: embeddings, positions and the output N(0, 0.02) (GPT-2's), biases zero, the layers nn.Transformer's.
//
// Config (config_value(), a checkpoint's "config"): {"family": "transformer-lm", "vocab": "65", ...}, every
// value a string; from_value also takes JSON numbers and booleans, and defaults for all but the vocabulary.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "attnkit/autograd/var.hpp"
#include "attnkit/io/value.hpp"
#include "attnkit/models/model.hpp"
#include "attnkit/nn/embedding.hpp"
#include "attnkit/nn/linear.hpp"
#include "attnkit/nn/positional.hpp"
#include "attnkit/nn/transformer.hpp"
#include "attnkit/tensor/random.hpp"

namespace attnkit::models {

struct TransformerLMConfig {
  int64_t vocab = 0;    // V
  int64_t layers = 4;   // L
  int64_t heads = 4;    // NH
  int64_t d_model = 128;  // E
  int64_t ff = 512;     // F
  float dropout = 0.0f;
  bool norm_first = true;
  nn::FfnActivation activation = nn::FfnActivation::Gelu;
  nn::PositionalKind positional = nn::PositionalKind::Learned;
  int64_t max_positions = 256;  // P: the learned positions, the context (decoding past it reads the last P tokens)
  bool tied_output = false;     // output.weight = embed.weight
  int64_t pad_id = 0;           // ignored by the loss

  nn::TransformerLayerOptions layer_options() const;
  io::Value to_value() const;
  static TransformerLMConfig from_value(const io::Value& value, std::string_view what);
  void validate() const;
};

class TransformerLM : public TranslationModel {
 public:
  TransformerLM(const TransformerLMConfig& config, Rng& rng);
  TransformerLM(const TransformerLM&) = delete;
  TransformerLM& operator=(const TransformerLM&) = delete;

  const TransformerLMConfig& config() const { return config_; }
  std::string_view family() const override { return "transformer-lm"; }
  bool has_source() const override { return false; }
  io::Value config_value() const override { return config_.to_value(); }

  // Loss and logits over tgt_in -> tgt_out. options.rng draws the dropout masks (needed when config.dropout > 0
  // and gradients are recorded); options.dropout and teacher_forcing must stay at their defaults.
  ForwardResult forward(const TeacherForcedBatch& batch, const ForwardOptions& options = {}) override;
  // Greedy continuation of each prompt (batch.src) by max_len tokens (the argmax at each step, whatever it is).
  std::vector<std::vector<int64_t>> greedy(const SourceBatch& batch, int64_t max_len) override;
  // Incremental decoding of the prompts (every prompt of the batch the same length; models/decoding.hpp):
  // start_decoding runs the prompts, and the first step() (whose tokens, the search's <bos>, stand for the
  // prompt) returns the prediction after the prompt's last token. With the cache each layer keeps its
  // self-attention keys and values [R, t, E]; without, every step runs the whole sequence again.
  // A language model has no source: cross_attention() is refused.
  std::unique_ptr<DecoderState> start_decoding(const SourceBatch& prompts, bool use_cache) override;

  std::vector<Parameter*> named_parameters() override;
  using Module::named_parameters;
  io::Value parameters_value() const override;
  void load_parameters(const io::Value& bundle, std::string_view what) override;
  // Inference in lower precision (models/model.hpp): the decoder layers' attention projections and feed-forward
  // matrices, then the output projection (output.weight, or with tied_output the embedding table's weight, by its
  // name: the lookup reads it in float32, the product in the plan's precision). Embeddings, positions, norms,
  // biases, softmax and residuals stay float32.
  void set_precision(nn::PrecisionPlan& plan) override;

  void set_training(bool on) { training_ = on; }
  bool training() const { return training_; }

  // The pieces, for decoding: embedded, position-encoded ids at positions offset .. offset + T ([N, T] ->
  // [N, T, E]); the output projection [N, T', E] -> [N, T', V].
  autograd::Var embed(const std::vector<int64_t>& ids, int64_t N, int64_t T, int64_t offset, Rng* rng = nullptr);
  autograd::Var project(const autograd::Var& h);
  nn::TransformerEncoder& decoder() { return decoder_; }

 private:
  friend class TransformerLMState;  // models/transformer_lm_decoding.cpp

  TransformerLMConfig config_;
  nn::Embedding embed_;
  nn::PositionalEncoding pos_;
  nn::TransformerEncoder decoder_;
  std::optional<nn::Linear> output_;
  // The tied output product's weight (the embedding table) in tied_precision_, or null (float32).
  std::shared_ptr<const ops::LowpWeights> tied_lowp() const;
  ops::Precision tied_precision_ = ops::Precision::Fp32;
  DerivedSlot<ops::LowpWeights> tied_lowp_;
  Parameter output_bias_;  // tied: "output.bias"
  bool training_ = true;
};

}  // namespace attnkit::models
