#include "attnkit/decode/rescore.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

#include "attnkit/autograd/var.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::decode {

std::vector<double> score_outputs(models::Decodable& model, const std::vector<std::vector<int64_t>>& sources,
                                  const std::vector<std::vector<int64_t>>& outputs, const SearchOptions& options,
                                  const std::vector<bool>& ends) {
  AK_CHECK(sources.size() == outputs.size(), "scoring: {} sources and {} outputs", sources.size(), outputs.size());
  AK_CHECK(ends.empty() || ends.size() == outputs.size(), "scoring: {} outputs and {} end flags", outputs.size(),
           ends.size());
  autograd::NoGrad no_grad;
  std::vector<double> scores(outputs.size(), 0.0);
  for (const auto& y : outputs)
    AK_CHECK(static_cast<int64_t>(y.size()) <= kMaxTokens, "scoring: output {} has {} tokens, more than {}",
             &y - outputs.data(), y.size(), kMaxTokens);
  std::unique_ptr<models::DecoderState> state = model.start_decoding(sources_batch(sources, options.pad), true);
  std::vector<int64_t> rows(outputs.size());  // the output each state row scores
  for (size_t r = 0; r < rows.size(); ++r) rows[r] = static_cast<int64_t>(r);
  std::vector<int64_t> prev(rows.size(), options.bos);
  for (size_t t = 0; !rows.empty(); ++t) {
    const Tensor lp = state->step(prev);  // [R, Vt]
    const int64_t V = lp.dim(1);
    std::vector<int64_t> keep, next;
    for (size_t r = 0; r < rows.size(); ++r) {
      const std::vector<int64_t>& y = outputs[size_t(rows[r])];
      const int64_t token = t < y.size() ? y[t] : options.eos;
      AK_CHECK(token >= 0 && token < V, "scoring: output {} has token {} outside the model's {} target tokens", rows[r],
               token, V);
      const bool counted = t < y.size() || ends.empty() || ends[size_t(rows[r])];  // (an unfinished one: no <eos>)
      if (counted) scores[size_t(rows[r])] += double(lp.data()[int64_t(r) * V + token]);
      if (t < y.size()) {
        keep.push_back(static_cast<int64_t>(r));
        next.push_back(token);
      }
    }
    if (keep.size() != rows.size()) {
      std::vector<int64_t> still;
      for (int64_t r : keep) still.push_back(rows[size_t(r)]);
      rows = std::move(still);
      if (rows.empty()) break;
      state->select_rows(keep);
    }
    prev = std::move(next);
  }
  return scores;
}

GraphoneScorer::GraphoneScorer(const models::GraphoneModel& model, const models::Vocab& source,
                               const models::Vocab& target)
    : model_(model) {
  for (const auto& [vocab, own, map] :
       {std::tie(source, model.source(), src_map_), std::tie(target, model.target(), tgt_map_)})
    for (const std::string& token : vocab.tokens())
      map.push_back(own.contains(token) && own.id(token) >= models::Vocab::kNumSpecials
                        ? static_cast<int32_t>(own.id(token))
                        : -1);
}

double GraphoneScorer::log_prob(const std::vector<int64_t>& source, const std::vector<int64_t>& output) const {
  std::vector<int32_t> x, y;
  for (const auto& [ids, map, out] : {std::tie(source, src_map_, x), std::tie(output, tgt_map_, y)})
    for (const int64_t id : ids) {
      AK_CHECK(id >= 0 && id < static_cast<int64_t>(map.size()), "graphone rescoring: token id {} outside the {} of "
               "the vocabulary", id, map.size());
      if (map[size_t(id)] < 0) return -std::numeric_limits<double>::infinity();
      out.push_back(map[size_t(id)]);
    }
  return model_.log_prob(x, y);
}

void join_beams(std::vector<std::vector<Hypothesis>>& results, const std::vector<std::vector<int64_t>>& sources,
                models::Decodable& search_model, bool search_reversed, const std::vector<Rescorer>& rescorers,
                const SearchOptions& options, int64_t first_index) {
  AK_CHECK(results.size() == sources.size(), "joining beams: {} hypothesis lists for {} sources", results.size(),
           sources.size());
  std::vector<std::pair<size_t, size_t>> added;  // (source, index in its list) of each joined hypothesis
  for (const Rescorer& m : rescorers) {
    if (!m.searches) continue;
    AK_CHECK(m.model != nullptr, "joining beams: no model");
    AK_CHECK(!m.inverse, "joining beams: an inverse model (target -> source) cannot search the sources' outputs");
    AK_CHECK(!options.attention, "joining beams: a rescoring model's hypotheses have no attention of the search's");
    if (sources.empty()) continue;
    std::vector<std::vector<Hypothesis>> own = search(*m.model, sources, options, first_index);
    for (size_t n = 0; n < own.size(); ++n)
      for (Hypothesis& h : own[n]) {
        if (m.reversed) std::reverse(h.ids.begin(), h.ids.end());
        if (std::any_of(results[n].begin(), results[n].end(), [&](const Hypothesis& e) { return e.ids == h.ids; }))
          continue;
        h.attention = Tensor();
        added.emplace_back(n, results[n].size());
        results[n].push_back(std::move(h));
      }
  }
  if (added.empty()) return;
  // the search model's log p of each joined hypothesis, shown in its own reading direction
  std::vector<std::vector<int64_t>> row_sources, outputs;
  std::vector<bool> ended;
  for (const auto& [n, i] : added) {
    const Hypothesis& h = results[n][i];
    row_sources.push_back(sources[n]);
    outputs.push_back(search_reversed ? std::vector<int64_t>(h.ids.rbegin(), h.ids.rend()) : h.ids);
    ended.push_back(h.ended);
  }
  const std::vector<double> s = score_outputs(search_model, row_sources, outputs, options, ended);
  for (size_t k = 0; k < added.size(); ++k) {
    Hypothesis& h = results[added[k].first][added[k].second];
    h.score = s[k];
    h.normalized = normalized_score(h.score, static_cast<int64_t>(h.ids.size()), options.length_penalty);
  }
}

