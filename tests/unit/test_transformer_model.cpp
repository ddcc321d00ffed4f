// models::Transformer: the whole model's loss gradient against central differences (every parameter, several
// configurations), the config's round trip and checks, parameters' names and round trip, greedy decoding, and a
// tiny model that learns to copy.
// Legend: N batch, S source length, T target length, E d_model, V vocabulary.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "attnkit/autograd/functional.hpp"
#include "attnkit/io/bundle_lookup.hpp"
#include "attnkit/io/json_reader.hpp"
#include "attnkit/models/transformer.hpp"
#include "attnkit/tensor/compare.hpp"
#include "attnkit/tensor/threads.hpp"
#include "attnkit/train/batch.hpp"
#include "attnkit/train/optimizer.hpp"
#include "attnkit/train/tasks.hpp"
#include "attnkit/train/vocab.hpp"
#include "decoding_contract.hpp"
#include "gradcheck.hpp"
#include "test_util.hpp"

using namespace attnkit;

namespace {

train::EncodedCorpus random_corpus(int64_t V, const std::vector<std::pair<int, int>>& lengths, Rng& rng) {
  train::EncodedCorpus c;
  for (auto [s, t] : lengths) {
    std::vector<int64_t> src, tgt;
    for (int i = 0; i < s; ++i) src.push_back(4 + int64_t(rng.next_u32() % uint32_t(V - 4)));
    for (int i = 0; i < t; ++i) tgt.push_back(4 + int64_t(rng.next_u32() % uint32_t(V - 4)));
    c.src.push_back(src);
    c.tgt.push_back(tgt);
  }
  return c;
}

models::TransformerConfig tiny(int64_t V) {
  models::TransformerConfig c;
  c.src_vocab = V;
  c.tgt_vocab = V;
  c.encoder_layers = 1;
  c.decoder_layers = 1;
  c.heads = 2;
  c.d_model = 8;
  c.ff = 12;
  c.dropout = 0.0f;
  return c;
}

struct OneThread {  // tiny sizes: a thread team costs more than it saves
  int saved = num_threads();
  OneThread() { set_num_threads(1); }
  ~OneThread() { set_num_threads(saved); }
};

double loss_of(models::Transformer& m, const train::Batch& b, const models::LossOptions& o) {
  autograd::NoGrad ng;
  return m.forward(b, o).loss.value()[0];
}

}  // namespace

