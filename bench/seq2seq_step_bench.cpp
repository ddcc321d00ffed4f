// seq2seq_step_bench: times one training step of models::Seq2Seq (forward, backward, Adam), the step
// seq2seq-train's loop runs, in-process. Prints one JSON object; bench/seq2seq_train_vs_torch.py runs it
// interleaved with the same model in PyTorch.
//   seq2seq_step_bench --N 64 --S 20 --T 20 --H 256 --E 256 --V 1000 --attention dot --threads 2 --reps 10
//       [--cell lstm] [--style luong] [--teacher-forcing 1] [--dropout 0] [--profile 1]
//       [--bidirectional 1] [--Vs N --Vt N (source and target vocabularies, default both --V)]
//       [--precision float32|bf16|both] [--A N (additive attention's size, default the decoder's)]
//       [--Hdec N (the decoder's hidden size, default the encoder's output)]
// Legend: N batch, S source length, T decoder steps (<bos> + T-1 tokens in, T-1 tokens + <eos> out),
// E embedding size, H hidden size, V vocabulary (source and target).
// --profile 1 adds the median time of each phase (forward, backward, clip, optimizer).
// best_cpu_s: the best rep's process CPU time (every thread), robust on a shared machine with --threads 1.
// --precision: the products' multiplications (ops::MatmulPrecision; bf16 needs AVX512_BF16). both: each rep runs a
// float32 step and a bf16 step, in alternating order, and the object holds each one's figures ("float32",
// "bf16") and the ratio of their medians (bf16_speedup = float32 median / bf16 median): paired, interleaved rounds.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "attnkit/autograd/var.hpp"
#include "attnkit/models/seq2seq.hpp"
#include "attnkit/ops/matmul.hpp"
#include "attnkit/tensor/memory.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/tensor/threads.hpp"
#include "attnkit/train/batch.hpp"
#include "attnkit/train/clip.hpp"
#include "attnkit/train/optimizer.hpp"

