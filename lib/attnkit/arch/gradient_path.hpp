// compare-arch, part 4: how the gradient of the last output reaches the inputs, at initialisation,
// through the autograd engine (the layers of arch/layers.hpp, recorded, then backward()).
//
// Legend: n sequence length, d model size, J(s) = d y_{n-1} / d x_s [d, d] (0-based positions).
//
// For each layer, norm[distance] = ||J(n-1-distance)||_F for distance 0 .. n-1, from one forward and
// one backward of a batch of P copies of the same random sequence x [1, n, d] ~ N(0, 1): copy p seeds
// the backward with u_p at position n-1, so that copy p's input gradient is u_p^T J(s) for every s at
// once. With d <= 64 the u_p are the d unit vectors (P = d: the exact Frobenius norm); above, P = 16
// Gaussian vectors u_p ~ N(0, I), and ||J||_F^2 = E ||u^T J||^2 is estimated by their mean.
#pragma once
#include <cstdint>
#include <vector>

#include "attnkit/arch/analytic.hpp"

namespace attnkit::arch {

struct GradientCurve {
  Layer layer;
  std::vector<double> norm;  // [n]: norm[distance]
  bool exact = true;         // false: estimated from 16 random directions
};

// Sizes' n, d, k, r are used (batch is not). Deterministic for a seed.
std::vector<GradientCurve> gradient_path(const Sizes& sizes, const std::vector<Layer>& layers, uint64_t seed);

}  // namespace attnkit::arch
