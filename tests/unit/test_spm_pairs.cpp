// SentencePiece tokens for an encoder-decoder (train/spm_models.hpp, the spm sides of train/data.hpp): each
// column of a pairs file trains its own model whose pieces give every line back exactly; both models are stored in
// the checkpoint (JSON and .safetensors) and read back for decoding with the same tokenization; resume refuses a
// model file other than the checkpoint's, naming it. Skipped in a build without SentencePiece.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "attnkit/decode/loader.hpp"
#include "attnkit/io/tensor_file.hpp"
#include "attnkit/models/checkpoint.hpp"
#include "attnkit/models/spm.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/threads.hpp"
#include "attnkit/train/data_source.hpp"
#include "attnkit/train/spm_models.hpp"
#include "attnkit/train/trainer.hpp"

#include "test_util.hpp"

using namespace attnkit;

namespace {

struct TempFile : test::TempFile {
  TempFile(const std::string& name, const std::string& text) : test::TempFile("spm_pairs_" + name, text) {}
};

using test::error_of;

// English -> German-ish pairs with doubled and leading spaces and non-ASCII UTF-8 on both sides.
const std::vector<std::pair<std::string, std::string>>& sample_pairs() {
  static const std::vector<std::pair<std::string, std::string>> pairs = {
      {"the cat sat on the mat", "die katze saß auf der matte"},
      {"the dog ran to the big red house", "der hund lief zum großen roten haus"},
      {"  a café  über alles", "  ein café  über alles"},
      {"naïve dog, naïve cat!", "naiver hund, naive katze!"},
      {"the house was red; the mat was old.", "das haus war rot; die matte war alt."},
      {"日本 and 🙂 at the end ", "日本 und 🙂 am ende "}};
  return pairs;
}

std::string sample_tsv() {
  std::string text;
  for (int k = 0; k < 4; ++k)
    for (const auto& [src, tgt] : sample_pairs()) text += src + "\t" + tgt + "\n";
  return text;
}

train::SpmModelsSpec both_sides(const std::string& path) {
  train::SpmModelsSpec spec;
  spec.train_path = path;
  spec.source.spm = spec.target.spm = true;
  spec.source.vocab_size = 40;
  spec.target.vocab_size = 44;
  spec.target.size_option = "--target-vocab-size";
  return spec;
}

train::DataSpec data_spec(const std::string& path, const train::SpmModels& m) {
  train::DataSpec spec;
  spec.train_path = spec.valid_path = path;
  spec.data.tokenizer = models::Tokenizer::Spm;
  spec.data.src_spm = m.source;
  spec.data.tgt_spm = m.target;
  return spec;
}

train::TrainerOptions tiny_options(int64_t steps, const std::string& save) {
  train::TrainerOptions o;
  o.model.cell = nn::CellKind::Gru;
  o.model.attention = models::AttentionKind::Dot;
  o.model.embed = 8;
  o.model.hidden = 8;
  o.steps = steps;
  o.batch_size = 4;
  o.schedule.lr = 0.01;
  o.log_every = 100;
  o.save_path = save;
  return o;
}

}  // namespace

TEST_CASE("spm pairs: each column's model gives every line of it back exactly") {
  if (!models::SpmModel::available()) return;
  TempFile tsv("roundtrip.tsv", sample_tsv());
  const train::SpmModels m = train::spm_models(both_sides(tsv.path));
  REQUIRE(m.source);
  REQUIRE(m.target);
  CHECK(m.source->pieces() == 40);
  CHECK(m.target->pieces() == 44);
  CHECK(*m.source != *m.target);
  const train::TrainingData d = train::load_training_data(data_spec(tsv.path, m));
  CHECK(d.src_vocab == m.source->vocab());
  CHECK(d.tgt_vocab == m.target->vocab());
  REQUIRE(d.train.size() == int64_t(4 * sample_pairs().size()));
  for (size_t i = 0; i < sample_pairs().size(); ++i) {
    const auto& [src, tgt] = sample_pairs()[i];
    const train::Example& ex = d.train.examples[i];
    CHECK(m.source->decode(m.source->encode(src)) == src);
    CHECK(m.target->decode(m.target->encode(tgt)) == tgt);
    // the corpus holds the pieces of the model's vocabulary, which decode to the line's text
    CHECK(d.src_vocab.encode(ex.src) == m.source->encode(src));
    CHECK(d.tgt_vocab.encode(ex.tgt) == m.target->encode(tgt));
    CHECK(m.source->decode(d.src_vocab.encode(ex.src)) == src);
  }
  // a size too small for the column's characters is refused in the option's terms, naming the column
  train::SpmModelsSpec small = both_sides(tsv.path);
  small.target.vocab_size = 10;
  CHECK(error_of([&] { train::spm_models(small); })
            .find("--target-vocab-size 10 is too small for " + tsv.path + " (targets)") == 0);
}

