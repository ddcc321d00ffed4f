// StepBarrier (INTERNAL, include from .cpp files only): a barrier for the threads of one OpenMP
// team that spins briefly, then sleeps. OpenMP's own barrier spins much longer (libgomp: up to
// GOMP_SPINCOUNT = 300000 pauses, milliseconds), which on cores shared with other work doubled the
// time of 2-thread runs: a spinning thread burns the time slice its descheduled partner waits for.
#pragma once
#include <immintrin.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
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
      generation_.store(gen + 1, std::memory_order_seq_cst);
      // Wake sleepers only if there are any: a step where every thread was still spinning costs the
      // last arriver no mutex and no notify. (A sleeper registers before its last look at the
      // generation, both seq_cst: either it sees the new generation or this load sees it.)
      if (sleepers_.load(std::memory_order_seq_cst) > 0) {
        { std::lock_guard<std::mutex> lock(mutex_); }
        cv_.notify_all();
      }
      return;
    }
    for (int i = 0; i < kSpins; ++i) {
      if (generation_.load(std::memory_order_acquire) != gen) return;
      _mm_pause();
    }
    std::unique_lock<std::mutex> lock(mutex_);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    cv_.wait(lock, [&] { return generation_.load(std::memory_order_seq_cst) != gen; });
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }

 private:
  static constexpr int kSpins = 1000;  // pause is ~40-140 cycles: some 20-50 microseconds
  int n_;
  std::atomic<int> arrived_{0};
  std::atomic<unsigned> generation_{0};
  std::atomic<int> sleepers_{0};  // threads in (or entering) cv_.wait
  std::mutex mutex_;
  std::condition_variable cv_;
};

// StepClaims: a barrier-free schedule for a loop of rounds j = 0, 1, ... of `parts` pieces of work,
// where every piece of round j needs every piece of round j - 1 done (a recurrent layer's time steps,
// split into runs of hidden units). Each piece is run exactly once, by whoever claims it first: a
// thread claims its own pieces (part c belongs to thread c: its weights stay in that core's cache),
// then any piece of the round nobody has claimed. On an idle machine the owner has claimed its piece
// long before another thread finishes its own, so nothing moves; when an owner is descheduled, the
// others take its pieces instead of waiting for it at every round (a barrier there cost a sleep and
// a late wake-up per step: 10-20 ms for a 0.5 ms loop).
//
//   StepClaims claims(parts);
//   #pragma omp parallel: for (j = 0; j < rounds; ++j) { if (j) claims.wait_round(j);
//       for (c = mine first, then the rest) if (claims.claim(c, j)) { work(c, j); claims.finish(); } }
class StepClaims {
 public:
  explicit StepClaims(int parts) : parts_(parts), claimed_(new Slot[parts]) {
    for (int c = 0; c < parts; ++c) claimed_[c].round.store(-1, std::memory_order_relaxed);
  }
  int parts() const { return parts_; }
  // Whether this thread got piece (c, round); true for exactly one caller. Call only after
  // wait_round(round) (or for round 0).
  bool claim(int c, int64_t round) {
    std::atomic<int64_t>& r = claimed_[c].round;
    int64_t expected = round - 1;
    if (r.load(std::memory_order_relaxed) != expected) return false;
    return r.compare_exchange_strong(expected, round, std::memory_order_acq_rel, std::memory_order_relaxed);
  }
  // After a claimed piece ran (also when it failed: the others must not wait for it forever).
  void finish() {
    done_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {  // as StepBarrier: no mutex unless someone sleeps
      { std::lock_guard<std::mutex> lock(mutex_); }
      cv_.notify_all();
    }
  }
  // Until every piece of the rounds before `round` is done (their writes are then visible): spins
  // briefly, then sleeps.
  void wait_round(int64_t round) {
    const int64_t target = round * parts_;
    for (int i = 0; i < kSpins; ++i) {
      if (done_.load(std::memory_order_acquire) >= target) return;
      _mm_pause();
    }
    std::unique_lock<std::mutex> lock(mutex_);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    cv_.wait(lock, [&] { return done_.load(std::memory_order_seq_cst) >= target; });
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }

 private:
  static constexpr int kSpins = 1000;
  struct alignas(64) Slot {  // one cache line per part: claims of different parts do not collide
    std::atomic<int64_t> round;
  };
  int parts_;
  std::unique_ptr<Slot[]> claimed_;  // the last round claimed of each part
  alignas(64) std::atomic<int64_t> done_{0};  // pieces finished, all rounds together
  std::atomic<int> sleepers_{0};
  std::mutex mutex_;
  std::condition_variable cv_;
};

}  // namespace attnkit
