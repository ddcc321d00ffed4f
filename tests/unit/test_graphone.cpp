// models/graphone.hpp and train/graphone.hpp: every n-gram distribution sums to 1; the probabilities are those of
// a plain recursion over counts made here from the model's own segmentations; EM finds the one-letter-two-phoneme
// and silent-letter graphones of a small lexicon; pairs it cannot segment score -inf; a saved model reads back
// scoring alike, and broken ones are refused naming the field; training twice gives the same model;
// decode::GraphoneScorer maps a checkpoint's ids by their text and rescore() weighs its log P(x, y) like a model's,
// an unsegmentable hypothesis 100 below the source's lowest, a source with none left to the other models.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "attnkit/decode/rescore.hpp"
#include "attnkit/models/graphone.hpp"
#include "attnkit/train/data.hpp"
#include "attnkit/train/graphone.hpp"
#include "test_util.hpp"
#include <fmt/format.h>
#include <fmt/ranges.h>

using namespace attnkit;

namespace {

// x -> "k s", a final e silent, the rest one letter to one phoneme
const char* kLexicon =
    "cat\tk ae t\n"
    "tax\tt ae k s\n"
    "ax\tae k s\n"
    "axe\tae k s\n"
    "tate\tt ey t\n"
    "cate\tk ey t\n"
    "at\tae t\n"
    "tac\tt ae k\n"
    "act\tae k t\n"
    "taxe\tt ae k s\n"
    "exact\tih g z ae k t\n"
    "cax\tk ae k s\n";

train::Corpus lexicon(const std::string& text = kLexicon) {
  train::DataOptions o;
  o.tokenizer = models::Tokenizer::Char;
  o.target_tokenizer = models::Tokenizer::Space;
  return train::parse_corpus(text, "lex.tsv", o);
}

models::GraphoneModel trained(int order, const std::string& text = kLexicon) {
  train::GraphoneOptions o;
  o.order = order;
  o.iterations = 8;
  return train::train_graphone(lexicon(text), o);
}

std::vector<int32_t> ids(const models::Vocab& v, const std::vector<std::string>& tokens) {
  std::vector<int32_t> out;
  for (const std::string& t : tokens) out.push_back(static_cast<int32_t>(v.id(t)));
  return out;
}

std::string text_of(const models::GraphoneModel& m, int32_t u) {
  const models::Graphone& g = m.units()[size_t(u)];
  std::string s;
  for (int i = 0; i < g.n_src; ++i) s += m.source().token(g.src[size_t(i)]);
  s += "|";
  for (int i = 0; i < g.n_tgt; ++i) s += (i ? " " : "") + m.target().token(g.tgt[size_t(i)]);
  return s;
}

}  // namespace

