// Initialisers of parameters, as PyTorch's torch.nn.init, drawn from an attnkit::Rng (the same bits with any
// compiler; not PyTorch's values, the same distributions). Each touch()es the parameter.
#pragma once
#include "attnkit/tensor/parameter.hpp"
#include "attnkit/tensor/random.hpp"

namespace attnkit::nn {

// xavier_uniform_ of a matrix [out, in]: U(+-sqrt(6 / (fan_in + fan_out))), row-major.
void xavier_uniform(Parameter& p, Rng& rng);

}  // namespace attnkit::nn
