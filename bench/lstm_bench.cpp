// lstm_bench: times attnkit's LSTM forward (nn::Recurrent, inference: no cache) in-process, and
// the bare Eigen sgemms of the same shapes (the GEMM bound), and the machine's sgemm peak (ops::gemm 1024^3).
// With --backward 1 it times training's forward + backward instead: forward keeping the cache,
// then Recurrent::backward for loss = output.sum() with the input's gradient wanted (PyTorch's
// `out.sum().backward()` with x.requires_grad), every weight gradient included.
// Both under the tools' allocator policy (retain_freed_memory, as tools::run sets it; --malloc-default 1:
// glibc's default, to measure what the policy saves).
// Prints one JSON object; bench/lstm_vs_torch.py and bench/lstm_backward_vs_torch.py run it
// interleaved with PyTorch.
//   lstm_bench --N 64 --T 100 --D 512 --H 512 --threads 2 --reps 5 [--cell lstm] [--backward 1] [--gemms 0] [--malloc-default 1]
//              [--precision fp32|bf16|int8]
// --precision bf16 / int8: the forward with W_ih and W_hh in that precision (nn::Recurrent::set_precision;
// forward only).
// best_cpu_s: the best rep's process CPU time (robust on a loaded machine with --threads 1);
// --gemms 0 skips the bare GEMM timings (their fields are then 0).
// Legend: N batch, T steps, D input size, H hidden size, G gates.
// GCC 12 reports false "may be used uninitialized" inside Eigen's AVX-512 packet code.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <time.h>
#include <vector>

#include "attnkit/nn/recurrent.hpp"
#include "attnkit/ops/matmul.hpp"
#include "attnkit/tensor/memory.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/tensor/threads.hpp"

using namespace attnkit;
using MatrixRM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU time of the whole process (every thread): on a machine shared with other work, the time the
// run really had a core, descheduled time excluded (spinning at a barrier is counted).
static double cpu_now() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static double best_cpu = 0;  // the smallest process CPU time of the last times() call's reps

template <typename F>
static std::vector<double> times(int reps, F f) {
  f();  // warm-up
  std::vector<double> t;
  best_cpu = 1e30;
  for (int r = 0; r < reps; ++r) {
    double t0 = now(), c0 = cpu_now();
    f();
    t.push_back(now() - t0);
    best_cpu = std::min(best_cpu, cpu_now() - c0);
  }
  std::sort(t.begin(), t.end());
  return t;
}

