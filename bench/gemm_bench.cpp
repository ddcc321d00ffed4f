// gemm_bench: GFLOP/s of the sgemm candidates on the shapes attnkit's kernels run, 1 and 2 threads,
// candidates interleaved within each round (the order rotates every round), median and spread over
// the rounds. Every candidate is first checked against ops::gemm_naive: in full on small odd shapes
// in all four transpose forms, then on three rows of each benchmark shape (first, middle, last).
//   gemm_bench [--rounds 5] [--threads 1,2] [--ms 40] [--only SUBSTRING] [--shapes SUBSTRING]
// Candidates: attnkit's gemm_with(kernel) for every kernel this processor runs (Eigen, our AVX2 and
// AVX-512 builds); attnkit's gemm_packed with B packed once before the timing (GemmPackedB); with AVX512_BF16,
// ops::gemm under MatmulPrecision::BFloat16 (attnkit-bf16: operands rounded to bfloat16, so checked against
// gemm_naive on rounded copies); OpenBLAS, BLIS and oneDNN when their shared libraries are installed (dlopen, so
// that their two cblas_sgemm do not collide: libopenblas0-pthread, libblis4-openmp, libdnnl2);
// libxsmm (static, linked when CMake found it) for the small no-transpose per-step products.
// OpenBLAS reads OPENBLAS_CORETYPE when it loads: the header prints its value; to compare run twice.
// Shapes: M x N x K, form op(A) op(B) (N no transpose, T transpose); per-step and linear forms use
// PyTorch's weight layout x W^T (NT) and the layout with W^T kept (NN).
// Legend: M rows of C, N columns of C, K depth.
#include <dlfcn.h>
#include <time.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "attnkit/ops/gemm_kernels.hpp"
#include "attnkit/ops/quantized.hpp"
#include "attnkit/tensor/threads.hpp"
#ifdef ATTNKIT_HAVE_LIBXSMM
#include <libxsmm.h>
#endif

using namespace attnkit;
using ops::Trans;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
// CPU time of the calling thread: with one thread, the time the product really ran, whatever else
// the shared machine runs (descheduled time excluded; other processes' cache traffic is not).
double thread_cpu() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

struct Shape {
  std::string name;
  Trans ta, tb;
  int64_t M, N, K;
};

using GemmFn = std::function<bool(Trans, Trans, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                                  int64_t, float, float*, int64_t)>;  // false: not applicable to this shape
struct Candidate {
  std::string name;
  GemmFn run;
  std::function<void(int)> set_threads;
  int max_threads = 64;
  bool bf16 = false;  // rounds its operands to bfloat16: checked against the product of rounded copies
};

// to 8 bits of mantissa, nearest, ties to even (ops::to_bf16, the library's inference weights' rounding)
float to_bf16(float x) { return ops::from_bf16(ops::to_bf16(x)); }
std::vector<float> to_bf16(std::vector<float> v) {
  for (float& x : v) x = to_bf16(x);
  return v;
}

void* open_lib(const char* path) { return dlopen(path, RTLD_NOW | RTLD_LOCAL); }

// cblas_sgemm(order, transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), int indices (LP64)
using cblas_sgemm_t = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*,
                               int);
GemmFn cblas(cblas_sgemm_t f) {
  return [f](Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
             const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    f(101, ta == Trans::Yes ? 112 : 111, tb == Trans::Yes ? 112 : 111, int(M), int(N), int(K), alpha, A, int(lda), B,
      int(ldb), beta, C, int(ldc));
    return true;
  };
}

