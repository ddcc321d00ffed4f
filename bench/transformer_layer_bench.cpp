// transformer_layer_bench: times one nn::TransformerEncoderLayer forward (post-LN, ReLU, no dropout, under
// autograd::NoGrad: inference) on random data, and the library's sgemm at the layer's FFN shape (the ceiling).
// Driven by bench/transformer_layer_vs_torch.py, which interleaves it with PyTorch; usable alone:
//   build/bench/transformer_layer_bench --batch 16 --len 256 --d 512 --ff 2048 --heads 8 --threads 2 --reps 5
// With --weights STATE_DICT.json (nn.TransformerEncoderLayer's names: self_attn.in_proj_weight, linear1.weight,
// norm1.weight ...) --input X.json --output Y.json it loads those weights, runs X [N, T, E] once and writes Y:
// bench/vs_onnxruntime/run.py checks that output against PyTorch's and ONNX Runtime's.
// Runs under the tools' allocator policy (retain_freed_memory, as tools::run sets it); --malloc-default:
// glibc's default instead, to measure what the policy saves.
// Prints one JSON line: {"best_s":.., "gflop":.. (the layer's multiply-adds x 2), "gflops":..,
//   "sgemm_gflops":.. ([N*T, E] x [E, F], best of reps), "checksum":..}
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "attnkit/autograd/var.hpp"
#include "attnkit/io/json_reader.hpp"
#include "attnkit/io/tensor_file.hpp"
#include "attnkit/nn/state_dict.hpp"
#include "attnkit/nn/transformer.hpp"
#include "attnkit/ops/matmul.hpp"
#include "attnkit/tensor/memory.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/tensor/threads.hpp"

using namespace attnkit;

int main(int argc, char** argv) {
  int64_t N = 16, T = 256, E = 512, F = 2048, NH = 8, threads = 2, reps = 5;
  bool norm_first = false, malloc_default = false;
  std::string weights, input, output;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if ((a == "--weights" || a == "--input" || a == "--output") && i + 1 < argc) {
      (a == "--weights" ? weights : a == "--input" ? input : output) = argv[++i];
      continue;
    }
    auto next = [&] { return i + 1 < argc ? std::atoll(argv[++i]) : 0LL; };
    if (a == "--batch") N = next();
    else if (a == "--len") T = next();
    else if (a == "--d") E = next();
    else if (a == "--ff") F = next();
    else if (a == "--heads") NH = next();
    else if (a == "--threads") threads = next();
    else if (a == "--reps") reps = next();
    else if (a == "--norm-first") norm_first = true;
    else if (a == "--malloc-default") malloc_default = true;
    else {
      std::fprintf(stderr, "usage: transformer_layer_bench [--batch 16] [--len 256] [--d 512] [--ff 2048] [--heads 8] "
                           "[--threads 2] [--reps 5] [--norm-first] [--malloc-default] [--weights W.json --input X.json --output Y.json]\n");
      return 2;
    }
  }
  set_num_threads(static_cast<int>(threads));
  if (!malloc_default) retain_freed_memory();  // the tools' allocator policy (tools::run, tensor/memory.hpp)
  Rng rng(1);
  nn::TransformerLayerOptions o;
  o.d_model = E;
  o.heads = NH;
  o.dim_feedforward = F;
  o.dropout = 0.0f;
  o.norm_first = norm_first;
  nn::TransformerEncoderLayer layer(o, rng);
  if (!weights.empty()) {  // one forward on given weights and input, for the agreement check
    try {
      nn::load_parameters(layer, io::parse_json(io::read_text(weights), weights), "encoder layer");
      const io::Value x = io::parse_json(io::read_text(input), input);
      autograd::NoGrad no_grad;
      io::write_value_file(output, io::Value(layer.forward(autograd::Var(x.tensor()), {}).value()));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "transformer_layer_bench: %s\n", e.what());
      return 1;
    }
    return 0;
  }
  const autograd::Var x(rand_normal({N, T, E}, rng));
  autograd::NoGrad no_grad;
  double best = 1e30, checksum = 0;
  for (int64_t r = 0; r < reps + 1; ++r) {  // the first call warms up
    const auto t0 = std::chrono::steady_clock::now();
    const autograd::Var y = layer.forward(x, {});
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::min(best, s);
    checksum = y.value()[0] + y.value()[y.value().numel() - 1];
  }
  const double M = double(N * T);
  // in_proj 3E x E, out_proj E x E, FFN 2 E F per row; scores and context 2 T E per row
  const double gflop = 2.0 * M * (4.0 * E * E + 2.0 * E * F + 2.0 * T * E) / 1e9;
  const Tensor A = rand_normal({N * T, E}, rng), B = rand_normal({F, E}, rng);
  Tensor C({N * T, F});
  double gemm_best = 1e30;
  for (int64_t r = 0; r < std::max<int64_t>(reps, 3) + 1; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    ops::gemm(ops::Trans::No, ops::Trans::Yes, N * T, F, E, 1.0f, A.data(), E, B.data(), E, 0.0f, C.data(), F);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) gemm_best = std::min(gemm_best, s);
  }
  std::printf("{\"best_s\":%.6f,\"gflop\":%.3f,\"gflops\":%.1f,\"sgemm_gflops\":%.1f,\"checksum\":%g}\n", best, gflop,
              gflop / best, 2.0 * M * E * F / gemm_best / 1e9, checksum);
  return 0;
}
