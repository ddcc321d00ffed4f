// Tensors from ranges, with numpy's semantics (computed in double, rounded once to float32).
#pragma once
#include "attnkit/tensor/tensor.hpp"

namespace attnkit {

// numpy.linspace(lo, hi, num): step = (hi - lo) / (num - 1); x_i = lo + i * step; x_{num-1} = hi.
Tensor linspace(double lo, double hi, int64_t num);
// numpy.arange(start, stop, step) (float64, then rounded to float32): ceil((stop - start) / step)
// values start, start + step, then start + i * ((start + step) - start), as numpy fills them.
Tensor arange(double start, double stop, double step = 1.0);
// Permutes the axes (numpy.transpose); an empty `axes` reverses them.
Tensor transpose(const Tensor& t, std::vector<int> axes = {});

}  // namespace attnkit
