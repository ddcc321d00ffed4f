#include "attnkit/tensor/creation.hpp"

#include <cmath>

#include "attnkit/tensor/error.hpp"

namespace attnkit {

Tensor linspace(double lo, double hi, int64_t num) {
  AK_CHECK(num >= 0, "linspace: number of values must be non-negative, got {}", num);
  AK_CHECK(std::isfinite(lo) && std::isfinite(hi), "linspace: ends must be finite, got {} and {}", lo, hi);
  Tensor t(Shape{num});
  if (num == 0) return t;
  double div = static_cast<double>(num - 1);
  double delta = hi - lo;
  double step = num > 1 ? delta / div : 0.0;
  for (int64_t i = 0; i < num; ++i) {
    // numpy: y = arange(num) * step + start (or arange * delta / div when step underflows to 0)
    double y = step == 0.0 && num > 1 ? static_cast<double>(i) / div * delta : static_cast<double>(i) * step;
    t[i] = static_cast<float>(y + lo);
  }
  if (num > 1) t[num - 1] = static_cast<float>(hi);
  return t;
}

Tensor arange(double start, double stop, double step) {
  AK_CHECK(step != 0.0 && std::isfinite(step), "arange: step must be finite and non-zero, got {}", step);
  AK_CHECK(std::isfinite(start) && std::isfinite(stop), "arange: bounds must be finite, got {} and {}", start, stop);
  double count = std::ceil((stop - start) / step);
  int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  AK_CHECK(count < 9.0e15, "arange: {} values is too many", count);
  Tensor t(Shape{n});
  // numpy fills x_0 = start, x_1 = start + step, then x_i = start + i * (x_1 - x_0)
  double second = start + step, delta = second - start;
  for (int64_t i = 0; i < n; ++i)
    t[i] = static_cast<float>(i == 0 ? start : i == 1 ? second : start + static_cast<double>(i) * delta);
  return t;
}

Tensor transpose(const Tensor& t, std::vector<int> axes) {
  const int r = t.rank();
  if (axes.empty())
    for (int i = r - 1; i >= 0; --i) axes.push_back(i);
  AK_CHECK(static_cast<int>(axes.size()) == r, "transpose: {} axes given for a tensor of shape {}", axes.size(), t.shape_str());
  std::vector<bool> seen(static_cast<size_t>(r), false);
  Shape out_shape(static_cast<size_t>(r));
  for (int i = 0; i < r; ++i) {
    int a = axes[static_cast<size_t>(i)] < 0 ? axes[static_cast<size_t>(i)] + r : axes[static_cast<size_t>(i)];
    AK_CHECK(a >= 0 && a < r && !seen[static_cast<size_t>(a)], "transpose: axes [{}] are not a permutation of 0..{}",
             fmt::join(axes, ", "), r - 1);
    seen[static_cast<size_t>(a)] = true;
    axes[static_cast<size_t>(i)] = a;
    out_shape[static_cast<size_t>(i)] = t.shape()[static_cast<size_t>(a)];
  }
  Shape in_strides(static_cast<size_t>(r), 1);
  for (int i = r - 2; i >= 0; --i) in_strides[static_cast<size_t>(i)] = in_strides[static_cast<size_t>(i) + 1] * t.shape()[static_cast<size_t>(i) + 1];
  Tensor out(out_shape);
  Shape index(static_cast<size_t>(r), 0);
  for (int64_t flat = 0; flat < out.numel(); ++flat) {
    int64_t src = 0;
    for (int i = 0; i < r; ++i) src += index[static_cast<size_t>(i)] * in_strides[static_cast<size_t>(axes[static_cast<size_t>(i)])];
    out[flat] = t[src];
    for (int i = r - 1; i >= 0; --i) {  // advance the output multi-index
      if (++index[static_cast<size_t>(i)] < out_shape[static_cast<size_t>(i)]) break;
      index[static_cast<size_t>(i)] = 0;
    }
  }
  return out;
}

}  // namespace attnkit
