// SentencePiece subword tokens (the --tokenizer spm of language models): a SentencePiece model (unigram or BPE)
// trained on a text file, or read from a .model file, and the vocabulary a model uses with it.
//
//   vocabulary  the specials <pad>=0 <bos>=1 <eos>=2 <unk>=3, then every SentencePiece piece that is not a
//               control or unknown piece, in SentencePiece's id order, then the newline token "\n" last.
//               A model trained here puts SentencePiece's own <pad> <bos> <eos> <unk> at ids 0-3, so that
//               SentencePiece's id k is the vocabulary's id k for every piece, and the newline is id P (P the
//               SentencePiece model's pieces). A model read from a file keeps its pieces' order; its unknown
//               piece reads as <unk> and its control pieces (<s>, </s>) are not in the vocabulary.
//   newlines    SentencePiece reads lines: a text is cut at '\n', each line encoded, and the newline token put
//               between lines (and after the last one when the text ends with '\n').
//   exactness   the trainer uses the identity normalization, keeps extra whitespace and learns every character of
//               its sample (character coverage 1), and tab is always a piece of its own (SentencePiece's trainer
//               does not learn it otherwise): decode(encode(text)) == text for the training text. Characters the
//               model lacks read as <unk> (shown as " ⁇ "). Text that is not UTF-8, or that holds U+2581 "▁"
//               (SentencePiece's mark for a space, which would come back as a space), is refused.
//   storage     serialized() is the model's protobuf bytes, stored base64 in a checkpoint's "spm" section
//               (models/checkpoint.hpp), so that a checkpoint decodes with nothing else.
// A build without SentencePiece (CMake did not find libsentencepiece-dev) has available() false, and every
// function that needs the library refuses with a message saying so.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/models/vocab.hpp"

namespace attnkit::models {

struct SpmTrainOptions {
  int64_t vocab_size = 8000;        // SentencePiece's pieces, its specials and the tab included
  std::string type = "unigram";     // or "bpe"
  int64_t max_sentences = 1000000;  // lines sampled for training (>= kMinSentences; SentencePiece's
                                    // input_sentence_size)
  std::string option;               // the option vocab_size came from, for messages ("" : "--vocab-size")
};

struct SpmTrainReport {
  int64_t lines = 0;    // non-empty lines of the file, cut into pieces of at most kMaxSentenceBytes
  int64_t sampled = 0;  // of them, the ones the trainer read (all when lines <= max_sentences)
};

class SpmModel {
 public:
  // Lines longer than this are given to the trainer as several sentences (cut at a UTF-8 boundary).
  static constexpr size_t kMaxSentenceBytes = 4096;
  static constexpr int64_t kMinVocabSize = 8;
  static constexpr int64_t kMaxVocabSize = int64_t{1} << 20;
  static constexpr int64_t kMinSentences = 1000;  // SpmTrainOptions::max_sentences (SentencePiece's: > 100)

  // Whether this build has SentencePiece; without it the functions below refuse, saying so.
  static bool available();
  // Trains on the lines of the file `path`. Refuses, naming the file: text it cannot read, invalid UTF-8 or
  // U+2581 (line and byte offset), and the trainer's refusals in the option's terms ("--vocab-size 5000 is too
  // large for FILE: ...").
  static SpmModel train(const std::string& path, const SpmTrainOptions& options, SpmTrainReport* report = nullptr);
  // The same on texts in memory (one column of a pairs file), each cut at its newlines; `what` names them in
  // messages ("pairs.tsv (source)").
  static SpmModel train_texts(const std::vector<std::string>& texts, const std::string& what,
                              const SpmTrainOptions& options, SpmTrainReport* report = nullptr);
  // A serialized model (a .model file's bytes); `what` names it in messages.
  static SpmModel from_serialized(std::string bytes, std::string_view what);
  static SpmModel read_file(const std::string& path);

  const std::string& serialized() const;
  int64_t pieces() const;        // SentencePiece's vocabulary size (P)
  const Vocab& vocab() const;    // above: P + 1 tokens for a model trained here
  int64_t newline_id() const;

  // One line (no '\n') -> vocabulary ids, appended to `out`. Returns "" or the reason the text is refused
  // ("invalid UTF-8 at byte 3"; byte offsets 1-based within `line`); `bad_offset`, when given, gets the 0-based
  // offset of the refused byte.
  std::string encode_line(std::string_view line, std::vector<int64_t>& out, size_t* bad_offset = nullptr) const;
  // A text (newlines allowed) -> ids; throws attnkit::Error with the reason.
  std::vector<int64_t> encode(std::string_view text) const;
  // Ids -> text: pieces with "▁" as spaces, the newline token as '\n', specials as nothing, <unk> as " ⁇ ".
  // `line_start`: the ids start a line, whose first "▁" is SentencePiece's prefix and not shown; false for a
  // continuation of text already shown (a prompt's).
  std::string decode(const std::vector<int64_t>& ids, bool line_start = true) const;

  bool operator==(const SpmModel& other) const { return serialized() == other.serialized(); }
  bool operator!=(const SpmModel& other) const { return !(*this == other); }

 private:
  struct Impl;
  explicit SpmModel(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// "" when `s` can be encoded, else the reason with the 1-based byte offset, and *offset the 0-based one.
std::string spm_unencodable(std::string_view s, size_t* offset = nullptr);

// Refuses a model that differs from `expected`, naming both: "<what>: the SentencePiece model of X differs from
// the one of Y (P pieces vs Q...)".
void check_same_spm(const SpmModel& expected, std::string_view expected_name, const SpmModel& actual,
                    std::string_view actual_name);

}  // namespace attnkit::models
