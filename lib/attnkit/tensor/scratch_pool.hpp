// ScratchPool (INTERNAL, include from .cpp files only): big float scratch buffers, recycled between
// calls. A fresh buffer of megabytes costs the kernel's zeroing of every page on its first touch (and
// glibc hands freed ones back to the system): thousands of page faults per MHA forward + backward,
// an LSTM forward's tens of MB of pre-activations, the FFN hidden of a Transformer layer every call. A training step frees its buffers after the
// backward and the next step asks for the same sizes again; an inference loop does the same per call.
// Up to kKeep freed buffers, kBytes in all, wait for a request they fit (at most twice its size; the
// smallest that fits serves it);
// buffers under 256 KB are not kept. Contents are uninitialised. The price: up to kBytes stay resident
// between calls (as ONNX Runtime's arena keeps its own). kBytes holds the probabilities an MHA training
// step keeps at T = 4096 (516 MiB, ops::MhaOptions::saved_probs_budget): fresh, their pages' faults
// would cost about as much as the step itself. Thread-safe; a buffer returns to the pool
// when its last shared_ptr goes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "attnkit/tensor/large_buffer.hpp"

namespace attnkit {

class ScratchPool {
 public:
  // A buffer of at least `floats` floats (uninitialised); throws std::bad_alloc like new.
  static std::shared_ptr<float> get(int64_t floats);
  // Which of `count` free buffers (their sizes in floats) a request for `floats` takes: the smallest that
  // fits (at least `floats`, at most twice), the first of equals; -1 if none. Not the first that fits:
  // that one may be the bigger buffer a later request of the same step needs, which then comes fresh
  // (an MHA training step's gradients would take the backward's bigger panels).
  static std::ptrdiff_t best_fit(const int64_t* sizes, size_t count, int64_t floats);

 private:
  static constexpr size_t kKeep = 16;  // a 2-layer LSTM training step frees 4 cache buffers a layer, and more
  static constexpr int64_t kBytes = int64_t{1} << 30;
  static constexpr int64_t kMinFloats = int64_t{1} << 16;  // smaller ones come and go through malloc
  struct Entry {
    std::unique_ptr<LargeBuffer> buf;
    int64_t floats;
  };
  void put(LargeBuffer* raw, int64_t floats);
  std::mutex mutex_;
  std::vector<Entry> free_;
  int64_t held_ = 0;  // floats in free_
};

}  // namespace attnkit
