// SentencePiece subword tokens (models/spm.hpp): base64 (io/base64.hpp), the training text's exact round trip,
// the vocabulary's ids against SentencePiece's, the language-model text read with a model, the model stored in a
// checkpoint and read back for decoding, exact resume, and the refusals (bad text, vocabulary sizes, another
// model). Skipped in a build without SentencePiece, whose refusal is checked instead.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "attnkit/decode/loader.hpp"
#include "attnkit/io/base64.hpp"
#include "attnkit/io/tensor_file.hpp"
#include "attnkit/models/checkpoint.hpp"
#include "attnkit/models/spm.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/train/lm_trainer.hpp"
#include "attnkit/train/text_data.hpp"

#include "test_util.hpp"

using namespace attnkit;

namespace {

struct TempFile : test::TempFile {
  TempFile(const std::string& name, const std::string& text) : test::TempFile("spm_" + name, text) {}
};

using test::error_of;

// Spaces (leading, trailing, doubled), tabs, empty lines, punctuation and non-ASCII UTF-8 (2, 3 and 4 bytes).
std::string sample_text() {
  std::string text;
  const char* lines[] = {"the cat sat on the mat, and the dog sat on the log.",
                         "  two  spaces\tand a tab; \"quotes\" (parens) [brackets]!",
                         "",
                         "naïve café über — “curly” 日本語 🙂 end  ",
                         "the dog ran; the cat ran? the mat was red: the log was old."};
  for (int k = 0; k < 6; ++k)
    for (const char* line : lines) text += std::string(line) + "\n";
  return text;
}

models::SpmModel trained(const std::string& path, int64_t vocab_size, const std::string& type = "unigram") {
  models::SpmTrainOptions o;
  o.vocab_size = vocab_size;
  o.type = type;
  return models::SpmModel::train(path, o);
}

train::LmTrainerOptions tiny_options() {
  train::LmTrainerOptions o;
  o.model.layers = 1;
  o.model.heads = 2;
  o.model.d_model = 16;
  o.model.ff = 32;
  o.model.max_positions = 16;
  o.model.dropout = 0.1f;
  o.context = 16;
  o.steps = 6;
  o.batch_size = 4;
  o.schedule.lr = 0.01;
  o.log_every = 100;
  return o;
}

}  // namespace

TEST_CASE("base64: RFC 4648's examples, any bytes, and the refusals") {
  CHECK(io::base64_encode("") == "");
  CHECK(io::base64_encode("f") == "Zg==");
  CHECK(io::base64_encode("fo") == "Zm8=");
  CHECK(io::base64_encode("foobar") == "Zm9vYmFy");
  std::string bytes;
  for (int b = 0; b < 256; ++b) bytes += static_cast<char>(b);
  CHECK(io::base64_decode(io::base64_encode(bytes), "x") == bytes);
  CHECK(io::base64_decode("Zm8=", "x") == "fo");
  CHECK(error_of([] { io::base64_decode("Zm8", "m"); }).find("m: base64 text of 3 characters") == 0);
  CHECK(error_of([] { io::base64_decode("Zm*=", "m"); }).find("unexpected character at offset 2") != std::string::npos);
  CHECK(error_of([] { io::base64_decode("Zm9=", "m"); }).find("non-zero padding bits") != std::string::npos);
  CHECK(error_of([] { io::base64_decode("Z=8=", "m"); }).find("unexpected character at offset 1") != std::string::npos);
}

TEST_CASE("spm: a build without SentencePiece refuses it, saying so") {
  if (models::SpmModel::available()) return;
  TempFile text("nolib.txt", sample_text());
  CHECK(error_of([&] { trained(text.path, 50); }).find("this build has no SentencePiece") != std::string::npos);
}

TEST_CASE("spm: the training text round-trips exactly; ids are SentencePiece's, the newline last") {
  if (!models::SpmModel::available()) return;
  const std::string text = sample_text();
  TempFile file("roundtrip.txt", text);
  for (const char* type : {"unigram", "bpe"}) {
    CAPTURE(type);
    const models::SpmModel spm = trained(file.path, 60, type);
    CHECK(spm.pieces() == 60);
    CHECK(spm.vocab().size() == 61);
    CHECK(spm.newline_id() == 60);
    CHECK(spm.vocab().token(60) == "\n");
    for (int64_t id = 0; id < models::Vocab::kNumSpecials; ++id)
      CHECK(spm.vocab().token(id) == models::Vocab::specials()[size_t(id)]);
    const std::vector<int64_t> ids = spm.encode(text);
    CHECK(std::count(ids.begin(), ids.end(), models::Vocab::kUnk) == 0);
    CHECK(std::count(ids.begin(), ids.end(), spm.newline_id()) == 30);
    CHECK(spm.decode(ids) == text);
    const auto characters = std::count_if(text.begin(), text.end(), [](char c) { return (c & 0xC0) != 0x80; });
    CHECK(int64_t(ids.size()) < characters);  // subwords, not characters
    // the model read back from its bytes is the same model, with the same ids
    const models::SpmModel again = models::SpmModel::from_serialized(spm.serialized(), "bytes");
    CHECK(again == spm);
    CHECK(again.encode(text) == ids);
    CHECK(again.vocab() == spm.vocab());
    // each line's first "▁" is SentencePiece's prefix: shown as a space only in a continuation
    const std::vector<int64_t> cat = spm.encode("cat");
    CHECK(spm.decode(cat) == "cat");
    CHECK(spm.decode(cat, false) == " cat");
    CHECK(spm.decode(spm.encode("a\ncat"), false) == " a\ncat");
    // a character the model lacks reads as <unk>
    const std::vector<int64_t> unknown = spm.encode("cat Ж");
    CHECK(unknown.back() == models::Vocab::kUnk);
    CHECK(spm.decode(unknown) == "cat  \xE2\x81\x87 ");
  }
}