void rescore(std::vector<std::vector<Hypothesis>>& results, const std::vector<std::vector<int64_t>>& sources,
             const std::vector<Rescorer>& rescorers, const SearchOptions& options) {
  AK_CHECK(results.size() == sources.size(), "rescoring: {} hypothesis lists for {} sources", results.size(),
           sources.size());
  if (rescorers.empty()) return;
  // every hypothesis as one row, beside its source
  std::vector<std::vector<int64_t>> row_sources, forward, backward;
  std::vector<bool> ended;
  for (size_t n = 0; n < results.size(); ++n)
    for (const Hypothesis& h : results[n]) {
      ended.push_back(h.ended);
      row_sources.push_back(sources[n]);
      forward.push_back(h.ids);
      backward.emplace_back(h.ids.rbegin(), h.ids.rend());
    }
  if (row_sources.empty()) return;
  std::vector<double> total(row_sources.size(), 0.0);
  double weights = 1.0;  // the search model's, and then each rescorer's
  for (const Rescorer& m : rescorers) {
    AK_CHECK(m.model != nullptr || m.pair != nullptr, "rescoring: no model");
    AK_CHECK(m.weight >= 0 && std::isfinite(m.weight), "rescoring: a model's weight is {}, not a number >= 0",
             m.weight);
    weights += m.weight;
    if (m.weight == 0) continue;  // (nothing to add: not even -inf for an empty hypothesis)
    if (m.pair != nullptr) {
      // per source: a hypothesis it cannot segment takes the lowest value among those it can, less
      // kUnsegmented; a source none of whose hypotheses it can segment is reranked without it
      constexpr double kUnsegmented = 100;
      size_t first = 0;
      for (const std::vector<Hypothesis>& hyps : results) {
        std::vector<double> lp(hyps.size());
        double lowest = std::numeric_limits<double>::infinity();
        for (size_t k = 0; k < hyps.size(); ++k) {
          lp[k] = m.pair->log_prob(row_sources[first + k], forward[first + k]);
          if (std::isfinite(lp[k])) lowest = std::min(lowest, lp[k]);
        }
        if (std::isfinite(lowest))
          for (size_t k = 0; k < hyps.size(); ++k)
            total[first + k] += m.weight * (std::isfinite(lp[k]) ? lp[k] : lowest - kUnsegmented);
        first += hyps.size();
      }
      continue;
    }
    if (!m.inverse) {
      const std::vector<double> s =
          score_outputs(*m.model, row_sources, m.reversed ? backward : forward, options, ended);
      for (size_t i = 0; i < s.size(); ++i) total[i] += m.weight * s[i];
      continue;
    }
    // log p(x | y): the non-empty hypotheses as sources, their words' sources as outputs
    std::vector<std::vector<int64_t>> ys, xs;
    std::vector<size_t> at;
    for (size_t i = 0; i < forward.size(); ++i) {
      if (forward[i].empty()) {
        total[i] = -std::numeric_limits<double>::infinity();
        continue;
      }
      ys.push_back(forward[i]);
      xs.push_back(m.reversed ? std::vector<int64_t>(row_sources[i].rbegin(), row_sources[i].rend()) : row_sources[i]);
      at.push_back(i);
    }
    if (ys.empty()) continue;
    const std::vector<double> s = score_outputs(*m.model, ys, xs, options);
    for (size_t j = 0; j < s.size(); ++j) total[at[j]] += m.weight * s[j];
  }
  size_t i = 0;
  for (std::vector<Hypothesis>& hyps : results) {
    for (Hypothesis& h : hyps) {
      const double combined = (h.score + total[i++]) / weights;
      h.normalized = normalized_score(combined, static_cast<int64_t>(h.ids.size()), options.length_penalty);
    }
    std::stable_sort(hyps.begin(), hyps.end(),
                     [](const Hypothesis& a, const Hypothesis& b) { return a.normalized > b.normalized; });
  }
}

}  // namespace attnkit::decode
