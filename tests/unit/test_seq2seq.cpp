// models/seq2seq: the whole model's loss gradient against central differences (a few entries of every
// parameter, every attention kind), parameter names, greedy decoding, and a tiny model overfitting `reverse`.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "attnkit/autograd/var.hpp"
#include "attnkit/io/bundle_lookup.hpp"
#include "attnkit/models/fields.hpp"
#include "attnkit/models/seq2seq.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/train/batch.hpp"
#include "attnkit/train/data.hpp"
#include "attnkit/train/optimizer.hpp"
#include "attnkit/train/tasks.hpp"
#include "test_util.hpp"

using namespace attnkit;
using models::AttentionKind;

namespace {

// Rows of random ids in [4, V) with the given lengths.
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

// With o.rng set, every forward draws from a fresh copy of *o.rng: the same dropout masks and sampling
// decisions each time, so the loss is a function of the parameters alone.
models::ForwardResult forward_fixed(models::Seq2Seq& m, const train::Batch& b, const models::ForwardOptions& o) {
  if (o.rng == nullptr) return m.forward(b, o);
  Rng copy = *o.rng;
  models::ForwardOptions oo = o;
  oo.rng = &copy;
  return m.forward(b, oo);
}

float loss_no_grad(models::Seq2Seq& m, const train::Batch& b, const models::ForwardOptions& o) {
  autograd::NoGrad ng;
  return forward_fixed(m, b, o).loss.value()[0];
}

// Central differences of the float loss at `per_param` entries of every parameter whose analytic gradient
// is not tiny; returns "" or the first disagreement. `flip` negates the analytic gradient (the negative check).
std::string spot_check(models::Seq2Seq& m, const train::Batch& b, const models::ForwardOptions& o, Rng& rng,
                       int per_param, bool flip, int* checked) {
  m.zero_grad();
  autograd::backward(forward_fixed(m, b, o).loss);
  const float h = 1e-2f;
  for (Parameter* p : m.named_parameters()) {
    REQUIRE(p->grad.shape() == p->value.shape());
    int done = 0;
    for (int tries = 0; tries < 64 && done < per_param; ++tries) {
      const int64_t i = int64_t(rng.next_u32() % uint32_t(p->value.numel()));
      const double analytic = (flip ? -1.0 : 1.0) * p->grad[i];
      if (std::fabs(analytic) < 2e-3) continue;  // a sign error would not show
      const float keep = p->value[i];
      p->value[i] = keep + h;
      p->touch();
      const double lp = loss_no_grad(m, b, o);
      p->value[i] = keep - h;
      p->touch();
      const double lm = loss_no_grad(m, b, o);
      p->value[i] = keep;
      p->touch();
      const double numeric = (lp - lm) / (2.0 * h);
      if (std::fabs(numeric - analytic) > 5e-4 + 0.01 * std::fabs(numeric))
        return p->name + "[" + std::to_string(i) + "]: numeric " + std::to_string(numeric) + ", analytic " +
               std::to_string(analytic);
      ++done;
      ++*checked;
    }
  }
  return "";
}

// An LSTM with a bidirectional encoder and additive attention: E 3, H 4 (He = Hd = 8), vocabularies 7 and 6.
models::Seq2SeqConfig small_additive() {
  models::Seq2SeqConfig c;
  c.cell = nn::CellKind::Lstm;
  c.attention = AttentionKind::Additive;
  c.src_vocab = 7;
  c.tgt_vocab = 6;
  c.embed = 3;
  c.hidden = 4;
  c.bidirectional = true;
  return c;
}

}  // namespace

