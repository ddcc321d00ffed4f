#include "attnkit/tensor/tensor.hpp"

#include "attnkit/tensor/error.hpp"

namespace attnkit {

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

int64_t shape_numel(const Shape& shape) {
  AK_CHECK(shape.size() <= static_cast<size_t>(kMaxRank), "shape {} has {} dimensions, at most {} are supported",
           shape_str(shape), shape.size(), kMaxRank);
  int64_t n = 1;
  for (int64_t d : shape) {
    AK_CHECK(d >= 0, "shape {} has a negative size", shape_str(shape));
    AK_CHECK(!__builtin_mul_overflow(n, d, &n), "shape {} has more elements than fit in 64 bits", shape_str(shape));
  }
  return n;
}

Tensor::Tensor(Shape shape) : shape_(std::move(shape)), data_(static_cast<size_t>(shape_numel(shape_)), 0.0f) {}

Tensor::Tensor(Shape shape, std::vector<float> data) : shape_(std::move(shape)), data_(std::move(data)) {
  AK_CHECK(shape_numel(shape_) == static_cast<int64_t>(data_.size()), "tensor of shape {} needs {} values, got {}",
           attnkit::shape_str(shape_), shape_numel(shape_), data_.size());
}

Tensor Tensor::filled(Shape shape, float value) {
  Tensor t(std::move(shape));
  std::fill(t.data_.begin(), t.data_.end(), value);
  return t;
}

int64_t shape_dim(const Shape& shape, int i) {
  const int r = static_cast<int>(shape.size()), j = i < 0 ? i + r : i;
  AK_CHECK(j >= 0 && j < r, "dimension {} out of range for a tensor of shape {}", i, shape_str(shape));
  return shape[static_cast<size_t>(j)];
}

int64_t Tensor::dim(int i) const { return shape_dim(shape_, i); }

static Shape infer_shape(Shape shape, int64_t numel, const Shape& from) {
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      AK_CHECK(infer < 0, "reshape: only one dimension may be -1, got {}", shape_str(shape));
      infer = static_cast<int>(i);
    } else {
      AK_CHECK(shape[i] >= 0, "reshape: shape {} has a negative size", shape_str(shape));
      AK_CHECK(!__builtin_mul_overflow(known, shape[i], &known), "reshape: shape {} is too large", shape_str(shape));
    }
  }
  if (infer >= 0) {
    AK_CHECK(known != 0 && numel % known == 0, "reshape: cannot reshape {} ({} values) to {}", shape_str(from), numel,
             shape_str(shape));
    shape[static_cast<size_t>(infer)] = numel / known;
  } else {
    AK_CHECK(known == numel, "reshape: cannot reshape {} ({} values) to {} ({} values)", shape_str(from), numel,
             shape_str(shape), known);
  }
  return shape;
}

Tensor Tensor::reshaped(Shape shape) const {
  Tensor t = *this;
  t.reshape(std::move(shape));
  return t;
}

void Tensor::reshape(Shape shape) {
  shape_ = infer_shape(std::move(shape), numel(), shape_);
  (void)shape_numel(shape_);  // rank limit
}

Shape unravel_index(int64_t flat, const Shape& shape) {
  Shape index(shape.size(), 0);
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 0) break;
    index[i] = flat % shape[i];
    flat /= shape[i];
  }
  return index;
}

}  // namespace attnkit
