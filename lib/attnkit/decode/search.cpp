#include "attnkit/decode/search.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "attnkit/autograd/var.hpp"
#include "attnkit/tensor/enum_names.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/random.hpp"

namespace attnkit::decode {

namespace {

constexpr EnumName<Strategy> kStrategyNames[] = {
    {Strategy::Greedy, "greedy"}, {Strategy::Beam, "beam"}, {Strategy::Sample, "sample"}};

}  // namespace

Strategy parse_strategy(std::string_view name) {
  if (const std::optional<Strategy> strategy = parse_name(kStrategyNames, name)) return *strategy;
  fail("unknown search strategy \"{}\" (expected {})", name, names_or(kStrategyNames));
}

void SearchOptions::validate() const {
  AK_CHECK(beam >= 1, "search: beam size {} (expected >= 1)", beam);
  AK_CHECK(length_penalty >= 0 && std::isfinite(length_penalty), "search: length penalty {} (expected >= 0)",
           length_penalty);
  AK_CHECK(n_best >= 1, "search: n_best {} (expected >= 1)", n_best);
  AK_CHECK(bos >= 0 && eos >= 0 && pad >= 0 && bos != eos, "search: special ids <bos> {}, <eos> {}, <pad> {} (expected "
           ">= 0, <bos> and <eos> apart)", bos, eos, pad);
  for (int64_t id : never)
    AK_CHECK(id >= 0 && id != eos, "search: never-output id {} (expected >= 0 and not <eos> {})", id, eos);
  AK_CHECK(strategy != Strategy::Greedy || n_best == 1, "search: greedy search gives one hypothesis, not {}", n_best);
  AK_CHECK(strategy != Strategy::Beam || n_best <= beam, "search: n_best {} is more than the beam size {}", n_best,
           beam);
  AK_CHECK(max_len >= 0 && min_len >= 0, "search: max_len {} and min_len {} must be >= 0", max_len, min_len);
  AK_CHECK(max_len <= kMaxTokens && min_len <= kMaxTokens, "search: max_len {} and min_len {} must be at most {}",
           max_len, min_len, kMaxTokens);
  AK_CHECK(beam <= kMaxRowsPerSource && n_best <= kMaxRowsPerSource,
           "search: beam {} and n_best {} must be at most {}", beam, n_best, kMaxRowsPerSource);
  AK_CHECK(max_len == 0 || min_len <= max_len, "search: min_len {} is more than max_len {}", min_len, max_len);
  AK_CHECK(temperature > 0 && std::isfinite(temperature), "search: temperature {} (expected > 0)", temperature);
  AK_CHECK(top_k >= 0, "search: top_k {} (expected >= 0; 0 = all)", top_k);
  AK_CHECK(top_p > 0 && top_p <= 1, "search: top_p {} (expected in (0, 1])", top_p);
}

models::SourceBatch sources_batch(const std::vector<std::vector<int64_t>>& sources, int64_t pad) {
  AK_CHECK(!sources.empty(), "decode: no sources");
  models::SourceBatch b;
  b.N = static_cast<int64_t>(sources.size());
  for (const auto& s : sources) {
    AK_CHECK(!s.empty(), "decode: source {} is empty", &s - sources.data());
    AK_CHECK(static_cast<int64_t>(s.size()) <= kMaxTokens, "decode: source {} has {} tokens, more than {}",
             &s - sources.data(), s.size(), kMaxTokens);
    b.S = std::max<int64_t>(b.S, static_cast<int64_t>(s.size()));
  }
  b.src.assign(size_t(b.N * b.S), pad);  // [N, S]
  for (int64_t n = 0; n < b.N; ++n) {
    std::copy(sources[size_t(n)].begin(), sources[size_t(n)].end(), b.src.begin() + n * b.S);
    b.src_lengths.push_back(static_cast<int64_t>(sources[size_t(n)].size()));
  }
  return b;
}

double normalized_score(double score, int64_t len, double alpha) {
  if (alpha == 0) return score;
  return score / std::pow((5.0 + static_cast<double>(len)) / 6.0, alpha);
}

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// One token drawn from the row's log-probabilities (see search.hpp: temperature, top_k, top_p).
int64_t draw(const float* lp, int64_t V, const SearchOptions& o, Rng& rng) {
  std::vector<std::pair<double, int64_t>> c;  // (tempered log-prob, id) of the possible tokens
  c.reserve(size_t(V));
  for (int64_t v = 0; v < V; ++v)
    if (lp[v] > -std::numeric_limits<float>::infinity()) c.emplace_back(double(lp[v]) / o.temperature, v);
  AK_CHECK(!c.empty(), "sample: no token has a non-zero probability");
  std::stable_sort(c.begin(), c.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  if (o.top_k > 0 && static_cast<int64_t>(c.size()) > o.top_k) c.resize(size_t(o.top_k));
  const double top = c[0].first;
  std::vector<double> p(c.size());
  double total = 0;
  for (size_t i = 0; i < c.size(); ++i) total += p[i] = std::exp(c[i].first - top);
  if (o.top_p < 1) {
    double cum = 0;
    size_t keep = 0;
    while (keep < c.size()) {
      cum += p[keep++] / total;
      if (cum >= o.top_p) break;
    }
    p.resize(keep);
    total = std::accumulate(p.begin(), p.end(), 0.0);
  }
  const double u = rng.uniform_double() * total;
  double acc = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    acc += p[i];
    if (u < acc) return c[i].second;
  }
  return c[p.size() - 1].second;  // u rounded up to the total
}

struct Row {
  int64_t src;      // the source it belongs to
  double score;     // sum of log-probs so far
  int64_t node;     // its last token in the tree (-1: <bos> only)
  int64_t rng = 0;  // sample: its generator
};

struct Node {
  int64_t parent;
  int64_t token;
};

struct Ended {
  int64_t node;  // the last node (<eos> itself when ended)
  double score;
  double normalized;
  bool ended;
};

}  // namespace

