// The special tokens a translation model's vocabularies start with, and their ids:
//   <pad> = 0   padding after each shorter row; ignored by the loss (cross-entropy's ignore_index)
//   <bos> = 1   the decoder's first input
//   <eos> = 2   ends a target (predicted after its last token)
//   <unk> = 3   a token the vocabulary does not hold
// A vocabulary built from data or read from a checkpoint has them at these ids (models/vocab.hpp); one exported
// from elsewhere may put them anywhere (Vocab::from_exported, a Transformer config's pad_id / bos_id / eos_id).
#pragma once
#include <array>
#include <cstdint>
#include <string>

namespace attnkit::models {

inline constexpr int64_t kPad = 0;
inline constexpr int64_t kBos = 1;
inline constexpr int64_t kEos = 2;
inline constexpr int64_t kUnk = 3;
inline constexpr int64_t kNumSpecials = 4;

// "<pad>", "<bos>", "<eos>", "<unk>", by id.
inline const std::array<std::string, 4>& special_tokens() {
  static const std::array<std::string, 4> names = {"<pad>", "<bos>", "<eos>", "<unk>"};
  return names;
}

// The token a greedy decoder outputs from a row of V scores: the first maximum among the ids other than <pad>,
// <bos> and <unk>, which no decoder emits (decode's searches mask them to -inf the same way). V > 3.
inline int64_t best_output_token(const float* row, int64_t V, int64_t pad = kPad, int64_t bos = kBos,
                                 int64_t unk = kUnk) {
  int64_t best = -1;
  for (int64_t v = 0; v < V; ++v)
    if (v != pad && v != bos && v != unk && (best < 0 || row[v] > row[best])) best = v;
  return best;
}

}  // namespace attnkit::models
