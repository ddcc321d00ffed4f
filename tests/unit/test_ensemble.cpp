// decode/ensemble.hpp: an ensemble's log-probabilities are those of its members' mean distribution, through
// steps and select_rows, with and without the cache; one member (or a member twice) decodes as the member;
// the members' attention is averaged; models that do not share their tokens are refused, naming the files.
// decode/rescore.hpp: forced decoding gives a beam hypothesis back its own score; rescoring reranks a beam by the
// mean of the models' log-probabilities, a right-to-left rescorer reading each hypothesis reversed, an inverse
// one scoring the source given each hypothesis; joined beams add each searching rescorer's own hypotheses once,
// scored by the search model;
// decode::reading_order turns a right-to-left model's hypotheses (and their attention rows) round.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/decode/ensemble.hpp"
#include "attnkit/decode/rescore.hpp"
#include "attnkit/decode/loader.hpp"
#include "attnkit/decode/search.hpp"
#include "attnkit/models/seq2seq.hpp"
#include "attnkit/models/transformer.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/tensor/threads.hpp"
#include "decoding_contract.hpp"
#include "test_util.hpp"

using namespace attnkit;

namespace {

constexpr int64_t kVocab = 10;

std::unique_ptr<models::Seq2Seq> recurrent(uint64_t seed) {
  models::Seq2SeqConfig c;
  c.cell = nn::CellKind::Lstm;
  c.attention = models::AttentionKind::Additive;
  c.src_vocab = kVocab;
  c.tgt_vocab = kVocab;
  c.embed = 4;
  c.hidden = 6;
  c.bidirectional = true;
  Rng rng(seed);
  return std::make_unique<models::Seq2Seq>(c, rng);
}

std::unique_ptr<models::Transformer> transformer(uint64_t seed) {
  models::TransformerConfig c;
  c.src_vocab = kVocab;
  c.tgt_vocab = kVocab;
  c.encoder_layers = 1;
  c.decoder_layers = 1;
  c.heads = 2;
  c.d_model = 8;
  c.ff = 12;
  Rng rng(seed);
  return std::make_unique<models::Transformer>(c, rng);
}

// log((1/K) sum_k exp(lp_k)) per element, in double.
Tensor log_mean_exp(const std::vector<Tensor>& lp) {
  Tensor out = Tensor::zeros(lp.front().shape());
  for (int64_t i = 0; i < out.numel(); ++i) {
    double s = 0;
    for (const Tensor& t : lp) s += std::exp(double(t[i]));
    out.data()[i] = float(std::log(s / double(lp.size())));
  }
  return out;
}

const std::vector<std::vector<int64_t>> kSources = {{4, 5, 6}, {7, 8}, {9, 4, 5, 6, 7}};

decode::SearchOptions beam_options(int64_t beam) {
  decode::SearchOptions o;
  o.strategy = decode::Strategy::Beam;
  o.beam = beam;
  o.n_best = beam;
  o.max_len = 8;
  o.never = {0, 1, 3, 6, 7, 8, 9};  // <eos> among three tokens: random models end their hypotheses within max_len
  return o;
}

// Each source's hypotheses in the order the search gave them.
void check_search_order(const std::vector<std::vector<decode::Hypothesis>>& results,
                        const std::vector<std::vector<decode::Hypothesis>>& searched) {
  REQUIRE(results.size() == searched.size());
  for (size_t n = 0; n < results.size(); ++n) {
    REQUIRE(results[n].size() == searched[n].size());
    for (size_t i = 0; i < results[n].size(); ++i) CHECK(results[n][i].ids == searched[n][i].ids);
  }
}

}  // namespace

