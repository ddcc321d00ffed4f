// Internal (include from ops/*.cpp only): the softmax's exponential over a row, in place, with its sum.
// Eigen 3.4's packet exp serves any input; a softmax's inputs are shifted scores x - max <= 0, and its
// result only needs to be right to about an ulp. This one clamps once, reduces to 2^n exp(r) with
// |r| <= ln2/2 (Cody-Waite), evaluates Cephes' degree-6 polynomial by Estrin's scheme and scales by 2^n
// built from n's bits, within 1.03 ulp (Eigen: 1.26); faster than Eigen's exp then its sum, and the exps
// are a large share of the attention forward.
#pragma once
#include <cstdint>

namespace attnkit::ops::detail {

// x[i] = exp(x[i] - shift) for i < n, in place; returns the sum of the results.
// -inf (a masked score) gives exactly 0, as does anything below about -87.68 (2^n under 2^-126);
// NaN stays NaN; above 88 the result is exp(88) (a softmax's x - shift is <= 0 up to a rounding).
// The sum's order is fixed by n alone (8 lanes from x[0], 16 with AVX-512, then a fixed tree), never by x's
// alignment. Each x[i]'s result depends on x[i] and shift only.
float exp_shifted_sum(float* x, int64_t n, float shift);

// max(x[0], .., x[n - 1]) (-inf for n = 0), with four vector accumulators: a softmax row's max pass was
// bound by one accumulator's latency (Eigen's maxCoeff: 0.19 cycles a float, a third of the exp's time).
float row_max(const float* x, int64_t n);

// alpha[i] = exp(old_max[i] - new_max[i]) for i < n, the online softmax's rescale factors (new_max >= old_max),
// with the same exponential; 1 where new_max[i] is -inf (a row masked so far), 0 where only old_max[i] is.
void rescale_factors(const float* old_max, const float* new_max, float* alpha, int64_t n);

}  // namespace attnkit::ops::detail