std::vector<Candidate> candidates(const std::string& only) {
  std::vector<Candidate> out;
  auto ours = [](ops::GemmKernel k) {
    return [k](Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
               const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
      ops::gemm_with(k, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      return true;
    };
  };
  for (ops::GemmKernel k : {ops::GemmKernel::Eigen, ops::GemmKernel::Avx2, ops::GemmKernel::Avx512})
    if (ops::gemm_kernel_available(k)) out.push_back({ops::gemm_kernel_name(k), ours(k), [](int t) { set_num_threads(t); }});
  if (ops::matmul_precision_available(ops::MatmulPrecision::BFloat16)) {
    Candidate c{"attnkit-bf16",
                [](Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                   const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
                  ops::set_matmul_precision(ops::MatmulPrecision::BFloat16);
                  ops::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
                  ops::set_matmul_precision(ops::MatmulPrecision::Float32);
                  return true;
                },
                [](int t) { set_num_threads(t); }};
    c.bf16 = true;
    out.push_back(c);
  }
  // ops::gemm_packed with op(B) packed once (outside the timing, as a recurrent layer packs W_hh once
  // per forward): the per-step products without the packing
  out.push_back({"attnkit-packed",
                 [](Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                    const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
                   // keyed by address, form, shape and three sampled values (a freed B's address comes back)
                   static std::map<std::tuple<const float*, int, int64_t, int64_t, int64_t, float, float, float>,
                                   ops::GemmPackedB>
                       cache;
                   const int64_t last = (tb == Trans::Yes ? N : K) * ldb - 1;
                   auto key = std::make_tuple(B, int(tb == Trans::Yes), K, N, ldb, B[0], B[last / 2], B[last]);
                   auto it = cache.find(key);
                   if (it == cache.end()) it = cache.emplace(key, ops::GemmPackedB(tb, K, N, B, ldb)).first;
                   ops::gemm_packed(ta, M, alpha, A, lda, it->second, beta, C, ldc);
                   return true;
                 },
                 [](int t) { set_num_threads(t); }});
  if (void* h = open_lib("/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0")) {
    auto f = reinterpret_cast<cblas_sgemm_t>(dlsym(h, "cblas_sgemm"));
    auto nt = reinterpret_cast<void (*)(int)>(dlsym(h, "openblas_set_num_threads"));
    const char* core = std::getenv("OPENBLAS_CORETYPE");
    if (f && nt) out.push_back({std::string("openblas") + (core ? std::string("(") + core + ")" : ""), cblas(f), nt});
  }
  if (void* h = open_lib("libblis.so.4")) {
    auto f = reinterpret_cast<cblas_sgemm_t>(dlsym(h, "cblas_sgemm"));
    auto nt = reinterpret_cast<void (*)(int64_t)>(dlsym(h, "bli_thread_set_num_threads"));
    if (f && nt) out.push_back({"blis", cblas(f), [nt](int t) { nt(t); }});
  }
  if (void* h = open_lib("libdnnl.so.2")) {
    using dnnl_sgemm_t = int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                                 int64_t, float, float*, int64_t);
    if (auto f = reinterpret_cast<dnnl_sgemm_t>(dlsym(h, "dnnl_sgemm")))
      out.push_back({"onednn",
                     [f](Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                         const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
                       return f(ta == Trans::Yes ? 'T' : 'N', tb == Trans::Yes ? 'T' : 'N', M, N, K, alpha, A, lda, B,
                                ldb, beta, C, ldc) == 0;
                     },
                     [](int t) { omp_set_num_threads(t); }});  // oneDNN runs on the same libgomp
  }
#ifdef ATTNKIT_HAVE_LIBXSMM
  // Row-major C [M, N] = A B is column-major C^T [N, M] = B^T A^T: a JIT kernel per 64-column tile
  // of C (m = 64 rows of C^T, n = M, k = K), tiles split over the threads. No-transpose, M <= 64 only.
  libxsmm_init();
  out.push_back({"libxsmm",
                 [](Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                    const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
                   if (ta == Trans::Yes || tb == Trans::Yes || M > 64 || N % 64 != 0) return false;
                   static std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, float, float>,
                                   libxsmm_smmfunction>
                       cache;
                   auto key = std::make_tuple(M, K, lda, ldb, ldc, alpha, beta);
                   auto it = cache.find(key);
                   if (it == cache.end()) {
                     const libxsmm_blasint la = ldb, lb = lda, lc = ldc;
                     const int flags = LIBXSMM_GEMM_FLAG_NONE, prefetch = LIBXSMM_GEMM_PREFETCH_NONE;
                     it = cache.emplace(key, libxsmm_smmdispatch(64, M, K, &la, &lb, &lc, &alpha, &beta, &flags,
                                                                 &prefetch)).first;
                   }
                   libxsmm_smmfunction k = it->second;
                   if (!k) return false;
#pragma omp parallel for
                   for (int64_t j = 0; j < N; j += 64) k(B + j, A, C + j);
                   return true;
                 },
                 [](int t) { omp_set_num_threads(t); }});
#endif
  if (!only.empty())
    out.erase(std::remove_if(out.begin(), out.end(), [&](const Candidate& c) { return c.name.find(only) == std::string::npos; }),
              out.end());
  return out;
}

std::vector<float> random_matrix(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);  // the bench's data only; not a reproducibility concern
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// Max |C - R| over rows `rows` of a [M, N] result, R from ops::gemm_naive one row at a time.
double row_error(const Shape& s, const float* A, int64_t lda, const float* B, int64_t ldb, const float* C, int64_t ldc,
                 const std::vector<int64_t>& rows) {
  std::vector<float> r(s.N);
  double err = 0;
  for (int64_t i : rows) {
    const float* a = s.ta == Trans::No ? A + i * lda : A + i;  // row i of op(A)
    ops::gemm_naive(s.ta, s.tb, 1, s.N, s.K, 1.0f, a, lda, B, ldb, 0.0f, r.data(), s.N);
    for (int64_t j = 0; j < s.N; ++j) err = std::max(err, std::fabs(double(C[i * ldc + j]) - r[j]));
  }
  return err;
}