TEST_CASE("ensemble: the mean distribution of its members, through steps, row selection and the cache") {
  set_num_threads(1);
  auto a = recurrent(3);
  auto b = transformer(4);
  auto c = recurrent(5);
  const std::vector<std::vector<int64_t>> src = {{4, 5, 6, 7}, {8, 4}, {9, 9, 5}};
  const models::SourceBatch batch = test::sources_batch(src);
  for (bool cache : {true, false}) {
    CAPTURE(cache);
    decode::Ensemble ens({a.get(), b.get(), c.get()});
    CHECK(ens.size() == 3);
    auto e = ens.start_decoding(batch, cache);
    std::vector<std::unique_ptr<models::DecoderState>> members;
    for (models::TranslationModel* m : std::vector<models::TranslationModel*>{a.get(), b.get(), c.get()})
      members.push_back(m->start_decoding(batch, cache));
    e->keep_attention();
    for (auto& m : members) m->keep_attention();
    std::vector<int64_t> prev = {1, 1, 1};
    const std::vector<std::vector<int64_t>> selections = {{0, 0, 1, 2}, {3, 1, 0}, {2, 2}};
    for (size_t step = 0; step < 4; ++step) {
      CAPTURE(step);
      const Tensor got = e->step(prev);
      std::vector<Tensor> lp;
      for (auto& m : members) lp.push_back(m->step(prev));
      const Tensor want = log_mean_exp(lp);
      CHECK(test::max_abs_diff(got, want) < 2e-6f);
      CHECK(test::max_abs_diff(got, lp[0]) > 1e-3f);  // not any one member's
      for (int64_t r = 0; r < got.shape()[0]; ++r) {
        double total = 0;
        for (int64_t v = 0; v < kVocab; ++v) total += std::exp(double(got[r * kVocab + v]));
        CHECK(total == doctest::Approx(1.0).epsilon(1e-5));
      }
      // attention: the members' (the recurrent ones' and the transformer's last layer, mean over heads) mean
      Tensor mean = Tensor::zeros(members[0]->cross_attention(-1, -1).shape());
      for (auto& m : members) {
        const Tensor at = m->cross_attention(-1, -1);
        for (int64_t i = 0; i < at.numel(); ++i) mean.data()[i] += at[i] / 3.0f;
      }
      CHECK(test::max_abs_diff(e->cross_attention(-1, -1), mean) < 1e-6f);
      if (step < selections.size()) {
        const std::vector<int64_t>& rows = selections[step];
        e->select_rows(rows);
        for (auto& m : members) m->select_rows(rows);
        CHECK(e->rows() == int64_t(rows.size()));
        prev.assign(rows.size(), 0);
        for (size_t r = 0; r < rows.size(); ++r) prev[r] = 4 + int64_t((r + step) % 5);
      }
    }
  }
  set_num_threads(0);
}

TEST_CASE("ensemble: one member, or one model twice, decodes as the model") {
  set_num_threads(1);
  auto a = recurrent(7);
  const std::vector<std::vector<int64_t>> src = {{4, 5, 6, 7}, {8, 4}, {9, 9, 5}, {6}};
  decode::SearchOptions greedy;
  greedy.strategy = decode::Strategy::Greedy;
  greedy.max_len = 8;
  decode::SearchOptions beam = greedy;
  beam.strategy = decode::Strategy::Beam;
  beam.beam = 3;
  for (const decode::SearchOptions& o : {greedy, beam}) {
    const auto alone = decode::search(*a, src, o);
    decode::Ensemble one({a.get()});
    decode::Ensemble twice({a.get(), a.get()});
    for (decode::Ensemble* e : {&one, &twice}) {
      const auto got = decode::search(*e, src, o);
      REQUIRE(got.size() == alone.size());
      for (size_t n = 0; n < got.size(); ++n) {
        CHECK(got[n].front().ids == alone[n].front().ids);
        CHECK(got[n].front().score == doctest::Approx(alone[n].front().score).epsilon(1e-5));
      }
    }
  }
  set_num_threads(0);
}