TEST_CASE("graphone n-grams: every distribution sums to 1 and follows the discounting recursion") {
  for (const int order : {1, 2, 3, 4}) {
    CAPTURE(order);
    const models::GraphoneModel m = trained(order);
    const int32_t U = static_cast<int32_t>(m.units().size());
    // the counts by hand from the model's own segmentations of the lexicon
    std::vector<std::map<std::vector<int32_t>, double>> c(static_cast<size_t>(order));
    for (const train::Example& e : lexicon().examples) {
      const std::vector<int32_t> q = m.align(ids(m.source(), e.src), ids(m.target(), e.tgt));
      REQUIRE(!q.empty());
      std::vector<int32_t> t(size_t(order - 1), 0);
      t.insert(t.end(), q.begin(), q.end());
      t.push_back(0);
      for (size_t k = size_t(order - 1); k < t.size(); ++k)
        for (int n = 1; n <= order; ++n) c[size_t(n - 1)][std::vector<int32_t>(t.begin() + long(k + 1) - n, t.begin() + long(k + 1))] += 1;
    }
    const double D = m.discount();
    const auto reference = [&](const std::vector<int32_t>& h, int32_t q) {
      double p = 1.0 / U;
      for (int n = 1; n <= order; ++n) {
        std::vector<int32_t> ctx(h.end() - (n - 1), h.end());
        double total = 0, types = 0, count = 0;
        for (const auto& [g, v] : c[size_t(n - 1)])
          if (std::equal(ctx.begin(), ctx.end(), g.begin())) {
            total += v;
            types += 1;
            if (g.back() == q) count = v;
          }
        if (total == 0) continue;
        p = std::max(count - D, 0.0) / total + D * types / total * p;
      }
      return p;
    };
    // histories: the start, seen ones, and an unseen one
    std::vector<std::vector<int32_t>> histories{{}};
    for (const auto& [g, v] : c[size_t(order - 1)]) {
      if (histories.size() > 12) break;
      histories.emplace_back(g.begin(), g.end() - 1);
    }
    histories.push_back(std::vector<int32_t>(size_t(order - 1), U - 1));
    for (const auto& h : histories) {
      std::vector<int32_t> padded(size_t(order - 1), 0);
      for (size_t i = 0; i < h.size() && i < padded.size(); ++i) padded[padded.size() - h.size() + i] = h[i];
      double sum = 0;
      for (int32_t q = 0; q < U; ++q) {
        const double p = m.prob(h, q);
        CHECK(p > 0);
        CHECK(p == doctest::Approx(reference(padded, q)).epsilon(1e-12));
        sum += p;
      }
      CHECK(sum == doctest::Approx(1.0).epsilon(1e-12));
    }
  }
}

TEST_CASE("graphone EM: x is k s, a final e is silent, and the segmentation scores as its n-grams") {
  const models::GraphoneModel m = trained(3);
  const std::vector<int32_t> q = m.align(ids(m.source(), {"t", "a", "x", "e"}), ids(m.target(), {"t", "ae", "k", "s"}));
  std::vector<std::string> seen;
  for (const int32_t u : q) seen.push_back(text_of(m, u));
  CAPTURE(fmt::format("{}", fmt::join(seen, ", ")));
  // the segmentation spells the pair, and the x goes with "k s" (EM on a dozen words may join neighbours to it)
  std::string spelled, said;
  for (size_t k = 0; k < q.size(); ++k) {
    const models::Graphone& g = m.units()[size_t(q[k])];
    for (int i = 0; i < g.n_src; ++i) spelled += m.source().token(g.src[size_t(i)]);
    for (int i = 0; i < g.n_tgt; ++i) said += m.target().token(g.tgt[size_t(i)]) + " ";
    if (seen[k].find('x') != std::string::npos) CHECK(seen[k].substr(seen[k].size() - 3) == "k s");
  }
  CHECK(spelled == "taxe");
  CHECK(said == "t ae k s ");
  // log P(x, y) is the n-gram log-probability of that segmentation, </s> included
  double lp = 0;
  std::vector<int32_t> h;
  for (const int32_t u : q) {
    lp += std::log(m.prob(h, u));
    h.push_back(u);
  }
  lp += std::log(m.prob(h, 0));
  CHECK(m.log_prob(std::vector<std::string>{"t", "a", "x", "e"}, {"t", "ae", "k", "s"}) == doctest::Approx(lp));
  // a likelier pronunciation scores higher than an unlikely one
  CHECK(m.log_prob(std::vector<std::string>{"t", "a", "x"}, {"t", "ae", "k", "s"}) >
        m.log_prob(std::vector<std::string>{"t", "a", "x"}, {"t", "ey", "k", "t"}));
}

TEST_CASE("graphone model: what it cannot segment is -inf") {
  const models::GraphoneModel m = trained(2);
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(m.log_prob(std::vector<std::string>{"q"}, {"k"}) == -inf);                        // a letter it lacks
  CHECK(m.log_prob(std::vector<std::string>{"a"}, {"zh"}) == -inf);                       // a phoneme it lacks
  CHECK(m.log_prob(std::vector<std::string>{"a"}, {"ae", "k", "s"}) == -inf);             // 3 > 2 x 1
  CHECK(m.log_prob(std::vector<std::string>{}, {"ae"}) == -inf);                          // no source
  CHECK(std::isfinite(m.log_prob(std::vector<std::string>{"t", "a", "c"}, {"t", "ae", "k"})));
}

