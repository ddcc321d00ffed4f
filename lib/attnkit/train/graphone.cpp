#include "attnkit/train/graphone.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>
#include <utility>

#include "attnkit/tensor/error.hpp"

namespace attnkit::train {

namespace {

using models::Graphone;
using models::GraphoneModel;

constexpr double kFirstWeight = 1e-3;  // every graphone alike in the first iteration
constexpr double kDropped = 1e-7;      // below this a graphone is dropped ...
constexpr double kUnseen = 1e-9;       // ... and weighs this in the next iteration's sums

struct Pair {
  std::vector<int32_t> src, tgt;
};

class Weights {
 public:
  explicit Weights(double fallback) : fallback_(fallback) {}
  double operator()(uint64_t k) const {
    const auto it = p_.find(k);
    return it == p_.end() ? fallback_ : it->second;
  }
  std::unordered_map<uint64_t, double> p_;

 private:
  double fallback_;
};

// Adds the pair's expected graphone counts to `counts` (forward-backward over its lattice); returns log Z, or
// -inf when no segmentation covers it.
double expected_counts(const Pair& p, const Weights& w, std::unordered_map<uint64_t, double>& counts) {
  const size_t n = p.src.size(), m = p.tgt.size(), W = m + 1;
  std::vector<double> a((n + 1) * W, 0.0), b((n + 1) * W, 0.0);
  a[0] = 1;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j <= m; ++j) {
      if (a[i * W + j] == 0) continue;
      for (size_t dx = 1; dx <= 2 && i + dx <= n; ++dx)
        for (size_t dy = 0; dy <= 2 && j + dy <= m; ++dy)
          a[(i + dx) * W + j + dy] += a[i * W + j] * w(models::chunk_key(p.src, i, dx, p.tgt, j, dy));
    }
  const double Z = a[n * W + m];
  if (!(Z > 0) || !std::isfinite(Z)) return -std::numeric_limits<double>::infinity();
  b[n * W + m] = 1;
  for (size_t i = n + 1; i-- > 0;)
    for (size_t j = W; j-- > 0;) {
      if (i == n && j == m) continue;
      double s = 0;
      for (size_t dx = 1; dx <= 2 && i + dx <= n; ++dx)
        for (size_t dy = 0; dy <= 2 && j + dy <= m; ++dy)
          s += w(models::chunk_key(p.src, i, dx, p.tgt, j, dy)) * b[(i + dx) * W + j + dy];
      b[i * W + j] = s;
    }
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j <= m; ++j) {
      if (a[i * W + j] == 0) continue;
      for (size_t dx = 1; dx <= 2 && i + dx <= n; ++dx)
        for (size_t dy = 0; dy <= 2 && j + dy <= m; ++dy) {
          const uint64_t k = models::chunk_key(p.src, i, dx, p.tgt, j, dy);
          const double c = a[i * W + j] * w(k) * b[(i + dx) * W + j + dy] / Z;
          if (c > 0) counts[k] += c;
        }
    }
  return std::log(Z);
}

}  // namespace