std::vector<std::vector<Hypothesis>> search(models::Decodable& model,
                                            const std::vector<std::vector<int64_t>>& sources,
                                            const SearchOptions& o, int64_t first_index) {
  o.validate();
  autograd::NoGrad no_grad;
  const models::SourceBatch batch = sources_batch(sources, o.pad);
  const int64_t N = batch.N, S = batch.S;
  const int64_t K = o.strategy == Strategy::Beam ? o.beam : o.strategy == Strategy::Sample ? o.n_best : 1;
  const int64_t eos = o.eos;

  std::vector<int64_t> max_len(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    const int64_t fallback = std::max(o.min_len, 2 * batch.src_lengths[size_t(n)] + 10);
    max_len[size_t(n)] = o.max_len > 0 ? o.max_len : std::min(kMaxTokens, fallback);
  }
  // The tree keeps every row's token at every step: refused before any work when it would not fit.
  const int64_t longest = *std::max_element(max_len.begin(), max_len.end());
  // attention per token: over the source, or a language model's over its prompt and output so far
  const int64_t att_width = model.has_source() ? S : S + longest;
  const double per_token = double(sizeof(Node)) + (o.attention ? double(att_width) * sizeof(float) : 0.0);
  const double tree_bytes = double(N) * double(K) * double(longest) * per_token;
  AK_CHECK(tree_bytes <= double(kMaxTreeBytes),
           "decode: {} source(s) x {} row(s) x {} tokens would keep {:.0f} MB of hypotheses, more than {} MB (use a "
           "smaller --batch, --beam, --n-best or --max-len)",
           N, K, longest, tree_bytes / 1048576, kMaxTreeBytes / 1048576);

  std::unique_ptr<models::DecoderState> state = model.start_decoding(batch, o.use_cache);
  if (o.attention) state->keep_attention();
  std::vector<Row> rows;
  std::vector<Rng> rngs;
  std::vector<int64_t> expand;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      expand.push_back(n);
      const bool alive = o.strategy != Strategy::Beam || k == 0;  // beam: one live row until the first step
      rows.push_back({n, alive ? 0.0 : kNegInf, -1, static_cast<int64_t>(rngs.size())});
      if (o.strategy == Strategy::Sample)
        rngs.emplace_back(splitmix64(o.seed + 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(first_index + n + 1)),
                          static_cast<uint64_t>(k));
    }
  if (K > 1) state->select_rows(expand);  // [N*K] rows


  std::vector<Node> nodes;
  std::vector<float> att;  // when o.attention: each node's attention row, W of them (S, or a language model's t)
  std::vector<std::pair<int64_t, int64_t>> att_row;  // per node: where its row starts in att, and W
  std::vector<std::vector<Ended>> ended(static_cast<size_t>(N));
  std::vector<int64_t> prev(rows.size(), o.bos);

  for (int64_t t = 0; !rows.empty(); ++t) {
    const int64_t R = static_cast<int64_t>(rows.size());
    Tensor lp = state->step(prev);  // [R, Vt]
    const int64_t V = lp.dim(1);
    AK_CHECK(eos < V && o.bos < V, "search: <bos> {} or <eos> {} is outside the model's {} target tokens", o.bos, eos, V);
    Tensor a;
    if (o.attention) a = state->cross_attention(o.attention_layer, o.attention_head);  // [R, W]
    const int64_t W = o.attention ? a.dim(1) : 0;
    constexpr float kMasked = -std::numeric_limits<float>::infinity();
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t id : o.never)
        if (id < V) lp[r * V + id] = kMasked;
      if (t < o.min_len) lp[r * V + eos] = kMasked;
    }
    auto add_node = [&](int64_t r, int64_t token) {
      nodes.push_back({rows[size_t(r)].node, token});
      if (o.attention) {
        att_row.emplace_back(static_cast<int64_t>(att.size()), W);
        att.insert(att.end(), a.data() + r * W, a.data() + (r + 1) * W);
      }
      return static_cast<int64_t>(nodes.size()) - 1;
    };
    auto finish = [&](int64_t src, int64_t node, double score, int64_t len, bool ended_eos) {
      ended[size_t(src)].push_back({node, score, normalized_score(score, len, o.length_penalty), ended_eos});
    };
    std::vector<Row> next;
    std::vector<int64_t> parents, tokens;
    auto keep = [&](int64_t r, int64_t token, double score, int64_t node) {
      next.push_back({rows[size_t(r)].src, score, node, rows[size_t(r)].rng});
      parents.push_back(r);
      tokens.push_back(token);
    };

    if (o.strategy != Strategy::Beam) {
      for (int64_t r = 0; r < R; ++r) {
        const float* row = lp.data() + r * V;
        const int64_t tok = o.strategy == Strategy::Greedy ? std::max_element(row, row + V) - row
                                                           : draw(row, V, o, rngs[size_t(rows[size_t(r)].rng)]);
        const double score = rows[size_t(r)].score + double(row[tok]);
        const int64_t src = rows[size_t(r)].src;
        const int64_t node = add_node(r, tok);
        if (o.on_token && K == 1 && tok != eos) o.on_token(src, tok);
        if (tok == eos) finish(src, node, score, t, true);
        else if (t + 1 >= max_len[size_t(src)]) finish(src, node, score, t + 1, false);
        else keep(r, tok, score, node);
      }
    } else {
      for (int64_t a0 = 0; a0 < R;) {
        const int64_t src = rows[size_t(a0)].src;
        int64_t a1 = a0;
        while (a1 < R && rows[size_t(a1)].src == src) ++a1;
        struct Cand {
          double value;
          int64_t r, v;
        };
        std::vector<Cand> cands;
        for (int64_t r = a0; r < a1; ++r) {
          if (rows[size_t(r)].score == kNegInf) continue;
          for (int64_t v = 0; v < V; ++v) {
            const double value = rows[size_t(r)].score + double(lp[r * V + v]);
            if (value > kNegInf) cands.push_back({value, r, v});
          }
        }
        const size_t top = std::min(cands.size(), size_t(2 * K));
        std::partial_sort(cands.begin(), cands.begin() + long(top), cands.end(), [](const Cand& x, const Cand& y) {
          if (x.value != y.value) return x.value > y.value;
          if (x.r != y.r) return x.r < y.r;
          return x.v < y.v;
        });
        const size_t first_next = next.size();
        for (size_t i = 0; i < top && int64_t(next.size() - first_next) < K; ++i) {
          const Cand& c = cands[i];
          if (c.v == eos) {
            if (int64_t(i) < K) finish(src, add_node(c.r, eos), c.value, t, true);
            continue;
          }
          keep(c.r, c.v, c.value, add_node(c.r, c.v));
        }
        const bool done = int64_t(ended[size_t(src)].size()) >= K || t + 1 >= max_len[size_t(src)] ||
                          next.size() == first_next;
        if (done) {
          if (int64_t(ended[size_t(src)].size()) < K)  // at max_len: the alive rows end unfinished
            for (size_t i = first_next; i < next.size(); ++i) finish(src, next[i].node, next[i].score, t + 1, false);
          next.resize(first_next);
          parents.resize(first_next);
          tokens.resize(first_next);
        }
        a0 = a1;
      }
    }
    bool same = static_cast<int64_t>(parents.size()) == R;
    for (size_t i = 0; same && i < parents.size(); ++i) same = parents[i] == static_cast<int64_t>(i);
    if (!same && !parents.empty()) state->select_rows(parents);
    rows = std::move(next);
    prev = std::move(tokens);
  }

  std::vector<std::vector<Hypothesis>> out(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    auto& e = ended[size_t(n)];
    std::stable_sort(e.begin(), e.end(), [](const Ended& x, const Ended& y) { return x.normalized > y.normalized; });
    const int64_t Sn = batch.src_lengths[size_t(n)];
    for (size_t i = 0; i < e.size() && int64_t(i) < o.n_best; ++i) {
      Hypothesis h;
      h.ended = e[i].ended;
      h.score = e[i].score;
      h.normalized = e[i].normalized;
      std::vector<int64_t> path;  // nodes, last first
      for (int64_t node = e[i].node; node >= 0; node = nodes[size_t(node)].parent) path.push_back(node);
      std::reverse(path.begin(), path.end());
      for (int64_t node : path)
        if (nodes[size_t(node)].token != eos) h.ids.push_back(nodes[size_t(node)].token);
      if (o.attention) {  // [steps, S_n], or a language model's [steps, t at the last step]: zeros past a row's
        int64_t width = 0;
        for (int64_t node : path) width = std::max(width, att_row[size_t(node)].second - (S - Sn));
        h.attention = Tensor({static_cast<int64_t>(path.size()), width});
        for (size_t s = 0; s < path.size(); ++s) {
          const auto [start, w] = att_row[size_t(path[s])];
          std::copy_n(att.data() + start, w - (S - Sn), h.attention.data() + int64_t(s) * width);
        }
      }
      out[size_t(n)].push_back(std::move(h));
    }
  }
  return out;
}

}  // namespace attnkit::decode
