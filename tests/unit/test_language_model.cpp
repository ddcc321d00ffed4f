// The language model (models/transformer_lm.hpp), its text data (train/text_data.hpp) and its trainer
// (train/lm_trainer.hpp): cache against recompute, greedy against beam 1, the validation loss against a plain
// per-token reference loop, exact resume, the byte tokenizer's round trip, the refusals of bad text, and the
// forward against PyTorch's (tests/fixtures/gen_language_models.py).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnkit/autograd/var.hpp"
#include "attnkit/io/bundle_lookup.hpp"
#include "attnkit/io/json_reader.hpp"
#include "attnkit/tensor/compare.hpp"
#include "attnkit/decode/search.hpp"
#include "attnkit/models/checkpoint.hpp"
#include "attnkit/models/transformer_lm.hpp"
#include "attnkit/ops/softmax.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/train/lm_trainer.hpp"
#include "attnkit/train/text_data.hpp"
#include "test_util.hpp"

using namespace attnkit;

namespace {

// A file under the temporary folder, removed at the end of the test.
struct TempFile : test::TempFile {
  TempFile(const std::string& name, const std::string& text) : test::TempFile("lm_" + name, text) {}
};

const std::string kText =
    "the cat sat on the mat. the dog sat on the log. a cat and a dog sat on a mat and a log.\n"
    "the mat was red; the log was old. the cat ran, the dog ran, and the cat sat again.\n";

using test::error_of;

train::LmTrainerOptions small_options(nn::PositionalKind positional, bool norm_first, bool tied) {
  train::LmTrainerOptions o;
  o.model.layers = 2;
  o.model.heads = 2;
  o.model.d_model = 16;
  o.model.ff = 32;
  o.model.positional = positional;
  o.model.norm_first = norm_first;
  o.model.tied_output = tied;
  o.model.max_positions = 64;
  o.context = 12;
  o.steps = 15;
  o.batch_size = 4;
  o.schedule.lr = 0.01;
  o.log_every = 100;
  return o;
}

// A 2-layer recurrent model of the cell given.
train::LmTrainerOptions recurrent_options(nn::CellKind cell) {
  train::LmTrainerOptions o = small_options(nn::PositionalKind::Learned, true, false);
  o.family = "recurrent-lm";
  o.recurrent.cell = cell;
  o.recurrent.embed = 16;
  o.recurrent.hidden = 24;
  o.recurrent.layers = 2;
  return o;
}

}  // namespace

TEST_CASE("language model: the cache gives the recomputed tokens and log-probabilities; greedy is beam 1") {
  TempFile text("cache.txt", kText);
  train::TextDataSpec spec;
  spec.train_path = text.path;
  spec.context = 12;
  for (const train::LmTrainerOptions& options :
       {small_options(nn::PositionalKind::Learned, true, false), small_options(nn::PositionalKind::Sinusoidal, false, true),
        recurrent_options(nn::CellKind::Lstm), recurrent_options(nn::CellKind::Gru)}) {
    CAPTURE(options.family);
    train::LmTrainer trainer(options, train::load_text_data(spec));
    trainer.run();
    models::TranslationModel& lm = trainer.model();
    const std::vector<std::vector<int64_t>> prompts = {{10, 11, 12, 13}, {14, 10, 9, 8}};
    // step by step, the two states agree
    models::SourceBatch b = decode::sources_batch(prompts);
    auto cached = lm.start_decoding(b, true), plain = lm.start_decoding(b, false);
    std::vector<int64_t> prev = {1, 1};
    for (int t = 0; t < 20; ++t) {
      const Tensor a = cached->step(prev), r = plain->step(prev);  // [2, V]
      for (int64_t i = 0; i < a.numel(); ++i) REQUIRE(std::abs(a[i] - r[i]) < 1e-4f);
      for (int64_t n = 0; n < 2; ++n) {
        const float* row = a.data() + n * a.dim(1);
        prev[size_t(n)] = std::max_element(row, row + a.dim(1)) - row;
      }
      if (t == 10) {  // rows reordered and repeated mid-way
        cached->select_rows({1, 0, 0});
        plain->select_rows({1, 0, 0});
        prev = {prev[1], prev[0], prev[0]};
      }
    }
    // the searches: the same tokens with and without the cache; greedy equals beam 1
    decode::SearchOptions o;
    o.max_len = 30;
    o.min_len = 30;
    for (const auto& p : prompts) {
      const auto with = decode::search(lm, {p}, o);
      o.use_cache = false;
      const auto without = decode::search(lm, {p}, o);
      o.use_cache = true;
      CHECK(with[0][0].ids == without[0][0].ids);
      CHECK(with[0][0].ids.size() == 30);
      decode::SearchOptions beam = o;
      beam.strategy = decode::Strategy::Beam;
      beam.beam = 1;
      CHECK(decode::search(lm, {p}, beam)[0][0].ids == with[0][0].ids);
    }
    // the model's own greedy, too
    CHECK(lm.greedy(decode::sources_batch({prompts[0]}), 30)[0] == decode::search(lm, {prompts[0]}, o)[0][0].ids);
  }
}

