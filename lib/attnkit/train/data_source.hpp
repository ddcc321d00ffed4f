// The data a training run reads: a built-in task's sets, or files, with the vocabularies built from the
// training data or read from a vocabulary file.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/train/data.hpp"
#include "attnkit/train/distributed.hpp"
#include "attnkit/train/tasks.hpp"
#include "attnkit/train/vocab.hpp"

namespace attnkit::train {

// Where the examples come from: a built-in task, or files.
struct DataSpec {
  std::optional<TaskOptions> task;  // set: a built-in task
  std::string train_path;           // else: TSV / JSONL files
  std::string valid_path;           // optional
  DataOptions data;                 // tokenizers (spm: with their models), max_len, skip_bad_lines (files only)
  std::string vocab_path;           // optional: the vocabularies from this file (read_vocab_pair, vocab.hpp)
};

struct TrainingData {
  Corpus train, valid;
  Vocab src_vocab, tgt_vocab;
  std::string vocab_source;  // the vocabulary file they came from, or "" (built from the data)
  // A side whose tokenizer is spm: its SentencePiece model, whose vocabulary is the side's (stored in the
  // checkpoint with it)
  std::optional<models::SpmModel> src_spm, tgt_spm;
  // The training file cut into parts (load_training_parts): `parts` are this process's, parts first_part ..
  // first_part + parts.size() − 1 of part_count, covering bytes [bytes.first, bytes.second) of the file; `train`
  // then holds no examples, only the file's name and tokenizers. part_count 0: `train` is the whole set.
  std::vector<Corpus> parts;
  int64_t first_part = 0, part_count = 0;
  std::pair<int64_t, int64_t> bytes{0, 0};
  // Where the vocabularies come from, for messages: the vocabulary file, else the training data's name.
  const std::string& vocab_name() const { return vocab_source.empty() ? train.name : vocab_source; }
};
// A task's sets and vocabularies, or the files read with vocabularies built from the training file
// (source side and target side each in the tokenizer's default order; a side whose tokenizer is spm: its
// SentencePiece model's); with spec.vocab_path, the vocabularies of that file instead (tokens it lacks become
// <unk>; refused for an spm side). Errors name the file and line.
TrainingData load_training_data(const DataSpec& spec);

// The training file of spec cut into `parts` parts (train/data_part.hpp), of which this process reads only its
// own, parts [first, first + parts / comm.size()) with first = comm.rank() · parts / comm.size(): one Corpus a
// part, in TrainingData::parts. The vocabularies are spec.vocab_path's, or the whole training file's: every
// part's token counts are gathered over `comm` and merged in part order, which gives the vocabularies of the
// whole file for every process count without any process reading it whole. The validation file is read by
// rank 0 only (it evaluates). A bad line in any part (or a file none of whose parts holds an example) is
// refused on every process with the same message, that of the first part to fail. Collective.
TrainingData load_training_parts(const DataSpec& spec, Communicator& comm, int64_t parts);

}  // namespace attnkit::train
