// The models/decoding.hpp contract, checked for any TranslationModel (the recurrent one in
// test_decoding.cpp; a new model family calls check_decoding_contract on a tiny instance of itself).
//   - stepping the state greedily gives TranslationModel::greedy's tokens;
//   - use_cache = false gives the same log-probabilities (within `tol`) through steps and select_rows
//     that expand, permute and drop rows;
//   - a row's result does not depend on the other rows (a row alone == the same row in the batch);
//   - cross_attention (when the model has one): [R, S], rows summing to 1, zero past each source's length.
// Returns "" or the first failure.
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "attnkit/models/model.hpp"
#include "attnkit/models/tokens.hpp"
#include "attnkit/train/vocab.hpp"

namespace attnkit::test {

// A batch of sources only (src, src_lengths), padded with <pad>.
inline models::SourceBatch sources_batch(const std::vector<std::vector<int64_t>>& rows) {
  models::SourceBatch b;
  b.N = static_cast<int64_t>(rows.size());
  for (const auto& r : rows) b.S = std::max<int64_t>(b.S, static_cast<int64_t>(r.size()));
  b.src.assign(size_t(b.N * b.S), train::Vocab::kPad);
  for (int64_t n = 0; n < b.N; ++n) {
    std::copy(rows[size_t(n)].begin(), rows[size_t(n)].end(), b.src.begin() + n * b.S);
    b.src_lengths.push_back(static_cast<int64_t>(rows[size_t(n)].size()));
  }
  return b;
}

inline float max_abs_diff(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return INFINITY;
  float d = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (a[i] == b[i]) continue;  // equal infinities too
    d = std::max(d, std::fabs(a[i] - b[i]));
  }
  return d;
}

// The greedy choice of row r: the best token other than <pad>, <bos>, <unk> (models/tokens.hpp).
inline int64_t argmax_row(const Tensor& lp, int64_t r) {
  const int64_t V = lp.dim(1);
  return models::best_output_token(lp.data() + r * V, V);
}

inline std::string check_decoding_contract(models::TranslationModel& model, const std::vector<std::vector<int64_t>>& src,
                                           bool has_attention, int64_t max_len = 6, float tol = 2e-5f) {
  const models::SourceBatch batch = sources_batch(src);
  const int64_t N = batch.N;
  // 1. greedy through the state == TranslationModel::greedy
  {
    const auto expected = model.greedy(batch, max_len);
    auto state = model.start_decoding(batch, true);
    std::vector<int64_t> prev(size_t(N), train::Vocab::kBos);
    std::vector<std::vector<int64_t>> got(static_cast<size_t>(N));
    std::vector<char> done(size_t(N), 0);
    for (int64_t t = 0; t < max_len; ++t) {
      const Tensor lp = state->step(prev);
      if (lp.shape() != Shape{N, lp.dim(1)}) return "step: log-probs of shape " + lp.shape_str();
      for (int64_t n = 0; n < N; ++n) {
        prev[size_t(n)] = argmax_row(lp, n);
        if (done[size_t(n)]) continue;
        if (prev[size_t(n)] == train::Vocab::kEos) done[size_t(n)] = 1;
        else got[size_t(n)].push_back(prev[size_t(n)]);
      }
    }
    if (got != expected) return "greedy through the decoder state differs from TranslationModel::greedy";
  }
  // 2. cache == no cache, through expansion, permutation and dropping of rows
  auto cached = model.start_decoding(batch, true);
  auto fresh = model.start_decoding(batch, false);
  std::vector<int64_t> prev(size_t(N), train::Vocab::kBos);
  const std::vector<std::vector<int64_t>> selections = {
      {}, [&] { std::vector<int64_t> r; for (int64_t n = 0; n < N; ++n) { r.push_back(n); r.push_back(n); } return r; }(),
      {}, [&] { std::vector<int64_t> r; for (int64_t n = 2 * N - 1; n >= 0; n -= 2) r.push_back(n); return r; }(),
      {}};
  // at least max_len steps: a cache that grows in blocks (the Transformer's, 16 rows) is crossed
  const size_t steps = std::max(selections.size(), static_cast<size_t>(max_len));
  for (size_t t = 0; t < steps; ++t) {
    const Tensor a = cached->step(prev), b = fresh->step(prev);
    const float d = max_abs_diff(a, b);
    if (!(d <= tol)) return fmt::format("step {}: cache and no cache differ by {} in the log-probs", t, d);
    for (int64_t r = 0; r < a.dim(0); ++r) {
      double sum = 0;
      for (int64_t v = 0; v < a.dim(1); ++v) sum += std::exp(double(a[r * a.dim(1) + v]));
      if (std::fabs(sum - 1.0) > 1e-4) return fmt::format("step {}: row {}: probabilities sum to {}", t, r, sum);
    }
    if (has_attention) {
      const Tensor w = cached->cross_attention(-1, -1);
      if (w.shape() != Shape{a.dim(0), batch.S}) return "cross_attention of shape " + w.shape_str();
      if (!(max_abs_diff(w, fresh->cross_attention(-1, -1)) <= tol)) return "cross_attention: cache and no cache differ";
    }
    for (int64_t r = 0; r < a.dim(0); ++r) prev[size_t(r)] = argmax_row(a, r);
    if (t < selections.size() && !selections[t].empty()) {
      cached->select_rows(selections[t]);
      fresh->select_rows(selections[t]);
      std::vector<int64_t> p;
      for (int64_t r : selections[t]) p.push_back(prev[size_t(r)]);
      prev = p;
      // the reversed odd rows of the doubled batch are the sources in reverse order
    }
    if (cached->rows() != static_cast<int64_t>(prev.size())) return "rows() does not follow select_rows";
  }
  // 3. a row alone == the same row in the batch, and attention rows sum to 1 with zeros past the length
  {
    auto all = model.start_decoding(batch, true);
    const Tensor a = all->step(std::vector<int64_t>(size_t(N), train::Vocab::kBos));
    for (int64_t n = 0; n < N; ++n) {
      auto one = model.start_decoding(sources_batch({src[size_t(n)]}), true);
      const Tensor b = one->step({train::Vocab::kBos});
      const int64_t V = a.dim(1);
      const Tensor an(Shape{1, V}, std::vector<float>(a.data() + n * V, a.data() + (n + 1) * V));
      if (!(max_abs_diff(an, b) <= tol)) return fmt::format("row {} alone differs from row {} in the batch", n, n);
    }
    if (has_attention) {
      const Tensor w = all->cross_attention(-1, -1);  // [N, S]
      for (int64_t n = 0; n < N; ++n) {
        double sum = 0;
        for (int64_t s = 0; s < batch.S; ++s) {
          const float x = w[n * batch.S + s];
          if (s >= batch.src_lengths[size_t(n)] && x != 0.0f) return fmt::format("attention past row {}'s length", n);
          sum += x;
        }
        if (std::fabs(sum - 1.0) > 1e-4) return fmt::format("attention row {} sums to {}", n, sum);
      }
    }
  }
  return "";
}

}  // namespace attnkit::test
