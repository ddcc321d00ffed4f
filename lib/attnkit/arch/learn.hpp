// compare-arch, part 5: what each layer type can learn, on a long-range recall task.
//
// Legend: n sequence length, K key symbols (the classes), V = K + distractor symbols, B batch, d model size.
//
// Task: a sequence of n tokens; token 0 is a key drawn from {0 .. K-1}, tokens 1 .. n-1 are
// distractors drawn from {K .. V-1}; the target, read at the LAST position, is the key: the output
// depends on a token at distance n-1. Chance is 1/K.
// Model: embedding [V, d] (N(0, 1)) -> one layer of arch/layers.hpp -> linear [d -> K] on position n-1,
// cross-entropy, Adam. Every architecture gets the same budget: the same steps, batch, learning rate
// and the same training sequences (one data seed); accuracy is measured on `eval` fresh sequences
// (another seed). Steps and wall time are reported per run.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attnkit/arch/analytic.hpp"

namespace attnkit::arch {

struct LearnOptions {
  std::vector<int64_t> lengths{8, 32, 128};  // the n values
  std::vector<Layer> layers{Layer::Conv, Layer::ConvStack, Layer::Rnn, Layer::Lstm, Layer::AttentionTiled,
                            Layer::LocalAttention};
  int64_t d = 32;
  int64_t keys = 8;         // K
  int64_t distractors = 8;  // V - K
  int steps = 300;
  int64_t batch = 32;
  double lr = 3e-3;
  int64_t eval = 512;
  uint64_t seed = 0;
  std::function<void(const std::string& what, int64_t done, int64_t total)> progress;  // may be empty
};

struct LearnResult {
  Layer layer;
  int64_t n = 0;
  double accuracy = 0;    // on the evaluation sequences
  double final_loss = 0;  // mean training loss of the last 10% of the steps
  int steps = 0;
  double seconds = 0;     // wall time of the training
};

// `sizes` gives k and r (for the conv stack and the window); n and d come from the options.
std::vector<LearnResult> learn(const Sizes& sizes, const LearnOptions& options);

}  // namespace attnkit::arch