TEST_CASE("graphone training: deterministic, unaligned pairs counted, bad options refused") {
  const models::GraphoneModel a = trained(3), b = trained(3);
  REQUIRE(a.units().size() == b.units().size());
  for (size_t u = 0; u < a.units().size(); ++u) CHECK(a.units()[u].log_prob == b.units()[u].log_prob);
  for (size_t n = 0; n < a.counts().size(); ++n) {
    CHECK(a.counts()[n].ids == b.counts()[n].ids);
    CHECK(a.counts()[n].count == b.counts()[n].count);
  }
  train::GraphoneReport r;
  train::train_graphone(lexicon(std::string(kLexicon) + "a\tae k s t\n"), {}, &r);
  CHECK(r.pairs == 13);
  CHECK(r.unaligned == 1);
  for (size_t i = 1; i < r.log_likelihood.size(); ++i) CHECK(r.log_likelihood[i] >= r.log_likelihood[i - 1] - 1e-6);
  train::GraphoneOptions o;
  o.order = 9;
  CHECK(test::error_of([&] { train::train_graphone(lexicon(), o); }).find("order 9 is outside 1-8") !=
        std::string::npos);
  o = {};
  o.discount = 1;
  CHECK(test::error_of([&] { train::train_graphone(lexicon(), o); }).find("discount 1 is outside (0, 1)") !=
        std::string::npos);
}

TEST_CASE("graphone model: a saved model reads back scoring alike; broken ones are refused naming the field") {
  const models::GraphoneModel m = trained(3);
  const io::Value v = m.to_value();
  const models::GraphoneModel back = models::GraphoneModel::from_value(v, "g.json");
  for (const auto& [x, y] : std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>>{
           {{"t", "a", "x"}, {"t", "ae", "k", "s"}}, {{"c", "a", "t", "e"}, {"k", "ey", "t"}}, {{"a"}, {"ae"}}})
    CHECK(back.log_prob(x, y) == m.log_prob(x, y));
  const auto refused = [&](const std::function<void(io::Value&)>& edit) {
    io::Value w = v;
    edit(w);
    return test::error_of([&] { models::GraphoneModel::from_value(w, "g.json"); });
  };
  const auto counts = [](io::Value& w, const std::string& n) -> Tensor& {
    return const_cast<io::Value*>(w.find("counts")->find(n))->tensor();
  };
  CHECK(refused([](io::Value& w) { w.set("format", io::Value::string("attnkit-seq2seq")); })
            .find("g.json: format \"attnkit-seq2seq\" is not a graphone model") != std::string::npos);
  CHECK(refused([&](io::Value& w) { counts(w, "2").data()[2] = 0; }).find("g.json: counts/2[0, 2] is 0, not an integer in [1,") !=
        std::string::npos);
  CHECK(refused([&](io::Value& w) { counts(w, "1").data()[0] = 1e6; })
            .find("g.json: counts/1[0, 0] is 1000000, not an integer in [0, ") != std::string::npos);
  CHECK(refused([&](io::Value& w) { counts(w, "3").data()[3] = 0.5f; }).find("counts/3[0, 3] is 0.5") != std::string::npos);
  CHECK(refused([&](io::Value& w) {
          Tensor& t = counts(w, "2");
          std::copy(t.data(), t.data() + 3, t.data() + 3);  // the second n-gram repeats the first
        }).find("order 2, n-gram 1 repeats") != std::string::npos);
  CHECK(refused([](io::Value& w) { const_cast<io::Value*>(w.find("graphones"))->tensor().data()[0] = -1; })
            .find("g.json: graphones[0]: no source token") != std::string::npos);
  CHECK(refused([](io::Value& w) { const_cast<io::Value*>(w.find("graphones"))->tensor().data()[4] = 0.5f; })
            .find("g.json: graphones[0, 4] is 0.5, not a log-probability") != std::string::npos);
  CHECK(refused([](io::Value& w) {
          io::Value c = *w.find("config");
          c.set("order", io::Value::string("9"));
          w.set("config", c);
        }).find("g.json: config") != std::string::npos);
  CHECK(refused([](io::Value& w) {
          io::Value c = *w.find("counts");
          c.set("4", Tensor(Shape{1, 5}));
          w.set("counts", c);
        }).find("counts of 4 orders for order 3") != std::string::npos);
}

