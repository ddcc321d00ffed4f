// Legend: N rows, T target positions.
#include "attnkit/train/metrics.hpp"

#include <algorithm>

#include "attnkit/tensor/error.hpp"

namespace attnkit::train {

namespace {

// Two-row dynamic programme: prev[j] = distance(a[:i-1], b[:j]), cur[j] = distance(a[:i], b[:j]).
template <typename Seq>
int64_t levenshtein(const Seq& a, const Seq& b) {
  const size_t m = b.size();
  std::vector<int64_t> prev(m + 1), cur(m + 1);
  for (size_t j = 0; j <= m; ++j) prev[j] = static_cast<int64_t>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int64_t>(i);
    for (size_t j = 1; j <= m; ++j) {
      const int64_t substitute = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, substitute});  // delete a[i-1], insert b[j-1], substitute
    }
    std::swap(prev, cur);
  }
  return prev[m];
}

}  // namespace

int64_t edit_distance(const std::vector<int64_t>& a, const std::vector<int64_t>& b) { return levenshtein(a, b); }
int64_t edit_distance(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  return levenshtein(a, b);
}

template <typename Seq>
void ErrorRates::add_impl(const Seq& prediction, const std::vector<Seq>& references) {
  AK_CHECK(!references.empty(), "error rates: a word has no reference");
  int64_t best = -1;
  int64_t best_length = 0;
  for (const auto& r : references) {
    const int64_t d = levenshtein(prediction, r);
    if (best < 0 || d < best) {
      best = d;
      best_length = static_cast<int64_t>(r.size());
    }
  }
  ++words_;
  wrong_words_ += best != 0;
  edits_ += best;
  reference_tokens_ += best_length;
}

void ErrorRates::add(const std::vector<std::string>& prediction,
                     const std::vector<std::vector<std::string>>& references) {
  add_impl(prediction, references);
}
void ErrorRates::add(const std::vector<int64_t>& prediction, const std::vector<std::vector<int64_t>>& references) {
  add_impl(prediction, references);
}

double ErrorRates::token_error_rate() const {
  return reference_tokens_ == 0 ? 0.0 : static_cast<double>(edits_) / static_cast<double>(reference_tokens_);
}
double ErrorRates::word_error_rate() const {
  return words_ == 0 ? 0.0 : static_cast<double>(wrong_words_) / static_cast<double>(words_);
}
double ErrorRates::exact_match() const {
  return words_ == 0 ? 0.0 : static_cast<double>(words_ - wrong_words_) / static_cast<double>(words_);
}

void TokenAccuracy::add(const std::vector<int64_t>& predicted, const std::vector<int64_t>& target, int64_t N,
                        int64_t T, int64_t pad) {
  AK_CHECK(N >= 0 && T >= 0 && static_cast<int64_t>(predicted.size()) == N * T &&
               static_cast<int64_t>(target.size()) == N * T,
           "token accuracy: predictions ({} ids) and targets ({} ids) must both be [N, T] = [{}, {}]",
           predicted.size(), target.size(), N, T);
  for (int64_t n = 0; n < N; ++n) {
    bool row_right = true;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t want = target[static_cast<size_t>(n * T + t)];
      if (want == pad) continue;
      const bool right = predicted[static_cast<size_t>(n * T + t)] == want;
      ++tokens;
      correct_tokens += right;
      row_right = row_right && right;
    }
    ++rows;
    correct_rows += row_right;
  }
}

double TokenAccuracy::accuracy() const {
  return tokens == 0 ? 0.0 : static_cast<double>(correct_tokens) / static_cast<double>(tokens);
}
double TokenAccuracy::exact_match() const {
  return rows == 0 ? 0.0 : static_cast<double>(correct_rows) / static_cast<double>(rows);
}

}  // namespace attnkit::train