TEST_CASE("ensemble: models that do not share their tokens are refused, naming the files") {
  decode::LoadedModel x, y, z;
  x.model = recurrent(1);
  y.model = transformer(2);
  z.model = recurrent(3);
  x.src_vocab = y.src_vocab = z.src_vocab = models::Vocab({"a", "b", "c"});
  x.tgt_vocab = y.tgt_vocab = models::Vocab({"p", "q"});
  z.tgt_vocab = models::Vocab({"p", "r"});
  CHECK_NOTHROW(decode::check_ensemble({&x, &y}, {"x.json", "y.json"}));
  CHECK(test::error_of([&] { decode::check_ensemble({&x, &y, &z}, {"x.json", "y.json", "z.json"}); }) ==
        "ensemble: the target vocabularies differ: " + models::vocab_difference(x.tgt_vocab, "x.json", z.tgt_vocab, "z.json"));
  y.tgt_tokenizer = models::Tokenizer::Space;
  CHECK(test::error_of([&] { decode::check_ensemble({&x, &y}, {"x.json", "y.json"}); }) ==
        "y.json splits its text with tokenizers char / space, x.json with char / char: models decoded together "
        "share their tokens");
  y.tgt_tokenizer = models::Tokenizer::Char;
  y.right_left = true;  // the other direction: rescoring, not an ensemble
  CHECK(test::error_of([&] { decode::check_ensemble({&x, &y}, {"x.json", "y.json"}); }) ==
        "y.json produces its outputs right to left and x.json left to right: an ensemble's models go step by step "
        "together (a model of the other direction can rescore the search's hypotheses instead)");
  CHECK_NOTHROW(decode::check_rescorers({&x, &y}, {"x.json", "y.json"}));
  CHECK(test::error_of([&] { decode::check_rescorers({&x, &y, &z}, {"x.json", "y.json", "z.json"}); }) ==
        "rescoring: the target vocabularies differ: " + models::vocab_difference(x.tgt_vocab, "x.json", z.tgt_vocab, "z.json"));
  CHECK(test::error_of([] { decode::Ensemble({}); }) == "ensemble: no models");
}

TEST_CASE("forced decoding: a beam's hypotheses, scored as given outputs, get back their scores") {
  set_num_threads(1);
  auto lstm = recurrent(1);
  auto tf = transformer(2);
  for (models::Decodable* model : {static_cast<models::Decodable*>(lstm.get()), static_cast<models::Decodable*>(tf.get())}) {
    const decode::SearchOptions o = beam_options(4);
    const auto results = decode::search(*model, kSources, o);
    // the log-probability of <eos> after y, one row stepped alone
    auto eos_after = [&](const std::vector<int64_t>& src, const std::vector<int64_t>& y) {
      auto state = model->start_decoding(decode::sources_batch({src}), true);
      Tensor lp = state->step({o.bos});
      for (int64_t token : y) lp = state->step({token});
      return double(lp[o.eos]);
    };
    std::vector<std::vector<int64_t>> sources, outputs;
    std::vector<double> expected;
    int64_t ended = 0;
    for (size_t n = 0; n < results.size(); ++n)
      for (const decode::Hypothesis& h : results[n]) {
        sources.push_back(kSources[n]);
        outputs.push_back(h.ids);
        // an unfinished hypothesis's score has no <eos>; forced decoding ends every output with it
        expected.push_back(h.ended ? h.score : h.score + eos_after(kSources[n], h.ids));
        ended += h.ended;
      }
    CHECK(ended > 0);
    {
      // told which ended, every hypothesis gets back its search score, an unfinished one without the <eos>
      decode::SearchOptions cut = o;
      cut.max_len = 2;
      const auto short_results = decode::search(*model, kSources, cut);
      std::vector<std::vector<int64_t>> srcs, outs;
      std::vector<bool> flags;
      std::vector<double> want;
      for (size_t n = 0; n < short_results.size(); ++n)
        for (const decode::Hypothesis& h : short_results[n])
          srcs.push_back(kSources[n]), outs.push_back(h.ids), flags.push_back(h.ended), want.push_back(h.score);
      CHECK(std::count(flags.begin(), flags.end(), false) > 0);  // some stopped at max_len
      const std::vector<double> as_searched = decode::score_outputs(*model, srcs, outs, cut, flags);
      for (size_t i = 0; i < want.size(); ++i) CHECK(as_searched[i] == doctest::Approx(want[i]).epsilon(1e-5));
    }
    // outputs of several lengths in one batch, rows leaving as they end
    CHECK(std::any_of(outputs.begin(), outputs.end(), [&](const auto& y) { return y.size() != outputs[0].size(); }));
    const std::vector<double> got = decode::score_outputs(*model, sources, outputs, o);
    REQUIRE(got.size() == expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      CHECK(got[i] == doctest::Approx(expected[i]).epsilon(1e-5));
    }
    // one row alone scores as it does among the others
    CHECK(decode::score_outputs(*model, {sources[1]}, {outputs[1]}, o)[0] == doctest::Approx(got[1]).epsilon(1e-5));
    // an empty output is log p(<eos> | x)
    auto state = model->start_decoding(decode::sources_batch({kSources[0]}), true);
    const Tensor lp = state->step({o.bos});
    CHECK(decode::score_outputs(*model, {kSources[0]}, {{}}, o)[0] == doctest::Approx(double(lp[o.eos])).epsilon(1e-6));
  }
  CHECK(test::error_of([&] { decode::score_outputs(*lstm, kSources, {{1}}, beam_options(2)); }) ==
        "scoring: 3 sources and 1 outputs");
  CHECK(test::error_of([&] { decode::score_outputs(*lstm, {{4}}, {{3, 10}}, beam_options(2)); }) ==
        "scoring: output 0 has token 10 outside the model's 10 target tokens");
  set_num_threads(0);
}