TEST_CASE("spm pairs: both models live in the checkpoint and decode alike; resume refuses another model file") {
  if (!models::SpmModel::available()) return;
  set_num_threads(1);
  TempFile tsv("ckpt.tsv", sample_tsv());
  const train::SpmModels m = train::spm_models(both_sides(tsv.path));
  for (const char* ext : {".json", ".safetensors"}) {
    CAPTURE(ext);
    TempFile ckpt(std::string("ckpt") + ext, "");
    train::Trainer trainer(tiny_options(2, ckpt.path), train::load_training_data(data_spec(tsv.path, m)));
    trainer.run();
    const io::Value v = io::read_value_file(ckpt.path);
    const models::CheckpointHead head = models::read_checkpoint_head(v, ckpt.path);
    REQUIRE(head.src_spm);
    REQUIRE(head.tgt_spm);
    CHECK(*head.src_spm == *m.source);
    CHECK(*head.tgt_spm == *m.target);
    CHECK(head.src_tokenizer == models::Tokenizer::Spm);
    CHECK(head.tgt_tokenizer == models::Tokenizer::Spm);
    // decoding: the same pieces for a source, and a target's pieces read back as its text
    const decode::LoadedModel loaded = decode::load_checkpoint(ckpt.path);
    for (const auto& [src, tgt] : sample_pairs()) {
      int64_t unknown = 0;
      CHECK(decode::encode_source(loaded, src, &unknown) == m.source->encode(src));
      CHECK(unknown == 0);
      CHECK(decode::target_text(loaded, decode::target_tokens(loaded, m.target->encode(tgt))) == tgt);
    }
    // resume: the checkpoint's models; the same model file is accepted, another refused naming it
    train::SpmModelsSpec again = both_sides(tsv.path);
    again.resume_path = ckpt.path;
    again.source.vocab_size = again.target.vocab_size = 0;
    const train::SpmModels stored = train::spm_models(again);
    CHECK(*stored.source == *m.source);
    CHECK(*stored.target == *m.target);
    TempFile same("same.model", m.target->serialized());
    again.target.model_path = same.path;
    again.target.model_option = "--target-spm-model";
    CHECK(*train::spm_models(again).target == *m.target);
    TempFile other("other.model", m.source->serialized());
    again.target.model_path = other.path;
    const std::string refused = error_of([&] { train::spm_models(again); });
    CHECK(refused.find("--target-spm-model " + other.path) != std::string::npos);
    CHECK(refused.find("differs from the one of " + ckpt.path) != std::string::npos);
    again.target.model_path.clear();
    again.source.vocab_size = 30;
    CHECK(error_of([&] { train::spm_models(again); }).find("--vocab-size 30 disagrees with the checkpoint") == 0);
    // the trainer itself refuses data split by another model
    train::SpmModels swapped = m;
    swapped.target = m.source;
    CHECK(error_of([&] {
            train::Trainer::resume(ckpt.path, tiny_options(4, ""), train::load_training_data(data_spec(tsv.path, swapped)));
          }).find("the SentencePiece model of the data's target tokenizer differs from the one of " + ckpt.path) == 0);
  }
}

TEST_CASE("spm pairs: one side spm, the other char; a checkpoint stores the one model") {
  if (!models::SpmModel::available()) return;
  set_num_threads(1);
  TempFile tsv("one.tsv", sample_tsv());
  TempFile ckpt("one.json", "");
  train::SpmModelsSpec spec = both_sides(tsv.path);
  spec.source.spm = false;
  const train::SpmModels m = train::spm_models(spec);
  CHECK(!m.source);
  REQUIRE(m.target);
  train::DataSpec data = data_spec(tsv.path, m);
  data.data.tokenizer = models::Tokenizer::Char;
  data.data.target_tokenizer = models::Tokenizer::Spm;
  train::Trainer trainer(tiny_options(1, ckpt.path), train::load_training_data(data));
  trainer.run();
  const decode::LoadedModel loaded = decode::load_checkpoint(ckpt.path);
  CHECK(loaded.src_tokenizer == models::Tokenizer::Char);
  CHECK(!loaded.src_spm);
  REQUIRE(loaded.tgt_spm);
  CHECK(*loaded.tgt_spm == *m.target);
  CHECK(decode::encode_source(loaded, "the cat", nullptr).size() == 7);
  // --vocab with an spm side is refused
  data.vocab_path = tsv.path;
  CHECK(error_of([&] { train::load_training_data(data); }).find("--vocab " + tsv.path + ": a side whose tokenizer is spm") == 0);
}