TEST_CASE("language model: the validation loss is the sum of per-token losses of a plain loop") {
  TempFile train_file("ref_train.txt", kText);
  TempFile valid_file("ref_valid.txt", "the cat sat on a log; the dog ran on the red mat.\n");
  train::TextDataSpec spec;
  spec.train_path = train_file.path;
  spec.valid_path = valid_file.path;
  spec.context = 12;
  for (const train::LmTrainerOptions& o :
       {small_options(nn::PositionalKind::Learned, true, false), recurrent_options(nn::CellKind::RnnTanh)}) {
  CAPTURE(o.family);
  train::LmTrainer trainer(o, train::load_text_data(spec));
  trainer.run();
  const train::TextData data = train::load_text_data(spec);
  const train::LmEvaluation ev = trainer.evaluate(data.valid);
  // the reference: every token but the first, predicted from the tokens before it in its window of 12, by
  // running the model on that prefix alone and reading the last row's log-probability
  autograd::NoGrad no_grad;
  double nats = 0;
  int64_t tokens = 0;
  const auto& ids = data.valid.ids;
  for (size_t i = 1; i < ids.size(); ++i) {
    const size_t start = (i - 1) / 12 * 12;
    models::TeacherForcedBatch b;
    b.N = 1;
    b.T = int64_t(i - start);
    b.tgt_in.assign(ids.begin() + long(start), ids.begin() + long(i));
    b.tgt_out.assign(size_t(b.T), 0);
    b.tgt_out.back() = ids[i];
    b.src_lengths = {0};
    b.tgt_lengths = {1};
    const auto r = trainer.model().forward(b);
    const Tensor lp = ops::log_softmax_forward(r.logits.value().reshaped({b.T, -1}));  // [T, V]
    nats -= lp[(b.T - 1) * lp.dim(1) + ids[i]];
    ++tokens;
  }
  CHECK(ev.tokens == tokens);
  CHECK(ev.loss * double(ev.tokens) == doctest::Approx(nats).epsilon(1e-5));
  CHECK(ev.perplexity == doctest::Approx(std::exp(nats / double(tokens))).epsilon(1e-5));
  // char tokens of ASCII text: one byte each, so bits per byte is the loss in bits
  CHECK(ev.bits_per_byte == doctest::Approx(nats / std::log(2.0) / double(tokens)).epsilon(1e-6));
  }
}

TEST_CASE("language model: a checkpoint resumes to the uninterrupted run's parameters") {
  TempFile text("resume.txt", kText);
  TempFile ckpt("resume.json", "");
  train::TextDataSpec spec;
  spec.train_path = text.path;
  spec.context = 12;
  for (train::LmTrainerOptions o :
       {small_options(nn::PositionalKind::Learned, true, false), recurrent_options(nn::CellKind::Lstm)}) {
  CAPTURE(o.family);
  o.steps = 10;
  o.model.dropout = o.recurrent.dropout = 0.1f;
  train::LmTrainer straight(o, train::load_text_data(spec));
  straight.run();
  train::LmTrainer again(o, train::load_text_data(spec));
  again.run();
  CHECK(again.model().named_parameters()[0]->value.values() == straight.model().named_parameters()[0]->value.values());
  o.steps = 7;  // the recurrent streams: mid-way through them, with a state to carry
  o.save_path = ckpt.path;
  train::LmTrainer first(o, train::load_text_data(spec));
  first.run();
  o.steps = 10;
  o.save_path.clear();
  auto second = train::LmTrainer::resume(ckpt.path, o, train::load_text_data(spec));
  CHECK(second->step() == 7);
  second->run();
  const auto a = straight.model().named_parameters(), b = second->model().named_parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i]->value.values() == b[i]->value.values());
  // the checkpoint loads as a model of the registered family
  spec.tokenizer = models::Tokenizer::Byte;
  CHECK(error_of([&] { train::LmTrainer::resume(ckpt.path, o, train::load_text_data(spec)); })
            .find("the model reads char tokens, the data is split into byte tokens") != std::string::npos);
  spec.tokenizer = models::Tokenizer::Char;
  }
}

