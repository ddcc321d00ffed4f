// The recurrent language model (char-rnn's shape): embedding, stacked RNN / LSTM / GRU layers, output projection.
// Legend: N batch, T tokens per row, E embedding size, H hidden size, L layers, V vocabulary.
//
//   x      = dropout(embed[ids])                                    [N, T, E]
//   h, s_T = recurrent(x, s_0)                                       [N, T, H], state s [L, N, H] (LSTM: h and c)
//   logits = dropout(h) W^T + b                                      [N, T, V]  (W = embed.weight if tied: E = H)
//   loss   = cross_entropy(logits, next ids, ignore_index <pad>)      mean over the tokens predicted
// Truncated backpropagation through time: with carry on (training on contiguous batches), each forward starts
// from the state the previous one ended in (s_0 = the last s_T, as a constant: gradients stop at the window's
// start), and reset_state() starts again from zeros; with carry off every forward starts from zeros.
//
// Parameters (PyTorch names; the first part is the checkpoint's sub-bundle):
//   embed.weight [V, E]
//   decoder.weight_ih_l{k} [G*H, E or H], decoder.weight_hh_l{k} [G*H, H], decoder.bias_ih_l{k}, decoder.bias_hh_l{k}
//     (one L-layer nn.LSTM / nn.GRU / nn.RNN: `lstm-run X --weights CKPT#decoder` runs the layers)
//   output.weight [V, H] (absent when tied), output.bias [V]
// Decoding (models/decoding.hpp): the prompts are the sources; start_decoding runs them and the first step()
// returns the prediction after the prompt's last token; each later step feeds one token and carries the state.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "attnkit/io/value.hpp"
#include "attnkit/models/model.hpp"
#include "attnkit/nn/embedding.hpp"
#include "attnkit/nn/linear.hpp"
#include "attnkit/nn/recurrent.hpp"
#include "attnkit/tensor/random.hpp"

namespace attnkit::models {

struct RecurrentLMConfig {
  nn::CellKind cell = nn::CellKind::Lstm;
  int64_t vocab = 0;    // V
  int64_t embed = 64;   // E
  int64_t hidden = 256; // H
  int layers = 2;       // L
  float dropout = 0.0f; // on the embeddings and the top layer's outputs
  bool tied_output = false;
  int64_t pad_id = 0;

  io::Value to_value() const;
  static RecurrentLMConfig from_value(const io::Value& value, std::string_view what);
  void validate() const;
};

class RecurrentLM : public TranslationModel {
 public:
  RecurrentLM(const RecurrentLMConfig& config, Rng& rng);
  RecurrentLM(const RecurrentLM&) = delete;
  RecurrentLM& operator=(const RecurrentLM&) = delete;

  const RecurrentLMConfig& config() const { return config_; }
  std::string_view family() const override { return "recurrent-lm"; }
  bool has_source() const override { return false; }
  io::Value config_value() const override { return config_.to_value(); }

  ForwardResult forward(const TeacherForcedBatch& batch, const ForwardOptions& options = {}) override;
  std::vector<std::vector<int64_t>> greedy(const SourceBatch& batch, int64_t max_len) override;
  std::unique_ptr<DecoderState> start_decoding(const SourceBatch& prompts, bool use_cache) override;

  std::vector<Parameter*> named_parameters() override;
  using Module::named_parameters;
  io::Value parameters_value() const override;
  // The recurrent layers' W_ih and W_hh and the output projection (output.weight, or embed.weight when tied)
  // in the plan's precision; the embedding lookup and the biases stay float32.
  void set_precision(nn::PrecisionPlan& plan) override;
  void load_parameters(const io::Value& bundle, std::string_view what) override;

  void set_training(bool on) { training_ = on; }
  // Truncated BPTT (above): carry the state from one forward to the next.
  void set_carry(bool on) { carry_ = on; }
  void reset_state() { h_ = c_ = Tensor(); }
  // The carried state [L, N, H] (empty: zeros); c only for an LSTM. set_state checks the shapes.
  const Tensor& state_h() const { return h_; }
  const Tensor& state_c() const { return c_; }
  void set_state(Tensor h, Tensor c);

  // The pieces, for decoding: the recurrent layers from state (h0, c0) over ids [N, T]; the projection.
  autograd::RecurrentVars run(const std::vector<int64_t>& ids, int64_t N, int64_t T, const Tensor& h0,
                              const Tensor& c0, Rng* rng = nullptr);
  autograd::Var project(const autograd::Var& h);

 private:
  RecurrentLMConfig config_;
  nn::Embedding embed_;
  nn::Recurrent decoder_;
  std::optional<nn::Linear> output_;
  Parameter output_bias_;
  ops::Precision tied_precision_ = ops::Precision::Fp32;  // tied output: embed.weight as the projection
  DerivedSlot<ops::LowpWeights> tied_lowp_;
  bool training_ = true, carry_ = false;
  Tensor h_, c_;
};

}  // namespace attnkit::models
