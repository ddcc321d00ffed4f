// Transformer encoder and decoder layers and their stacks, as PyTorch's nn.TransformerEncoderLayer,
// nn.TransformerDecoderLayer, nn.TransformerEncoder / Decoder (batch_first=True), built from
// nn::MultiheadAttention, nn::Linear, nn::LayerNorm and autograd ops: the forward is recorded, so the
// backward is the ops' own.
// Legend: N batch, T target (query) length, S source (memory) length, E d_model, F dim_feedforward, NH heads.
//
// Encoder layer (x [N, S, E]):
//   post-LN (norm_first = false, the paper):   x = norm1(x + sa(x));           x = norm2(x + ff(x))
//   pre-LN  (norm_first = true):               x = x + sa(norm1(x));           x = x + ff(norm2(x))
// Decoder layer (x [N, T, E], memory [N, S, E]):
//   post-LN:  x = norm1(x + sa(x));  x = norm2(x + mha(x, memory));  x = norm3(x + ff(x))
//   pre-LN:   x = x + sa(norm1(x));  x = x + mha(norm2(x), memory);  x = x + ff(norm3(x))
// where sa(x) = dropout1(self_attn(x, x, x)), mha(x, m) = dropout2(multihead_attn(x, m, m)),
//       ff(x) = dropout_ff_out(linear2(dropout(activation(linear1(x)))))   (F = dim_feedforward),
//       activation ReLU or GELU (exact, erf), LayerNorm eps 1e-5.
// Stacks: N layers in turn, then the final norm ("encoder.norm", "decoder.norm"), as nn.Transformer builds them.
//
// Masks (ops::MaskSpec, 1 = attend): the encoder's self-attention and the decoder's cross-attention take
// key lengths (key padding: keys [0, len[n]) visible, PyTorch's key_padding_mask = positions >= len);
// the decoder's self-attention is causal (upper-left: PyTorch's generate_square_subsequent_mask) plus any
// target key lengths.
//
// Parameters: PyTorch's state_dict names and layouts under the prefix given ("encoder.layers.0."):
//   self_attn.in_proj_weight [3E, E], self_attn.in_proj_bias [3E], self_attn.out_proj.weight [E, E],
//   self_attn.out_proj.bias [E], (decoder: multihead_attn.* likewise), linear1.weight [F, E], linear1.bias [F],
//   linear2.weight [E, F], linear2.bias [E], norm1.weight [E], norm1.bias, norm2.*, (decoder: norm3.*)
// and "encoder.norm.weight", "encoder.norm.bias" (likewise decoder) for the stacks' final norms.
// Init as nn.Transformer's _reset_parameters: every matrix xavier_uniform (U(+-sqrt(6 / (fan_in + fan_out)))),
// attention biases zero, linear biases U(+-1/sqrt(fan_in)), norms ones and zeros. Built without an Rng, the
// matrices and biases are zeros (the norms ones and zeros), to be filled by load_state_dict (nn/state_dict.hpp).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/autograd/var.hpp"
#include "attnkit/nn/attention.hpp"
#include "attnkit/nn/layer_norm.hpp"
#include "attnkit/nn/linear.hpp"
#include "attnkit/nn/parameter.hpp"
#include "attnkit/ops/attention.hpp"
#include "attnkit/tensor/random.hpp"

namespace attnkit::nn {

enum class FfnActivation { Relu, Gelu };
FfnActivation parse_ffn_activation(std::string_view name);  // "relu", "gelu"
std::string_view ffn_activation_name(FfnActivation a);

struct TransformerLayerOptions {
  int64_t d_model = 512;          // E
  int64_t heads = 8;              // NH, divides E
  int64_t dim_feedforward = 2048; // F
  float dropout = 0.1f;           // every dropout of the layer, in [0, 1)
  FfnActivation activation = FfnActivation::Relu;
  bool norm_first = false;        // pre-LN
  float layer_norm_eps = 1e-5f;
  void validate(std::string_view what) const;
};

// What a forward draws dropout masks from: training with p > 0 and an rng drops; otherwise the identity.
struct DropoutContext {
  bool training = false;
  Rng* rng = nullptr;
  bool active(float p) const { return training && p > 0.0f && rng != nullptr; }
};

// A MultiheadAttention with in_proj (q, k, v stacked) of size E, NH heads, named "<prefix>in_proj_weight", ...
// and initialised as PyTorch's: in_proj xavier_uniform, out_proj U(+-1/sqrt(E)) (overwritten by xavier in
// nn.Transformer), biases zero.
MultiheadAttention make_attention(int64_t E, int64_t heads, Rng& rng, const std::string& prefix);

class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(const TransformerLayerOptions& options, const std::string& prefix = "");  // to be loaded
  TransformerEncoderLayer(const TransformerLayerOptions& options, Rng& rng, const std::string& prefix = "");
  void reset_parameters(Rng& rng);  // as nn.Transformer's (above)
  TransformerEncoderLayer(const TransformerEncoderLayer&) = delete;
  TransformerEncoderLayer& operator=(const TransformerEncoderLayer&) = delete;

