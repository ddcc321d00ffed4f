// The Transformer encoder-decoder ("Attention Is All You Need"; PyTorch's nn.Transformer with embeddings,
// positional encoding and an output projection around it).
// Legend: N batch, S source length, T target length (+1 for <bos>/<eos>), E d_model, F ff size, NH heads,
// L layers, Vs / Vt vocabularies, P learned positions.
//
//   x      = dropout(PE(src_embed[src] * sqrt(E)))                          [N, S, E]
//   memory = encoder(x, source key padding)                                 [N, S, E]  (L layers + final norm)
//   y      = dropout(PE(tgt_embed[tgt_in] * sqrt(E)))                       [N, T, E]  (<bos> y_1 .. y_m)
//   h      = decoder(y, memory, causal self-attention, source key padding)  [N, T, E]  (L layers + final norm)
//   logits = output(h) = h W^T + b                                         [N, T, Vt] (W = tgt_embed.weight if tied)
//   loss   = cross_entropy(logits, tgt_out, ignore_index <pad>, label smoothing)   mean over real tokens
// The layers are nn/transformer.hpp's (post-LN by default, pre-LN with norm_first; ReLU or GELU), the
// positional encoding nn/positional.hpp's (sinusoidal, or a learned table of P positions shared by both sides).
// Dropout (every dropout of the model, rate config.dropout) is applied by forward() while recording gradients
// and training(); under autograd::NoGrad (evaluation, decoding) the model is deterministic. Each forward draws its
// masks from an Rng seeded by (the dropout seed, the batch's epoch and example indices), so that a resumed
// training run draws the same masks as an uninterrupted one without any generator state in the checkpoint.
//
// Parameters (named_parameters(), this order; PyTorch state_dict names, whose first part is the sub-bundle a
// checkpoint stores them under):
//   src_embed.weight [Vs, E]   tgt_embed.weight [Vt, E] (absent with shared_embeddings: src_embed serves both)
//   pos_embed.weight [P, E] (learned positions only)
//   encoder.layers.i.{self_attn.in_proj_weight, ..., norm2.bias}, encoder.norm.{weight, bias}
//   decoder.layers.i.{self_attn.*, multihead_attn.*, linear1.*, linear2.*, norm1..3.*}, decoder.norm.*
//   output.weight [Vt, E] (absent with tied_output: tgt_embed.weight is used), output.bias [Vt]
// So a PyTorch model holding `src_embed`, `tgt_embed` (nn.Embedding), an nn.Transformer's `encoder` and
// `decoder` (batch_first=True) and `output` (nn.Linear) exports a state_dict this class loads unchanged.
//
// Config (config_value(), a checkpoint's "config"): {"family": "transformer", "src_vocab": "14", ...}, every value
// a string; from_value also takes JSON numbers and booleans (a config written by hand), and defaults for all but
// the vocabularies: see TransformerConfig.
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
#include "attnkit/models/inputs.hpp"

namespace attnkit::models {

struct TransformerConfig {
  int64_t src_vocab = 0;       // Vs
  int64_t tgt_vocab = 0;       // Vt
  int64_t encoder_layers = 6;  // L (encoder)
  int64_t decoder_layers = 6;  // L (decoder)
  int64_t heads = 8;           // NH
  int64_t d_model = 512;       // E
  int64_t ff = 2048;           // F
  float dropout = 0.1f;
  bool norm_first = false;
  nn::FfnActivation activation = nn::FfnActivation::Relu;
  nn::PositionalKind positional = nn::PositionalKind::Sinusoidal;
  int64_t max_positions = 1024;  // P (learned positions)
  bool shared_embeddings = false;  // one table for both sides (needs Vs == Vt)
  bool tied_output = false;        // output.weight = tgt_embed.weight
  // Special token ids (models/tokens.hpp's by default).
  int64_t pad_id = 0, bos_id = 1, eos_id = 2;