// The full check on small odd shapes, every transpose form, alpha 0.5, beta 0 over NaN and beta -1.5.
bool full_check(const Candidate& c, std::string& why) {
  std::mt19937 rng(5);
  for (auto [M, N, K] : {std::array<int64_t, 3>{37, 45, 29}, {1, 70, 33}, {64, 128, 130}})
    for (Trans ta : {Trans::No, Trans::Yes})
      for (Trans tb : {Trans::No, Trans::Yes})
        for (float beta : {0.0f, -1.5f}) {
          const int64_t lda = (ta == Trans::No ? K : M) + 3, ldb = (tb == Trans::No ? N : K) + 5, ldc = N + 1;
          auto A = random_matrix((ta == Trans::No ? M : K) * lda, rng), B = random_matrix((tb == Trans::No ? K : N) * ldb, rng);
          auto C = random_matrix(M * ldc, rng);
          if (beta == 0.0f) std::fill(C.begin(), C.end(), NAN);
          auto R = C;
          if (!c.run(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, beta, C.data(), ldc)) continue;
          if (c.bf16 && M > 4) A = to_bf16(A), B = to_bf16(B);  // from 5 rows both operands rounded (1: float32)
          ops::gemm_naive(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, beta, R.data(), ldc);
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j)
              if (!(std::fabs(C[i * ldc + j] - R[i * ldc + j]) <= 3e-6 * K + 1e-6)) {
                why = "M " + std::to_string(M) + " N " + std::to_string(N) + " K " + std::to_string(K) + " ta " +
                      std::to_string(ta == Trans::Yes) + " tb " + std::to_string(tb == Trans::Yes) + " beta " +
                      std::to_string(beta) + ": C(" + std::to_string(i) + ", " + std::to_string(j) + ") = " +
                      std::to_string(C[i * ldc + j]) + ", expected " + std::to_string(R[i * ldc + j]);
                return false;
              }
        }
  return true;
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> v;
  size_t p = 0;
  while (p < s.size()) {
    size_t q = s.find(',', p);
    if (q == std::string::npos) q = s.size();
    v.push_back(std::atoi(s.substr(p, q - p).c_str()));
    p = q + 1;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5;
  double target_ms = 40;
  std::vector<int> thread_counts = {1, 2};
  std::string only, shape_filter;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--rounds") rounds = std::atoi(v.c_str());
    else if (k == "--threads") thread_counts = parse_list(v);
    else if (k == "--ms") target_ms = std::atof(v.c_str());
    else if (k == "--only") only = v;
    else if (k == "--shapes") shape_filter = v;
    else {
      std::fprintf(stderr, "gemm_bench: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  const Trans n = Trans::No, t = Trans::Yes;
  std::vector<Shape> shapes = {
      {"lstm input proj x W^T", n, t, 6400, 2048, 512},  // [N*T, D] x [D, 4H], N=64 T=100 D=H=512
      {"lstm input proj x Wt", n, n, 6400, 2048, 512},
  };
  for (int64_t H : {128, 512})
    for (int64_t N : {1, 8, 64}) {
      const std::string sz = "N=" + std::to_string(N) + " H=" + std::to_string(H);
      shapes.push_back({"step h W^T " + sz, n, t, N, 4 * H, H});  // [N, H] x [H, 4H]
      shapes.push_back({"step h Wt " + sz, n, n, N, 4 * H, H});
    }
  shapes.push_back({"attn P V tile", n, n, 256, 64, 256});
  shapes.push_back({"attn Q K^T tile", n, t, 256, 256, 64});
  shapes.push_back({"tfm proj x W^T", n, t, 4096, 512, 512});
  shapes.push_back({"tfm ffn2 x W^T", n, t, 4096, 512, 2048});
  shapes.push_back({"tfm ffn1 x W^T", n, t, 4096, 2048, 512});
  shapes.push_back({"bwd dW = dY^T X (A^T B)", t, n, 2048, 512, 6400});
  shapes.push_back({"bwd dX = dY W (A B)", n, n, 6400, 512, 2048});
  shapes.push_back({"bwd attn dS = dO V^T (A B^T)", n, t, 256, 256, 64});
  shapes.push_back({"bwd attn dV = P^T dO (A^T B)", t, n, 256, 64, 256});
  if (!shape_filter.empty())
    shapes.erase(std::remove_if(shapes.begin(), shapes.end(),
                                [&](const Shape& s) { return s.name.find(shape_filter) == std::string::npos; }),
                 shapes.end());

  std::vector<Candidate> cands = candidates(only);
  char host[256] = "";
  gethostname(host, sizeof host);
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  const char* core = std::getenv("OPENBLAS_CORETYPE");
  std::printf("# gemm_bench: rounds %d, ~%.0f ms per timing, load average %.2f %.2f %.2f, OPENBLAS_CORETYPE=%s, "
              "ops::gemm picks %s\n",
              rounds, target_ms, load[0], load[1], load[2], core ? core : "(unset)",
              ops::gemm_kernel_name(ops::GemmKernel::Auto));
  std::vector<Candidate> ok;
  for (auto& c : cands) {
    c.set_threads(1);
    std::string why;
    if (full_check(c, why)) ok.push_back(c);
    else std::printf("# %s: WRONG against gemm_naive (%s); not timed\n", c.name.c_str(), why.c_str());
  }
  std::printf("| shape | form | M x N x K | threads |");
  for (auto& c : ok) std::printf(" %s |", c.name.c_str());
  std::printf("\n|---|---|---|---|");
  for (size_t i = 0; i < ok.size(); ++i) std::printf("---|");
  std::printf("\n");
  std::fflush(stdout);

  std::mt19937 rng(1);
  for (const Shape& s : shapes) {
    const int64_t ar = s.ta == n ? s.M : s.K, ac = s.ta == n ? s.K : s.M;
    const int64_t br = s.tb == n ? s.K : s.N, bc = s.tb == n ? s.N : s.K;
    auto A = random_matrix(ar * ac, rng), B = random_matrix(br * bc, rng);
    const auto A16 = to_bf16(A), B16 = to_bf16(B);  // what the bf16 candidates multiply (from 5 rows)
    std::vector<float> C(s.M * s.N);
    const double flops = 2.0 * s.M * s.N * s.K;
    for (int threads : thread_counts) {
      // check each candidate on this shape (three rows against gemm_naive), and calibrate its repetitions
      std::vector<int> reps(ok.size(), 0);
      std::vector<std::string> note(ok.size());
      for (size_t c = 0; c < ok.size(); ++c) {
        if (threads > ok[c].max_threads) continue;
        ok[c].set_threads(threads);
        std::fill(C.begin(), C.end(), NAN);
        const double t0 = now();
        if (!ok[c].run(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), ac, B.data(), bc, 0.0f, C.data(), s.N)) continue;
        const double dt = std::max(now() - t0, 1e-7);
        const bool rounded = ok[c].bf16 && s.M > 4;
        const double err = row_error(s, (rounded ? A16 : A).data(), ac, (rounded ? B16 : B).data(), bc, C.data(), s.N,
                                     {0, s.M / 2, s.M - 1});
        if (!(err <= 3e-6 * s.K + 1e-6)) {
          note[c] = "WRONG";
          continue;
        }
        reps[c] = std::max(1, int(target_ms * 1e-3 / dt));
      }
      std::vector<std::vector<double>> gf(ok.size()), gf_cpu(ok.size());
      for (int r = 0; r < rounds; ++r)
        for (size_t q = 0; q < ok.size(); ++q) {
          const size_t c = (q + r) % ok.size();  // rotate the order every round
          if (!reps[c]) continue;
          ok[c].set_threads(threads);
          ok[c].run(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), ac, B.data(), bc, 0.0f, C.data(), s.N);  // warm
          const double t0 = now(), c0 = thread_cpu();
          for (int k = 0; k < reps[c]; ++k)
            ok[c].run(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), ac, B.data(), bc, 0.0f, C.data(), s.N);
          const double c1 = thread_cpu();
          gf[c].push_back(flops * reps[c] / (now() - t0) * 1e-9);
          gf_cpu[c].push_back(flops * reps[c] / (c1 - c0) * 1e-9);
          std::this_thread::sleep_for(std::chrono::milliseconds(5));  // let spinning pool threads settle
        }
      auto row = [&](const std::vector<std::vector<double>>& g, const std::string& label) {
        std::printf("| %s | %s%s | %lld x %lld x %lld | %s |", s.name.c_str(), s.ta == n ? "N" : "T",
                    s.tb == n ? "N" : "T", (long long)s.M, (long long)s.N, (long long)s.K, label.c_str());
        for (size_t c = 0; c < ok.size(); ++c) {
          if (g[c].empty()) {
            std::printf(" %s |", note[c].empty() ? "-" : note[c].c_str());
            continue;
          }
          std::vector<double> v = g[c];
          std::sort(v.begin(), v.end());
          std::printf(" %.0f (%.0f-%.0f) |", v[v.size() / 2], v.front(), v.back());
        }
        std::printf("\n");
      };
      row(gf, std::to_string(threads));
      if (threads == 1) row(gf_cpu, "1 cpu");
      std::fflush(stdout);
    }
  }
  getloadavg(load, 3);
  std::printf("# GFLOP/s: median (min-max) over %d interleaved rounds, by wall clock; rows '1 cpu': the same one-thread\n"
              "# runs by the thread's CPU time. Load average at the end %.2f %.2f %.2f\n", rounds,
              load[0], load[1], load[2]);
  return 0;
}
