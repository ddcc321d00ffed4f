// nn::Linear: y = x W^T + b (PyTorch's nn.Linear, ops/linear.hpp).
// Legend: I in features, O out features.
//   weight [O, I]  "weight" (or "<prefix>.weight")     bias [O]  "bias"   (state_dict order)
// Init, PyTorch's default (kaiming_uniform_(a = sqrt 5) reduces to it): weight and bias both
// ~ U(-1/sqrt(I), 1/sqrt(I)), drawn from the attnkit::Rng given, weight row-major first, then bias.
// (The values differ from PyTorch's, whose generator is not reproduced; the distribution is the same.)
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attnkit/autograd/var.hpp"
#include "attnkit/io/value.hpp"
#include "attnkit/nn/parameter.hpp"
#include "attnkit/tensor/random.hpp"

namespace attnkit::ops {
class GemmPackedB;
struct GemmEpilogue;
}

namespace attnkit::nn {

class Linear : public Module {
 public:
  // prefix: the layer's name inside a bigger model ("linear1"), "" for a standalone layer.
  Linear(int64_t in_features, int64_t out_features, Rng& rng, bool bias = true, const std::string& prefix = "");

  Parameter weight;  // [O, I]
  Parameter bias;    // [O]; an empty value (and absent from named_parameters) when built without bias

  int64_t in_features() const { return weight.value.dim(1); }
  int64_t out_features() const { return weight.value.dim(0); }
  bool has_bias() const { return has_bias_; }

  // x [..., I] -> [..., O]; recorded unless under autograd::NoGrad (gradients land in weight.grad,
  // bias.grad). The module must outlive the backward pass and not move before it.
  autograd::Var forward(const autograd::Var& x);

  // What follows the product: act(x W^T + b) + residual, residual [..., O] (nullptr: none).
  struct Then {
    bool relu = false;
    const autograd::Var* residual = nullptr;
  };
  // Recorded: linear, relu, add (autograd's ops, each with its backward). Under NoGrad: one product with
  // the bias, the ReLU and the residual applied as the kernel stores (ops::GemmEpilogue), no pass over y
  // after it. Same values as the recorded path, bit for bit.
  autograd::Var forward(const autograd::Var& x, const Then& then);

  // The fused product on raw rows, nothing recorded: y [rows, O] = act(x [rows, I] W^T + b) + add,
  // add [rows, O] or nullptr. For callers that keep their own buffers (the Transformer's FFN hidden).
  // Needs well_formed(). Above 4 rows it reads W^T packed once for the product kernel (derived from
  // `weight`, repacked after its version moves; the same bits as packing it per call).
  void apply(const float* x, int64_t rows, float* y, bool relu, const float* add) const;
  // For a team's tasks of rows (feed_forward): W^T packed for the product kernel, as apply reads it above 4 rows
  // (null if the processor has no panel kernel), then the product on this thread with it, nothing allocated or
  // locked. The same bits as apply on any rows of a product of more than 4.
  std::shared_ptr<const ops::GemmPackedB> packed_weight() const;
  void apply_packed(const ops::GemmPackedB& w, const float* x, int64_t rows, float* y, bool relu,
                    const float* add) const;
  // weight [O, I] and, with a bias, bias [O]
  bool well_formed() const;

  std::vector<Parameter*> named_parameters() override;
  // weight (and bias) from a bundle by name, presence and shape checked (nn/state_dict.hpp).
  void load(const io::Value& bundle);

 private:
  bool has_bias_;
  std::string what_;  // for messages: the prefix, or "linear"
  DerivedSlot<ops::GemmPackedB> packed_;  // W^T [I, O] for ops::gemm_packed
  ops::GemmEpilogue epilogue(bool relu, const float* add) const;  // + b, ReLU, + add [rows, O]
};

// The feed-forward block under inference: y [rows, O2] = add + relu(x [rows, I] W1^T + b1) W2^T + b2 (add [rows, O2]
// or nullptr), linear2.in_features() == linear1.out_features(), both well_formed(). In tasks of 48 rows over the
// team, each task's hidden block [48, O1] in its thread's buffer (384 KB at O1 = 2048: L2) and straight into the
// second product: the whole hidden [rows, O1] (32 MB for a Transformer layer at 16 x 256, d_ff 2048) went out to
// memory and back between two products (3-6% slower). The bits of linear1.apply, then linear2.apply, on all rows.
void feed_forward(const Linear& linear1, const Linear& linear2, const float* x, int64_t rows, float* y,
                  const float* add);

}  // namespace attnkit::nn