GraphoneModel train_graphone(const Corpus& corpus, const GraphoneOptions& options, GraphoneReport* report) {
  AK_CHECK(options.order >= 1 && options.order <= GraphoneModel::kMaxOrder, "graphone training: order {} is outside "
           "1-{}", options.order, GraphoneModel::kMaxOrder);
  AK_CHECK(options.iterations >= 1 && options.iterations <= 100, "graphone training: {} iterations: give 1 to 100",
           options.iterations);
  AK_CHECK(std::isfinite(options.discount) && options.discount > 0 && options.discount < 1,
           "graphone training: discount {} is outside (0, 1)", options.discount);
  AK_CHECK(!corpus.examples.empty(), "graphone training: {} has no pairs", corpus.name);
  // the vocabularies: tokens in their first appearance's order, after the specials
  models::Vocab source, target;
  std::vector<Pair> pairs;
  pairs.reserve(corpus.examples.size());
  for (const Example& e : corpus.examples) {
    AK_CHECK(static_cast<int64_t>(e.src.size()) <= GraphoneModel::kMaxTokens &&
                 static_cast<int64_t>(e.tgt.size()) <= GraphoneModel::kMaxTokens,
             "{}:{}: a pair of {} and {} tokens: a graphone model takes at most {} on either side", corpus.name,
             e.line, e.src.size(), e.tgt.size(), GraphoneModel::kMaxTokens);
    Pair p;
    for (const auto& [side, vocab, ids] : {std::tie(e.src, source, p.src), std::tie(e.tgt, target, p.tgt)})
      for (const std::string& t : side) {
        if (!vocab.contains(t)) {
          AK_CHECK(vocab.size() < 65534, "{}:{}: more than 65533 distinct tokens on one side", corpus.name, e.line);
          vocab.append(t, e.line, corpus.name, "token");
        }
        ids.push_back(static_cast<int32_t>(vocab.id(t)));
      }
    pairs.push_back(std::move(p));
  }
  GraphoneReport r;
  r.pairs = static_cast<int64_t>(pairs.size());
  Weights w(kFirstWeight);
  for (int it = 0; it < options.iterations; ++it) {
    std::unordered_map<uint64_t, double> counts;
    double ll = 0;
    for (const Pair& p : pairs) {
      const double z = expected_counts(p, w, counts);
      if (std::isfinite(z)) ll += z;
    }
    if (it > 0) r.log_likelihood.push_back(ll);  // (the first weighs every graphone alike: no distribution)
    // normalised in a fixed order (the keys sorted), so that the sums do not depend on the hash table's
    std::vector<std::pair<uint64_t, double>> sorted(counts.begin(), counts.end());
    std::sort(sorted.begin(), sorted.end());
    double total = 0;
    for (const auto& kv : sorted) total += kv.second;
    Weights next(kUnseen);
    for (const auto& [k, c] : sorted)
      if (c / total > kDropped) next.p_.emplace(k, c / total);
    w = std::move(next);
  }
  AK_CHECK(!w.p_.empty(), "graphone training: no pair of {} could be segmented into graphones of 1-2 source and 0-2 "
           "target tokens (each target longer than twice its source)", corpus.name);
  // the graphones kept, in key order; graphone 0 is the boundary
  std::vector<std::pair<uint64_t, double>> kept(w.p_.begin(), w.p_.end());
  std::sort(kept.begin(), kept.end());
  AK_CHECK(static_cast<int64_t>(kept.size()) < GraphoneModel::kMaxGraphones, "graphone training: {} graphones: at "
           "most {}", kept.size(), GraphoneModel::kMaxGraphones - 1);
  std::vector<Graphone> units(1);
  for (const auto& [k, prob] : kept) {
    Graphone g;
    const int32_t ids[4] = {int32_t((k >> 48) & 0xffff) - 1, int32_t((k >> 32) & 0xffff) - 1,
                            int32_t((k >> 16) & 0xffff) - 1, int32_t(k & 0xffff) - 1};
    g.src = {ids[0], ids[1]};
    g.tgt = {ids[2], ids[3]};
    g.n_src = (ids[0] >= 0) + (ids[1] >= 0);
    g.n_tgt = (ids[2] >= 0) + (ids[3] >= 0);
    g.log_prob = std::log(prob);
    units.push_back(g);
  }
  // a model without counts yet, to segment the pairs with the alignment model
  std::vector<models::GraphoneCounts> unigram(1);
  unigram[0].ids = {0};
  unigram[0].count = {1};
  const GraphoneModel aligner(source, target, corpus.src_tokenizer, corpus.tgt_tokenizer, units, 1, options.discount,
                              unigram, "graphone training");
  std::vector<std::map<std::vector<int32_t>, int64_t>> grams(size_t(options.order));
  for (const Pair& p : pairs) {
    const std::vector<int32_t> q = aligner.align(p.src, p.tgt);
    if (q.empty()) {
      ++r.unaligned;
      continue;
    }
    std::vector<int32_t> t(size_t(options.order - 1), 0);  // start markers
    t.insert(t.end(), q.begin(), q.end());
    t.push_back(0);  // the end
    for (size_t k = size_t(options.order - 1); k < t.size(); ++k)
      for (int m = 1; m <= options.order; ++m)
        ++grams[size_t(m - 1)][std::vector<int32_t>(t.begin() + std::ptrdiff_t(k + 1 - size_t(m)),
                                                    t.begin() + std::ptrdiff_t(k + 1))];
  }
  AK_CHECK(r.unaligned < r.pairs, "graphone training: no pair of {} could be segmented into graphones of 1-2 "
           "source and 0-2 target tokens", corpus.name);
  std::vector<models::GraphoneCounts> counts(size_t(options.order));
  for (int m = 1; m <= options.order; ++m)
    for (const auto& [ids, c] : grams[size_t(m - 1)]) {
      counts[size_t(m - 1)].ids.insert(counts[size_t(m - 1)].ids.end(), ids.begin(), ids.end());
      counts[size_t(m - 1)].count.push_back(c);
    }
  if (report) *report = std::move(r);
  return GraphoneModel(std::move(source), std::move(target), corpus.src_tokenizer, corpus.tgt_tokenizer,
                       std::move(units), options.order, options.discount, counts, "graphone training");
}

}  // namespace attnkit::train
