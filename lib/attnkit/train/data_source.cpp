#include "attnkit/train/data_source.hpp"

#include "attnkit/tensor/error.hpp"
#include "attnkit/train/data_part.hpp"

namespace attnkit::train {

namespace {

// A side whose tokenizer is spm has its SentencePiece model's vocabulary, the other sides keep theirs.
void use_spm_vocabularies(TrainingData& d, const DataSpec& spec) {
  const Tokenizer src = spec.data.tokenizer, tgt = spec.data.target_tokenizer.value_or(spec.data.tokenizer);
  AK_CHECK(src != Tokenizer::Spm || spec.data.src_spm, "{}: the source's spm tokenizer needs its SentencePiece model",
           spec.train_path);
  AK_CHECK(tgt != Tokenizer::Spm || spec.data.tgt_spm, "{}: the target's spm tokenizer needs its SentencePiece model",
           spec.train_path);
  AK_CHECK(spec.vocab_path.empty() || (src != Tokenizer::Spm && tgt != Tokenizer::Spm),
           "--vocab {}: a side whose tokenizer is spm has its SentencePiece model's vocabulary", spec.vocab_path);
  if (src == Tokenizer::Spm) d.src_vocab = spec.data.src_spm->vocab(), d.src_spm = spec.data.src_spm;
  if (tgt == Tokenizer::Spm) d.tgt_vocab = spec.data.tgt_spm->vocab(), d.tgt_spm = spec.data.tgt_spm;
}

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
  if (d.train.src_tokenizer != Tokenizer::Spm)
    d.src_vocab = build_vocab(d.train, Side::Source, default_order(d.train.src_tokenizer));
  if (d.train.tgt_tokenizer != Tokenizer::Spm)
    d.tgt_vocab = build_vocab(d.train, Side::Target, default_order(d.train.tgt_tokenizer));
  use_spm_vocabularies(d, spec);
  return d;
}
}  // namespace

namespace {

// --vocab: the file's vocabularies replace the ones built from the data.
void use_vocab_file(TrainingData& d, const std::string& path) {
  VocabPair v = read_vocab_pair(path);
  d.src_vocab = std::move(v.source);
  d.tgt_vocab = std::move(v.target);
  d.vocab_source = path;
}

}  // namespace

TrainingData load_training_data(const DataSpec& spec) {
  TrainingData d = load_data(spec);
  if (!spec.vocab_path.empty()) use_vocab_file(d, spec.vocab_path);
  return d;
}

TrainingData load_training_parts(const DataSpec& spec, Communicator& comm, int64_t parts) {
  AK_CHECK(!spec.task && !spec.train_path.empty(), "training data in parts: a training file, not a task");
  AK_CHECK(parts >= 1 && parts % comm.size() == 0, "{}: {} parts for {} processes", spec.train_path, parts,
           comm.size());
  TrainingData d;
  const int64_t count = parts / comm.size();
  d.first_part = comm.rank() * count;
  d.part_count = parts;
  VocabBuilder src, tgt;
  uint64_t mine[2] = {0, 0};  // examples, bad lines
  // A bad line stops every process with one message: each says whether its parts (and rank 0 the validation
  // file) read, and the first failure in rank order is every process's error.
  std::string failed;
  try {
    for (int64_t p = d.first_part; p < d.first_part + count; ++p) {
      std::pair<int64_t, int64_t> range;
      d.parts.push_back(read_corpus_part(spec.train_path, p, parts, spec.data, &range));
      if (p == d.first_part) d.bytes.first = range.first;
      d.bytes.second = range.second;
      add_to_vocab(src, d.parts.back(), Side::Source);
      add_to_vocab(tgt, d.parts.back(), Side::Target);
      mine[0] += uint64_t(d.parts.back().size());
      mine[1] += uint64_t(d.parts.back().bad_lines);
    }
    if (comm.rank() == 0 && !spec.valid_path.empty()) d.valid = read_corpus(spec.valid_path, spec.data);
  } catch (const Error& e) {
    failed = e.what();
    if (failed.empty()) failed = spec.train_path + ": cannot be read";
  }
  for (const std::string& m : comm.allgather(failed))
    if (!m.empty()) throw Error(m);
  d.train.name = spec.train_path;
  d.train.src_tokenizer = spec.data.tokenizer;
  d.train.tgt_tokenizer = spec.data.target_tokenizer.value_or(spec.data.tokenizer);
  std::vector<uint64_t> all(size_t(2 * comm.size()));
  comm.allgather(mine, 2, all.data());
  uint64_t examples = 0, bad = 0;
  for (int r = 0; r < comm.size(); ++r) examples += all[size_t(2 * r)], bad += all[size_t(2 * r + 1)];
  if (examples == 0) {
    AK_CHECK(bad > 0, "{}: no examples (every line is blank)", spec.train_path);
    fail("{}: no examples left: {} bad lines skipped", spec.train_path, bad);
  }
  if (!spec.vocab_path.empty()) {
    use_spm_vocabularies(d, spec);  // refuses --vocab for an spm side
    use_vocab_file(d, spec.vocab_path);
    return d;
  }
  // every rank's counts, merged in rank order: the parts' order
  VocabBuilder whole_src, whole_tgt;
  for (const std::string& b : comm.allgather(src.to_bytes()))
    whole_src.merge(VocabBuilder::from_bytes(b, spec.train_path + ": the source tokens' counts"));
  for (const std::string& b : comm.allgather(tgt.to_bytes()))
    whole_tgt.merge(VocabBuilder::from_bytes(b, spec.train_path + ": the target tokens' counts"));
  const Tokenizer src_tok = spec.data.tokenizer, tgt_tok = spec.data.target_tokenizer.value_or(spec.data.tokenizer);
  try {
    if (src_tok != Tokenizer::Spm) d.src_vocab = whole_src.build(default_order(src_tok));
    if (tgt_tok != Tokenizer::Spm) d.tgt_vocab = whole_tgt.build(default_order(tgt_tok));
  } catch (const Error& e) {
    fail("{}: {}", spec.train_path, e.what());
  }
  use_spm_vocabularies(d, spec);
  return d;
}

}  // namespace attnkit::train
