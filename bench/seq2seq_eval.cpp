// seq2seq_eval: scores a seq2seq-train checkpoint on held-out TSV / JSONL pairs by greedy decoding, each
// distinct source scored against every target it has in the file (G2P: a word's pronunciations; a
// prediction is right if it equals any of them): phoneme (token) error rate and word error rate
// (train/metrics.hpp). Prints one JSON object. Used by bench/g2p.sh.
//   seq2seq_eval --model MODEL.json --train train.tsv --test test.tsv [--tokenizer char]
//       [--target-tokenizer space] [--max-len 40] [--batch 256] [--threads 2] [--show 5]
// --train is the file the model was trained on: the vocabularies are rebuilt from it and checked
// against the checkpoint's (train::Trainer::resume). --show N prints N wrong predictions to stderr.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/threads.hpp"
#include "attnkit/train/metrics.hpp"
#include "attnkit/train/trainer.hpp"

using namespace attnkit;

int main(int argc, char** argv) try {
  std::string model_path, train_path, test_path, tokenizer = "char", target_tokenizer;
  int64_t max_len = 40, batch = 256, show = 0;
  int threads = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") model_path = v;
    else if (k == "--train") train_path = v;
    else if (k == "--test") test_path = v;
    else if (k == "--tokenizer") tokenizer = v;
    else if (k == "--target-tokenizer") target_tokenizer = v;
    else if (k == "--max-len") max_len = std::atoll(v.c_str());
    else if (k == "--batch") batch = std::atoll(v.c_str());
    else if (k == "--threads") threads = std::atoi(v.c_str());
    else if (k == "--show") show = std::atoll(v.c_str());
    else {
      std::fprintf(stderr, "seq2seq_eval: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (model_path.empty() || train_path.empty() || test_path.empty()) {
    std::fprintf(stderr, "usage: seq2seq_eval --model MODEL.json --train TRAIN --test TEST [options]\n");
    return 2;
  }
  set_num_threads(threads);
  train::DataSpec spec;
  spec.train_path = train_path;
  spec.data.tokenizer = train::tokenizer_from_name(tokenizer);
  if (!target_tokenizer.empty()) spec.data.target_tokenizer = train::tokenizer_from_name(target_tokenizer);
  train::TrainingData data = train::load_training_data(spec);
  const train::Corpus test = train::read_corpus(test_path, spec.data);
  const train::Vocab src_vocab = data.src_vocab, tgt_vocab = data.tgt_vocab;
  train::TrainerOptions o;
  o.steps = 0;
  auto trainer = train::Trainer::resume(model_path, o, std::move(data));
  models::TranslationModel& model = trainer->model();

  // One example per distinct source, decoded in batches.
  const std::vector<train::ReferenceGroup> groups = train::group_by_source(test);
  train::Corpus firsts;
  firsts.src_tokenizer = test.src_tokenizer;
  firsts.tgt_tokenizer = test.tgt_tokenizer;
  for (const auto& g : groups) firsts.examples.push_back(test.examples[size_t(g.first_example)]);
  const train::EncodedCorpus enc = train::encode(firsts, src_vocab, tgt_vocab);
  train::ErrorRates rates;
  int64_t shown = 0;
  for (const train::Batch& b : train::batches_in_order(enc, batch, false)) {
    const auto decoded = model.greedy(b, max_len);
    for (int64_t n = 0; n < b.N; ++n) {
      const auto& g = groups[size_t(b.index[size_t(n)])];
      std::vector<std::string> pred;
      for (int64_t id : decoded[size_t(n)]) pred.push_back(tgt_vocab.token(id));
      const int64_t wrong = rates.wrong_words();
      rates.add(pred, g.references);
      if (rates.wrong_words() > wrong && shown < show) {
        ++shown;
        std::string s, p, r;
        for (const auto& t : g.src) s += t;
        for (const auto& t : pred) p += (p.empty() ? "" : " ") + t;
        for (const auto& t : g.references[0]) r += (r.empty() ? "" : " ") + t;
        std::cerr << s << ": predicted \"" << p << "\", reference \"" << r << "\"\n";
      }
    }
  }
  nlohmann::json j;
  j["words"] = rates.words();
  j["per"] = rates.token_error_rate();
  j["wer"] = rates.word_error_rate();
  j["wrong_words"] = rates.wrong_words();
  j["step"] = trainer->step();
  std::cout << j.dump() << '\n';
  return 0;
} catch (const Error& e) {
  std::fprintf(stderr, "seq2seq_eval: %s\n", e.what());
  return 1;
}