TEST_CASE("seq2seq: the loss gradient of the whole model against central differences") {
  Rng data_rng(11);
  const int64_t V = 9;
  auto corpus = random_corpus(V, {{5, 4}, {3, 6}, {4, 2}}, data_rng);  // different lengths: padding and masks
  const train::Batch b = train::make_batch(corpus, {0, 1, 2}, false);
  struct Case {
    nn::CellKind cell;
    AttentionKind att;
    int layers;
    bool bidir;
    float smoothing;
    int64_t attention_dim = 0;
    int64_t decoder_size = 0;
  };
  for (Case k : {Case{nn::CellKind::Lstm, AttentionKind::None, 1, false, 0.0f},
                 Case{nn::CellKind::Lstm, AttentionKind::Additive, 1, false, 0.1f},
                 Case{nn::CellKind::Gru, AttentionKind::General, 2, true, 0.0f},
                 Case{nn::CellKind::RnnTanh, AttentionKind::Dot, 1, true, 0.0f},
                 Case{nn::CellKind::Lstm, AttentionKind::ScaledDot, 2, false, 0.2f},
                 Case{nn::CellKind::Lstm, AttentionKind::Additive, 1, true, 0.0f, 3},
                 Case{nn::CellKind::Lstm, AttentionKind::Additive, 2, true, 0.0f, 3, 6},  // bridged: He 10, Hd 6
                 Case{nn::CellKind::Gru, AttentionKind::General, 1, false, 0.0f, 0, 7}}) {
    CAPTURE(ops::cell_name(k.cell));
    CAPTURE(std::string(models::attention_kind_name(k.att)));
    models::Seq2SeqConfig c;
    c.cell = k.cell;
    c.attention = k.att;
    c.src_vocab = V;
    c.tgt_vocab = V;
    c.embed = 4;
    c.hidden = 5;
    c.layers = k.layers;
    c.bidirectional = k.bidir;
    c.attention_dim = k.attention_dim;
    c.decoder_size = k.decoder_size;
    Rng rng(3);
    models::Seq2Seq m(c, rng);
    models::LossOptions o;
    o.label_smoothing = k.smoothing;
    Rng pick(7);
    int checked = 0;
    CHECK(spot_check(m, b, o, pick, 3, false, &checked) == "");
    CHECK(checked >= 12);
    // the same check must fail with the gradient's sign flipped
    Rng pick2(7);
    int checked2 = 0;
    CHECK(spot_check(m, b, o, pick2, 3, true, &checked2) != "");
  }
}