TEST_CASE("graphone rescoring: a checkpoint's ids by their text, weighed as a model's, unsegmentable ones last") {
  const models::GraphoneModel m = trained(3);
  // a checkpoint vocabulary of other ids (and a phoneme the graphone model lacks)
  const models::Vocab src({"x", "t", "a", "c", "e"}), tgt({"zh", "s", "k", "ae", "t", "ey"});
  const decode::GraphoneScorer scorer(m, src, tgt);
  const auto enc = [](const models::Vocab& v, const std::vector<std::string>& t) { return v.encode(t); };
  const std::vector<int64_t> tax = enc(src, {"t", "a", "x"});
  CHECK(scorer.log_prob(tax, enc(tgt, {"t", "ae", "k", "s"})) ==
        m.log_prob(std::vector<std::string>{"t", "a", "x"}, {"t", "ae", "k", "s"}));
  CHECK(std::isinf(scorer.log_prob(tax, enc(tgt, {"t", "zh", "k", "s"}))));
  std::vector<std::vector<decode::Hypothesis>> results(1);
  for (const auto& y : std::vector<std::vector<std::string>>{{"t", "ae", "zh"}, {"t", "ey", "k", "t"}, {"t", "ae", "k", "s"}}) {
    decode::Hypothesis h;
    h.ids = enc(tgt, y);
    h.score = -1.0;  // the search model likes them alike: the graphone model decides
    h.ended = true;
    results[0].push_back(h);
  }
  decode::Rescorer r;
  r.pair = &scorer;
  r.weight = 0.5;
  decode::SearchOptions o;
  decode::rescore(results, {tax}, {r}, o);
  CHECK(results[0][0].ids == enc(tgt, {"t", "ae", "k", "s"}));
  CHECK(results[0][0].normalized ==
        doctest::Approx((-1.0 + 0.5 * scorer.log_prob(tax, results[0][0].ids)) / 1.5).epsilon(1e-12));
  // the one with a phoneme the graphone model lacks: the lowest segmentable log P less 100, last
  double lowest = 0;
  for (const decode::Hypothesis& h : results[0])
    if (std::isfinite(scorer.log_prob(tax, h.ids))) lowest = std::min(lowest, scorer.log_prob(tax, h.ids));
  int64_t unsegmented = 0;
  for (const decode::Hypothesis& h : results[0])
    if (!std::isfinite(scorer.log_prob(tax, h.ids))) {
      CHECK(h.normalized == doctest::Approx((-1.0 + 0.5 * (lowest - 100)) / 1.5).epsilon(1e-12));
      ++unsegmented;
    }
  CHECK(unsegmented >= 1);
  CHECK(results[0].back().normalized < results[0][0].normalized - 30);
  // a source none of whose hypotheses it can segment keeps the other models' ranking, every score a number
  std::vector<std::vector<decode::Hypothesis>> none(1, std::vector<decode::Hypothesis>(2));
  none[0][0].ids = enc(tgt, {"zh"});
  none[0][0].score = -3.0;
  none[0][1].ids = enc(tgt, {"zh", "zh"});
  none[0][1].score = -2.0;
  decode::rescore(none, {tax}, {r}, o);
  CHECK(none[0][0].ids == enc(tgt, {"zh", "zh"}));
  CHECK(none[0][0].normalized == doctest::Approx(-2.0 / 1.5).epsilon(1e-12));
  CHECK(none[0][1].normalized == doctest::Approx(-3.0 / 1.5).epsilon(1e-12));
}
