// StepBarrier (INTERNAL, include from .cpp files only): a barrier for the threads of one OpenMP
// team that spins a while (20 us unless the constructor says otherwise), then sleeps. OpenMP's own
// barrier spins much longer (libgomp: up to GOMP_SPINCOUNT = 300000 pauses, milliseconds), which on
// cores shared with other work doubled the time of 2-thread runs: a spinning thread burns the time
// slice its descheduled partner waits for.
#pragma once
#include <immintrin.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

namespace attnkit {

class StepBarrier {
 public:
  // spin: how long a waiter spins before it sleeps (waking a sleeper costs the waker tens of microseconds
  // and the sleeper more until it runs; a stage of milliseconds affords a longer spin than a time step)
  explicit StepBarrier(int n, std::chrono::microseconds spin = std::chrono::microseconds(20)) : n_(n), spin_(spin) {}
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
    const auto until = std::chrono::steady_clock::now() + spin_;
    for (int i = 1;; ++i) {
      if (generation_.load(std::memory_order_acquire) != gen) return;
      _mm_pause();  // 18 ns here: the clock every 64
      if (i % 64 == 0 && std::chrono::steady_clock::now() >= until) break;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    cv_.wait(lock, [&] { return generation_.load(std::memory_order_seq_cst) != gen; });
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }

 private:
  int n_;
  std::chrono::microseconds spin_;
  std::atomic<int> arrived_{0};
  std::atomic<unsigned> generation_{0};
  std::atomic<int> sleepers_{0};  // threads in (or entering) cv_.wait
  std::mutex mutex_;
  std::condition_variable cv_;
};

// StepClaims: a barrier-free schedule for a loop of rounds j = 0, 1, ... of `parts` pieces of work,
// where every piece of round j needs every piece of round j - 1 done (a recurrent layer's time steps,
// split into runs of hidden units). Each piece is run exactly once, by whoever claims it first. A
// thread claims its own pieces (part c belongs to thread c: its weights stay in that core's cache);
// while it waits for a round to complete, it takes the pieces nobody has claimed once it has waited
// a few microseconds (an owner on an idle machine claims its piece within a fraction of that, so
// nothing moves; a descheduled owner's pieces run elsewhere instead of every round waiting for it,
// as every round would at a barrier on shared cores).
//
//   StepClaims claims(parts);
//   #pragma omp parallel: for (j = 0; j <= rounds; ++j) {
//       if (j) claims.wait_round(j, [&] { for other parts c: if (claims.claim(c, j - 1)) run(c, j - 1); });
//       if (j < rounds) for my parts c: if (claims.claim(c, j)) run(c, j); }  // run ends in finish(c, j)
class StepClaims {
 public:
  explicit StepClaims(int parts) : parts_(parts), slots_(new Slot[parts]) {
    for (int c = 0; c < parts; ++c) {
      slots_[c].claimed.store(-1, std::memory_order_relaxed);
      slots_[c].done.store(0, std::memory_order_relaxed);
    }
  }
  int parts() const { return parts_; }
  // Whether this thread got piece (c, round); true for exactly one caller. Call only once every
  // piece of round - 1 is done (wait_round(round), or within wait_round(round + 1)'s take_unclaimed).
  bool claim(int c, int64_t round) {
    std::atomic<int64_t>& r = slots_[c].claimed;
    int64_t expected = round - 1;
    if (r.load(std::memory_order_relaxed) != expected) return false;
    return r.compare_exchange_strong(expected, round, std::memory_order_acq_rel, std::memory_order_relaxed);
  }
  // After piece (c, round) ran (also when it failed: the others must not wait for it forever). A plain
  // store to the part's own line: the thread goes on at once (a locked add on one shared counter
  // would stall it for the line's round trip between cores, every step).
  void finish(int c, int64_t round) {
    slots_[c].done.store(round + 1, std::memory_order_release);
    // No fence before this look (it would cost the stall the store avoids): a waiter that went to
    // sleep just now may miss the notify, and its timed wait looks again within kSleep.
    if (sleepers_.load(std::memory_order_relaxed) > 0) {
      { std::lock_guard<std::mutex> lock(mutex_); }
      cv_.notify_all();
    }
  }
  // Until every piece of the rounds before `round` is done (their writes are then visible): spins;
  // after kStealAfter pauses calls take_unclaimed() (which claims and runs what it can of round - 1),
  // and again before it sleeps.
  template <typename F>
  void wait_round(int64_t round, F&& take_unclaimed) {
    for (int i = 0; i < kSpins; ++i) {
      if (round_done(round)) return;
      if (i == kStealAfter) take_unclaimed();
      _mm_pause();
    }
    take_unclaimed();
    std::unique_lock<std::mutex> lock(mutex_);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    while (!round_done(round)) cv_.wait_for(lock, kSleep);
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }

 private:
  static constexpr int kSpins = 1000, kStealAfter = 100;  // pause: ~40-140 cycles
  static constexpr std::chrono::microseconds kSleep{200};
  bool round_done(int64_t round) const {
    for (int c = 0; c < parts_; ++c)
      if (slots_[c].done.load(std::memory_order_acquire) < round) return false;
    return true;
  }
  struct Slot {  // a part's two cache lines: waiters poll `done`, the owner's claims stay off that line
    alignas(64) std::atomic<int64_t> claimed;  // the last round claimed
    alignas(64) std::atomic<int64_t> done;     // rounds finished (a part's pieces finish in round order)
  };
  int parts_;
  std::unique_ptr<Slot[]> slots_;
  alignas(64) std::atomic<int> sleepers_{0};
  std::mutex mutex_;
  std::condition_variable cv_;
};

}  // namespace attnkit
