// lowp_linear_bench: y = x W^T + b in float32 (ops::gemm, the sgemm attnkit runs everywhere), bfloat16 and int8
// weights (ops/quantized.hpp, every kernel this processor runs), on the linear shapes of decoding (one row: the
// weights streamed once per token) and of batches. Candidates interleaved within each round (the order rotates),
// median over the rounds; prints ms, GFLOP/s, GB/s of weights read and the ratio to float32.
// First, the arithmetic ceilings the kernels work under: independent chains of float32 FMAs (vfmadd, 2 ops a
// lane), int8 dot products (VNNI's vpdpbusd, 8 ops a 32-bit lane) and bfloat16 pair dot products (vdpbf16ps, 4
// ops a lane) in registers, on every thread at once: int8 / fp32 is the most a compute-bound int8 product can
// gain over float32 on this processor, whatever its kernel.
//   lowp_linear_bench [--rounds 7] [--threads 1,2] [--ms 50]
// Legend: M rows of x, N outputs, K inputs.
// _mm512_reduce_add_*: GCC 12 false positives on their undefined first operand
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <immintrin.h>
#include <string>
#include <vector>

#include "attnkit/ops/matmul.hpp"
#include "attnkit/ops/quantized.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/tensor/threads.hpp"

using namespace attnkit;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Candidate {
  std::string name;
  double weight_bytes;
  std::function<void()> run;
  std::vector<double> seconds;
};

// Seconds per call: calls repeated for about `ms` milliseconds.
double time_calls(const std::function<void()>& f, double ms) {
  f();
  int64_t reps = 1;
  for (;;) {
    const double t0 = now();
    for (int64_t i = 0; i < reps; ++i) f();
    const double dt = now() - t0;
    if (dt * 1e3 >= ms) return dt / double(reps);
    reps = dt <= 0 ? reps * 10 : std::max<int64_t>(reps * 2, int64_t(double(reps) * ms / (dt * 1e3)) + 1);
  }
}

// Chains of one instruction in registers; returns a value that depends on every lane (the work is not dropped).
constexpr int kChains = 16;
constexpr int64_t kIters = 10'000'000;

__attribute__((target("avx512f"))) double chains_fma() {
  __m512 c[kChains];
  for (int j = 0; j < kChains; ++j) c[j] = _mm512_set1_ps(0.001f * float(j));
  const __m512 a = _mm512_set1_ps(0.9999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < kIters; ++i)
    for (int j = 0; j < kChains; ++j) c[j] = _mm512_fmadd_ps(c[j], a, b);
  double sum = 0;
  for (int j = 0; j < kChains; ++j) sum += _mm512_reduce_add_ps(c[j]);
  return sum;
}

// vpdpbusd in inline assembly, as the int8 kernel issues it (ops/quantized_avx512.cpp): with the intrinsic GCC 12
// moved every chain between registers (and two through the stack) each round, which halved the measured rate.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) inline __m512i dpbusd(__m512i c, __m512i u, __m512i w) {
  __asm__("vpdpbusd %[w], %[u], %[c]" : [c] "+v"(c) : [u] "v"(u), [w] "v"(w));
  return c;
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) double chains_vnni() {
  __m512i c[kChains];
  for (int j = 0; j < kChains; ++j) c[j] = _mm512_set1_epi32(j);
  const __m512i a = _mm512_set1_epi32(0x01020304), b = _mm512_set1_epi32(0x01FF01FF);
  for (int64_t i = 0; i < kIters; ++i)
    for (int j = 0; j < kChains; ++j) c[j] = dpbusd(c[j], a, b);
  double sum = 0;
  for (int j = 0; j < kChains; ++j) sum += _mm512_reduce_add_epi32(c[j]);
  return sum;
}

__attribute__((target("avx512f,avx512bf16"))) double chains_bf16() {
  __m512 c[kChains];
  for (int j = 0; j < kChains; ++j) c[j] = _mm512_set1_ps(0.001f * float(j));
  const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3F803F80), b = (__m512bh)_mm512_set1_epi32(0x33D633D6);
  for (int64_t i = 0; i < kIters; ++i)
    for (int j = 0; j < kChains; ++j) c[j] = _mm512_dpbf16_ps(c[j], a, b);
  double sum = 0;
  for (int j = 0; j < kChains; ++j) sum += _mm512_reduce_add_ps(c[j]);
  return sum;
}

// G ops/s of each kind of chains on `threads` threads at once, the kinds interleaved, best of 5 rounds:
// ops = instructions x ops_per_instruction.
struct Chains {
  double (*run)();
  double ops_per_instruction;
  double best = 1e30;
};