TEST_CASE("transformer model: the loss gradient of every parameter against central differences") {
  OneThread one;
  Rng data_rng(11);
  const int64_t V = 7;
  const auto corpus = random_corpus(V, {{4, 3}, {2, 4}}, data_rng);  // different lengths: padding and masks
  const train::Batch b = train::make_batch(corpus, {0, 1}, false);
  struct Case {
    bool norm_first, shared, tied, learned;
    nn::FfnActivation act;
    float smoothing;
  };
  for (Case k : {Case{false, false, false, false, nn::FfnActivation::Gelu, 0.1f},
                 Case{true, true, true, true, nn::FfnActivation::Gelu, 0.0f}}) {
    CAPTURE(k.norm_first);
    models::TransformerConfig c = tiny(V);
    c.norm_first = k.norm_first;
    c.shared_embeddings = k.shared;
    c.tied_output = k.tied;
    c.positional = k.learned ? nn::PositionalKind::Learned : nn::PositionalKind::Sinusoidal;
    c.max_positions = 8;
    c.activation = k.act;
    Rng rng(3);
    models::Transformer m(c, rng);
    models::LossOptions o;
    o.label_smoothing = k.smoothing;
    m.zero_grad();
    autograd::backward(m.forward(b, o).loss);
    // Every parameter, at 3 elements drawn at random (all of them would take thousands of forwards): the
    // probes are the checked inputs, written into the parameters before each loss.
    struct Probe {
      Parameter* p;
      std::vector<int64_t> at;
    };
    std::vector<Probe> probes;
    std::vector<Tensor> values, grads;
    Rng pick(7);
    for (Parameter* p : m.named_parameters()) {
      p->grad_buffer();  // zeros when no gradient reached it (the check then names it)
      Probe pr{p, {}};
      const int64_t count = std::min<int64_t>(3, p->value.numel());
      Tensor v({count}), g({count});
      for (int64_t j = 0; j < count; ++j) {
        int64_t i = 0;
        do i = int64_t(pick.next_u32() % uint32_t(p->value.numel()));
        while (std::find(pr.at.begin(), pr.at.end(), i) != pr.at.end());  // distinct elements
        pr.at.push_back(i);
        v[j] = p->value[i];
        g[j] = p->grad[i];
      }
      probes.push_back(pr);
      values.push_back(v);
      grads.push_back(g);
    }
    auto loss = [&] {
      for (size_t k = 0; k < probes.size(); ++k) {
        for (size_t j = 0; j < probes[k].at.size(); ++j) probes[k].p->value[probes[k].at[j]] = values[k][int64_t(j)];
        probes[k].p->touch();
      }
      return loss_of(m, b, o);
    };
    std::vector<Tensor*> inputs;
    std::vector<std::string> names;
    std::vector<const Tensor*> analytic;
    for (size_t k = 0; k < probes.size(); ++k) {
      inputs.push_back(&values[k]);
      names.push_back(probes[k].p->name);
      analytic.push_back(&grads[k]);
    }
    CHECK(probes.size() >= 20);
    const test::GradTolerance tol{1e-2, 1e-3, 2e-2};
    CHECK(test::gradient_mismatch(inputs, names, loss, analytic, tol) == "");
    // the check sees a wrong gradient: one probe of the encoder's FFN output weight nudged
    size_t w = 0;
    while (probes[w].p != &m.encoder().layers[0]->linear2.weight) ++w;
    Tensor wrong = grads[w];
    wrong[0] += 0.05f + 0.1f * std::fabs(wrong[0]);
    CHECK(test::gradient_mismatch({&values[w]}, {names[w]}, loss, {&wrong}, tol) != "");
  }
}

