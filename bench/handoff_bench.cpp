// handoff_bench: what a two-thread team pays to hand a recurrent layer's state over at every step, on this
// machine. Two threads, one per CPU (0 and 1, pinned):
//   ping-pong    one-way latency of a flag written by one core and polled by the other (a cache line's
//                trip between the cores: about 50-100 ns on one chip, 240 ns between this VM's vCPUs)
//   step floor   an LSTM-sized time loop reduced to its handoff: each thread multiplies h [H] by its half of
//                W_hh [H, 4H] (ops::gemm_packed, B packed for rows) and writes its half of the next h, then
//                raises its flag; the other waits for it. --H 128: the N=1 latency case of bench/vs_onnxruntime.
//                Against "one thread", the whole product per step on one core with no handoff.
//   handoff_bench [--H 128] [--steps 100] [--rounds 2000]
// Prints one JSON line: {"H":..,"one_way_ns":..,"team_step_us":..,"one_thread_step_us":..}
// Linux only (pthread_setaffinity_np); needs 2 CPUs.
#include <immintrin.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "attnkit/ops/matmul.hpp"

using namespace attnkit;
using Clock = std::chrono::steady_clock;

namespace {

void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

struct alignas(64) Flag {
  std::atomic<int64_t> v{0};
};

double one_way_ns(int rounds) {
  Flag f;
  std::thread other([&] {
    pin(1);
    for (int64_t i = 0; i < rounds; ++i) {
      while (f.v.load(std::memory_order_acquire) != 2 * i + 1) _mm_pause();
      f.v.store(2 * i + 2, std::memory_order_release);
    }
  });
  pin(0);
  const Clock::time_point t0 = Clock::now();
  for (int64_t i = 0; i < rounds; ++i) {
    f.v.store(2 * i + 1, std::memory_order_release);
    while (f.v.load(std::memory_order_acquire) != 2 * i + 2) _mm_pause();
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  other.join();
  return s / rounds / 2 * 1e9;
}

// Step i: y = h_i W (this thread's columns), h_{i+1}[own half] = 0.001 y[own units' first gate]. Returns the
// best time of `rounds` loops of `steps` steps, microseconds a step.
double team_step_us(int64_t H, int steps, int rounds) {
  const int64_t GH = 4 * H, half = H / 2;
  std::vector<float> w(static_cast<size_t>(H * GH));
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.01f * static_cast<float>(int(i * 7 % 13) - 6);
  std::vector<ops::GemmPackedB> parts;
  for (int c = 0; c < 2; ++c)
    parts.emplace_back(ops::Trans::No, H, GH / 2, w.data() + c * GH / 2, GH, ops::GemmPackedB::Layout::Rows);
  std::vector<float> h(static_cast<size_t>(2 * H), 0.5f);
  Flag done[2];
  std::atomic<int64_t> go{-1};
  std::atomic<int> finished{0};
  auto loop = [&](int id, int64_t base) {
    std::vector<float> y(static_cast<size_t>(GH / 2));
    for (int i = 0; i < steps; ++i) {
      if (i > 0)
        while (done[1 - id].v.load(std::memory_order_acquire) < base + i) _mm_pause();
      const float* hi = h.data() + (i & 1) * H;
      ops::gemm_packed(ops::Trans::No, 1, 1.0f, hi, H, parts[size_t(id)], 0.0f, y.data(), GH / 2,
                       ops::GemmThreads::This);
      float* next = h.data() + ((i + 1) & 1) * H + id * half;
      for (int64_t u = 0; u < half; ++u) next[u] = 0.001f * y[size_t(u)];
      done[id].v.store(base + i + 1, std::memory_order_release);
    }
  };
  std::thread other([&] {
    pin(1);
    for (int64_t seen = -1;;) {
      int64_t g;
      while ((g = go.load(std::memory_order_acquire)) == seen) _mm_pause();
      if (g < 0) return;
      seen = g;
      loop(1, g * steps);
      finished.fetch_add(1);
    }
  });
  pin(0);
  double best = 1e30;
  for (int64_t r = 0; r < rounds; ++r) {
    const Clock::time_point t0 = Clock::now();
    go.store(r, std::memory_order_release);
    loop(0, r * steps);
    while (finished.load() != r + 1) _mm_pause();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  go.store(-2, std::memory_order_release);
  other.join();
  return best / steps * 1e6;
}

double one_thread_step_us(int64_t H, int steps, int rounds) {
  const int64_t GH = 4 * H;
  std::vector<float> w(static_cast<size_t>(H * GH));
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.01f * static_cast<float>(int(i * 7 % 13) - 6);
  const ops::GemmPackedB packed(ops::Trans::No, H, GH, w.data(), GH, ops::GemmPackedB::Layout::Rows);
  std::vector<float> h(static_cast<size_t>(2 * H), 0.5f), y(static_cast<size_t>(GH));
  pin(0);
  double best = 1e30;
  for (int r = 0; r < rounds; ++r) {
    const Clock::time_point t0 = Clock::now();
    for (int i = 0; i < steps; ++i) {
      ops::gemm_packed(ops::Trans::No, 1, 1.0f, h.data() + (i & 1) * H, H, packed, 0.0f, y.data(), GH,
                       ops::GemmThreads::This);
      for (int64_t u = 0; u < H; ++u) h[size_t(((i + 1) & 1) * H + u)] = 0.001f * y[size_t(u)];
    }
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best / steps * 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t H = 128;
  int steps = 100, rounds = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--H") H = std::atoll(argv[i + 1]);
    else if (k == "--steps") steps = std::atoi(argv[i + 1]);
    else if (k == "--rounds") rounds = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "handoff_bench: unknown option %s\n", k.c_str());
      return 1;
    }
  }
  if (H < 2 || H % 2 || steps < 1 || rounds < 1 || std::thread::hardware_concurrency() < 2) {
    std::fprintf(stderr, "handoff_bench: needs an even --H >= 2, --steps and --rounds >= 1, and 2 CPUs\n");
    return 1;
  }
  const double ns = one_way_ns(rounds * 100);
  const double team = team_step_us(H, steps, rounds);
  const double one = one_thread_step_us(H, steps, rounds);
  std::printf("{\"H\":%lld,\"one_way_ns\":%.1f,\"team_step_us\":%.3f,\"one_thread_step_us\":%.3f}\n",
              static_cast<long long>(H), ns, team, one);
  return 0;
}