TEST_CASE("rescoring: a beam reranked by the mean of the models' log-probabilities, right to left reversed") {
  set_num_threads(1);
  auto search_model = recurrent(3);
  auto forward = recurrent(4);
  auto backward = transformer(5);
  for (const auto& [alpha, max_len] : {std::pair{0.0, 8}, std::pair{1.0, 8}, std::pair{0.0, 2}}) {
    CAPTURE(alpha);
    CAPTURE(max_len);
    decode::SearchOptions o = beam_options(5);
    o.length_penalty = alpha;
    o.max_len = max_len;  // 2: unfinished hypotheses, scored without <eos> by the rescorers too
    const auto searched = decode::search(*search_model, kSources, o);
    auto results = searched;
    decode::rescore(results, kSources, {{forward.get(), false}, {backward.get(), true}}, o);
    bool reordered = false;
    for (size_t n = 0; n < results.size(); ++n) {
      REQUIRE(results[n].size() == searched[n].size());
      for (size_t i = 0; i < results[n].size(); ++i) {
        const decode::Hypothesis& h = results[n][i];
        std::vector<int64_t> reversed(h.ids.rbegin(), h.ids.rend());
        const double f = decode::score_outputs(*forward, {kSources[n]}, {h.ids}, o, {h.ended})[0];
        const double b = decode::score_outputs(*backward, {kSources[n]}, {reversed}, o, {h.ended})[0];
        const double mean = (h.score + f + b) / 3;
        const double len = static_cast<double>(h.ids.size());
        CHECK(h.normalized == doctest::Approx(mean / std::pow((5 + len) / 6, alpha)).epsilon(1e-5));
        if (i > 0) CHECK(results[n][i - 1].normalized >= h.normalized);
        // the same hypotheses, the search's scores kept
        CHECK(std::any_of(searched[n].begin(), searched[n].end(),
                          [&](const decode::Hypothesis& s) { return s.ids == h.ids && s.score == h.score; }));
        reordered = reordered || searched[n][i].ids != h.ids;
      }
    }
    int64_t unfinished = 0;
    for (const auto& hyps : results) unfinished += std::count_if(hyps.begin(), hyps.end(), [](const auto& h) { return !h.ended; });
    if (max_len == 2) CHECK(unfinished > 0);
    if (max_len == 8) CHECK(reordered);  // the rescorers disagree with the search somewhere (else the test shows nothing)
    // no rescorers: the search's order
    auto same = searched;
    decode::rescore(same, kSources, {}, o);
    check_search_order(same, searched);
  }
  set_num_threads(0);
}

