// step_products_bench: the products of an LSTM's fused time step alone (nn FusedSteps), no cell, no packing of
// x_t and h_prev: what the forward's time could be if the products were all of it, on this machine.
// Each thread: its rows of x_t and h_prev [rows, depth] packed once (ops::pack_a_panels, balanced blocks), two
// weights [depth, cols] packed once (W_ih, W_hh, shared by the threads), and per step, chunk by chunk of columns:
//   lstm        C = x_t W_ih (beta 0), then C += h_prev W_hh (beta 1): the fused step's two products
//   overwrite   the same count of products, each with beta 0
//   accumulate  the same, each with beta 1 (C read and added to)
// A rep is one step; the threads run their steps at once (the row split of N = 2 x rows).
//   step_products_bench [--rows 32] [--depth 512] [--cols 2048] [--chunk 512] [--form lstm] [--threads 2]
//                       [--reps 300]
// Prints one JSON line: best and mean GFLOP/s over the reps (all threads), and "steps_100_ms": 100 steps at the
// mean rate (the products of an LSTM N = 2 x rows, T = 100, D = H = depth, 4H = cols).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "attnkit/ops/gemm_panels.hpp"
#include "attnkit/ops/matmul.hpp"

using namespace attnkit;

int main(int argc, char** argv) {
  int64_t rows = 32, depth = 512, cols = 2048, chunk = 512, threads = 2, reps = 300;
  std::string form = "lstm";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--rows") rows = std::atoll(v.c_str());
    else if (k == "--depth") depth = std::atoll(v.c_str());
    else if (k == "--cols") cols = std::atoll(v.c_str());
    else if (k == "--chunk") chunk = std::atoll(v.c_str());
    else if (k == "--form") form = v;
    else if (k == "--threads") threads = std::atoll(v.c_str());
    else if (k == "--reps") reps = std::atoll(v.c_str());
    else {
      std::fprintf(stderr, "step_products_bench: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  const ops::PanelShape ps = ops::gemm_panel_shape();
  if (ps.mr == 0 || depth > ps.max_depth || (form != "lstm" && form != "overwrite" && form != "accumulate") ||
      rows < 1 || cols < 1 || chunk < 1 || chunk % ps.nr || cols % chunk || threads < 1 || reps < 1) {
    std::fprintf(stderr,
                 "step_products_bench: needs the own panel kernels, depth <= %lld, a chunk a multiple of %lld "
                 "dividing cols, --form lstm|overwrite|accumulate\n",
                 (long long)ps.max_depth, (long long)ps.nr);
    return 2;
  }
  std::vector<float> w(static_cast<size_t>(depth * cols));
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i * 7919 % 201) - 100) * 1e-3f;
  std::vector<float> w_ih(static_cast<size_t>(depth * cols)), w_hh(w_ih.size());
  ops::pack_b_panels(ops::Trans::No, depth, cols, w.data(), cols, w_ih.data());
  ops::pack_b_panels(ops::Trans::No, depth, cols, w.data(), cols, w_hh.data());
  const float beta_x = form == "accumulate" ? 1.0f : 0.0f, beta_h = form == "overwrite" ? 0.0f : 1.0f;

  std::vector<double> step_s(static_cast<size_t>(reps));
  int team = 1;
#pragma omp parallel num_threads(static_cast<int>(threads))
  {
#pragma omp master
    team = omp_get_num_threads();
    std::vector<float> a(static_cast<size_t>(rows * depth)), x(static_cast<size_t>(ops::panels_size(rows, depth, ps.mr)));
    std::vector<float> h(x.size()), c(static_cast<size_t>(rows * chunk));
    for (size_t i = 0; i < a.size(); ++i) a[i] = float(int(i * 104729 % 199) - 99) * 1e-2f;
    ops::pack_a_panels(ops::Trans::No, rows, depth, a.data(), depth, x.data(), ops::RowBlocks::Balanced);
    ops::pack_a_panels(ops::Trans::No, rows, depth, a.data(), depth, h.data(), ops::RowBlocks::Balanced);
    for (int64_t r = -3; r < reps; ++r) {  // 3 warm-up steps
#pragma omp barrier
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t j = 0; j < cols; j += chunk) {
        ops::gemm_panels(rows, chunk, depth, 1.0f, x.data(), w_ih.data() + j * depth, beta_x, c.data(), chunk,
                         ops::RowBlocks::Balanced);
        ops::gemm_panels(rows, chunk, depth, 1.0f, h.data(), w_hh.data() + j * depth, beta_h, c.data(), chunk,
                         ops::RowBlocks::Balanced);
      }
#pragma omp barrier
#pragma omp master
      if (r >= 0) step_s[size_t(r)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  }
  const double flops = 2.0 * 2.0 * double(rows) * double(depth) * double(cols) * double(team);
  double best = step_s[0], sum = 0;
  for (double s : step_s) best = std::min(best, s), sum += s;
  const double mean = sum / double(reps);
  std::printf(
      "{\"rows\":%lld,\"depth\":%lld,\"cols\":%lld,\"chunk\":%lld,\"form\":\"%s\",\"threads\":%lld,\"reps\":%lld,"
      "\"best_gflops\":%.1f,\"mean_gflops\":%.1f,\"steps_100_ms\":%.3f}\n",
      (long long)rows, (long long)depth, (long long)cols, (long long)chunk, form.c_str(), (long long)team,
      (long long)reps, flops / best / 1e9, flops / mean / 1e9, 100.0 * mean * 1e3);
  return 0;
}
