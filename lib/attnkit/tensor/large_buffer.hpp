// LargeBuffer (INTERNAL, include from .cpp files only): an uninitialised float scratch buffer that
// asks for transparent huge pages when it is big (madvise; advice only). A buffer of tens of MB
// written once per call otherwise faults in 4 KB pages: ~5-10% of a big LSTM or attention forward.
#pragma once
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <optional>

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

// A float scratch buffer (uninitialised) that the calling thread keeps from call to call for its
// slot, grown on demand, up to kKept floats (64 MB); larger ones are mapped fresh each time. Fresh memory is
// expensive: the kernel zeroes every page on its first touch, and for the [N*T, G*H] pre-activations
// of an LSTM N=64 T=100 H=512 (52 MB) that took 10% of a forward (perf: clear_page_erms), every call.
// Kept, the memory stays mapped at the largest size asked for (as ONNX Runtime's arena keeps its own).
// One user per slot at a time on a thread: each slot names the one place that uses it.
class KeptScratch {
 public:
  enum Slot { kRecurrentInput, kFeedForward, kAttentionContext, kAttentionQkv, kAttentionK, kAttentionV, kSlots };
  KeptScratch(int64_t floats, Slot slot) {
    if (floats > kKept) {
      large_.emplace(floats);
      data_ = large_->data();
      return;
    }
    thread_local std::unique_ptr<LargeBuffer> kept[kSlots];
    thread_local int64_t kept_size[kSlots] = {};
    if (!kept[slot] || kept_size[slot] < floats) {
      kept[slot].reset();
      kept[slot] = std::make_unique<LargeBuffer>(floats);
      kept_size[slot] = floats;
    }
    data_ = kept[slot]->data();
  }
  float* data() { return data_; }

 private:
  static constexpr int64_t kKept = int64_t(1) << 24;  // floats (64 MB per slot at most)
  std::optional<LargeBuffer> large_;
  float* data_ = nullptr;
};

}  // namespace attnkit
