// The one Eigen bridge (internal: include from .cpp files only, never from a public header).
// Views a Tensor (or a slice of its data) as a row-major Eigen matrix without copying.
#pragma once
#include <Eigen/Core>

#include "attnkit/tensor/tensor.hpp"

namespace attnkit {

using MatrixRM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapRM = Eigen::Map<MatrixRM>;
using ConstMapRM = Eigen::Map<const MatrixRM>;
using MapVec = Eigen::Map<Eigen::VectorXf>;
using ConstMapVec = Eigen::Map<const Eigen::VectorXf>;

inline MapRM as_matrix(float* data, int64_t rows, int64_t cols) { return MapRM(data, rows, cols); }
inline ConstMapRM as_matrix(const float* data, int64_t rows, int64_t cols) { return ConstMapRM(data, rows, cols); }
// A tensor of any rank as [numel / last, last].
inline MapRM as_matrix(Tensor& t) {
  int64_t cols = t.rank() == 0 ? 1 : t.dim(-1);
  return MapRM(t.data(), cols == 0 ? 0 : t.numel() / cols, cols);
}
inline ConstMapRM as_matrix(const Tensor& t) {
  int64_t cols = t.rank() == 0 ? 1 : t.dim(-1);
  return ConstMapRM(t.data(), cols == 0 ? 0 : t.numel() / cols, cols);
}

}  // namespace attnkit
