// precision_bench: the Transformer's inference in float32, bfloat16 and int8 weights (models::Transformer::
// set_precision, the path transformer-decode --precision runs), on one randomly initialised model (the speed
// does not depend on the values): greedy decoding through decode::search (every source made to produce exactly
// --tokens tokens) at batch 1 and --batch, and one encoder layer's forward on [--enc-batch, --enc-len, d].
// Precisions interleaved within each round (the order rotates; the copies are made between timings), median
// over the rounds; ratios to float32, and the weights streamed: the bytes one decoding step reads (the decoder's
// self-attention, cross-attention query and output, FFN matrices and the output projection, as held) x steps/s,
// beside the machine's read bandwidth measured in the same rounds (--threads threads summing their parts of a
// 512 MB buffer, past every cache: what a step that streams its weights from memory could reach at most).
// Driven by bench/precision_decode.sh; alone:
//   precision_bench [--layers 6] [--d 512] [--heads 8] [--ff 2048] [--vocab 8000] [--src-len 32] [--tokens 64]
//                   [--batch 64] [--enc-batch 16] [--enc-len 256] [--rounds 5] [--threads 2]
//                   [--only fp32|bf16|int8 (one precision, no ratios: for a profiler)]
// Prints one JSON line per measurement and precision, then a table on stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "attnkit/autograd/var.hpp"
#include "attnkit/decode/search.hpp"
#include "attnkit/models/transformer.hpp"
#include "attnkit/nn/precision.hpp"
#include "attnkit/nn/transformer.hpp"
#include "attnkit/tensor/memory.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/tensor/threads.hpp"

using namespace attnkit;
using ops::Precision;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Bytes of a [out, in] matrix as held in precision p (int8: a float scale per row).
double matrix_bytes(Precision p, double out, double in) {
  if (p == Precision::Int8) return out * in + 4 * out;
  return out * in * (p == Precision::Bf16 ? 2 : 4);
}

