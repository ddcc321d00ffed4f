#include "attnkit/tensor/scratch_tensor.hpp"

#include <algorithm>

#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/scratch_pool.hpp"

namespace attnkit::detail {

ScratchTensor::ScratchTensor(Shape shape) : shape_(std::move(shape)) {
  for (int64_t d : shape_) AK_CHECK(d >= 0, "scratch tensor: negative dimension in {}", shape_str(shape_));
  const int64_t n = numel();
  if (n > 0) data_ = ScratchPool::get(n);
}

int64_t ScratchTensor::dim(int i) const { return shape_dim(shape_, i); }

int64_t ScratchTensor::numel() const {
  if (shape_.empty()) return 0;
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

Tensor ScratchTensor::to_tensor() const {
  Tensor t(shape_.empty() ? Shape{0} : shape_);
  if (numel() > 0) std::copy(data(), data() + numel(), t.data());
  return t;
}

}  // namespace attnkit::detail