void print_peaks(const std::vector<int>& thread_counts) {
  if (!__builtin_cpu_supports("avx512f")) {
    std::printf("arithmetic ceilings: measured on AVX-512 processors only\n");
    return;
  }
  const bool vnni = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
  const bool bf16 = __builtin_cpu_supports("avx512bf16");
  double sink = 0;
  for (int threads : thread_counts) {
    Chains kinds[] = {{chains_fma, 32}, {vnni ? chains_vnni : nullptr, 128}, {bf16 ? chains_bf16 : nullptr, 64}};
    for (int r = 0; r < 5; ++r)
      for (Chains& c : kinds) {
        if (!c.run) continue;
        const double t0 = now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
        sink += c.run();
        c.best = std::min(c.best, now() - t0);
      }
    auto rate = [&](const Chains& c) { return double(kIters) * kChains * c.ops_per_instruction * threads / c.best * 1e-9; };
    const double f = rate(kinds[0]);
    std::printf("ceiling, %d thread%s: fp32 FMA %.1f GFLOP/s", threads, threads > 1 ? "s" : "", f);
    if (vnni) std::printf("; int8 vpdpbusd %.1f GOP/s (%.2fx fp32)", rate(kinds[1]), rate(kinds[1]) / f);
    if (bf16) std::printf("; bf16 vdpbf16ps %.1f GFLOP/s (%.2fx fp32)", rate(kinds[2]), rate(kinds[2]) / f);
    std::printf("\n");
  }
  __asm__ volatile("" : : "m"(sink));  // the chains' results are used
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 7;
  double ms = 50;
  std::vector<int> thread_counts = {1, 2};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--rounds") rounds = std::atoi(argv[i + 1]);
    else if (a == "--ms") ms = std::atof(argv[i + 1]);
    else if (a == "--threads") {
      thread_counts.clear();
      for (const char* p = argv[i + 1]; *p;) {
        thread_counts.push_back(std::atoi(p));
        while (*p && *p != ',') ++p;
        if (*p) ++p;
      }
    }
  }
  struct Shape {
    int64_t m, n, k;
    const char* what;
  };
  const Shape shapes[] = {{1, 512, 512, "decode: attention out_proj d512"},
                          {1, 1536, 512, "decode: in_proj d512"},
                          {1, 2048, 512, "decode: ff linear1 d512"},
                          {1, 512, 2048, "decode: ff linear2 d512"},
                          {64, 2048, 512, "batch 64: ff linear1 d512"},
                          {64, 2048, 512 + 512, "LSTM x/h step, N=64 H=512 (4H x (D+H))"},
                          {4096, 2048, 512, "encoder B16 T256: ff linear1"}};
  print_peaks(thread_counts);
  std::printf("%-42s %3s %-16s %9s %8s %8s %6s\n", "shape (M x N x K)", "thr", "candidate", "ms", "GFLOP/s", "GB/s", "x f32");
  for (int threads : thread_counts) {
    set_num_threads(threads);
    for (const Shape& s : shapes) {
      Rng rng(1);
      Tensor w = rand_normal({s.n, s.k}, rng), x = rand_normal({s.m, s.k}, rng), b = rand_normal({s.n}, rng);
      Tensor y({s.m, s.n});
      const ops::Q8Matrix q = ops::quantize_q8(w.data(), s.n, s.k);
      const ops::Bf16Matrix h = ops::quantize_bf16(w.data(), s.n, s.k);
      std::vector<Candidate> cands;
      ops::GemmEpilogue e;
      e.bias = b.data();
      cands.push_back({"fp32 sgemm", 4.0 * double(s.n * s.k), [&] {
                         ops::gemm(ops::Trans::No, ops::Trans::Yes, s.m, s.n, s.k, 1.0f, x.data(), s.k, w.data(), s.k, 0.0f,
                                   y.data(), s.n, ops::GemmThreads::Policy, e);
                       }, {}});
      for (ops::LowpKernel kern : {ops::LowpKernel::Avx2, ops::LowpKernel::Avx512}) {
        if (ops::bf16_kernel_available(kern))
          cands.push_back({"bf16 " + std::string(ops::lowp_kernel_name(kern)), 2.0 * double(s.n * s.k),
                           [&, kern] { ops::bf16_linear(h, x.data(), s.m, s.k, b.data(), y.data(), s.n, kern); }, {}});
        if (ops::q8_kernel_available(kern))
          cands.push_back({"int8 " + std::string(ops::lowp_kernel_name(kern)), double(s.n * s.k) + 4.0 * double(s.n),
                           [&, kern] { ops::q8_linear(q, x.data(), s.m, s.k, b.data(), y.data(), s.n, kern); }, {}});
      }
      for (int r = 0; r < rounds; ++r)
        for (size_t c = 0; c < cands.size(); ++c) {
          Candidate& cand = cands[(c + static_cast<size_t>(r)) % cands.size()];
          cand.seconds.push_back(time_calls(cand.run, ms));
        }
      double f32 = 0;
      for (Candidate& c : cands) {
        std::sort(c.seconds.begin(), c.seconds.end());
        const double t = c.seconds[c.seconds.size() / 2];
        if (f32 == 0) f32 = t;
        char label[64];
        std::snprintf(label, sizeof label, "%lldx%lldx%lld", (long long)s.m, (long long)s.n, (long long)s.k);
        std::printf("%-14s %-27.27s %3d %-16s %9.4f %8.1f %8.1f %6.2f\n", label, s.what, threads, c.name.c_str(), t * 1e3,
                    2.0 * double(s.m * s.n * s.k) / t * 1e-9, c.weight_bytes / t * 1e-9, f32 / t);
      }
    }
  }
  return 0;
}
