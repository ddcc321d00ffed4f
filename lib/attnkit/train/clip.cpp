// clip_grad_norm: torch.nn.utils.clip_grad_norm_ with norm_type 2 (clip.hpp has the formulas and the
// non-finite policy).
#include "attnkit/train/clip.hpp"

#include <cmath>
#include <string>

#include <fmt/format.h>

#include "attnkit/tensor/error.hpp"

namespace attnkit::train {

namespace {

// Sum of squares of n floats in double: 8 independent partial sums (a loop the compiler vectorises:
// vcvtps2pd + vfmadd on two ymm registers), added up in a fixed order, so the result is deterministic.
double sum_of_squares(const float* g, int64_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += static_cast<double>(g[i + j]) * static_cast<double>(g[i + j]);
  for (; i < n; ++i) acc[i % 8] += static_cast<double>(g[i]) * static_cast<double>(g[i]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// Sum of squares of every non-empty grad, in double.
double sum_of_squares(const std::vector<Parameter*>& params) {
  double sum = 0.0;
  for (const Parameter* p : params) {
    AK_CHECK(p != nullptr, "clip_grad_norm: a parameter is a null pointer");
    if (p->grad.empty()) continue;
    AK_CHECK(p->grad.shape() == p->value.shape(), "clip_grad_norm: the grad of '{}' has shape {}, expected {}",
             p->name, p->grad.shape_str(), p->value.shape_str());
    sum += sum_of_squares(p->grad.data(), p->grad.numel());
  }
  return sum;
}

// Why the norm is not finite: the first non-finite grad element, or an overflow of float32.
[[noreturn]] void fail_non_finite(const std::vector<Parameter*>& params, float total) {
  for (const Parameter* p : params) {
    for (int64_t i = 0; i < p->grad.numel(); ++i) {
      if (!std::isfinite(p->grad[i]))
        fail("clip_grad_norm: the total L2 norm of the gradients is {}: the grad of '{}' is {} at {}", total, p->name,
             p->grad[i], shape_str(unravel_index(i, p->grad.shape())));
    }
  }
  fail("clip_grad_norm: the total L2 norm of the gradients is {}: too large for float32", total);
}

}  // namespace

float grad_norm(const std::vector<Parameter*>& params) {
  return static_cast<float>(std::sqrt(sum_of_squares(params)));
}

float clip_grad_norm(const std::vector<Parameter*>& params, const ClipOptions& options) {
  AK_CHECK(std::isfinite(options.max_norm) && options.max_norm > 0.0,
           "clip_grad_norm: max_norm must be > 0 and finite, got {}", options.max_norm);
  const float total = grad_norm(params);
  if (!std::isfinite(total) && options.non_finite == NonFinite::Error) fail_non_finite(params, total);
  // clip_coef = max_norm / (total_norm + 1e-6), which PyTorch evaluates as (total_norm + 1e-6).reciprocal() * max_norm
  const float coef = (1.0f / (total + 1e-6f)) * static_cast<float>(options.max_norm);
  // PyTorch multiplies by clamp(clip_coef, max=1) always; a factor of 1 changes nothing, so skip it. A NaN
  // coefficient (NaN norm, NonFinite::Scale) fails `coef >= 1` and is applied, as in PyTorch.
  if (coef >= 1.0f) return total;
  for (Parameter* p : params) {
    if (p->grad.empty()) continue;
    float* g = p->grad.data();
    const int64_t n = p->grad.numel();
    for (int64_t i = 0; i < n; ++i) g[i] *= coef;
  }
  return total;
}

float clip_step_gradients(const std::vector<Parameter*>& params, double max_norm, int64_t step) {
  try {
    if (max_norm > 0) {
      ClipOptions co;
      co.max_norm = max_norm;
      return clip_grad_norm(params, co);
    }
    const float norm = grad_norm(params);
    AK_CHECK(std::isfinite(norm), "the gradient norm is {}", std::isnan(norm) ? std::string("NaN") : fmt::format("{}", norm));
    return norm;
  } catch (const Error& e) {
    fail("training: step {}: {} (the last checkpoint is kept)", step, e.what());
  }
}

}  // namespace attnkit::train
