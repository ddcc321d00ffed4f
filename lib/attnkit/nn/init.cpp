#include "attnkit/nn/init.hpp"

#include <cmath>

#include "attnkit/tensor/error.hpp"

namespace attnkit::nn {

void xavier_uniform(Parameter& p, Rng& rng) {
  AK_CHECK(p.value.rank() == 2, "xavier_uniform: {} has shape {}, expected a matrix [out, in]", p.name,
           p.value.shape_str());
  const int64_t out = p.value.dim(0), in = p.value.dim(1);
  const float bound = static_cast<float>(std::sqrt(6.0 / double(in + out)));
  p.value = rand_uniform(p.value.shape(), rng, -bound, bound);
  p.touch();
}

}  // namespace attnkit::nn
