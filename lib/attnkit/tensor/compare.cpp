#include "attnkit/tensor/compare.hpp"

#include <cmath>

namespace attnkit {

Comparison compare(const Tensor& a, const Tensor& b, const Tolerance& tol) {
  Comparison c;
  if (a.shape() != b.shape()) {
    c.same_shape = false;
    c.close = false;
    return c;
  }
  int64_t max_abs_i = -1, max_rel_i = -1, first_bad = -1;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = a[i], y = b[i];
    bool ok;
    if (std::isnan(x) || std::isnan(y)) {
      ok = std::isnan(x) && std::isnan(y);
    } else if (std::isinf(x) || std::isinf(y)) {
      ok = x == y;
    } else {
      double err = std::fabs(x - y);
      ok = err <= tol.atol + tol.rtol * std::fabs(y);
      if (max_abs_i < 0 || err > c.max_abs_error) {  // first of the largest, like numpy.argmax
        max_abs_i = i;
        c.max_abs_error = err;
      }
      if (y != 0.0 && (max_rel_i < 0 || err / std::fabs(y) > c.max_rel_error)) {
        c.max_rel_error = err / std::fabs(y);
        max_rel_i = i;
      }
    }
    if (!ok) {
      ++c.mismatches;
      if (first_bad < 0) first_bad = i;
    }
  }
  c.close = c.mismatches == 0;
  if (max_abs_i >= 0) c.max_abs_at = unravel_index(max_abs_i, a.shape());
  if (max_rel_i >= 0) c.max_rel_at = unravel_index(max_rel_i, a.shape());
  if (first_bad >= 0) c.first_mismatch_at = unravel_index(first_bad, a.shape());
  return c;
}

}  // namespace attnkit