TEST_CASE("transformer model: config round trip and checks, state_dict names, parameter round trip") {
  models::TransformerConfig c = tiny(9);
  c.norm_first = true;
  c.activation = nn::FfnActivation::Gelu;
  c.dropout = 0.25f;
  c.decoder_layers = 2;
  const models::TransformerConfig r = models::TransformerConfig::from_value(c.to_value(), "m.json");
  CHECK(r.norm_first);
  CHECK(r.activation == nn::FfnActivation::Gelu);
  CHECK(r.dropout == 0.25f);
  CHECK(r.decoder_layers == 2);
  CHECK(r.encoder_layers == 1);
  CHECK(r.d_model == 8);

  io::Value bad = c.to_value();
  bad.set("heads", io::Value::other("a string", "\"3\""));
  CHECK(test::error_of([&] { models::TransformerConfig::from_value(bad, "m.json"); }) ==
        "m.json: config: transformer: 3 heads do not divide d_model 8");
  bad = c.to_value();
  bad.set("family", io::Value::other("a string", "\"recurrent\""));
  CHECK(test::error_of([&] { models::TransformerConfig::from_value(bad, "m.json"); }) ==
        "m.json: the model config is for a \"recurrent\" model, not a transformer");
  bad = c.to_value();
  bad.set("norm_first", io::Value::other("a string", "\"yes\""));
  CHECK(test::error_of([&] { models::TransformerConfig::from_value(bad, "m.json"); }) ==
        "m.json: config \"norm_first\" is \"yes\", expected true or false");
  // a config written by hand: numbers and booleans, defaults for the rest
  io::Value hand;
  hand.set("src_vocab", Tensor::scalar(9)).set("tgt_vocab", Tensor::scalar(9)).set("d_model", Tensor::scalar(8));
  hand.set("heads", Tensor::scalar(2)).set("layers", Tensor::scalar(1)).set("ff", Tensor::scalar(12));
  hand.set("tied_output", io::Value::other("a boolean", "true"));
  const models::TransformerConfig h = models::TransformerConfig::from_value(hand, "hand.json");
  CHECK(h.encoder_layers == 1);
  CHECK(h.decoder_layers == 1);
  CHECK(h.tied_output);
  CHECK(h.dropout == 0.1f);
  io::Value headless;  // "heads" has no default: the weights' shapes do not tell it
  headless.set("src_vocab", Tensor::scalar(9)).set("tgt_vocab", Tensor::scalar(9)).set("d_model", Tensor::scalar(8));
  CHECK_THROWS_WITH_AS(models::TransformerConfig::from_value(headless, "hand.json"), doctest::Contains("\"heads\""),
                       Error);
  hand.set("d_model", Tensor::scalar(8.5f));
  CHECK(test::error_of([&] { models::TransformerConfig::from_value(hand, "hand.json"); }) ==
        "hand.json: config \"d_model\" is \"8.5\", not an integer");
  models::TransformerConfig sv = tiny(9);
  sv.tgt_vocab = 10;
  sv.shared_embeddings = true;
  Rng rng(1);
  CHECK_THROWS_WITH_AS(models::Transformer(sv, rng), doctest::Contains("shared embeddings need one vocabulary"), Error);

  models::Transformer m(c, rng);
  const auto params = m.named_parameters();
  CHECK(params.front()->name == "src_embed.weight");
  CHECK(params[1]->name == "tgt_embed.weight");
  CHECK(params[2]->name == "encoder.layers.0.self_attn.in_proj_weight");
  CHECK(params.back()->name == "output.bias");
  CHECK(params[params.size() - 2]->name == "output.weight");
  for (int64_t i = 0; i < 8; ++i) CHECK(params.front()->value[i] == 0.0f);  // the <pad> row
  const io::Value saved = m.parameters_value();
  REQUIRE(saved.find("encoder") != nullptr);
  CHECK(saved.find("encoder")->find("layers.0.linear1.weight") != nullptr);
  Rng rng2(2);
  models::Transformer m2(c, rng2);
  m2.load_parameters(saved, "saved");
  for (size_t i = 0; i < params.size(); ++i) CHECK(m2.named_parameters()[i]->value.values() == params[i]->value.values());
  // a flat PyTorch-style state_dict loads too; a wrong shape is refused naming the parameter
  io::Value flat;
  for (const Parameter* p : m.named_parameters()) flat.set(p->name, p->value);
  m2.load_parameters(flat, "flat.json");
  flat.set("decoder.norm.weight", Tensor({7}));
  CHECK(test::error_of([&] { m2.load_parameters(flat, "flat.json"); }).find("decoder.norm.weight has shape [7], expected [8]") !=
        std::string::npos);
}

TEST_CASE("transformer model: dropout only while recording and training; a tiny model learns to copy") {
  OneThread one;
  train::TaskOptions t;
  t.name = "copy";
  t.vocab_size = 6;
  t.min_len = 3;
  t.max_len = 5;
  t.train_size = 12;
  t.valid_size = 0;
  t.seed = 5;
  const train::TaskData data = train::make_task(t);
  const train::EncodedCorpus enc = train::encode(data.train, data.src_vocab, data.tgt_vocab);
  std::vector<int64_t> all(12);
  for (int64_t i = 0; i < 12; ++i) all[size_t(i)] = i;
  const train::Batch b = train::make_batch(enc, all, false);
  models::TransformerConfig c = tiny(data.src_vocab.size());
  c.tgt_vocab = data.tgt_vocab.size();
  c.d_model = 16;
  c.ff = 32;
  c.dropout = 0.1f;
  Rng rng(1);
  models::Transformer m(c, rng);
  const double eval1 = loss_of(m, b, {}), eval2 = loss_of(m, b, {});
  CHECK(eval1 == doctest::Approx(eval2).epsilon(1e-6));  // NoGrad: no dropout (layer norm: 1 ulp)
  const double train1 = m.forward(b).loss.value()[0];
  autograd::clear_tape();
  CHECK(train1 != eval1);
  m.set_training(false);
  CHECK(double(m.forward(b).loss.value()[0]) == doctest::Approx(eval1).epsilon(1e-6));  // (layer norm: 1 ulp)
  autograd::clear_tape();
  // the copy task itself without dropout (12 examples to overfit)

  train::AdamOptions ao;
  ao.lr = 0.01;
  train::Adam opt(m.named_parameters(), ao);
  const double first = eval1;
  for (int step = 0; step < 300; ++step) {
    opt.zero_grad();
    auto r = m.forward(b);
    autograd::backward(r.loss);
    opt.step();
  }
  const double last = loss_of(m, b, {});
  CAPTURE(first);
  CAPTURE(last);
  CHECK(first > 1.0);
  CHECK(last < 0.05);
  const auto decoded = m.greedy(b, 10);
  int exact = 0;
  for (int64_t n = 0; n < b.N; ++n) exact += decoded[size_t(n)] == enc.tgt[size_t(b.index[size_t(n)])];
  CHECK(exact == 12);
  for (const auto& row : m.greedy(b, 2)) CHECK(row.size() <= 2);
}

