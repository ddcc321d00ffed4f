// Comparing tensors within a tolerance, numpy.allclose style: |a - b| <= atol + rtol * |b|.
// NaN equals NaN and an infinity equals the same infinity (what a golden-file check needs).
#pragma once
#include "attnkit/tensor/tensor.hpp"

namespace attnkit {

struct Tolerance {
  double rtol = 1e-5;
  double atol = 1e-8;
};

struct Comparison {
  bool same_shape = true;
  bool close = true;             // every element within tolerance (and same shape)
  int64_t mismatches = 0;        // elements outside tolerance
  double max_abs_error = 0.0;    // largest |a - b| over the finite pairs
  Shape max_abs_at;
  double max_rel_error = 0.0;    // largest |a - b| / |b| over the finite pairs with b != 0
  Shape max_rel_at;
  Shape first_mismatch_at;       // where the first element outside tolerance stands
};

Comparison compare(const Tensor& a, const Tensor& b, const Tolerance& tol = {});

}  // namespace attnkit
