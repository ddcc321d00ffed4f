#include "attnkit/tensor/scratch_pool.hpp"

namespace attnkit {

std::shared_ptr<float> ScratchPool::get(int64_t floats) {
  static ScratchPool* pool = new ScratchPool;  // never destroyed: a cache may outlive static destruction
  std::unique_ptr<LargeBuffer> buf;
  int64_t size = floats;
  {
    std::lock_guard<std::mutex> lock(pool->mutex_);
    int64_t sizes[kKeep];  // put() keeps at most kKeep: nothing allocated under the lock
    size_t count = 0;
    for (const Entry& e : pool->free_) sizes[count++] = e.floats;
    const std::ptrdiff_t i = best_fit(sizes, count, floats);
    if (i >= 0) {
      buf = std::move(pool->free_[size_t(i)].buf), size = pool->free_[size_t(i)].floats;
      pool->held_ -= size;
      pool->free_.erase(pool->free_.begin() + i);
    }
  }
  if (!buf) buf = std::make_unique<LargeBuffer>(floats);
  LargeBuffer* raw = buf.release();
  return std::shared_ptr<float>(raw->data(), [raw, size](float*) { pool->put(raw, size); });
}

std::ptrdiff_t ScratchPool::best_fit(const int64_t* sizes, size_t count, int64_t floats) {
  std::ptrdiff_t best = -1;
  for (size_t i = 0; i < count; ++i)
    if (sizes[i] >= floats && sizes[i] <= 2 * floats && (best < 0 || sizes[i] < sizes[size_t(best)]))
      best = static_cast<std::ptrdiff_t>(i);
  return best;
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
