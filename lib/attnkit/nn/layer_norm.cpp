// Legend: E normalised size.
#include "attnkit/nn/layer_norm.hpp"

#include "attnkit/autograd/layers.hpp"
#include "attnkit/nn/state_dict.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::nn {

LayerNorm::LayerNorm(int64_t normalized_size, float eps_, bool elementwise_affine, const std::string& prefix)
    : eps(eps_), size_(normalized_size), affine_(elementwise_affine), what_(prefix.empty() ? "layer_norm" : prefix) {
  AK_CHECK(normalized_size >= 0, "{}: normalized size {} must be >= 0", what_, normalized_size);
  weight = Parameter(qualified(prefix, "weight"), affine_ ? Tensor::filled({size_}, 1.0f) : Tensor());  // [E]
  bias = Parameter(qualified(prefix, "bias"), affine_ ? Tensor({size_}) : Tensor());                    // [E]
}

autograd::Var LayerNorm::forward(const autograd::Var& x) {
  using autograd::Var;
  AK_CHECK(x.value().rank() >= 1 && x.value().dim(-1) == size_, "{}: input has shape {}, expected [..., {}]", what_,
           x.value().shape_str(), size_);
  return autograd::layer_norm(x, affine_ ? Var::param(weight) : Var(), affine_ ? Var::param(bias) : Var(), eps,
                              what_.c_str());  // [..., E]
}

std::vector<Parameter*> LayerNorm::named_parameters() {
  if (affine_) return {&weight, &bias};
  return {};
}

void LayerNorm::load(const io::Value& bundle) { load_parameters(*this, bundle, what_); }

}  // namespace attnkit::nn
