// nn::Linear: y = x W^T + b (PyTorch's nn.Linear, ops/linear.hpp).
// Legend: I in features, O out features.
//   weight [O, I]  "weight" (or "<prefix>.weight")     bias [O]  "bias"   (state_dict order)
// Init, PyTorch's default (kaiming_uniform_(a = sqrt 5) reduces to it): weight and bias both
// ~ U(-1/sqrt(I), 1/sqrt(I)), drawn from the attnkit::Rng given, weight row-major first, then bias.
// (The values differ from PyTorch's, whose generator is not reproduced; the distribution is the same.)
// Built without an Rng, the weights are zeros, to be filled by load_state_dict (nn/state_dict.hpp).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attnkit/autograd/functional.hpp"
#include "attnkit/autograd/var.hpp"
#include "attnkit/io/value.hpp"
#include "attnkit/nn/parameter.hpp"
#include "attnkit/nn/precision.hpp"
#include "attnkit/ops/feed_forward.hpp"
#include "attnkit/tensor/random.hpp"

namespace attnkit::nn {

class Linear : public Module {
 public:
  // prefix: the layer's name inside a bigger model ("linear1"), "" for a standalone layer.
  // Zeros, to be loaded (load_state_dict) or initialised (reset_parameters).
  Linear(int64_t in_features, int64_t out_features, bool bias = true, const std::string& prefix = "");
  // Initialised as PyTorch's (above): Linear(in, out, bias, prefix), then reset_parameters(rng).
  Linear(int64_t in_features, int64_t out_features, Rng& rng, bool bias = true, const std::string& prefix = "");

  Parameter weight;  // [O, I]
  Parameter bias;    // [O]; an empty value (and absent from named_parameters) when built without bias

  int64_t in_features() const { return weight.value.dim(1); }
  int64_t out_features() const { return weight.value.dim(0); }
  bool has_bias() const { return has_bias_; }

  // x [..., I] -> [..., O]; recorded unless under autograd::NoGrad (gradients land in weight.grad,
  // bias.grad). The module must outlive the backward pass and not move before it.
  autograd::Var forward(const autograd::Var& x);

  // act(x W^T + b) + residual (autograd::linear with an epilogue: the recorded ops, or under NoGrad one fused
  // product reading W^T packed, packed_weight()). Same values either way, bit for bit.
  autograd::Var forward(const autograd::Var& x, const autograd::LinearThen& then);

  // W^T packed for the product kernel (ops::LinearWeights::packed): derived from `weight`, repacked after its
  // version moves (null if the processor has no panel kernel).
  std::shared_ptr<const ops::GemmPackedB> packed_weight() const;
  // The weights as the fused kernels read them (ops/feed_forward.hpp), in place: the layer must outlive the view.
  ops::LinearWeights view() const;

  // Inference in lower precision: the products read `weight` in the plan's precision for its name (int8 or
  // bfloat16, made from the current values and remade after they change), or in float32 (the default). Under
  // the tape the layer refuses to run with lower-precision weights.
  void set_precision(PrecisionPlan& plan);
  ops::Precision precision() const { return precision_; }
  // weight in precision(), or null in float32.
  std::shared_ptr<const ops::LowpWeights> lowp_weight() const;

  std::vector<Parameter*> named_parameters() override;
  using Module::named_parameters;
  // weight, then bias ~ U(-1/sqrt(I), 1/sqrt(I)) from `rng` (touch()ed).
  void reset_parameters(Rng& rng);
  // weight (and bias) from a bundle by name, presence and shape checked (nn/state_dict.hpp).
  void load(const io::Value& bundle);

 private:
  void draw(Rng& rng);  // reset_parameters' values, untouched
  bool has_bias_;
  std::string what_;  // for messages: the prefix, or "linear"
  DerivedSlot<ops::GemmPackedB> packed_;  // W^T [I, O] for ops::gemm_packed
  ops::Precision precision_ = ops::Precision::Fp32;
  DerivedSlot<ops::LowpWeights> lowp_;  // W in precision_
};

// The feed-forward block inside its residual connection: base + relu(x W1^T + b1) W2^T + b2 (autograd::feed_forward
// on the layers' parameters: recorded, or under NoGrad the fused kernel, ops::feed_forward).
autograd::Var feed_forward(Linear& linear1, Linear& linear2, const autograd::Var& x, const autograd::Var& base);

}  // namespace attnkit::nn
