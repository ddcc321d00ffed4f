// Decoding speed of a model through decode::search (the path transformer-decode runs): greedy tokens/s at
// batch 1 and batch B, and the peak memory of beam search. Every source (random ids of length S) is made to
// produce exactly T tokens (min_len = max_len = T), so tokens/s counts the same work in every run.
//   decode_bench --model MODEL.json [--weights STATE_DICT.json] [--src-len 32] [--tokens 64] [--batch 64]
//                [--beam 5] [--reps 3] [--threads 2] [--no-cache]
// Prints one JSON line: {"greedy_b1_tokens_per_s", "greedy_bB_tokens_per_s" (B > 1), "beam_peak_mb", ...}.
// (bench/decode_vs_torch.py runs it beside PyTorch's nn.Transformer loop.)
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

#include <fmt/format.h>

#include "attnkit/decode/loader.hpp"
#include "attnkit/decode/search.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/tensor/threads.hpp"

using namespace attnkit;

namespace {

// The process's resident set now (VmRSS) or at its peak (VmHWM, reset after loading), in MB, from /proc/self/status.
double status_mb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::stod(line.substr(std::strlen(key))) / 1024.0;
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, weights_path;
  int64_t S = 32, T = 64, B = 64, beam = 5, reps = 3;
  int threads = 2;
  bool no_cache = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "decode_bench: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model") model_path = next();
    else if (a == "--weights") weights_path = next();
    else if (a == "--src-len") S = std::stoll(next());
    else if (a == "--tokens") T = std::stoll(next());
    else if (a == "--batch") B = std::stoll(next());
    else if (a == "--beam") beam = std::stoll(next());
    else if (a == "--reps") reps = std::stoll(next());
    else if (a == "--threads") threads = std::stoi(next());
    else if (a == "--no-cache") no_cache = true;
    else {
      std::cerr << "decode_bench: unknown option " << a << "\n";
      return 2;
    }
  }
  if (model_path.empty()) {
    std::cerr << "decode_bench: give --model MODEL.json [--weights STATE_DICT.json]\n";
    return 2;
  }
  try {
    set_num_threads(threads);
    const double rss_before_load = status_mb("VmRSS:");
    const decode::LoadedModel m =
        weights_path.empty() ? decode::load_checkpoint(model_path) : decode::load_exported(model_path, weights_path);
    const double rss_loaded = status_mb("VmRSS:");
    // The peak so far is the loading's (a JSON state_dict's text is parsed whole): reset it (Linux >= 4.0).
    { std::ofstream("/proc/self/clear_refs") << "5"; }
    Rng rng(5);
    const int64_t Vs = m.src_vocab.size();
    auto sources = [&](int64_t n) {
      std::vector<std::vector<int64_t>> out(static_cast<size_t>(n));
      for (auto& s : out)
        for (int64_t i = 0; i < S; ++i) s.push_back(4 + int64_t(rng.next_u32() % uint32_t(Vs - 4)));
      return out;
    };
    decode::SearchOptions o;
    decode::use_special_ids(m, o);
    o.max_len = T;
    o.min_len = T;
    o.use_cache = !no_cache;
    auto tokens_per_s = [&](const std::vector<std::vector<int64_t>>& src, const decode::SearchOptions& opt) {
      double best = 1e30;
      for (int64_t r = 0; r < reps + 1; ++r) {  // the first is a warm-up
        const auto t0 = std::chrono::steady_clock::now();
        const auto res = decode::search(*m.model, src, opt);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r > 0) best = std::min(best, s);
        for (const auto& h : res)
          if (static_cast<int64_t>(h[0].ids.size()) != T) throw Error("decode_bench: a hypothesis is not T tokens");
      }
      return static_cast<double>(src.size() * size_t(T)) / best;
    };
    // beam first: the process's peak (VmHWM) then belongs to it
    decode::SearchOptions ob = o;
    ob.strategy = decode::Strategy::Beam;
    ob.beam = beam;
    const auto one = sources(1);
    const auto t0 = std::chrono::steady_clock::now();
    decode::search(*m.model, one, ob);
    const double beam_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double peak = status_mb("VmHWM:");
    const double b1 = tokens_per_s(one, o);
    const double bB = B == 1 ? b1 : tokens_per_s(sources(B), o);
    const std::string batched = B == 1 ? "" : fmt::format("\"greedy_b{}_tokens_per_s\":{:.1f},", B, bB);
    std::cout << fmt::format(
        "{{\"family\":\"{}\",\"src_len\":{},\"tokens\":{},\"threads\":{},\"cache\":{},\"greedy_b1_tokens_per_s\":{:.1f},"
        "{}\"beam\":{},\"beam_tokens_per_s\":{:.1f},\"model_mb\":{:.1f},"
        "\"beam_peak_mb\":{:.1f},\"beam_peak_over_model_mb\":{:.1f}}}\n",
        m.family, S, T, threads, !no_cache, b1, batched, beam, double(T) / beam_s, rss_loaded - rss_before_load, peak,
        peak - rss_loaded);
  } catch (const std::exception& e) {
    std::cerr << "decode_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