TEST_CASE("transformer model: the decoding contract (KV cache == recomputed prefix, select_rows, cross-attention)") {
  OneThread one;
  const std::vector<std::vector<int64_t>> src = {{4, 5, 6, 7}, {8, 4}, {6, 6, 9}};
  for (bool norm_first : {false, true}) {
    CAPTURE(norm_first);
    models::TransformerConfig c = tiny(10);
    c.decoder_layers = 2;
    c.norm_first = norm_first;
    c.tied_output = norm_first;
    Rng rng(4);
    models::Transformer m(c, rng);
    CHECK(test::check_decoding_contract(m, src, true, 20) == "");  // 20 steps: past the cache's first 16 rows
    auto state = m.start_decoding(test::sources_batch(src), true);
    state->step({1, 1, 1});
    const Tensor h0 = state->cross_attention(0, 1), mean = state->cross_attention(-1, -1);
    CHECK(h0.shape() == Shape{3, 4});
    CHECK(h0[1 * 4 + 2] == 0.0f);  // past row 1's source length
    CHECK_THROWS_WITH_AS(state->cross_attention(2, 0), doctest::Contains("attention layer 2: the decoder has 2 layers"),
                         Error);
    CHECK_THROWS_WITH_AS(state->cross_attention(0, 2), doctest::Contains("attention head 2: the layers have 2 heads"),
                         Error);
    CHECK_THROWS_WITH_AS(state->step({1, 1}), doctest::Contains("2 previous tokens for 3 rows"), Error);
    CHECK_THROWS_WITH_AS(state->step({1, 1, 10}), doctest::Contains("token id 10 outside the target vocabulary"), Error);
  }
}

TEST_CASE("transformer model: a PyTorch-trained Transformer (state_dict + config) decodes greedily to PyTorch's tokens") {
  OneThread one;
  // tests/fixtures/gen_transformer_greedy.py: trained in PyTorch 1.13, decoded there by the usual loop that
  // recomputes the whole prefix at each step
  const std::string text = test::fixture_text("transformer/greedy.json");
  const nlohmann::json j = nlohmann::json::parse(text);
  const io::Value all = io::parse_json(text, "greedy.json");
  const models::TransformerConfig c = models::TransformerConfig::from_value(*all.find("config"), "greedy.json#config");
  CHECK(c.dropout == 0.0f);
  CHECK(c.encoder_layers == 1);
  Rng rng(1);
  models::Transformer m(c, rng);
  m.load_parameters(*all.find("state"), "greedy.json#state");
  CHECK(m.named_parameters().size() == all.find("state")->names().size());  // every tensor of the state_dict used
  std::vector<std::vector<int64_t>> src;
  for (size_t i = 0; i < j["sources"].size(); ++i) {
    std::vector<int64_t> row = j["sources"][i].get<std::vector<int64_t>>();
    row.resize(j["lengths"][i].get<size_t>());
    src.push_back(row);
  }
  const models::SourceBatch b = test::sources_batch(src);
  const auto want = j["tokens"].get<std::vector<std::vector<int64_t>>>();
  CHECK(m.greedy(b, j["max_len"].get<int64_t>()) == want);
  // the first step's log-probabilities, through the cache and without
  const Tensor first = *io::find_tensor(all, "first_log_probs", "fixture");
  for (bool cache : {true, false}) {
    auto state = m.start_decoding(b, cache);
    const Tensor lp = state->step(std::vector<int64_t>(src.size(), train::Vocab::kBos));
    CHECK(compare(lp, first, Tolerance{1e-4, 1e-5}).close);
  }
}