TEST_CASE("joined beams: each searching rescorer's own hypotheses added once with the search model's score") {
  set_num_threads(1);
  auto search_model = recurrent(3);
  auto forward = recurrent(4);
  auto backward = transformer(5);
  for (const bool search_reversed : {false, true}) {
    CAPTURE(search_reversed);
    const decode::SearchOptions o = beam_options(4);
    auto searched = decode::search(*search_model, kSources, o);
    if (search_reversed)  // a right-to-left search model: its hypotheses in reading order
      for (auto& hyps : searched)
        for (auto& h : hyps) std::reverse(h.ids.begin(), h.ids.end());
    const std::vector<decode::Rescorer> rescorers{{forward.get(), false, false, 1.0, true},
                                                  {backward.get(), true, false, 1.0, true}};
    auto joined = searched;
    decode::join_beams(joined, kSources, *search_model, search_reversed, rescorers, o);
    const auto own_forward = decode::search(*forward, kSources, o);
    const auto own_backward = decode::search(*backward, kSources, o);
    int64_t added = 0;
    for (size_t n = 0; n < joined.size(); ++n) {
      // the search's hypotheses first, as they were
      REQUIRE(joined[n].size() >= searched[n].size());
      for (size_t i = 0; i < searched[n].size(); ++i) {
        CHECK(joined[n][i].ids == searched[n][i].ids);
        CHECK(joined[n][i].score == searched[n][i].score);
      }
      auto count = [&](const std::vector<int64_t>& ids) {
        return std::count_if(joined[n].begin(), joined[n].end(), [&](const auto& h) { return h.ids == ids; });
      };
      // every hypothesis of both rescorers' beams, in reading order, once
      for (const auto& h : own_forward[n]) CHECK(count(h.ids) == 1);
      for (const auto& h : own_backward[n]) CHECK(count(std::vector<int64_t>(h.ids.rbegin(), h.ids.rend())) == 1);
      for (const auto& h : joined[n]) CHECK(count(h.ids) == 1);
      // an added one is scored by the search model, read in its direction
      for (size_t i = searched[n].size(); i < joined[n].size(); ++i) {
        const decode::Hypothesis& h = joined[n][i];
        const std::vector<int64_t> shown = search_reversed ? std::vector<int64_t>(h.ids.rbegin(), h.ids.rend()) : h.ids;
        CHECK(h.score == doctest::Approx(decode::score_outputs(*search_model, {kSources[n]}, {shown}, o, {h.ended})[0])
                             .epsilon(1e-5));
        CHECK(h.normalized == h.score);
        CHECK(h.attention.numel() == 0);
        ++added;
      }
    }
    CHECK(added > 0);  // the rescorers' beams hold what the search's lacks (else the test shows nothing)
    // rescorers that do not search add nothing
    auto plain = searched;
    decode::join_beams(plain, kSources, *search_model, search_reversed, {{forward.get(), false}, {backward.get(), true}}, o);
    check_search_order(plain, searched);
  }
  const decode::SearchOptions o = beam_options(2);
  CHECK(test::error_of([&] {
          auto r = decode::search(*search_model, kSources, o);
          decode::join_beams(r, kSources, *search_model, false, {{forward.get(), false, true, 1.0, true}}, o);
        }) == "joining beams: an inverse model (target -> source) cannot search the sources' outputs");
  CHECK(test::error_of([&] {
          decode::SearchOptions with_attention = o;
          with_attention.attention = true;
          auto r = decode::search(*search_model, kSources, o);
          decode::join_beams(r, kSources, *search_model, false, {{forward.get(), false, false, 1.0, true}}, with_attention);
        }) == "joining beams: a rescoring model's hypotheses have no attention of the search's");
  set_num_threads(0);
}

