// StepBarrier (INTERNAL, include from .cpp files only): a barrier for the threads of one OpenMP
// team that spins briefly, then sleeps. OpenMP's own barrier spins much longer (libgomp: up to
// GOMP_SPINCOUNT = 300000 pauses, milliseconds), which on cores shared with other work doubled the
// time of 2-thread runs: a spinning thread burns the time slice its descheduled partner waits for.
#pragma once
#include <immintrin.h>

#include <atomic>
#include <condition_variable>
#include <mutex>

namespace attnkit {

class StepBarrier {
 public:
  explicit StepBarrier(int n) : n_(n) {}
  void resize(int n) { n_ = n; }  // before anyone waits
  void wait() {
    const unsigned gen = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
      arrived_.store(0, std::memory_order_relaxed);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        generation_.store(gen + 1, std::memory_order_release);
      }
      cv_.notify_all();
      return;
    }
    for (int i = 0; i < kSpins; ++i) {
      if (generation_.load(std::memory_order_acquire) != gen) return;
      _mm_pause();
    }
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != gen; });
  }

 private:
  static constexpr int kSpins = 1000;  // pause is ~40-140 cycles: some 20-50 microseconds
  int n_;
  std::atomic<int> arrived_{0};
  std::atomic<unsigned> generation_{0};
  std::mutex mutex_;
  std::condition_variable cv_;
};

}  // namespace attnkit
