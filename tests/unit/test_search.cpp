// decode/search: the strategies on tiny random recurrent models (every model family runs the same loop):
// greedy == TranslationModel::greedy, beam 1 == greedy, cache == no cache, n-best ordering, sampling's seeds
// and filters, min_len, attention rows, the options' checks and limits; on a model with hand-set
// log-probabilities, that <pad>, <bos> and <unk> are never output; and that a non-finite score is not written.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "attnkit/decode/records.hpp"
#include "attnkit/decode/search.hpp"
#include "attnkit/models/seq2seq.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/train/vocab.hpp"

using namespace attnkit;
using decode::Hypothesis;
using decode::SearchOptions;
using decode::Strategy;

namespace {

models::Seq2Seq tiny_model(models::AttentionKind att, uint64_t seed) {
  models::Seq2SeqConfig c;
  c.cell = nn::CellKind::Lstm;
  c.attention = att;
  c.src_vocab = 10;
  c.tgt_vocab = 8;
  c.embed = 4;
  c.hidden = 6;
  Rng rng(seed);
  return models::Seq2Seq(c, rng);
}

const std::vector<std::vector<int64_t>> kSources = {{4, 5, 6, 7}, {8, 4}, {9, 9, 5}, {6}};

bool same_hyps(const std::vector<std::vector<Hypothesis>>& a, const std::vector<std::vector<Hypothesis>>& b,
               double tol) {
  if (a.size() != b.size()) return false;
  for (size_t n = 0; n < a.size(); ++n) {
    if (a[n].size() != b[n].size()) return false;
    for (size_t i = 0; i < a[n].size(); ++i)
      if (a[n][i].ids != b[n][i].ids || a[n][i].ended != b[n][i].ended ||
          !(std::fabs(a[n][i].score - b[n][i].score) <= tol))
        return false;
  }
  return true;
}

}  // namespace

TEST_CASE("search: greedy equals TranslationModel::greedy, beam 1 equals greedy, the cache changes nothing") {
  for (uint64_t seed : {1, 2, 3}) {
    CAPTURE(seed);
    models::Seq2Seq m = tiny_model(models::AttentionKind::General, seed);
    SearchOptions o;
    o.max_len = 7;
    const auto greedy = decode::search(m, kSources, o);
    const auto lib = m.greedy(decode::sources_batch(kSources), 7);  // the same specials never output
    for (size_t n = 0; n < kSources.size(); ++n) {
      REQUIRE(greedy[n].size() == 1);
      CHECK(greedy[n][0].ids == lib[n]);
      for (int64_t id : greedy[n][0].ids) CHECK(id >= models::kNumSpecials);
      CHECK(std::isfinite(greedy[n][0].score));
      CHECK(greedy[n][0].score <= 0);
    }
    SearchOptions b = o;
    b.strategy = Strategy::Beam;
    b.beam = 1;
    CHECK(same_hyps(decode::search(m, kSources, b), greedy, 1e-6));
    o.min_len = 3;
    b.min_len = 3;
    const auto g3 = decode::search(m, kSources, o);
    CHECK(same_hyps(decode::search(m, kSources, b), g3, 1e-6));
    for (const auto& h : g3) CHECK(h[0].ids.size() >= 3);
    for (Strategy s : {Strategy::Greedy, Strategy::Beam, Strategy::Sample}) {
      SearchOptions c = o;
      c.strategy = s;
      c.beam = 3;
      c.n_best = s == Strategy::Greedy ? 1 : 3;
      c.attention = true;
      SearchOptions n = c;
      n.use_cache = false;
      CHECK(same_hyps(decode::search(m, kSources, c), decode::search(m, kSources, n), 1e-4));
    }
  }
}

TEST_CASE("search: beam n-best is sorted, the length penalty ranks, max_len stops unfinished") {
  models::Seq2Seq m = tiny_model(models::AttentionKind::Dot, 5);
  for (double alpha : {0.0, 0.6, 2.0}) {
    CAPTURE(alpha);
    SearchOptions o;
    o.strategy = Strategy::Beam;
    o.beam = 4;
    o.n_best = 4;
    o.max_len = 6;
    o.length_penalty = alpha;
    for (const auto& hyps : decode::search(m, kSources, o)) {
      REQUIRE(hyps.size() == 4);
      for (size_t i = 0; i + 1 < hyps.size(); ++i) CHECK(hyps[i].normalized >= hyps[i + 1].normalized);
      for (const auto& h : hyps) {
        const double len = static_cast<double>(h.ids.size());
        CHECK(h.normalized == doctest::Approx(h.score / std::pow((5 + len) / 6, alpha)));
        CHECK((h.ended || h.ids.size() == 6));
        CHECK(h.ids.size() <= 6);
      }
    }
  }
  // max_len 1: every hypothesis is one token, or <eos> alone
  SearchOptions o;
  o.max_len = 1;
  for (const auto& hyps : decode::search(m, kSources, o)) CHECK(hyps[0].ids.size() <= 1);
}