// GB/s of `threads` threads each summing its part of buf once (integer sums: the compiler vectorizes them).
double read_gb_per_s(const std::vector<uint32_t>& buf, int threads) {
  std::vector<uint32_t> sums(static_cast<size_t>(threads));
  const double t0 = now();
  std::vector<std::thread> team;
  const size_t n = buf.size();
  for (int t = 0; t < threads; ++t)
    team.emplace_back([&, t] {
      uint32_t s = 0;
      for (size_t i = n * size_t(t) / size_t(threads), end = n * size_t(t + 1) / size_t(threads); i < end; ++i)
        s += buf[i];
      sums[size_t(t)] = s;
    });
  for (std::thread& th : team) th.join();
  const double seconds = now() - t0;
  uint32_t all = 0;
  for (uint32_t s : sums) all += s;
  if (all == 1) std::fprintf(stderr, " ");  // the sums are used
  return double(n) * sizeof(uint32_t) / seconds / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t layers = 6, E = 512, NH = 8, F = 2048, V = 8000, S = 32, T = 64, B = 64, EB = 16, ET = 256, rounds = 5;
  int threads = 2;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "precision_bench: %s needs a value (see the header of bench/precision_bench.cpp)\n", a.c_str());
      return 2;
    }
    if (a == "--only") {
      only = argv[++i];
      continue;
    }
    const int64_t v = std::atoll(argv[++i]);
    if (a == "--layers") layers = v;
    else if (a == "--d") E = v;
    else if (a == "--heads") NH = v;
    else if (a == "--ff") F = v;
    else if (a == "--vocab") V = v;
    else if (a == "--src-len") S = v;
    else if (a == "--tokens") T = v;
    else if (a == "--batch") B = v;
    else if (a == "--enc-batch") EB = v;
    else if (a == "--enc-len") ET = v;
    else if (a == "--rounds") rounds = v;
    else if (a == "--threads") threads = static_cast<int>(v);
    else {
      std::fprintf(stderr, "precision_bench: unknown option %s (see the header of bench/precision_bench.cpp)\n", a.c_str());
      return 2;
    }
  }
  try {
    set_num_threads(threads);
    retain_freed_memory();  // the tools' allocator policy (tools::run)
    Rng rng(1);
    models::TransformerConfig c;
    c.src_vocab = c.tgt_vocab = V;
    c.encoder_layers = c.decoder_layers = layers;
    c.heads = NH, c.d_model = E, c.ff = F, c.dropout = 0.0f;
    models::Transformer model(c, rng);
    model.set_training(false);
    nn::TransformerLayerOptions lo = c.layer_options();
    lo.dropout = 0.0f;
    nn::TransformerEncoderLayer layer(lo, rng);
    const autograd::Var x(rand_normal({EB, ET, E}, rng));

    auto sources = [&](int64_t n) {
      std::vector<std::vector<int64_t>> out(static_cast<size_t>(n));
      for (auto& s : out)
        for (int64_t i = 0; i < S; ++i) s.push_back(4 + int64_t(rng.next_u32() % uint32_t(V - 4)));
      return out;
    };
    const auto one = sources(1), many = sources(B);
    decode::SearchOptions o;
    o.max_len = o.min_len = T;
    auto decode_s = [&](const std::vector<std::vector<int64_t>>& src) {
      const double t0 = now();
      decode::search(model, src, o);
      return now() - t0;
    };
    auto layer_s = [&] {
      autograd::NoGrad no_grad;
      const double t0 = now();
      const autograd::Var y = layer.forward(x, {});
      return now() - t0;
    };
    std::vector<Precision> precisions{Precision::Fp32, Precision::Bf16, Precision::Int8};
    if (!only.empty()) precisions = {ops::precision_from_name(only)};
    std::map<Precision, std::vector<double>> b1, bB, enc;
    std::vector<uint32_t> stream(size_t(128) << 20, 1u);  // 512 MB
    std::vector<double> bandwidth;
    auto use = [&](Precision p) {
      nn::PrecisionPlan plan(p), layer_plan(p);
      model.set_precision(plan);
      layer.set_precision(layer_plan);
    };
    for (Precision p : precisions) {  // warm-up: every path once
      use(p);
      decode_s(one), layer_s();
    }
    for (int64_t r = 0; r < rounds; ++r)
      for (size_t k = 0; k < precisions.size(); ++k) {
        const Precision p = precisions[(k + size_t(r)) % precisions.size()];
        use(p);
        b1[p].push_back(double(T) / decode_s(one));
        bB[p].push_back(double(B * T) / decode_s(many));
        enc[p].push_back(layer_s());
        if (k == 0) {  // the bandwidth, best of 3 passes, once a round
          double best = 0;
          for (int pass = 0; pass < 3; ++pass) best = std::max(best, read_gb_per_s(stream, threads));
          bandwidth.push_back(best);
        }
      }
    const double read_gb = median(bandwidth);
    // one step's weights: per decoder layer self-attention Q|K|V and output, cross-attention query and output,
    // the two FFN matrices; then the output projection
    auto step_bytes = [&](Precision p) {
      return double(layers) * (matrix_bytes(p, 3 * E, E) + 3 * matrix_bytes(p, E, E) + matrix_bytes(p, F, E) +
                               matrix_bytes(p, E, F)) +
             matrix_bytes(p, V, E);
    };
    std::fprintf(stderr, "%-5s %12s %8s %9s %14s %8s %9s %14s %8s\n", "", "b1 tok/s", "ratio", "b1 GB/s",
                 ("b" + std::to_string(B) + " tok/s").c_str(), "ratio", "GB/s", "encoder ms", "ratio");
    for (Precision p : precisions) {
      const double t1 = median(b1[p]), tB = median(bB[p]), e = median(enc[p]);
      const double gb1 = step_bytes(p) * t1 / 1e9, gbB = step_bytes(p) * tB / double(B) / 1e9;
      std::printf("{\"precision\":\"%s\",\"layers\":%lld,\"d\":%lld,\"threads\":%d,\"rounds\":%lld,"
                  "\"greedy_b1_tokens_per_s\":%.1f,\"greedy_b%lld_tokens_per_s\":%.1f,\"step_weight_mb\":%.1f,"
                  "\"b1_weight_gb_per_s\":%.2f,\"bB_weight_gb_per_s\":%.2f,\"memory_read_gb_per_s\":%.2f,"
                  "\"encoder_layer_ms\":%.2f,\"encoder_shape\":[%lld,%lld,%lld]}\n",
                  std::string(ops::precision_name(p)).c_str(), (long long)layers, (long long)E, threads,
                  (long long)rounds, t1, (long long)B, tB, step_bytes(p) / 1e6, gb1, gbB, read_gb, e * 1e3, (long long)EB,
                  (long long)ET, (long long)E);
      const Precision base = precisions.front();  // float32 unless --only
      const double f1 = median(b1[base]), fB = median(bB[base]), fe = median(enc[base]);
      std::fprintf(stderr, "%-5s %12.1f %7.2fx %9.2f %14.1f %7.2fx %9.2f %14.2f %7.2fx\n",
                   std::string(ops::precision_name(p)).c_str(), t1, t1 / f1, gb1, tB, tB / fB, gbB, e * 1e3, fe / e);
    }
    std::fprintf(stderr, "memory read bandwidth, %d thread%s: %.1f GB/s (median of the rounds' best of 3 passes)\n",
                 threads, threads > 1 ? "s" : "", read_gb);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "precision_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
