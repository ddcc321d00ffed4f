// StepClaims and StepBarrier (tensor/barrier.hpp): every piece of a loop of rounds runs exactly once, a round only
// after the whole previous round, and a late thread's pieces are taken by the others; guided shares (threads.hpp).
#include <omp.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "attnkit/tensor/barrier.hpp"
#include "attnkit/tensor/threads.hpp"
#include <doctest/doctest.h>

using namespace attnkit;

namespace {

struct Outcome {
  std::vector<int> runs;      // [rounds * parts] how often each piece ran
  std::vector<int> runner;    // [rounds * parts] the thread that ran it
  int out_of_order = 0;       // pieces that found a piece of the previous round not yet done
  int moved = 0;              // pieces run by a thread that does not own them
  int threads = 0;            // the team OpenMP gave
};

// `late`: thread 1 starts this long after the others (as if descheduled).
Outcome run_loop(int parts, int threads, int64_t rounds, std::chrono::milliseconds late) {
  StepClaims claims(parts);
  Outcome o;
  o.runs.assign(size_t(rounds * parts), 0);
  o.runner.assign(size_t(rounds * parts), -1);
  std::vector<std::atomic<int>> done(size_t(rounds * parts));
  for (auto& d : done) d.store(0);
  std::atomic<int> out_of_order{0}, moved{0};
#pragma omp parallel num_threads(threads)
  {
    const int id = omp_get_thread_num(), nt = omp_get_num_threads();
    if (id == 0) o.threads = nt;
    if (id == 1) std::this_thread::sleep_for(late);
    auto run = [&](int c, int64_t r) {
      if (r > 0)
        for (int d = 0; d < parts; ++d)
          if (!done[size_t((r - 1) * parts + d)].load()) ++out_of_order;
      ++o.runs[size_t(r * parts + c)];  // exactly one thread gets here per piece
      o.runner[size_t(r * parts + c)] = id;
      if (c % nt != id) ++moved;
      done[size_t(r * parts + c)].store(1);
      claims.finish(c, r);
    };
    for (int64_t r = 0; r <= rounds; ++r) {
      if (r > 0)
        claims.wait_round(r, [&] {
          for (int c = 0; c < parts; ++c)
            if (c % nt != id && claims.claim(c, r - 1)) run(c, r - 1);
        });
      if (r < rounds)
        for (int c = id; c < parts; c += nt)
          if (claims.claim(c, r)) run(c, r);
    }
  }
  o.out_of_order = out_of_order.load();
  o.moved = moved.load();
  return o;
}

}  // namespace

TEST_CASE("StepClaims: every piece once, rounds in order, a late thread's pieces taken by the others") {
  for (int parts : {1, 2, 3}) {
    for (int threads : {1, 2}) {
      CAPTURE(parts);
      CAPTURE(threads);
      const int64_t rounds = 50;
      const Outcome o = run_loop(parts, threads, rounds, std::chrono::milliseconds(0));
      for (int n : o.runs) REQUIRE(n == 1);
      CHECK(o.out_of_order == 0);
    }
  }
  // Thread 1 arrives 100 ms late: thread 0 runs thread 1's pieces meanwhile (waiting a few
  // microseconds a round) instead of waiting for it; the late thread then finds them done.
  const Outcome o = run_loop(2, 2, 20, std::chrono::milliseconds(100));
  for (int n : o.runs) REQUIRE(n == 1);
  CHECK(o.out_of_order == 0);
  if (o.threads == 2) {
    CHECK(o.runner[1] == 0);  // round 0 of part 1: thread 1 was still asleep
    CHECK(o.moved > 0);
  }
}

TEST_CASE("StepBarrier: no thread passes round j before every thread reached it, spinning or asleep") {
  // spin 0: a waiter sleeps at once (the notify path); 200 ms: it never sleeps here
  for (int spin_us : {0, 200000}) {
    CAPTURE(spin_us);
    const int rounds = 200;
    std::vector<std::atomic<int>> reached(rounds);
    for (auto& r : reached) r.store(0);
    std::atomic<int> early{0};
    StepBarrier barrier(2, std::chrono::microseconds(spin_us));
#pragma omp parallel num_threads(2)
    {
#pragma omp single
      barrier.resize(omp_get_num_threads());
      const int team = omp_get_num_threads();
      for (int j = 0; j < rounds; ++j) {
        if (omp_get_thread_num() == j % team) std::this_thread::sleep_for(std::chrono::microseconds(j % 7 * 50));
        reached[j].fetch_add(1);
        barrier.wait();
        if (reached[j].load() != team) early.fetch_add(1);
      }
    }
    CHECK(early.load() == 0);
  }
}

TEST_CASE("guided shares: cover the units once, shrink toward the end, never below the minimum") {
  for (int team : {1, 2, 3, 8}) {
    for (int64_t units : {0, 1, 2, 7, 86, 1000}) {
      for (int64_t min_units : {1, 2, 5}) {
        CAPTURE(team);
        CAPTURE(units);
        CAPTURE(min_units);
        const int64_t tasks = attnkit::detail::guided_tasks(units, team, min_units);
        REQUIRE(attnkit::detail::guided_start(units, team, min_units, 0) == 0);
        REQUIRE(attnkit::detail::guided_start(units, team, min_units, tasks) == units);
        int64_t previous = units + 1;
        for (int64_t b = 0; b < tasks; ++b) {
          const int64_t share = attnkit::detail::guided_start(units, team, min_units, b + 1) - attnkit::detail::guided_start(units, team, min_units, b);
          CHECK(share >= 1);
          CHECK(share <= previous);
          if (b + 1 < tasks) CHECK(share >= min_units);  // only the last may be smaller (what was left)
          if (b == 0) CHECK(share == std::max<int64_t>(std::min(units, min_units), (units + 2 * team - 1) / (2 * team)));
          previous = share;
        }
      }
    }
  }
  // 1024 rows in register blocks of 12 on 2 threads: 22, 16, 12, .. blocks, the last ones 2
  CHECK(attnkit::detail::guided_tasks(86, 2, 2) == 12);
  CHECK(attnkit::detail::guided_start(86, 2, 2, 1) == 22);
  CHECK(attnkit::detail::guided_start(86, 2, 2, 2) == 38);
}