  TransformerLayerOptions options;
  MultiheadAttention self_attn;
  Linear linear1, linear2;
  LayerNorm norm1, norm2;

  // x [N, S, E] -> [N, S, E]; mask: the self-attention's (key lengths, causal, explicit).
  autograd::Var forward(const autograd::Var& x, const ops::MaskSpec& mask, const DropoutContext& dropout = {});
  // Inference in lower precision (nn/precision.hpp): self_attn, linear1, linear2 (the norms stay float32).
  void set_precision(PrecisionPlan& plan);

  std::vector<Parameter*> named_parameters() override;
  using Module::named_parameters;
};

class TransformerDecoderLayer : public Module {
 public:
  TransformerDecoderLayer(const TransformerLayerOptions& options, const std::string& prefix = "");  // to be loaded
  TransformerDecoderLayer(const TransformerLayerOptions& options, Rng& rng, const std::string& prefix = "");
  void reset_parameters(Rng& rng);  // as nn.Transformer's (above)
  TransformerDecoderLayer(const TransformerDecoderLayer&) = delete;
  TransformerDecoderLayer& operator=(const TransformerDecoderLayer&) = delete;

  TransformerLayerOptions options;
  MultiheadAttention self_attn, multihead_attn;
  Linear linear1, linear2;
  LayerNorm norm1, norm2, norm3;

  // x [N, T, E], memory [N, S, E] -> [N, T, E]. self_mask: the self-attention's (causal for training);
  // memory_mask: the cross-attention's (the source's key lengths).
  autograd::Var forward(const autograd::Var& x, const autograd::Var& memory, const ops::MaskSpec& self_mask,
                        const ops::MaskSpec& memory_mask, const DropoutContext& dropout = {});

  // The pieces, for incremental decoding (a KV cache): the feed-forward block, and the norms as the
  // layer applies them. pre-LN: x + ff(norm3(x)); post-LN: norm3(x + ff(x)).
  autograd::Var feed_forward(const autograd::Var& x, const DropoutContext& dropout = {});
  // Inference in lower precision: self_attn, multihead_attn, linear1, linear2 (the norms stay float32).
  void set_precision(PrecisionPlan& plan);

  std::vector<Parameter*> named_parameters() override;
  using Module::named_parameters;
};

// N layers and the final norm ("<prefix>layers.i.", "<prefix>norm.").
class TransformerEncoder : public Module {
 public:
  TransformerEncoder(const TransformerLayerOptions& options, int64_t num_layers, const std::string& prefix = "encoder.");
  TransformerEncoder(const TransformerLayerOptions& options, int64_t num_layers, Rng& rng,
                     const std::string& prefix = "encoder.");
  std::vector<std::unique_ptr<TransformerEncoderLayer>> layers;
  LayerNorm norm;

  autograd::Var forward(const autograd::Var& x, const ops::MaskSpec& mask, const DropoutContext& dropout = {});
  void set_precision(PrecisionPlan& plan);  // every layer's, in order
  std::vector<Parameter*> named_parameters() override;
  using Module::named_parameters;
};

class TransformerDecoder : public Module {
 public:
  TransformerDecoder(const TransformerLayerOptions& options, int64_t num_layers, const std::string& prefix = "decoder.");
  TransformerDecoder(const TransformerLayerOptions& options, int64_t num_layers, Rng& rng,
                     const std::string& prefix = "decoder.");
  std::vector<std::unique_ptr<TransformerDecoderLayer>> layers;
  LayerNorm norm;

  autograd::Var forward(const autograd::Var& x, const autograd::Var& memory, const ops::MaskSpec& self_mask,
                        const ops::MaskSpec& memory_mask, const DropoutContext& dropout = {});
  void set_precision(PrecisionPlan& plan);  // every layer's, in order
  std::vector<Parameter*> named_parameters() override;
  using Module::named_parameters;
};

}  // namespace attnkit::nn
