#include "attnkit/nn/dropout.hpp"

#include "attnkit/autograd/layers.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::nn {

Dropout::Dropout(float p, uint64_t seed) : p_(p), rng_(seed) {
  AK_CHECK(p >= 0.0f && p < 1.0f, "dropout: p is {}, expected a probability in [0, 1)", p);
}

autograd::Var Dropout::forward(const autograd::Var& x) { return forward(x, rng_); }

autograd::Var Dropout::forward(const autograd::Var& x, Rng& rng) {
  return autograd::dropout(x, ops::DropoutOptions{p_, training_}, rng);  // same shape
}

}  // namespace attnkit::nn
