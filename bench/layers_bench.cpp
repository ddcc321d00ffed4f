// layers_bench: times one layer kernel's forward + backward (ops/: cross-entropy, layer norm,
// gelu, softmax) on random data, gradients allocated fresh each call as PyTorch's autograd does.
// Driven by bench/layers_vs_torch.py, which interleaves it with PyTorch; usable alone:
//   build/bench/layers_bench --op ce --rows 4096 --cols 1000 --threads 1 --reps 20
// Prints one JSON line: {"op":..,"rows":..,"cols":..,"threads":..,"best_s":..}
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "attnkit/ops/activation.hpp"
#include "attnkit/ops/cross_entropy.hpp"
#include "attnkit/ops/layer_norm.hpp"
#include "attnkit/ops/softmax.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/tensor/threads.hpp"

using namespace attnkit;

int main(int argc, char** argv) {
  std::string op = "ce";
  int64_t R = 4096, C = 1000, threads = 1, reps = 20;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atoll(argv[++i]) : 0LL; };
    if (a == "--op" && i + 1 < argc) op = argv[++i];
    else if (a == "--rows") R = next();
    else if (a == "--cols") C = next();
    else if (a == "--threads") threads = next();
    else if (a == "--reps") reps = next();
    else {
      std::fprintf(stderr, "usage: layers_bench [--op ce|ln|gelu|softmax] [--rows 4096] [--cols 1000] [--threads 1] [--reps 20]\n");
      return 2;
    }
  }
  if (op != "ce" && op != "ln" && op != "gelu" && op != "softmax") {
    std::fprintf(stderr, "layers_bench: unknown --op %s\n", op.c_str());
    return 2;
  }
  set_num_threads(static_cast<int>(threads));
  Rng rng(1);
  const Tensor x = rand_normal({R, C}, rng), dy = rand_normal({R, C}, rng), w = rand_normal({C}, rng),
               b = rand_normal({C}, rng);
  std::vector<int64_t> targets(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) targets[static_cast<size_t>(r)] = (r * 7919) % C;
  const ops::CrossEntropyOptions ce{-100, 0.1f, ops::Reduction::Mean};
  double checksum = 0, best = 1e30;
  for (int64_t rep = 0; rep < reps + 1; ++rep) {  // the first call warms up
    const auto t0 = std::chrono::steady_clock::now();
    Tensor dx(x.shape());
    if (op == "ce") {
      ops::CrossEntropySaved saved;
      const Tensor loss = ops::cross_entropy_forward(x, targets, ce, &saved);
      ops::cross_entropy_backward(Tensor::scalar(1.0f), x, targets, ce, saved, dx);
      checksum += loss[0];
    } else if (op == "ln") {
      ops::LayerNormStats stats;
      const Tensor y = ops::layer_norm_forward(x, w, b, 1e-5f, &stats);
      Tensor dw({C}), db({C});
      ops::layer_norm_backward(dy, x, w, stats, &dx, &dw, &db);
      checksum += y[0] + dw[0];
    } else if (op == "gelu") {
      const Tensor y = ops::gelu_forward(x);
      ops::gelu_backward(dy, x, dx);
      checksum += y[0];
    } else {
      const Tensor y = ops::softmax_forward(x);
      ops::softmax_backward(dy, y, dx);
      checksum += y[0];
    }
    checksum += dx[0];
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) best = std::min(best, s);
  }
  std::printf("{\"op\":\"%s\",\"rows\":%lld,\"cols\":%lld,\"threads\":%lld,\"best_s\":%.9g,\"checksum\":%.6g}\n",
              op.c_str(), static_cast<long long>(R), static_cast<long long>(C), static_cast<long long>(threads), best,
              checksum);
  return 0;
}
