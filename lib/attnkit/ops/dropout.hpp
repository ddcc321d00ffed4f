// Dropout, inverted (PyTorch's F.dropout): in training each element is zeroed with probability p
// and the survivors are scaled by 1 / (1 - p), so the expected value is unchanged and evaluation
// needs no rescaling.
//   forward   mask [...] = (u >= p) / (1 - p),  u ~ U[0, 1) one draw per element in row-major order
//             y [...] = x * mask
//   backward  dx [...] += dy * mask
// Draws come from the attnkit::Rng passed in (tensor/random.hpp: portable, so the same seed gives
// the same mask with any compiler); PyTorch's RNG is not reproduced. p = 0, or evaluation mode,
// is the identity: nothing is drawn and the mask is left empty (backward then passes dy through).
#pragma once
#include <vector>

#include "attnkit/tensor/random.hpp"
#include "attnkit/tensor/tensor.hpp"

namespace attnkit::ops {

struct DropoutOptions {
  float p = 0.5f;        // in [0, 1)
  bool training = true;  // false: the identity
};

// mask (may be null) receives [x's shape] of 0 and 1 / (1 - p), or is emptied when the op is the identity.
Tensor dropout_forward(const Tensor& x, const DropoutOptions& options, Rng& rng, Tensor* mask = nullptr);
// mask from the forward (empty: the identity).
void dropout_backward(const Tensor& dy, const Tensor& mask, Tensor& dx);

// Reference: x * mask in double (an empty mask is the identity).
std::vector<double> dropout_reference(const Tensor& x, const Tensor& mask);

}  // namespace attnkit::ops
