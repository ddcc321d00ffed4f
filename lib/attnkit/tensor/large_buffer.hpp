// LargeBuffer (INTERNAL, include from .cpp files only): an uninitialised float scratch buffer that
// asks for transparent huge pages when it is big (madvise; advice only). A buffer of tens of MB
// written once per call otherwise faults in 4 KB pages, a cost of the order of the work it holds.
#pragma once
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace attnkit {

class LargeBuffer {
 public:
  explicit LargeBuffer(int64_t floats) {
    constexpr size_t kHuge = size_t(2) << 20;
    size_t bytes = std::max<size_t>(64, sizeof(float) * static_cast<size_t>(floats));
    const bool huge = bytes >= 2 * kHuge;
    if (huge) bytes = (bytes + kHuge - 1) / kHuge * kHuge;
    void* p = nullptr;
    if (posix_memalign(&p, huge ? kHuge : 64, bytes) != 0) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    if (huge) madvise(p, bytes, MADV_HUGEPAGE);  // advice only: ignore failure
#endif
    data_ = static_cast<float*>(p);
  }
  ~LargeBuffer() { std::free(data_); }
  LargeBuffer(const LargeBuffer&) = delete;
  LargeBuffer& operator=(const LargeBuffer&) = delete;
  float* data() { return data_; }

 private:
  float* data_ = nullptr;
};

}  // namespace attnkit
