#include "attnkit/tensor/tensor.hpp"

#include <mutex>

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

// Buffers of big Tensor::uninitialized tensors freed recently, for the next ones: a forward's output [N, T, H] would
// otherwise be zero-filled by page faults on one thread while the other waits. At most kKept buffers and kKeptBytes in all (memory a library
// user would otherwise get back), the oldest dropped first.
namespace {
constexpr size_t kMinFloats = size_t(1) << 18;  // 1 MB
constexpr size_t kKept = 8, kKeptBytes = size_t(128) << 20;

class Recycler {
 public:
  // The smallest kept buffer of n to 2n floats, resized to n (a shrink: nothing written), or empty.
  std::vector<float> take(size_t n) {
    std::lock_guard<std::mutex> lock(mutex_);
    size_t best = kept_.size();
    for (size_t i = 0; i < kept_.size(); ++i) {
      const size_t size = kept_[i].size();
      if (size >= n && size <= 2 * n && (best == kept_.size() || size < kept_[best].size())) best = i;
    }
    if (best == kept_.size()) return {};
    std::vector<float> v = std::move(kept_[best]);
    kept_.erase(kept_.begin() + static_cast<std::ptrdiff_t>(best));
    bytes_ -= v.size() * sizeof(float);
    v.resize(n);
    return v;
  }
  void give(std::vector<float>& v) noexcept {
    if (v.size() < kMinFloats || v.size() * sizeof(float) > kKeptBytes) return;
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      kept_.push_back(std::move(v));
      bytes_ += kept_.back().size() * sizeof(float);
      while (kept_.size() > kKept || bytes_ > kKeptBytes) {
        bytes_ -= kept_.front().size() * sizeof(float);
        kept_.erase(kept_.begin());
      }
    } catch (...) {  // no memory for the list, or no lock: the buffer is simply freed
    }
  }

 private:
  std::mutex mutex_;
  std::vector<std::vector<float>> kept_;
  size_t bytes_ = 0;
};

// Never destroyed: a tensor in static storage may be freed after it would be.
Recycler& recycler() {
  static Recycler* r = new Recycler;
  return *r;
}
}  // namespace

Tensor Tensor::uninitialized(Shape shape) {
  const size_t n = static_cast<size_t>(shape_numel(shape));
  if (n < kMinFloats) return Tensor(std::move(shape));
  std::vector<float> v = recycler().take(n);
  if (v.empty()) v.resize(n);  // none kept fits: a fresh, zero-filled one
  Tensor t(std::move(shape), std::move(v));
  t.recyclable_ = true;
  return t;
}

void Tensor::give_back() noexcept {
  if (recyclable_) recycler().give(data_);
  recyclable_ = false;
}

Tensor::Tensor(Tensor&& other) noexcept
    : shape_(std::move(other.shape_)), data_(std::move(other.data_)), recyclable_(other.recyclable_) {
  other.recyclable_ = false;
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this != &other) {
    give_back();
    shape_ = other.shape_;
    data_ = other.data_;
  }
  return *this;
}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this != &other) {
    give_back();
    shape_ = std::move(other.shape_);
    data_ = std::move(other.data_);
    recyclable_ = other.recyclable_;
    other.recyclable_ = false;
  }
  return *this;
}

Tensor::~Tensor() { give_back(); }

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
