// sdpa_backward_bench: times the strided attention core's tiled forward (ops::sdpa_tiled) and its
// FlashAttention-2 style backward (ops::sdpa_backward_tiled) on random data, heads strided inside
// a row like multi-head attention reads them, and reports the peak resident memory (no T x S
// matrix is ever held: memory grows linearly in T).
//   build/bench/sdpa_backward_bench --T 32768 --E 512 --heads 8 --threads 2 --causal
// PyTorch's equivalent (explicit softmax attention, autograd): bench/sdpa_backward_torch.py.
// Prints one JSON line: {"T":..,"E":..,"heads":..,"threads":..,"causal":..,"forward_s":..,"backward_s":..,"peak_rss_mb":..}
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "attnkit/ops/attention.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/tensor/threads.hpp"

using namespace attnkit;

int main(int argc, char** argv) {
  int64_t T = 4096, E = 512, NH = 8, threads = 2, tq = 0, tk = 0;
  bool causal = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atoll(argv[++i]) : 0LL; };
    if (a == "--T") T = next();
    else if (a == "--E") E = next();
    else if (a == "--heads") NH = next();
    else if (a == "--threads") threads = next();
    else if (a == "--tile-q") tq = next();
    else if (a == "--tile-k") tk = next();
    else if (a == "--causal") causal = true;
    else {
      std::fprintf(stderr, "usage: sdpa_backward_bench [--T 4096] [--E 512] [--heads 8] [--threads 2] [--causal] "
                           "[--tile-q Q --tile-k K]\n");
      return 2;
    }
  }
  if (T < 1 || E < 1 || NH < 1 || E % NH != 0) {
    std::fprintf(stderr, "sdpa_backward_bench: need T >= 1 and E a multiple of heads\n");
    return 2;
  }
  set_num_threads(static_cast<int>(threads));
  if (tq > 0 && tk > 0) ops::set_tile_sizes({tq, tk});
  const int64_t HS = E / NH;
  Rng rng(1);
  // [T, E] buffers, head h at columns [h*HS, (h+1)*HS) of every row
  Tensor q = rand_normal({T, E}, rng), k = rand_normal({T, E}, rng), v = rand_normal({T, E}, rng), out({T, E});
  Tensor lse({NH, T}), dout = rand_normal({T, E}, rng), dq({T, E}), dk({T, E}), dv({T, E});
  ops::MaskSpec mask;
  if (causal) mask.causal = ops::CausalKind::UpperLeft;
  ops::SdpaProblem p;
  p.N = 1, p.NH = NH, p.T = T, p.S = T, p.Dk = HS, p.Dv = HS, p.scale = 1.0f / std::sqrt(static_cast<float>(HS));
  p.q = {q.data(), T * E, HS, E}, p.k = {k.data(), T * E, HS, E}, p.v = {v.data(), T * E, HS, E};
  p.out = {out.data(), T * E, HS, E};
  p.mask = &mask;
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  ops::sdpa_tiled(p, lse.data());
  const auto t1 = clock::now();
  ops::sdpa_backward_tiled(p, lse.data(), {dout.data(), T * E, HS, E},
                           {{dq.data(), T * E, HS, E}, {dk.data(), T * E, HS, E}, {dv.data(), T * E, HS, E}});
  const auto t2 = clock::now();
  double checksum = 0;
  for (int64_t i = 0; i < dq.numel(); ++i) checksum += std::fabs(dq[i]) + std::fabs(dk[i]) + std::fabs(dv[i]);
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  std::printf("{\"T\":%lld,\"E\":%lld,\"heads\":%lld,\"threads\":%lld,\"causal\":%s,\"forward_s\":%.4f,\"backward_s\":%.4f,"
              "\"peak_rss_mb\":%ld,\"checksum\":%.6g}\n",
              static_cast<long long>(T), static_cast<long long>(E), static_cast<long long>(NH),
              static_cast<long long>(threads), causal ? "true" : "false",
              std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t2 - t1).count(),
              u.ru_maxrss / 1024, checksum);
}
