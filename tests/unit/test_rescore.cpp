// decode/rescore.hpp: forced decoding gives a beam hypothesis back its own score; rescoring reranks a beam by the
// mean of the models' log-probabilities, a right-to-left rescorer reading each hypothesis reversed;
// decode::reading_order turns a right-to-left model's hypotheses (and their attention rows) round; the trainer's
// right-to-left run is the left-to-right run on reversed targets, bit for bit, and its checkpoint says so.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnkit/decode/loader.hpp"
#include "attnkit/decode/rescore.hpp"
#include "attnkit/decode/search.hpp"
#include "attnkit/models/seq2seq.hpp"
#include "attnkit/models/transformer.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/tensor/threads.hpp"
#include "attnkit/train/trainer.hpp"
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

}  // namespace

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
  for (const double alpha : {0.0, 1.0}) {
    CAPTURE(alpha);
    decode::SearchOptions o = beam_options(5);
    o.length_penalty = alpha;
    const auto searched = decode::search(*search_model, kSources, o);
    auto results = searched;
    decode::rescore(results, kSources, {{forward.get(), false}, {backward.get(), true}}, o);
    bool reordered = false;
    for (size_t n = 0; n < results.size(); ++n) {
      REQUIRE(results[n].size() == searched[n].size());
      for (size_t i = 0; i < results[n].size(); ++i) {
        const decode::Hypothesis& h = results[n][i];
        std::vector<int64_t> reversed(h.ids.rbegin(), h.ids.rend());
        const double f = decode::score_outputs(*forward, {kSources[n]}, {h.ids}, o)[0];
        const double b = decode::score_outputs(*backward, {kSources[n]}, {reversed}, o)[0];
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
    CHECK(reordered);  // the rescorers disagree with the search somewhere (else the test shows nothing)
    // no rescorers: the search's order
    auto same = searched;
    decode::rescore(same, kSources, {}, o);
    for (size_t n = 0; n < same.size(); ++n)
      for (size_t i = 0; i < same[n].size(); ++i) CHECK(same[n][i].ids == searched[n][i].ids);
  }
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

namespace {

train::TrainingData reverse_task() {
  train::DataSpec spec;
  train::TaskOptions t;
  t.name = "reverse";
  t.vocab_size = 6;
  t.min_len = 2;
  t.max_len = 5;
  t.train_size = 40;
  t.valid_size = 8;
  t.seed = 3;
  spec.task = t;
  return train::load_training_data(spec);
}

train::TrainerOptions options(const std::string& save, bool right_left) {
  train::TrainerOptions o;
  o.model.cell = nn::CellKind::Lstm;
  o.model.attention = models::AttentionKind::Dot;
  o.model.embed = 8;
  o.model.hidden = 12;
  o.steps = 9;
  o.batch_size = 8;
  o.schedule.lr = 0.01;
  o.log_every = 3;
  o.save_path = save;
  o.right_left = right_left;
  return o;
}

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string("attnkit_") + std::to_string(::getpid()) + "_" + name)).string();
}

}  // namespace

TEST_CASE("right to left: the run on reversed targets, bit for bit, and a checkpoint that says so") {
  set_num_threads(1);
  const std::string rl = temp_path("rescore_rl.json"), lr = temp_path("rescore_lr.json"),
                    rest = temp_path("rescore_rest.json");
  std::vector<std::string> lines_rl, lines_lr;
  train::Trainer a(options(rl, true), reverse_task());
  a.run([&](const std::string& l) { lines_rl.push_back(l); });
  train::TrainingData flipped = reverse_task();  // the reverse task's targets by hand: the copy task
  for (train::Corpus* c : {&flipped.train, &flipped.valid})
    for (train::Example& e : c->examples) std::reverse(e.tgt.begin(), e.tgt.end());
  train::Trainer b(options(lr, false), std::move(flipped));
  b.run([&](const std::string& l) { lines_lr.push_back(l); });
  auto strip = [](const std::string& l) {
    nlohmann::json j = nlohmann::json::parse(l);
    j.erase("tokens_per_s");
    return j.dump();
  };
  REQUIRE(lines_rl.size() == 3);
  REQUIRE(lines_lr.size() == 3);
  for (size_t i = 0; i < lines_rl.size(); ++i) CHECK(strip(lines_rl[i]) == strip(lines_lr[i]));
  auto pa = a.model().named_parameters(), pb = b.model().named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t k = 0; k < pa.size(); ++k) {
    CAPTURE(pa[k]->name);
    CHECK(std::memcmp(pa[k]->value.data(), pb[k]->value.data(), sizeof(float) * size_t(pa[k]->value.numel())) == 0);
  }
  CHECK(decode::load_checkpoint(rl).right_left);
  CHECK_FALSE(decode::load_checkpoint(lr).right_left);
  // a resume keeps the direction
  CHECK(test::error_of([&] { train::Trainer::resume(rl, options(rest, false), reverse_task()); }) ==
        rl + ": the checkpoint was trained right to left (its targets reversed); it cannot continue left to right");
  CHECK(test::error_of([&] { train::Trainer::resume(lr, options(rest, true), reverse_task()); }) ==
        lr + ": the checkpoint was trained left to right; it cannot continue right to left");
  CHECK(train::Trainer::resume(rl, options(rest, true), reverse_task())->step() == 9);
  for (const auto& p : {rl, lr, rest}) std::remove(p.c_str());
  set_num_threads(0);
}
