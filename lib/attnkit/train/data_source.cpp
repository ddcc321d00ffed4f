#include "attnkit/train/data_source.hpp"

#include "attnkit/tensor/error.hpp"

namespace attnkit::train {

namespace {
TrainingData load_data(const DataSpec& spec) {
  TrainingData d;
  if (spec.task) {
    TaskData t = make_task(*spec.task);
    d.train = std::move(t.train);
    d.valid = std::move(t.valid);
    d.src_vocab = std::move(t.src_vocab);
    d.tgt_vocab = std::move(t.tgt_vocab);
    return d;
  }
  AK_CHECK(!spec.train_path.empty(), "training data: no task and no training file");
  d.train = read_corpus(spec.train_path, spec.data);
  if (!spec.valid_path.empty()) d.valid = read_corpus(spec.valid_path, spec.data);
  d.src_vocab = build_vocab(d.train, Side::Source, default_order(d.train.src_tokenizer));
  d.tgt_vocab = build_vocab(d.train, Side::Target, default_order(d.train.tgt_tokenizer));
  return d;
}
}  // namespace

TrainingData load_training_data(const DataSpec& spec) {
  TrainingData d = load_data(spec);
  if (!spec.vocab_path.empty()) {
    VocabPair v = read_vocab_pair(spec.vocab_path);
    d.src_vocab = std::move(v.source);
    d.tgt_vocab = std::move(v.target);
    d.vocab_source = spec.vocab_path;
  }
  return d;
}

}  // namespace attnkit::train