TEST_CASE("spm: bad text and vocabulary sizes are refused in the option's terms") {
  if (!models::SpmModel::available()) return;
  TempFile bad("bad.txt", "good line\nbad \xC3( here\n");
  CHECK(error_of([&] { trained(bad.path, 20); }) ==
        bad.path + ": line 2: invalid UTF-8 at byte 5 of the line, byte offset 14 of the file (SentencePiece reads "
                   "UTF-8 text)");
  TempFile mark("mark.txt", "a \xE2\x96\x81 b\n");
  CHECK(error_of([&] { trained(mark.path, 20); }).find("line 1: U+2581") != std::string::npos);
  TempFile text("sizes.txt", sample_text());
  CHECK(error_of([&] { trained(text.path, 5000); })
            .find("--vocab-size 5000 is too large for " + text.path + ": SentencePiece finds at most") == 0);
  CHECK(error_of([&] { trained(text.path, 10); }).find("--vocab-size 10 is too small for " + text.path) == 0);
  CHECK(error_of([&] { trained(text.path, 3); }).find("--vocab-size 3: a SentencePiece model's is in [8,") == 0);
  TempFile empty("empty.txt", "\n\n");
  CHECK(error_of([&] { trained(empty.path, 20); }).find("no text to train SentencePiece on") != std::string::npos);
  const models::SpmModel spm = trained(text.path, 60);
  CHECK(error_of([&] { spm.encode("ok\nno \xFF"); }) == "spm tokenizer: invalid UTF-8 at byte 7");
  CHECK(error_of([&] { models::SpmModel::from_serialized("not a model", "m.model"); })
            .find("m.model: not a SentencePiece model") == 0);
  const models::SpmModel other = trained(text.path, 50);
  CHECK(error_of([&] { models::check_same_spm(spm, "a.json", other, "b.model"); })
            .find("the SentencePiece model of b.model differs from the one of a.json (60 pieces in a.json, 50 in "
                  "b.model)") == 0);
}

TEST_CASE("spm: a language model's text, checkpoint, decoding and exact resume") {
  if (!models::SpmModel::available()) return;
  const std::string text = sample_text();
  TempFile file("lm.txt", text);
  TempFile ckpt("lm.json", "");
  const models::SpmModel spm = trained(file.path, 60);
  train::TextDataSpec spec;
  spec.train_path = spec.valid_path = file.path;
  spec.tokenizer = models::Tokenizer::Spm;
  spec.context = 16;
  spec.spm = spm;
  const train::TextData data = train::load_text_data(spec);
  CHECK(data.vocab == spm.vocab());
  CHECK(data.train.bytes == int64_t(text.size()));
  CHECK(std::vector<int64_t>(data.train.ids.begin(), data.train.ids.end()) == spm.encode(text));

  train::LmTrainerOptions o = tiny_options();
  train::LmTrainer straight(o, train::load_text_data(spec));
  straight.run();
  o.steps = 4;
  o.save_path = ckpt.path;
  train::LmTrainer first(o, train::load_text_data(spec));
  first.run();
  // the checkpoint holds the model: it decodes with nothing else
  const io::Value v = io::read_value_file(ckpt.path);
  const models::CheckpointHead head = models::read_checkpoint_head(v, ckpt.path);
  REQUIRE(head.src_spm);
  CHECK(*head.src_spm == spm);
  CHECK(head.src_tokenizer == models::Tokenizer::Spm);
  CHECK(v.find("spm")->find("target") == nullptr);  // a language model's one model, stored once
  const decode::LoadedModel loaded = decode::load_checkpoint(ckpt.path);
  int64_t unknown = 0;
  const std::vector<int64_t> prompt = decode::encode_source(loaded, "the cat sat", &unknown);
  CHECK(prompt == spm.encode("the cat sat"));
  CHECK(unknown == 0);
  CHECK(decode::target_text(loaded, decode::target_tokens(loaded, spm.encode("the dog"))) == " the dog");
  CHECK(train::LmTrainer::stored_spm(ckpt.path) == spm);
  // resume: the uninterrupted run's parameters
  o.steps = 6;
  o.save_path.clear();
  auto second = train::LmTrainer::resume(ckpt.path, o, train::load_text_data(spec));
  CHECK(second->step() == 4);
  second->run();
  const auto a = straight.model().named_parameters(), b = second->model().named_parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i]->value.values() == b[i]->value.values());
  // another model is refused, naming both
  spec.spm = trained(file.path, 50);
  CHECK(error_of([&] { train::LmTrainer::resume(ckpt.path, o, train::load_text_data(spec)); })
            .find("the SentencePiece model of the data's tokenizer differs from the one of " + ckpt.path) == 0);
}