TEST_CASE("language model: the byte tokenizer round-trips any bytes; the char one the text") {
  std::string bytes;
  for (int b = 0; b < 256; ++b) bytes += char(b);
  bytes += "h\xC3\xA9llo <pad>";
  CHECK(models::join_tokens(models::tokenize(bytes, models::Tokenizer::Byte), models::Tokenizer::Byte) == bytes);
  CHECK(models::byte_token(0x0A) == "<0x0A>");
  CHECK(models::byte_token('a') == "a");
  CHECK(train::byte_vocab().size() == 256 + 4);
  TempFile text("round.txt", "na\xC3\xAFve caf\xC3\xA9\n\xE2\x82\xAC 5\n");
  for (models::Tokenizer tk : {models::Tokenizer::Char, models::Tokenizer::Byte}) {
    train::TextDataSpec spec;
    spec.train_path = text.path;
    spec.tokenizer = tk;
    spec.context = 4;
    const train::TextData d = train::load_text_data(spec);
    std::vector<std::string> tokens;
    for (int32_t id : d.train.ids) tokens.push_back(d.vocab.token(id));
    CHECK(models::join_tokens(tokens, tk) == "na\xC3\xAFve caf\xC3\xA9\n\xE2\x82\xAC 5\n");
    CHECK(d.train.bytes == 19);
    CHECK(d.train.size() == (tk == models::Tokenizer::Char ? 15 : 19));
  }
}

TEST_CASE("language model: bad text is refused naming the file, the line and the byte") {
  train::TextDataSpec spec;
  spec.context = 4;
  TempFile bad("bad.txt", "good line\nsecond \xC3( line\n");
  spec.train_path = bad.path;
  const std::string utf8 = error_of([&] { train::load_text_data(spec); });
  CHECK(utf8.find(bad.path + ": line 2: invalid UTF-8 at byte offset 17") != std::string::npos);
  spec.tokenizer = models::Tokenizer::Byte;  // takes any bytes
  CHECK(train::load_text_data(spec).train.size() == 25);
  TempFile empty("empty.txt", "");
  spec.train_path = empty.path;
  CHECK(error_of([&] { train::load_text_data(spec); }).find("empty file") != std::string::npos);
  TempFile small("small.txt", "abcd");
  spec.train_path = small.path;
  CHECK(error_of([&] { train::load_text_data(spec); })
            .find("4 tokens, but a context of 4 needs at least 5") != std::string::npos);
  spec.train_path = "/nonexistent/attnkit.txt";
  CHECK(error_of([&] { train::load_text_data(spec); }).find("/nonexistent/attnkit.txt: cannot read") !=
        std::string::npos);
}

TEST_CASE("language model: a UTF-8 character cut by a block's end is read whole") {
  // 1 MiB of 'a' minus one byte, then a 2-byte character across the first block's end
  std::string text(size_t{1} << 20, 'a');
  text.back() = '\xC3';
  text += "\xA9z";
  TempFile big("block.txt", text);
  train::TextDataSpec spec;
  spec.train_path = big.path;
  spec.context = 8;
  const train::TextData d = train::load_text_data(spec);
  CHECK(d.train.size() == (int64_t{1} << 20) + 1);
  CHECK(d.vocab.token(d.train.ids[d.train.ids.size() - 2]) == "\xC3\xA9");
}

TEST_CASE("language model: logits and loss equal PyTorch's (Transformer pre- and post-LN, LSTM, GRU)") {
  // tests/fixtures/gen_language_models.py: nn.TransformerEncoder under the causal mask, nn.LSTM / nn.GRU
  const std::string text = test::fixture_text("language_model/golden.json");
  const nlohmann::json j = nlohmann::json::parse(text);
  const io::Value all = io::parse_json(text, "golden.json");
  for (const char* name : {"gpt_pre", "gpt_post", "lstm", "gru"}) {
    CAPTURE(name);
    const io::Value& c = *all.find(name);
    const io::Value& config = *c.find("config");
    std::unique_ptr<models::TranslationModel> m =
        models::model_family(models::family_name(config, name), name).make(*c.find("state"), config, name);
    models::load_parameters(*m, *c.find("state"), name);
    CHECK(m->named_parameters().size() == c.find("state")->names().size());  // every tensor of the state_dict used
    models::TeacherForcedBatch b;
    const auto ids = j[name]["ids"].get<std::vector<std::vector<int64_t>>>();
    const auto targets = j[name]["targets"].get<std::vector<std::vector<int64_t>>>();
    b.N = int64_t(ids.size());
    b.T = int64_t(ids[0].size());
    for (size_t n = 0; n < ids.size(); ++n) {
      b.tgt_in.insert(b.tgt_in.end(), ids[n].begin(), ids[n].end());
      b.tgt_out.insert(b.tgt_out.end(), targets[n].begin(), targets[n].end());
    }
    b.src_lengths.assign(size_t(b.N), 0);
    b.tgt_lengths.assign(size_t(b.N), b.T);
    autograd::NoGrad no_grad;
    const models::ForwardResult r = m->forward(b);
    CHECK(compare(r.logits.value(), *io::find_tensor(c, "logits", name), Tolerance{1e-4, 1e-5}).close);
    CHECK(r.loss.value()[0] == doctest::Approx(j[name]["loss"].get<double>()).epsilon(1e-5));
  }
}
