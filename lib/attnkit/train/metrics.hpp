// Sequence metrics: edit distance, phoneme (token) error rate, word error rate with several references,
// exact match, and token accuracy under teacher forcing.
// Legend: N rows, T target positions.
//
//   edit distance   Levenshtein distance between two token sequences (insertions, deletions and
//                   substitutions cost 1)
//   PER             sum over words of the edit distance to the closest reference / sum of those
//                   references' lengths (the closest: least distance, ties to the earlier reference);
//                   "phoneme" error rate on G2P, token error rate in general
//   WER             words whose prediction equals none of their references / words
//   exact match     1 - WER: predictions equal to one of their references
//   token accuracy  under teacher forcing: positions where the prediction equals the target, over the
//                   positions whose target is not <pad>; a row is an exact match when all its counted
//                   positions are right
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace attnkit::train {

int64_t edit_distance(const std::vector<int64_t>& a, const std::vector<int64_t>& b);
int64_t edit_distance(const std::vector<std::string>& a, const std::vector<std::string>& b);

// Accumulates PER and WER over words, each scored against its references.
class ErrorRates {
 public:
  // Refuses an empty reference list.
  void add(const std::vector<std::string>& prediction, const std::vector<std::vector<std::string>>& references);
  void add(const std::vector<int64_t>& prediction, const std::vector<std::vector<int64_t>>& references);

  int64_t words() const { return words_; }
  int64_t wrong_words() const { return wrong_words_; }
  int64_t edits() const { return edits_; }
  int64_t reference_tokens() const { return reference_tokens_; }
  double token_error_rate() const;  // PER; 0 with no words
  double word_error_rate() const;   // 0 with no words
  double exact_match() const;       // 1 - WER; 0 with no words

 private:
  template <typename Seq>
  void add_impl(const Seq& prediction, const std::vector<Seq>& references);

  int64_t words_ = 0;
  int64_t wrong_words_ = 0;
  int64_t edits_ = 0;
  int64_t reference_tokens_ = 0;
};

// Token accuracy and exact match of teacher-forced predictions (the argmax at each position) against
// the targets (a batch's tgt_out), both [N, T]; positions whose target is `pad` are not counted.
struct TokenAccuracy {
  int64_t correct_tokens = 0;
  int64_t tokens = 0;
  int64_t correct_rows = 0;
  int64_t rows = 0;
  void add(const std::vector<int64_t>& predicted, const std::vector<int64_t>& target, int64_t N, int64_t T,
           int64_t pad = 0);
  double accuracy() const;     // correct_tokens / tokens; 0 with no tokens
  double exact_match() const;  // correct_rows / rows; 0 with no rows
};

}  // namespace attnkit::train
