// attention_bench: times attnkit's self-attention (nn::multihead_attention_forward, weights not
// requested: the tiled kernel) on random data and reports the peak resident memory.
// Driven by bench/attention_vs_torch.py and bench/attention_train_vs_torch.py, which interleave it
// with PyTorch; usable alone:
//   build/bench/attention_bench --T 4096 --E 512 --heads 8 --threads 2 --reps 3
//   --ops        the op-by-op path (nn::multihead_attention_forward_ops) instead of the fused one
//   --backward   forward (keeping the cache) + nn::multihead_attention_backward for d out.sum()
//                (dY = 1; gradients of the input and every weight), timed together; also reports the
//                best forward and backward CPU times apart
//   --malloc-default  glibc's default allocator policy instead of the tools' (retain_freed_memory, as
//                tools::run sets it), to measure what the policy saves
//   --probs-budget B  MhaOptions::saved_probs_budget (bytes; 0: the O(T) path that recomputes the
//                probabilities in the backward; default: the library's)
//   --sgemm-peak only time ops::gemm [1024 x 1024] x [1024 x 1024] (the GFLOP/s ceiling)
//   --fma-peak   only time a loop of independent vector FMAs in registers on every thread (the
//                processor's arithmetic peak as this VM delivers it now: what no sgemm can exceed)
// Prints one JSON line: {"T":..,"E":..,"heads":..,"threads":..,"times_s":[..],"best_s":..,"best_cpu_s":..,
// "peak_rss_mb":..} (--backward adds "best_forward_cpu_s", "best_backward_cpu_s"); best_cpu_s: the smallest process CPU time of a rep (on a loaded machine, compare
// one-thread runs by it).
#include <immintrin.h>
#include <omp.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "attnkit/nn/attention.hpp"
#include "attnkit/ops/matmul.hpp"
#include "attnkit/tensor/memory.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/tensor/threads.hpp"

using namespace attnkit;