TEST_CASE("search: sampling is reproducible per source, and top-k 1 is greedy") {
  models::Seq2Seq m = tiny_model(models::AttentionKind::Additive, 7);
  SearchOptions o;
  o.strategy = Strategy::Sample;
  o.n_best = 3;
  o.temperature = 3.0;  // flat: the samples differ
  o.seed = 42;
  o.max_len = 6;
  const auto all = decode::search(m, kSources, o);
  // the same seed: the same samples; a source decoded alone (with its index) gets the samples it got in the batch
  CHECK(same_hyps(decode::search(m, kSources, o), all, 0));
  const auto third = decode::search(m, {kSources[2]}, o, 2);
  CHECK(third[0][0].ids == all[2][0].ids);
  CHECK(third[0][2].ids == all[2][2].ids);
  for (const auto& hyps : all)
    for (size_t i = 0; i + 1 < hyps.size(); ++i) CHECK(hyps[i].score >= hyps[i + 1].score);
  SearchOptions other = o;
  other.seed = 43;
  CHECK_FALSE(same_hyps(decode::search(m, kSources, other), all, 1e-3));
  SearchOptions k1 = o;
  k1.top_k = 1;
  k1.n_best = 1;
  SearchOptions g;
  g.max_len = 6;
  CHECK(same_hyps(decode::search(m, kSources, k1), decode::search(m, kSources, g), 1e-6));
  SearchOptions p = k1;  // a tiny top_p keeps only the most likely token too
  p.top_k = 0;
  p.top_p = 1e-6;
  CHECK(same_hyps(decode::search(m, kSources, p), decode::search(m, kSources, g), 1e-6));
}

TEST_CASE("search: attention rows per step, and the options' checks") {
  models::Seq2Seq m = tiny_model(models::AttentionKind::Dot, 9);
  SearchOptions o;
  o.attention = true;
  o.max_len = 5;
  const auto r = decode::search(m, kSources, o);
  for (size_t n = 0; n < kSources.size(); ++n) {
    const Hypothesis& h = r[n][0];
    CHECK(h.attention.shape() == Shape{int64_t(h.ids.size()) + (h.ended ? 1 : 0), int64_t(kSources[n].size())});
  }
  models::Seq2Seq plain = tiny_model(models::AttentionKind::None, 9);
  CHECK_THROWS_AS(decode::search(plain, kSources, o), Error);
  auto refused = [&](auto change) {
    SearchOptions x;
    change(x);
    return [&] {
      try {
        decode::search(m, kSources, x);
      } catch (const Error&) {
        return true;
      }
      return false;
    }();
  };
  CHECK(refused([](SearchOptions& x) { x.strategy = Strategy::Beam; x.beam = 0; }));
  CHECK(refused([](SearchOptions& x) { x.strategy = Strategy::Beam; x.beam = 2; x.n_best = 3; }));
  CHECK(refused([](SearchOptions& x) { x.n_best = 2; }));  // greedy gives one
  CHECK(refused([](SearchOptions& x) { x.strategy = Strategy::Sample; x.top_p = 1.5; }));
  CHECK(refused([](SearchOptions& x) { x.strategy = Strategy::Sample; x.temperature = 0; }));
  CHECK(refused([](SearchOptions& x) { x.max_len = 2; x.min_len = 3; }));
  CHECK(refused([](SearchOptions& x) { x.strategy = Strategy::Beam; x.beam = 1000000; }));  // the limits
  CHECK(refused([](SearchOptions& x) { x.strategy = Strategy::Sample; x.n_best = 257; }));
  CHECK(refused([](SearchOptions& x) { x.max_len = 1000000; }));
  CHECK(refused([](SearchOptions& x) { x.min_len = 1000000000; }));
  CHECK_THROWS_WITH_AS(decode::search(m, {std::vector<int64_t>(5000, 4)}, SearchOptions{}),
                       doctest::Contains("more than 4096"), Error);
  SearchOptions wide;  // 64 sources x 256 rows x 4096 tokens x 32 bytes: 2 GB, refused before any work
  wide.strategy = Strategy::Beam;
  wide.beam = 256;
  wide.max_len = 4096;
  wide.attention = true;
  const std::vector<std::vector<int64_t>> many(64, {4, 5, 6, 7});
  CHECK_THROWS_WITH_AS(decode::search(m, many, wide), doctest::Contains("more than 1024 MB"), Error);
  CHECK_THROWS_AS(decode::search(m, {{4, 5}, {}}, SearchOptions{}), Error);  // an empty source
  CHECK_THROWS_AS(decode::search(m, {{4, 10}}, SearchOptions{}), Error);     // outside the source vocabulary
}

