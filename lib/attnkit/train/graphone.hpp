// Training a joint-sequence (graphone) model (models/graphone.hpp) from a corpus of pairs.
//
// 1. The alignment model, by expectation-maximisation (as m2m-aligner and Sequitur's first stage): every way of
//    cutting a pair into chunks of 1-2 source tokens with 0-2 target tokens is weighed by the product of its
//    graphones' probabilities; the forward-backward sums over all of them give each graphone's expected count,
//    and the counts, normalised, are the next iteration's probabilities. The first iteration weighs every
//    graphone alike; a graphone whose probability falls below 1e-7 is dropped (and weighs 1e-9 in the next
//    iteration's sums, so that it may come back).
// 2. Each pair is cut along its most likely segmentation (Viterbi) under the last probabilities, and the n-gram
//    counts of those graphone sequences, orders 1 to n, are the model's.
// A pair that no segmentation covers (a target longer than twice its source) is left out and counted.
// Deterministic: the same corpus and options give the same model, bit for bit.
#pragma once
#include <cstdint>
#include <vector>

#include "attnkit/models/graphone.hpp"
#include "attnkit/train/data.hpp"

namespace attnkit::train {

struct GraphoneOptions {
  int order = 4;           // n, 1 .. GraphoneModel::kMaxOrder
  int iterations = 5;      // of expectation-maximisation, 1 .. 100
  double discount = 0.75;  // D, in (0, 1)
};

struct GraphoneReport {
  int64_t pairs = 0;       // the corpus' examples
  int64_t unaligned = 0;   // left out: no segmentation covers them
  // from the second iteration on: sum over the pairs of log sum_q prod_k P(q_k) under that iteration's
  // probabilities (the last iteration's estimate); EM never lowers it
  std::vector<double> log_likelihood;
};

// Refuses options out of range and a pair longer than GraphoneModel::kMaxTokens on either side (naming the
// corpus and the line); `report`, when given, is filled.
models::GraphoneModel train_graphone(const Corpus& corpus, const GraphoneOptions& options,
                                     GraphoneReport* report = nullptr);

}  // namespace attnkit::train