namespace {

// kChains independent FMA chains (enough to cover the FMA latency times the FMA ports of Zen 3/4 and
// Sapphire Rapids); returns the sum so nothing is optimised away. FLOPs: iters * kChains * lanes * 2.
constexpr int kChains = 12;

__attribute__((target("avx2,fma"))) float fma_chains_avx2(int64_t iters) {
  __m256 acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm256_set1_ps(0.001f * j);
  const __m256 a = _mm256_set1_ps(0.9999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < kChains; ++j) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
  float sum = 0, lane[8];
  for (int j = 0; j < kChains; ++j) {
    _mm256_storeu_ps(lane, acc[j]);
    for (float v : lane) sum += v;
  }
  return sum;
}

__attribute__((target("avx512f"))) float fma_chains_avx512(int64_t iters) {
  __m512 acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_set1_ps(0.001f * j);
  const __m512 a = _mm512_set1_ps(0.9999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < kChains; ++j) acc[j] = _mm512_fmadd_ps(acc[j], a, b);
  float sum = 0, lane[16];
  for (int j = 0; j < kChains; ++j) {
    _mm512_storeu_ps(lane, acc[j]);
    for (float v : lane) sum += v;
  }
  return sum;
}

// {"fma_peak_gflops":..}: the best of reps wall-clock runs of every thread's chains at once.
int fma_peak(int64_t threads, int64_t reps) {
  const bool wide = __builtin_cpu_supports("avx512f");
  if (!wide && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
    std::fprintf(stderr, "attention_bench: --fma-peak needs AVX2 + FMA or AVX-512F\n");
    return 1;
  }
  const int64_t iters = 20'000'000, lanes = wide ? 16 : 8;
  double best = 1e30, sink = 0;
  for (int64_t r = 0; r < std::max<int64_t>(reps, 3); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(static_cast<int>(threads)) reduction(+ : sink)
    sink += wide ? fma_chains_avx512(iters) : fma_chains_avx2(iters);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf("{\"fma_peak_gflops\":%.1f,\"threads\":%lld,\"vector_bits\":%lld,\"best_s\":%.6f,\"sink\":%g}\n",
              2.0 * iters * kChains * lanes * threads / best / 1e9, (long long)threads, (long long)(32 * lanes), best,
              sink);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t N = 1, T = 1024, E = 512, NH = 8, threads = 2, reps = 3, tq = 0, tk = 0, probs_budget = -1;
  bool causal = false, weights = false, by_ops = false, backward = false, sgemm = false, malloc_default = false,
       fma = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atoll(argv[++i]) : 0LL; };
    if (a == "--N") N = next();
    else if (a == "--T") T = next();
    else if (a == "--E") E = next();
    else if (a == "--heads") NH = next();
    else if (a == "--threads") threads = next();
    else if (a == "--reps") reps = next();
    else if (a == "--tile-q") tq = next();
    else if (a == "--tile-k") tk = next();
    else if (a == "--probs-budget") probs_budget = next();
    else if (a == "--causal") causal = true;
    else if (a == "--need-weights") weights = true;
    else if (a == "--ops") by_ops = true;
    else if (a == "--backward") backward = true;
    else if (a == "--sgemm-peak") sgemm = true;
    else if (a == "--fma-peak") fma = true;
    else if (a == "--malloc-default") malloc_default = true;
    else {
      std::fprintf(stderr, "usage: attention_bench [--N 1] [--T 1024] [--E 512] [--heads 8] [--threads 2] [--reps 3] "
                           "[--causal] [--need-weights] [--ops] [--backward] [--malloc-default] [--probs-budget BYTES] "
                           "[--sgemm-peak] [--fma-peak] [--tile-q Q --tile-k K]\n");
      return 2;
    }
  }
  set_num_threads(static_cast<int>(threads));
  if (!malloc_default) retain_freed_memory();  // the tools' allocator policy (tools::run, tensor/memory.hpp)
  if (tq > 0 && tk > 0) ops::set_tile_sizes({tq, tk});
  if (fma) return fma_peak(threads, reps);
  Rng rng(1);
  if (sgemm) {
    const int64_t M = 1024;
    const Tensor A = rand_normal({M, M}, rng), B = rand_normal({M, M}, rng);
    Tensor C({M, M});
    double best = 1e30;
    for (int64_t r = 0; r < std::max<int64_t>(reps, 3); ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      ops::gemm(ops::Trans::No, ops::Trans::No, M, M, M, 1.0f, A.data(), M, B.data(), M, 0.0f, C.data(), M);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("{\"sgemm_M\":%lld,\"threads\":%lld,\"best_s\":%.6f,\"gflops\":%.1f}\n", (long long)M,
                (long long)threads, best, 2.0 * M * M * M / best / 1e9);
    return 0;
  }
  const float s = 1.0f / std::sqrt(static_cast<float>(E));
  io::Value w = io::Value::bundle();
  w.set("in_proj_weight", rand_uniform({3 * E, E}, rng, -s, s));
  w.set("in_proj_bias", Tensor({3 * E}));
  w.set("out_proj.weight", rand_uniform({E, E}, rng, -s, s));
  w.set("out_proj.bias", Tensor({E}));
  nn::MultiheadAttention m = nn::MultiheadAttention::from_bundle(w, NH);
  const Tensor x = rand_normal({N, T, E}, rng);
  ops::MhaOptions o;
  if (causal) o.mask.causal = ops::CausalKind::UpperLeft;
  if (probs_budget >= 0) o.saved_probs_budget = probs_budget;
  if (weights) o.weights = ops::HeadWeights::Averaged;
  std::vector<double> times;
  double checksum = 0, best_cpu = 1e30, best_fwd_cpu = 1e30, best_bwd_cpu = 1e30;
  auto cpu_now = [] {  // process CPU time: robust on a shared machine with --threads 1
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
  };
  for (int64_t r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_now();
    if (backward) {
      ops::MhaCache cache;
      ops::MhaResult y = nn::multihead_attention_forward(m, x, x, x, o, &cache);
      const double c1 = cpu_now();
      best_fwd_cpu = std::min(best_fwd_cpu, c1 - c0);
      const Tensor dy = Tensor::filled(y.output.shape(), 1.0f);  // d out.sum() / d out
      Tensor dx(x.shape());
      m.zero_grad();
      nn::multihead_attention_backward(m, x, x, x, o, cache, dy, &dx, &dx, &dx);
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      const double c2 = cpu_now();
      best_cpu = std::min(best_cpu, c2 - c0);
      best_bwd_cpu = std::min(best_bwd_cpu, c2 - c1);
      checksum = dx[0] + m.in_proj_weight.grad[0];
      continue;
    }
    ops::MhaResult y = by_ops ? nn::multihead_attention_forward_ops(m, x, x, x, o) : nn::multihead_attention_forward(m, x, x, x, o);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    best_cpu = std::min(best_cpu, cpu_now() - c0);
    checksum = y.output[0] + y.output[y.output.numel() - 1];
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::string ts, phases;
  if (backward)
    phases = "\"best_forward_cpu_s\":" + std::to_string(best_fwd_cpu) + ",\"best_backward_cpu_s\":" +
             std::to_string(best_bwd_cpu) + ",";
  for (double t : times) ts += (ts.empty() ? "" : ",") + std::to_string(t);
  std::printf("{\"N\":%lld,\"T\":%lld,\"E\":%lld,\"heads\":%lld,\"threads\":%lld,\"causal\":%s,\"path\":\"%s\",\"times_s\":[%s],"
              "\"best_s\":%.6f,\"best_cpu_s\":%.6f,%s\"peak_rss_mb\":%.1f,\"checksum\":%g}\n",
              (long long)N, (long long)T, (long long)E, (long long)NH, (long long)threads, causal ? "true" : "false",
              backward ? "forward+backward" : by_ops ? "ops" : "fused", ts.c_str(), *std::min_element(times.begin(), times.end()), best_cpu, phases.c_str(), ru.ru_maxrss / 1024.0, checksum);
  return 0;
}
