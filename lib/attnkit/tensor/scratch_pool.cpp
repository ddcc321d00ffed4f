#include "attnkit/tensor/scratch_pool.hpp"

namespace attnkit {

std::shared_ptr<float> ScratchPool::get(int64_t floats) {
  static ScratchPool* pool = new ScratchPool;  // never destroyed: a cache may outlive static destruction
  std::unique_ptr<LargeBuffer> buf;
  int64_t size = floats;
  {
    std::lock_guard<std::mutex> lock(pool->mutex_);
    for (size_t i = 0; i < pool->free_.size(); ++i)
      if (pool->free_[i].floats >= floats && pool->free_[i].floats <= 2 * floats) {
        buf = std::move(pool->free_[i].buf), size = pool->free_[i].floats;
        pool->held_ -= size;
        pool->free_.erase(pool->free_.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
  }
  if (!buf) buf = std::make_unique<LargeBuffer>(floats);
  LargeBuffer* raw = buf.release();
  return std::shared_ptr<float>(raw->data(), [raw, size](float*) { pool->put(raw, size); });
}

void ScratchPool::put(LargeBuffer* raw, int64_t floats) {
  std::unique_ptr<LargeBuffer> buf(raw);
  std::lock_guard<std::mutex> lock(mutex_);
  if (floats < kMinFloats || free_.size() >= kKeep || (held_ + floats) * int64_t(sizeof(float)) > kBytes)
    return;  // freed here
  held_ += floats;
  free_.push_back({std::move(buf), floats});
}

}  // namespace attnkit
