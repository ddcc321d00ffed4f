// Tensor: a dense, row-major float32 array with a shape (rank 0..8; a rank-0 tensor is a scalar).
// Value semantics: copying a Tensor copies its data. Public headers stay Eigen-free;
// lib code reaches Eigen through tensor/eigen_bridge.hpp.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace attnkit {

using Shape = std::vector<int64_t>;

constexpr int kMaxRank = 8;

// "[2, 3]" — the form every message uses.
std::string shape_str(const Shape& shape);
// shape[i], negative i counting from the end; throws naming the shape when i is out of range
int64_t shape_dim(const Shape& shape, int i);
// Product of the dims; throws attnkit::Error on a negative dim or an int64 overflow.
int64_t shape_numel(const Shape& shape);

class Tensor {
 public:
  Tensor() : shape_{0} {}  // an empty [0] tensor
  explicit Tensor(Shape shape);  // zero-filled
  Tensor(Shape shape, std::vector<float> data);  // data.size() must equal the product of shape
  static Tensor zeros(Shape shape) { return Tensor(std::move(shape)); }
  static Tensor filled(Shape shape, float value);
  static Tensor scalar(float value) { return Tensor(Shape{}, {value}); }
  // Values left as they are (torch.empty): for an output that a kernel writes whole. A big one (1 MB and up)
  // reuses the buffer of a big uninitialized() tensor freed recently (a few are kept, see tensor.cpp), so neither
  // zero fill nor fresh pages are paid; its old values are still there until written. Else zero-filled.
  static Tensor uninitialized(Shape shape);

  Tensor(const Tensor& other) : shape_(other.shape_), data_(other.data_) {}  // a copy's buffer is not kept
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(const Tensor& other);
  Tensor& operator=(Tensor&& other) noexcept;  // a big uninitialized() buffer it replaces is kept for uninitialized()
  ~Tensor();                                   // the same

  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  // dim(i), with Python-style negative indices: dim(-1) is the last.
  int64_t dim(int i) const;
  int64_t numel() const { return static_cast<int64_t>(data_.size()); }
  bool empty() const { return data_.empty(); }
  std::string shape_str() const { return attnkit::shape_str(shape_); }

  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  float& operator[](int64_t i) { return data_[static_cast<size_t>(i)]; }
  float operator[](int64_t i) const { return data_[static_cast<size_t>(i)]; }
  const std::vector<float>& values() const { return data_; }
  std::vector<float>& values() { return data_; }

  // Same data, new shape (one dim may be -1); throws if the sizes disagree.
  Tensor reshaped(Shape shape) const;
  // In place: keeps the data, changes the shape (same numel).
  void reshape(Shape shape);

 private:
  void give_back() noexcept;  // data_ to uninitialized()'s kept buffers, if it came from there
  Shape shape_;
  std::vector<float> data_;
  // data_ came from uninitialized(): freed, it is kept for the next one. Only those: keeping a reader's or a copy's
  // freed buffers too would hold memory that the next malloc could reuse (raising the JSON reader's peak
  // memory, and leaving its writer's temporaries on fresh pages).
  bool recyclable_ = false;
};

// Row-major flat index -> multi-index, for messages ("at [1, 2]").
Shape unravel_index(int64_t flat, const Shape& shape);

}  // namespace attnkit