TEST_CASE("rescoring by inverse models: log p(source | hypothesis), a right-to-left one shown the source reversed") {
  set_num_threads(1);
  auto search_model = recurrent(3);
  auto inverse = recurrent(6);
  auto inverse_rl = transformer(7);
  const decode::SearchOptions o = beam_options(5);
  const auto searched = decode::search(*search_model, kSources, o);
  // log p(x | y) of source n under each inverse model, the right-to-left one shown the source reversed
  auto inverse_scores = [&](size_t n, const decode::Hypothesis& h) {
    const std::vector<int64_t> reversed(kSources[n].rbegin(), kSources[n].rend());
    return std::pair{decode::score_outputs(*inverse, {h.ids}, {kSources[n]}, o)[0],
                     decode::score_outputs(*inverse_rl, {h.ids}, {reversed}, o)[0]};
  };
  auto results = searched;
  decode::rescore(results, kSources, {{inverse.get(), false, true}, {inverse_rl.get(), true, true}}, o);
  bool reordered = false;
  int64_t empty = 0;
  for (size_t n = 0; n < results.size(); ++n)
    for (size_t i = 0; i < results[n].size(); ++i) {
      const decode::Hypothesis& h = results[n][i];
      reordered = reordered || searched[n][i].ids != h.ids;
      if (h.ids.empty()) {  // it cannot be an inverse model's source: it ranks last
        CHECK((std::isinf(h.normalized) && h.normalized < 0));
        CHECK(i + 1 == results[n].size());
        ++empty;
        continue;
      }
      const auto [a, b] = inverse_scores(n, h);
      CHECK(h.normalized == doctest::Approx((h.score + a + b) / 3).epsilon(1e-5));
      if (i > 0) CHECK(results[n][i - 1].normalized >= h.normalized);
    }
  CHECK(reordered);
  CHECK(empty > 0);  // the random search model ends some hypotheses at once
  // weighted: (score + w a + w b) / (1 + 2 w); weight 0 leaves the search's order
  auto weighted = searched;
  decode::rescore(weighted, kSources, {{inverse.get(), false, true, 0.25}, {inverse_rl.get(), true, true, 0.25}}, o);
  for (size_t n = 0; n < weighted.size(); ++n)
    for (const decode::Hypothesis& h : weighted[n]) {
      if (h.ids.empty()) continue;
      const auto [a, b] = inverse_scores(n, h);
      CHECK(h.normalized == doctest::Approx((h.score + 0.25 * a + 0.25 * b) / 1.5).epsilon(1e-5));
    }
  auto unweighted = searched;
  decode::rescore(unweighted, kSources, {{inverse.get(), false, true, 0.0}}, o);
  check_search_order(unweighted, searched);
  CHECK(test::error_of([&] {
          auto r = searched;
          decode::rescore(r, kSources, {{inverse.get(), false, true, -1.0}}, o);
        }) == "rescoring: a model's weight is -1, not a number >= 0");
  // checks: the inverse model's sides are the search model's, swapped
  decode::LoadedModel x, y;
  x.model = recurrent(1);
  y.model = recurrent(2);
  x.src_vocab = y.tgt_vocab = models::Vocab({"a", "b", "c"});
  x.tgt_vocab = y.src_vocab = models::Vocab({"p", "q"});
  y.src_tokenizer = models::Tokenizer::Space;
  x.tgt_tokenizer = models::Tokenizer::Space;
  CHECK_NOTHROW(decode::check_rescorers({&x, &y}, {"x.json", "y.json"}, {false, true}));
  CHECK(test::error_of([&] { decode::check_rescorers({&x, &y}, {"x.json", "y.json"}); }).find(
            "y.json splits its text with tokenizers space / char, x.json with char / space") == 0);
  y.src_vocab = models::Vocab({"p", "r"});
  CHECK(test::error_of([&] { decode::check_rescorers({&x, &y}, {"x.json", "y.json"}, {false, true}); }) ==
        "rescoring: the target vocabularies differ (read the other way: an inverse model's source is the target): " +
            models::vocab_difference(x.tgt_vocab, "x.json", y.src_vocab, "y.json"));
  set_num_threads(0);
}

TEST_CASE("reading order: a right-to-left model's hypotheses and their attention rows turned round") {
  decode::LoadedModel m;
  decode::Hypothesis h;
  h.ids = {5, 6, 7};
  h.ended = true;
  h.attention = Tensor::zeros({4, 2});  // a row per id, then <eos>'s
  for (int64_t i = 0; i < 8; ++i) h.attention.data()[i] = float(i);
  std::vector<std::vector<decode::Hypothesis>> results{{h}};
  decode::reading_order(m, results);  // left to right: as it was
  CHECK(results[0][0].ids == std::vector<int64_t>{5, 6, 7});
  m.right_left = true;
  decode::reading_order(m, results);
  CHECK(results[0][0].ids == std::vector<int64_t>{7, 6, 5});
  const std::vector<float> rows(results[0][0].attention.data(), results[0][0].attention.data() + 8);
  CHECK(rows == std::vector<float>{4, 5, 2, 3, 0, 1, 6, 7});
}
