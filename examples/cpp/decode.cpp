// Decode from C++: a seq2seq-train checkpoint (any model family) loaded with its vocabularies and tokenizers,
// each source decoded greedily and with a beam of 4. Prints one line per source and strategy:
//   greedy  1 2 3 -> 3 2 1  (log p -0.0123)
//   usage: decode CHECKPOINT SOURCE...      (sources in the checkpoint's source tokenizer: "1 2 3")
#include <cstdio>
#include <string>
#include <vector>

#include "attnkit/decode/loader.hpp"
#include "attnkit/decode/search.hpp"
#include "attnkit/tensor/error.hpp"

using namespace attnkit;

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  try {
    decode::LoadedModel m = decode::load_checkpoint(argv[1]);  // refusals name the file
    std::vector<std::vector<int64_t>> sources;
    for (int i = 2; i < argc; ++i) {
      int64_t unknown = 0;
      sources.push_back(decode::encode_source(m, argv[i], &unknown));  // unknown tokens -> <unk>, counted
    }
    for (const decode::Strategy strategy : {decode::Strategy::Greedy, decode::Strategy::Beam}) {
      decode::SearchOptions options;
      options.strategy = strategy;  // beam: 4 rows per source, the best one returned
      decode::use_special_ids(m, options);
      const std::vector<std::vector<decode::Hypothesis>> out = decode::search(*m.model, sources, options);
      for (size_t i = 0; i < out.size(); ++i) {
        const decode::Hypothesis& best = out[i].front();
        const std::string text = decode::target_text(m, decode::target_tokens(m, best.ids));
        std::printf("%-6s  %s -> %s  (log p %.4f)\n", strategy == decode::Strategy::Greedy ? "greedy" : "beam",
                    argv[2 + i], text.c_str(), best.score);
      }
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "decode: %s\n", e.what());
    return 1;
  }
  return 0;
}