TEST_CASE("seq2seq: Bahdanau attention, dropout and scheduled sampling: gradients against central differences") {
  Rng data_rng(11);
  const int64_t V = 9;
  auto corpus = random_corpus(V, {{5, 4}, {3, 6}, {4, 2}}, data_rng);
  const train::Batch b = train::make_batch(corpus, {0, 1, 2}, false);
  struct Case {
    nn::CellKind cell;
    AttentionKind att;
    models::AttentionStyle style;
    int layers;
    bool bidir;
    float dropout, teacher_forcing;
    int64_t decoder_size = 0;
  };
  // (the sampled argmax is piecewise constant: a perturbation that flips one would show as a jump, so the ratios
  // and seeds are ones where none flips)
  const auto B = models::AttentionStyle::Bahdanau, Lu = models::AttentionStyle::Luong;
  for (Case k : {Case{nn::CellKind::Lstm, AttentionKind::Additive, B, 1, false, 0.0f, 1.0f},
                 Case{nn::CellKind::Gru, AttentionKind::Dot, B, 2, true, 0.3f, 1.0f},
                 Case{nn::CellKind::Lstm, AttentionKind::General, Lu, 2, false, 0.3f, 1.0f},
                 Case{nn::CellKind::Lstm, AttentionKind::Additive, Lu, 1, true, 0.0f, 0.5f},
                 Case{nn::CellKind::RnnTanh, AttentionKind::None, Lu, 2, false, 0.2f, 0.7f},
                 Case{nn::CellKind::Lstm, AttentionKind::ScaledDot, B, 2, false, 0.2f, 0.5f},
                 Case{nn::CellKind::Lstm, AttentionKind::Additive, B, 1, true, 0.0f, 1.0f, 4}}) {  // bridged
    CAPTURE(ops::cell_name(k.cell));
    CAPTURE(std::string(models::attention_kind_name(k.att)));
    CAPTURE(std::string(models::attention_style_name(k.style)));
    CAPTURE(k.dropout);
    CAPTURE(k.teacher_forcing);
    models::Seq2SeqConfig c;
    c.cell = k.cell;
    c.attention = k.att;
    c.style = k.style;
    c.src_vocab = V;
    c.tgt_vocab = V;
    c.embed = 4;
    c.hidden = 5;
    c.layers = k.layers;
    c.bidirectional = k.bidir;
    c.decoder_size = k.decoder_size;
    Rng rng(3);
    models::Seq2Seq m(c, rng);
    Rng train_rng(9, 55);
    models::ForwardOptions o;
    o.dropout = k.dropout;
    o.teacher_forcing = k.teacher_forcing;
    o.rng = &train_rng;
    if (k.dropout > 0 || k.teacher_forcing < 1) {
      // the randomness is real (another Rng state gives another loss) and reproducible (the same, the same)
      Rng other(10, 55);
      models::ForwardOptions o2 = o;
      o2.rng = &other;
      CHECK(loss_no_grad(m, b, o) == loss_no_grad(m, b, o));
      CHECK(loss_no_grad(m, b, o) != loss_no_grad(m, b, o2));
    }
    Rng pick(7);
    int checked = 0;
    CHECK(spot_check(m, b, o, pick, 3, false, &checked) == "");
    CHECK(checked >= 12);
    Rng pick2(7);
    int checked2 = 0;
    CHECK(spot_check(m, b, o, pick2, 3, true, &checked2) != "");
  }
  // Bahdanau's decoder reads [y; c]: input E + Hd
  models::Seq2SeqConfig c;
  c.attention = AttentionKind::Dot;
  c.style = models::AttentionStyle::Bahdanau;
  c.src_vocab = c.tgt_vocab = V;
  c.embed = 4;
  c.hidden = 5;
  Rng rng(1);
  models::Seq2Seq m(c, rng);
  CHECK(m.decoder_layer(0).direction(0).w_ih.value.shape() == Shape{20, 9});
  CHECK(models::Seq2SeqConfig::from_value(c.to_value(), "x").style == models::AttentionStyle::Bahdanau);
  c.attention = AttentionKind::None;
  CHECK(test::error_of([&] { c.validate(); }).find("Bahdanau-style attention needs") != std::string::npos);
}

TEST_CASE("seq2seq: parameter names, order and sub-bundles") {
  models::Seq2SeqConfig c = small_additive();
  Rng rng(1);
  models::Seq2Seq m(c, rng);
  {  // two layers: layer 1's names are those of a 2-layer PyTorch module
    models::Seq2SeqConfig c2 = c;
    c2.layers = 2;
    Rng r2(1);
    models::Seq2Seq m2(c2, r2);
    CHECK(m2.named_parameters()[9]->name == "encoder.weight_ih_l1");
    CHECK(m2.named_parameters()[9]->value.shape() == Shape{16, 8});
    CHECK(m2.named_parameters()[16]->name == "encoder.bias_hh_l1_reverse");
  }
  std::vector<std::string> names;
  for (Parameter* p : m.named_parameters()) names.push_back(p->name);
  CHECK(names == std::vector<std::string>{
                     "src_embed.weight", "encoder.weight_ih_l0", "encoder.weight_hh_l0", "encoder.bias_ih_l0",
                     "encoder.bias_hh_l0", "encoder.weight_ih_l0_reverse", "encoder.weight_hh_l0_reverse",
                     "encoder.bias_ih_l0_reverse", "encoder.bias_hh_l0_reverse", "tgt_embed.weight",
                     "decoder.weight_ih_l0", "decoder.weight_hh_l0", "decoder.bias_ih_l0", "decoder.bias_hh_l0",
                     "attention.W_q", "attention.W_k", "attention.v", "combine.weight", "combine.bias",
                     "output.weight", "output.bias"});
  const io::Value v = m.parameters_value();
  CHECK(v.names() == std::vector<std::string>{"src_embed", "encoder", "tgt_embed", "decoder", "attention", "combine",
                                              "output"});
  CHECK(io::find_tensor(v, "decoder.weight_hh_l0", "t")->shape() == Shape{32, 8});  // [4 Hd, Hd], Hd = 2H
  CHECK(io::find_tensor(v, "encoder.weight_ih_l0_reverse", "t")->shape() == Shape{16, 3});
  // the encoder's sub-bundle is a recurrent layer's bundle
  nn::Recurrent enc = nn::Recurrent::from_bundle(*v.find("encoder"), nn::CellKind::Lstm, nn::WeightLayout::Torch);
  CHECK(enc.config().bidirectional);
  // load into a fresh model: same values; a misshapen one is refused naming the parameter
  Rng rng2(2);
  models::Seq2Seq m2(c, rng2);
  m2.load_parameters(v, "model.json");
  CHECK(m2.named_parameters()[20]->value.values() == m.named_parameters()[20]->value.values());
  c.hidden = 5;
  models::Seq2Seq m3(c, rng2);
  CHECK(test::error_of([&] { m3.load_parameters(v, "model.json"); }).find("encoder.weight_ih_l0") !=
        std::string::npos);
  // config round trip
  CHECK(models::Seq2SeqConfig::from_value(c.to_value(), "x").to_value().names() == c.to_value().names());
  CHECK(models::Seq2SeqConfig::from_value(c.to_value(), "x").hidden == 5);
  CHECK(test::error_of([] { models::parse_attention_kind("luong"); }) ==
        "unknown attention \"luong\" (expected none, dot, scaled-dot, general or additive)");
}