  nn::TransformerLayerOptions layer_options() const;
  io::Value to_value() const;
  static TransformerConfig from_value(const io::Value& value, std::string_view what);
  void validate() const;
};

class Transformer : public TranslationModel {
 public:
  // Initialised from `rng` as the Annotated Transformer does: xavier_uniform on every matrix (embeddings, a learned
  // position table and the output included), biases as nn.Linear (attention biases zero), norms ones and zeros.
  Transformer(const TransformerConfig& config, Rng& rng);
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const TransformerConfig& config() const { return config_; }
  std::string_view family() const override { return "transformer"; }
  io::Value config_value() const override { return config_.to_value(); }

  ForwardResult forward(const TeacherForcedBatch& batch, const LossOptions& options = {}) override;
  // Greedy decoding through start_decoding(batch, true) (the KV cache).
  std::vector<std::vector<int64_t>> greedy(const SourceBatch& batch, int64_t max_len) override;
  // Incremental decoding (models/decoding.hpp, models/transformer_decoding.cpp): with the cache, each decoder
  // layer keeps its self-attention keys and values [R, t, E] (one row appended per step) and the cross-attention's
  // keys and values [R, S, E] projected once per source; select_rows gathers them. Without, every step runs the
  // layers over the whole prefix (causal) and projects the memory again.
  std::unique_ptr<DecoderState> start_decoding(const SourceBatch& sources, bool use_cache) override;

  std::vector<Parameter*> named_parameters() override;
  using Module::named_parameters;
  io::Value parameters_value() const override;
  void load_parameters(const io::Value& bundle, std::string_view what) override;
  // Inference in lower precision (models/model.hpp): the encoder's and decoder's layers' attention projections and feed-forward
  // matrices, then the output projection (output.weight, or with tied_output the target embedding table's weight, by its
  // name: the lookup reads it in float32, the product in the plan's precision). Embeddings, positions, norms,
  // biases, softmax and residuals stay float32.
  void set_precision(nn::PrecisionPlan& plan) override;

  // Dropout on (the default) or off; dropout only ever applies while gradients are recorded.
  void set_training(bool on) { training_ = on; }
  bool training() const { return training_; }
  // The seed the dropout masks derive from (the default is 1).
  void seed_dropout(uint64_t seed) { dropout_seed_ = seed; }

  // The pieces, for decoders: the embedded, scaled, position-encoded target tokens at positions
  // offset .. offset + T' ([N, T'] ids -> [N, T', E]); the encoder's output for a batch's sources; the
  // output projection.
  autograd::Var embed_target(const std::vector<int64_t>& ids, int64_t N, int64_t T, int64_t offset = 0);
  autograd::Var encode(const SourceBatch& batch);
  autograd::Var project(const autograd::Var& h);  // [N, T', E] -> [N, T', Vt]
  nn::TransformerEncoder& encoder() { return encoder_; }
  nn::TransformerDecoder& decoder() { return decoder_; }

 private:
  autograd::Var embed(nn::Embedding& table, const std::vector<int64_t>& ids, int64_t N, int64_t T, int64_t offset);
  nn::DropoutContext dropout_context();
  nn::Embedding& target_table() { return config_.shared_embeddings ? src_embed_ : *tgt_embed_; }

  friend class TransformerDecoderState;  // models/transformer_decoding.cpp

  TransformerConfig config_;
  nn::Embedding src_embed_;
  std::optional<nn::Embedding> tgt_embed_;
  nn::PositionalEncoding pos_;
  nn::TransformerEncoder encoder_;
  nn::TransformerDecoder decoder_;
  std::optional<nn::Linear> output_;  // weight and bias, or only the bias (tied)
  // The tied output product's weight (the embedding table) in tied_precision_, or null (float32).
  std::shared_ptr<const ops::LowpWeights> tied_lowp() const;
  ops::Precision tied_precision_ = ops::Precision::Fp32;
  DerivedSlot<ops::LowpWeights> tied_lowp_;
  Parameter output_bias_;         // tied: "output.bias"
  bool training_ = true;
  uint64_t dropout_seed_ = 1;
  Rng dropout_rng_{1};
};

}  // namespace attnkit::models