int main(int argc, char** argv) {
  int64_t N = 64, T = 100, D = 512, H = 512;
  int threads = 2, reps = 5;
  std::string cell = "lstm";
  bool backward = false;
  bool gemms = true, malloc_default = false;
  std::string precision = "fp32";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--N") N = std::atoll(v.c_str());
    else if (k == "--T") T = std::atoll(v.c_str());
    else if (k == "--D") D = std::atoll(v.c_str());
    else if (k == "--H") H = std::atoll(v.c_str());
    else if (k == "--threads") threads = std::atoi(v.c_str());
    else if (k == "--reps") reps = std::atoi(v.c_str());
    else if (k == "--cell") cell = v;
    else if (k == "--backward") backward = v == "1";
    else if (k == "--gemms") gemms = v != "0";
    else if (k == "--malloc-default") malloc_default = v == "1";
    else if (k == "--precision") precision = v;
    else {
      std::fprintf(stderr, "lstm_bench: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  set_num_threads(threads);
  if (!malloc_default) retain_freed_memory();  // the tools' allocator policy (tools::run, tensor/memory.hpp)
  ops::RecurrentConfig cfg;
  cfg.cell = cell == "gru" ? ops::CellKind::Gru : cell == "rnn" ? ops::CellKind::RnnTanh : ops::CellKind::Lstm;
  cfg.input_size = D, cfg.hidden_size = H;
  const int64_t G = ops::gate_count(cfg.cell);
  Rng rng(1);
  nn::Recurrent model = nn::Recurrent::random(cfg, rng);
  if (precision != "fp32" && (backward || (precision != "bf16" && precision != "int8"))) {
    std::fprintf(stderr, "lstm_bench: --precision is fp32, bf16 or int8, and bf16 / int8 time the forward only\n");
    return 2;
  }
  nn::PrecisionPlan plan(ops::precision_from_name(precision));
  model.set_precision(plan);
  Tensor x = rand_normal({N, T, D}, rng);
  ops::RecurrentInputs in;
  in.x = &x;
  ops::RunOptions opt;
  volatile float sink = 0;
  std::vector<double> ours;
  if (!backward) {
    ours = times(reps, [&] { sink = sink + model.forward(in, opt).h_n[0]; });
  } else {
    opt.keep_cache = true;
    Tensor ones = Tensor::filled({N, T, H}, 1.0f);  // d out.sum() / d out
    Tensor dx({N, T, D});
    ours = times(reps, [&] {
      ops::RecurrentResult r = model.forward(in, opt);
      model.zero_grad();
      ops::RecurrentGradOutputs dy;
      dy.output = &ones;
      ops::RecurrentGradInputs g;
      g.x = &dx;
      model.backward(in, r, dy, g);
      sink = sink + dx[0];
    });
  }
  const double ours_cpu = best_cpu;

  // The GEMMs alone, as Eigen does them with the same threads: the input projection [N*T, D] x
  // [D, G*H] once, and T hidden products [N, H] x [H, G*H].
  const int64_t g = gemms ? 1 : 0;
  MatrixRM X = MatrixRM::Random(g * N * T, D), Wx = MatrixRM::Random(D, G * H), Wh = MatrixRM::Random(H, G * H);
  MatrixRM P(g * N * T, G * H), h = MatrixRM::Random(N, H), hp(N, G * H);
  // --gemms 0: not timed (the fields are then 0)
  std::vector<double> input_gemm{0.0}, hidden_gemms{0.0}, peak{0.0};
  const int64_t S = 1024;
  if (gemms) {
    input_gemm = times(reps, [&] { P.noalias() = X * Wx; });
    hidden_gemms = times(reps, [&] {
      for (int64_t t = 0; t < T; ++t) hp.noalias() = h * Wh;
    });
    // sgemm peak: a large square product with the same threads, on the library's GEMM (ops::gemm, as
    // attention_bench --sgemm-peak): Eigen's runs well below it, and a share of Eigen's
    // peak would read above 100%.
    MatrixRM A = MatrixRM::Random(S, S), B = MatrixRM::Random(S, S), C(S, S);
    peak = times(reps, [&] {
      ops::gemm(ops::Trans::No, ops::Trans::No, S, S, S, 1.0f, A.data(), S, B.data(), S, 0.0f, C.data(), S);
    });
  }

  // forward: the input and hidden products; backward: twice that (d x and d W_ih, d h and d W_hh)
  const double flops = 2.0 * N * T * (D + H) * G * H * (backward ? 3 : 1);
  std::printf(
      "{\"N\":%lld,\"T\":%lld,\"D\":%lld,\"H\":%lld,\"threads\":%d,\"cell\":\"%s\",\"precision\":\"%s\",\"backward\":%s,"
      "\"best_s\":%.6g,\"median_s\":%.6g,\"best_cpu_s\":%.6g,\"gflops\":%.4g,"
      "\"input_gemm_s\":%.6g,\"hidden_gemms_s\":%.6g,\"gemm_bound_s\":%.6g,"
      "\"sgemm_peak_gflops\":%.4g}\n",
      (long long)N, (long long)T, (long long)D, (long long)H, threads, cell.c_str(), precision.c_str(), backward ? "true" : "false", ours[0], ours[ours.size() / 2],
      ours_cpu, flops / ours[0] / 1e9, input_gemm[0], hidden_gemms[0], input_gemm[0] + hidden_gemms[0],
      gemms ? 2.0 * S * S * S / peak[0] / 1e9 : 0.0);
  return 0;
}
