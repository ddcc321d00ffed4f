// ScratchTensor: a shaped float buffer from the recycling ScratchPool (tensor/scratch_pool.hpp),
// uninitialised: for big per-call buffers that a kernel writes whole before anything reads them. A
// recurrent layer's training cache is one (91 MB at N=64 T=100 H=512): as Tensors, their zero-fill and
// first-touch page faults would run on one thread while the other waited.
// Copies share the buffer; it returns to the pool when the last copy goes. A detail (may change in any release,
// docs/library.md): a recurrent cache holds some.
#pragma once
#include <cstdint>
#include <memory>

#include "attnkit/tensor/tensor.hpp"

namespace attnkit::detail {

class ScratchTensor {
 public:
  ScratchTensor() = default;  // holds nothing: rank 0, empty
  explicit ScratchTensor(Shape shape);  // uninitialised values
  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const;  // negative i counts from the end
  int64_t numel() const;
  bool empty() const { return numel() == 0; }
  Tensor to_tensor() const;  // a copy

 private:
  Shape shape_;
  std::shared_ptr<float> data_;
};

}  // namespace attnkit::detail