TEST_CASE("seq2seq: additive attention of its own size") {
  models::Seq2SeqConfig c = small_additive();  // Hd = 8
  const auto shapes = [](const models::Seq2SeqConfig& config) {
    Rng rng(1);
    models::Seq2Seq m(config, rng);
    std::vector<Shape> out;
    for (Parameter* p : m.named_parameters())
      if (p->name.rfind("attention.", 0) == 0) out.push_back(p->value.shape());
    return out;
  };
  CHECK(shapes(c) == std::vector<Shape>{{8, 8}, {8, 8}, {8}});  // A = Hd by default
  CHECK(c.attention_size() == 8);
  CHECK(c.to_value().find("attention_dim") == nullptr);  // the config of a model without one reads as before
  c.attention_dim = 3;
  CHECK(shapes(c) == std::vector<Shape>{{8, 3}, {8, 3}, {3}});  // W_q, W_k [Hd, A], v [A]
  CHECK(c.to_value().find("attention_dim")->str() == "3");
  CHECK(models::Seq2SeqConfig::from_value(c.to_value(), "x").attention_size() == 3);
  models::Seq2SeqConfig same = c;
  same.attention_dim = 8;  // Hd given explicitly: the default's config
  CHECK(same.to_value().find("attention_dim") == nullptr);
  io::Value bad = c.to_value();
  bad.set("attention_dim", models::text_value("0"));
  CHECK(test::error_of([&] { models::Seq2SeqConfig::from_value(bad, "m.json"); }).find("attention_dim") !=
        std::string::npos);
  models::Seq2SeqConfig dot = c;
  dot.attention = AttentionKind::Dot;
  CHECK(test::error_of([&] { dot.validate(); }) ==
        "seq2seq: an attention size (3) goes with additive attention only, not dot");
  // a model saved with one size does not load into another
  Rng r1(1), r2(1);
  models::Seq2Seq m(c, r1);
  models::Seq2SeqConfig c4 = c;
  c4.attention_dim = 4;
  models::Seq2Seq m4(c4, r2);
  CHECK(test::error_of([&] { m4.load_parameters(m.parameters_value(), "model.json"); }).find("attention.W_q") !=
        std::string::npos);
}

