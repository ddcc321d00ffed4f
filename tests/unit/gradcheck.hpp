// Finite-difference gradient checks, shared by every op's test.
//
// The loss is L = sum(dy ⊙ f(inputs)) for a fixed random upstream gradient dy, computed by the
// caller in double precision (from a double reference implementation where one exists). Each
// input element is nudged by ±eps in place and (L+ - L-) / 2eps is compared with the analytic
// gradient the backward kernel produced. A test passes when every element agrees within
// atol + rtol * |numeric|; the report names the input, the element and both values.
#pragma once
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "attnkit/tensor/tensor.hpp"

namespace attnkit::test {

struct GradTolerance {
  double eps = 1e-3;   // nudge (inputs are float32: smaller nudges drown in rounding)
  double atol = 2e-3;
  double rtol = 2e-2;
};

// The first element that disagrees, as a message ("" when all agree). `inputs` are nudged in
// place and restored; `names` label them; `analytic[i]` has inputs[i]'s shape.
inline std::string gradient_mismatch(std::vector<Tensor*> inputs, const std::vector<std::string>& names,
                                     const std::function<double()>& loss, const std::vector<const Tensor*>& analytic,
                                     GradTolerance tol = {}) {
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& x = *inputs[k];
    if (!analytic[k]) continue;
    REQUIRE(analytic[k]->shape() == x.shape());
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float keep = x[i];
      x[i] = static_cast<float>(keep + tol.eps);
      const double hi_step = double(x[i]) - keep;
      const double lp = loss();
      x[i] = static_cast<float>(keep - tol.eps);
      const double lo_step = keep - double(x[i]);
      const double lm = loss();
      x[i] = keep;
      const double numeric = (lp - lm) / (hi_step + lo_step);
      const double got = (*analytic[k])[i];
      if (!(std::fabs(got - numeric) <= tol.atol + tol.rtol * std::fabs(numeric)))
        return fmt::format("d loss / d {}[{}]: analytic {:.6g}, numeric {:.6g}", names[k],
                           shape_str(unravel_index(i, x.shape())), got, numeric);
    }
  }
  return "";
}

// sum(dy ⊙ y) in double.
inline double dot(const Tensor& dy, const Tensor& y) {
  double acc = 0;
  for (int64_t i = 0; i < y.numel(); ++i) acc += double(dy[i]) * y[i];
  return acc;
}

}  // namespace attnkit::test
