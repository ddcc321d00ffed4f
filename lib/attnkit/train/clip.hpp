// Gradient clipping by the global L2 norm: torch.nn.utils.clip_grad_norm_(params, max_norm) (norm_type 2).
//
//   total_norm = sqrt(sum over every non-empty grad g, over its elements, of g^2)
//   clip_coef  = max_norm / (total_norm + 1e-6)
//   if clip_coef < 1: every non-empty grad *= clip_coef          (empty grads are skipped: grad None)
//   returns total_norm (0 when no parameter has a grad)
//
// The sum of squares is accumulated in double, so it neither overflows nor loses small terms; PyTorch sums
// each grad's squares in float32 and then the per-grad norms, so the two totals differ by float32 rounding
// (a few ulps; PyTorch's overflows to inf when a grad exceeds ~1.8e19 where this one stays finite).
// The coefficient is computed in float32 as PyTorch does: max_norm * (1 / (total_norm + 1e-6f)).
//
// A non-finite total norm (an inf or NaN in some grad) is an error by default (NonFinite::Error, PyTorch's
// error_if_nonfinite=True, which PyTorch announces as its future default): clip_grad_norm throws attnkit::Error
// naming the first non-finite element, and the grads are left as they were, so a trainer can catch it, skip
// the step and zero the grads. NonFinite::Scale is PyTorch 1.13's default (error_if_nonfinite=False): the grads
// are multiplied by the coefficient anyway (0 for an inf norm, which turns the inf into NaN and every finite
// element into 0; NaN for a NaN norm) and the non-finite norm is returned.
#pragma once
#include <cstdint>
#include <vector>

#include "attnkit/tensor/parameter.hpp"

namespace attnkit::train {

enum class NonFinite { Error, Scale };

struct ClipOptions {
  double max_norm = 1.0;                   // > 0 and finite
  NonFinite non_finite = NonFinite::Error;
};

// Clips the grads in place; returns the total L2 norm before clipping (as a float32, as PyTorch's tensor).
float clip_grad_norm(const std::vector<Parameter*>& params, const ClipOptions& options);

// The total L2 norm of the non-empty grads, nothing changed (computed as clip_grad_norm computes it).
float grad_norm(const std::vector<Parameter*>& params);

// A training step's gradients: clipped to max_norm when max_norm > 0, else only measured; returns the norm before
// clipping. A non-finite norm fails naming the step ("training: step 7: ... (the last checkpoint is kept)").
float clip_step_gradients(const std::vector<Parameter*>& params, double max_norm, int64_t step);

}  // namespace attnkit::train