namespace {

// A model whose every step gives the same hand-set log-probabilities (Vt = 6): <pad> the highest, then <unk>,
// <bos>, then <eos>, then the real tokens 4 and 5.
class FixedLogits : public models::TranslationModel {
 public:
  static constexpr float kLogits[6] = {-0.1f, -0.3f, -2.0f, -0.2f, -3.0f, -4.0f};
  class State : public models::DecoderState {
   public:
    explicit State(int64_t rows) : rows_(rows) {}
    int64_t rows() const override { return rows_; }
    Tensor step(const std::vector<int64_t>& prev) override {
      Tensor lp({static_cast<int64_t>(prev.size()), 6});  // [R, Vt]
      for (int64_t r = 0; r < lp.dim(0); ++r) std::copy_n(kLogits, 6, lp.data() + r * 6);
      return lp;
    }
    void select_rows(const std::vector<int64_t>& rows) override { rows_ = static_cast<int64_t>(rows.size()); }
    Tensor cross_attention(int, int) const override { fail("no attention"); }

   private:
    int64_t rows_;
  };
  std::string_view family() const override { return "fixed"; }
  io::Value config_value() const override { return {}; }
  models::ForwardResult forward(const models::TeacherForcedBatch&, const models::ForwardOptions&) override {
    fail("not trained");
  }
  std::vector<std::vector<int64_t>> greedy(const models::SourceBatch&, int64_t) override { fail("unused"); }
  std::unique_ptr<models::DecoderState> start_decoding(const models::SourceBatch& b, bool) override {
    return std::make_unique<State>(b.N);
  }
  io::Value parameters_value() const override { return {}; }
  void load_parameters(const io::Value&, std::string_view) override {}
  std::vector<Parameter*> named_parameters() override { return {}; }
};

}  // namespace

TEST_CASE("search: <pad>, <bos> and <unk> are never output, even when the most likely") {
  FixedLogits m;
  const std::vector<std::vector<int64_t>> sources = {{4, 5}, {5}};
  for (Strategy s : {Strategy::Greedy, Strategy::Beam, Strategy::Sample}) {
    SearchOptions o;
    o.strategy = s;
    o.max_len = 6;
    o.min_len = 2;  // <eos> masked too for two steps: the real tokens are all that is left
    if (s == Strategy::Beam) o.n_best = 4;
    if (s == Strategy::Sample) {
      o.n_best = 20;
      o.temperature = 3;
    }
    for (const auto& hyps : decode::search(m, sources, o)) {
      REQUIRE(!hyps.empty());
      for (const Hypothesis& h : hyps) {
        CHECK(h.ids.size() >= 2);
        for (int64_t id : h.ids) CHECK(id >= 4);
      }
    }
  }
  SearchOptions g;
  g.max_len = 6;
  const auto r = decode::search(m, sources, g);  // <eos> is the best allowed token: ends at once
  CHECK(r[0][0].ids.empty());
  CHECK(r[0][0].ended);
  CHECK(r[0][0].score == doctest::Approx(-2.0));
}

TEST_CASE("search: a score that is not a finite number is refused, not written as JSON") {
  decode::LoadedModel m;  // no model: result_json needs only the (empty) target vocabulary
  Hypothesis h;
  h.ended = true;
  h.score = 0.0;
  CHECK(decode::result_json(m, {h}, {}) == R"({"tokens":[],"text":"","score":0})");
  h.score = std::nan("");
  CHECK_THROWS_WITH_AS(decode::result_json(m, {h}, {}), doctest::Contains("score is NaN"), Error);
  h.score = -INFINITY;
  CHECK_THROWS_WITH_AS(decode::result_json(m, {h}, {}), doctest::Contains("score is -Infinity"), Error);
}