TEST_CASE("seq2seq: a decoder of its own size, bridged from the encoder") {
  models::Seq2SeqConfig c = small_additive();  // He = 8
  c.decoder_size = 5;      // Hd = 5
  c.attention_dim = 2;
  CHECK(c.bridged());
  Rng rng(1);
  models::Seq2Seq m(c, rng);
  std::vector<std::pair<std::string, Shape>> got;
  for (Parameter* p : m.named_parameters())
    if (p->name.rfind("encoder.", 0) != 0) got.emplace_back(p->name, p->value.shape());
  CHECK(got == std::vector<std::pair<std::string, Shape>>{
                   {"src_embed.weight", {7, 3}},     {"tgt_embed.weight", {6, 3}},
                   {"decoder.weight_ih_l0", {20, 3}}, {"decoder.weight_hh_l0", {20, 5}},
                   {"decoder.bias_ih_l0", {20}},      {"decoder.bias_hh_l0", {20}},
                   {"attention.W_q", {5, 2}},         {"attention.W_k", {8, 2}},
                   {"attention.v", {2}},              {"combine.weight", {5, 13}},
                   {"combine.bias", {5}},             {"output.weight", {6, 5}},
                   {"output.bias", {6}},              {"bridge_h.weight", {5, 8}},
                   {"bridge_h.bias", {5}},            {"bridge_c.weight", {5, 8}},
                   {"bridge_c.bias", {5}}});
  CHECK(c.to_value().find("decoder_hidden")->str() == "5");
  const models::Seq2SeqConfig back = models::Seq2SeqConfig::from_value(c.to_value(), "x");
  CHECK(back.decoder_hidden() == 5);
  CHECK(back.attention_size() == 2);
  models::Seq2SeqConfig plain = c;
  plain.decoder_size = 8;  // the encoder's output given explicitly: no bridge, the default's config
  CHECK(!plain.bridged());
  CHECK(plain.to_value().find("decoder_hidden") == nullptr);
  // greedy decoding runs through the bridge
  const std::vector<int64_t> src = {4, 5, 6};
  models::SourceBatch sb;
  sb.N = 1, sb.S = 3, sb.src = src, sb.src_lengths = {3};
  CHECK(m.greedy(sb, 4).size() == 1);
  models::Seq2SeqConfig dot = c;
  dot.attention = AttentionKind::Dot;
  dot.attention_dim = 0;
  CHECK(test::error_of([&] { dot.validate(); }) ==
        "seq2seq: a decoder of 5 units and an encoder output of 8: the dot score needs the two sizes equal "
        "(general and additive take any)");
}

TEST_CASE("seq2seq: a tiny model overfits 16 reverse examples, and greedy decoding reproduces them") {
  train::TaskOptions t;
  t.name = "reverse";
  t.vocab_size = 6;
  t.min_len = 3;
  t.max_len = 6;
  t.train_size = 16;
  t.valid_size = 0;
  t.seed = 5;
  const train::TaskData data = train::make_task(t);
  const train::EncodedCorpus enc = train::encode(data.train, data.src_vocab, data.tgt_vocab);
  std::vector<int64_t> all(16);
  for (int64_t i = 0; i < 16; ++i) all[size_t(i)] = i;
  const train::Batch b = train::make_batch(enc, all, false);
  models::Seq2SeqConfig c;
  c.cell = nn::CellKind::Lstm;
  c.attention = AttentionKind::Dot;
  c.src_vocab = data.src_vocab.size();
  c.tgt_vocab = data.tgt_vocab.size();
  c.embed = 16;
  c.hidden = 32;
  Rng rng(1);
  models::Seq2Seq m(c, rng);
  train::AdamOptions ao;
  ao.lr = 0.02;
  train::Adam opt(m.named_parameters(), ao);
  const float first = loss_no_grad(m, b, {});
  float last = first;
  for (int step = 0; step < 300 && last > 0.02f; ++step) {
    opt.zero_grad();
    auto r = m.forward(b);
    last = r.loss.value()[0];
    autograd::backward(r.loss);
    opt.step();
  }
  CAPTURE(first);
  CHECK(first > 1.5f);
  CHECK(last < 0.05f);
  const auto decoded = m.greedy(b, 10);
  int exact = 0;
  for (int64_t n = 0; n < b.N; ++n) exact += decoded[size_t(n)] == enc.tgt[size_t(b.index[size_t(n)])];
  CHECK(exact >= 15);
  // max_len caps the output
  for (const auto& row : m.greedy(b, 2)) CHECK(row.size() <= 2);
}
