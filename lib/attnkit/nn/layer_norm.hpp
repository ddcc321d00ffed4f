// nn::LayerNorm over the last axis (PyTorch's nn.LayerNorm(E), ops/layer_norm.hpp).
// Legend: E normalised size.
//   weight [E]  "weight" (ones)    bias [E]  "bias" (zeros)    (state_dict order; none without affine)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/autograd/var.hpp"
#include "attnkit/io/value.hpp"
#include "attnkit/nn/parameter.hpp"
#include "attnkit/ops/layer_norm.hpp"

namespace attnkit::nn {

class LayerNorm : public Module {
 public:
  LayerNorm(int64_t normalized_size, float eps = ops::kLayerNormEps, bool elementwise_affine = true,
            const std::string& prefix = "");

  Parameter weight;  // [E] ones; empty value without the affine part
  Parameter bias;    // [E] zeros; empty value without the affine part
  float eps;

  int64_t normalized_size() const { return size_; }
  bool elementwise_affine() const { return affine_; }

  autograd::Var forward(const autograd::Var& x);  // [..., E] -> [..., E]

  std::vector<Parameter*> named_parameters() override;
  void load(const io::Value& bundle);  // presence and shape checked (nn/state_dict.hpp)

 private:
  int64_t size_;
  bool affine_;
  std::string what_;
};

}  // namespace attnkit::nn