using namespace attnkit;

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static double cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  int64_t N = 64, S = 20, T = 20, H = 256, E = 256, V = 1000, Vs = 0, Vt = 0, A = 0, Hdec = 0;
  bool bidirectional = false;
  int threads = 2, reps = 10;
  std::string cell = "lstm", attention = "dot", style = "luong", precision = "float32";
  bool profile = false;
  float teacher_forcing = 1.0f, dropout = 0.0f;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--N") N = std::atoll(v.c_str());
    else if (k == "--S") S = std::atoll(v.c_str());
    else if (k == "--T") T = std::atoll(v.c_str());
    else if (k == "--H") H = std::atoll(v.c_str());
    else if (k == "--E") E = std::atoll(v.c_str());
    else if (k == "--V") V = std::atoll(v.c_str());
    else if (k == "--Vs") Vs = std::atoll(v.c_str());
    else if (k == "--Vt") Vt = std::atoll(v.c_str());
    else if (k == "--A") A = std::atoll(v.c_str());
    else if (k == "--Hdec") Hdec = std::atoll(v.c_str());
    else if (k == "--bidirectional") bidirectional = v == "1";
    else if (k == "--threads") threads = std::atoi(v.c_str());
    else if (k == "--precision") precision = v;
    else if (k == "--reps") reps = std::atoi(v.c_str());
    else if (k == "--cell") cell = v;
    else if (k == "--attention") attention = v;
    else if (k == "--style") style = v;
    else if (k == "--profile") profile = v == "1";
    else if (k == "--teacher-forcing") teacher_forcing = std::strtof(v.c_str(), nullptr);
    else if (k == "--dropout") dropout = std::strtof(v.c_str(), nullptr);
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  set_num_threads(threads);
  retain_freed_memory();  // as seq2seq-train does
  models::Seq2SeqConfig c;
  c.cell = models::parse_cell_kind(cell);
  c.attention = models::parse_attention_kind(attention);
  c.style = models::parse_attention_style(style);
  if (Vs <= 0) Vs = V;
  if (Vt <= 0) Vt = V;
  c.src_vocab = Vs;
  c.tgt_vocab = Vt;
  c.bidirectional = bidirectional;
  c.embed = E;
  c.hidden = H;
  c.attention_dim = A;
  c.decoder_size = Hdec;
  Rng rng(1);
  models::Seq2Seq model(c, rng);
  train::EncodedCorpus data;
  for (int64_t n = 0; n < N; ++n) {
    std::vector<int64_t> src, tgt;
    for (int64_t s = 0; s < S; ++s) src.push_back(4 + int64_t(rng.next_u32() % uint32_t(Vs - 4)));
    for (int64_t t = 0; t + 1 < T; ++t) tgt.push_back(4 + int64_t(rng.next_u32() % uint32_t(Vt - 4)));
    data.src.push_back(src);
    data.tgt.push_back(tgt);
  }
  std::vector<int64_t> rows(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) rows[size_t(n)] = n;
  const train::Batch batch = train::make_batch(data, rows, false);
  const std::vector<Parameter*> params = model.named_parameters();
  train::AdamOptions ao;
  ao.lr = 1e-3;
  train::Adam adam(params, ao);
  Rng train_rng(1, 55);
  models::ForwardOptions fo;
  fo.teacher_forcing = teacher_forcing;
  fo.dropout = dropout;
  fo.rng = &train_rng;
  if (precision != "float32" && precision != "bf16" && precision != "both") {
    std::fprintf(stderr, "--precision is float32, bf16 or both, not %s\n", precision.c_str());
    return 2;
  }
  if (precision != "float32" && !ops::matmul_precision_available(ops::MatmulPrecision::BFloat16)) {
    std::fprintf(stderr, "--precision %s: this processor has no AVX512_BF16\n", precision.c_str());
    return 2;
  }
  struct Times {
    std::vector<double> total, cpu, fwd, bwd, clip, opt;
    float loss = 0;
  };
  Times by[2];  // float32, bf16
  const bool both = precision == "both";
  for (int r = 0; r <= reps; ++r)  // r = 0: warm-up
    for (int q = 0; q < (both ? 2 : 1); ++q) {
      const int which = both ? (q + r) % 2 : precision == "bf16";
      ops::set_matmul_precision(which ? ops::MatmulPrecision::BFloat16 : ops::MatmulPrecision::Float32);
      Times& tm = by[which];
      auto& [total, cpu, fwd, bwd, clip, opt, loss] = tm;
      const double c0 = cpu_now();
      const double t0 = now();
      adam.zero_grad();
      auto out = model.forward(batch, fo);
      loss = out.loss.value()[0];
      const double t1 = now();
      autograd::backward(out.loss);
      const double t2 = now();
      train::ClipOptions co;
      co.max_norm = 1.0;
      train::clip_grad_norm(params, co);
      const double t3 = now();
      adam.step();
      const double t4 = now();
      const double c4 = cpu_now();
      if (r == 0) continue;
      total.push_back(t4 - t0);
      cpu.push_back(c4 - c0);
      fwd.push_back(t1 - t0);
      bwd.push_back(t2 - t1);
      clip.push_back(t3 - t2);
      opt.push_back(t4 - t3);
    }
  auto print = [&](const Times& t) {
    std::printf("{\"best_s\": %.6g, \"median_s\": %.6g, \"best_cpu_s\": %.6g, \"loss\": %.9g",
                *std::min_element(t.total.begin(), t.total.end()), median(t.total),
                *std::min_element(t.cpu.begin(), t.cpu.end()), double(t.loss));
    if (profile)
      std::printf(", \"forward_s\": %.6g, \"backward_s\": %.6g, \"clip_s\": %.6g, \"adam_s\": %.6g", median(t.fwd),
                  median(t.bwd), median(t.clip), median(t.opt));
    std::printf("}");
  };
  if (both) {
    std::printf("{\"float32\": ");
    print(by[0]);
    std::printf(", \"bf16\": ");
    print(by[1]);
    std::printf(", \"bf16_speedup\": %.4g}\n", median(by[0].total) / median(by[1].total));
  } else {
    print(by[precision == "bf16"]);
    std::printf("\n");
  }
  return 0;
}
