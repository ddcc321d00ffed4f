// Sequence-to-sequence data: pairs of token sequences (a Corpus) read from TSV or JSONL files, encoded
// with vocabularies, and grouped by source for multi-reference scoring.
//
// Formats (one example per line, lines numbered from 1; a blank or whitespace-only line is skipped;
// a UTF-8 byte-order mark at the start and a CR before each LF are dropped):
//   TSV    source TAB target                        "hello\thh ax l ow"
//   JSONL  {"src": "source", "tgt": "target"}        other members are ignored
// Format::Auto picks JSONL for names ending in .jsonl, .ndjson or .json, TSV otherwise.
// Each side is tokenized with the options' tokenizer (vocab.hpp), the target with target_tokenizer when
// it is given ("hello<TAB>hh ax l ow": char for the spelling, space for the phonemes). A side whose tokenizer
// is spm is split by its SentencePiece model (src_spm, tgt_spm; models/spm.hpp) into the pieces of the model's
// vocabulary ("▁the", "▁c", "at"; a character the model lacks is "<unk>", a newline inside a JSONL text "\n").
//
// A bad line is an attnkit::Error "<file>:<line>: <reason>", the reasons being:
//   TSV    "no tab between source and target"  "2 tabs (expected 1 between source and target)"
//   JSONL  "invalid JSON: <parser's message>"  "expected a JSON object {\"src\": ..., \"tgt\": ...}"
//          "missing \"src\""  "\"tgt\" is not a string (a number)" (an array, null, ...)
//   both   "empty source"  "empty target"  "source: <tokenizer's reason>"
//          "source has 51 tokens, more than the maximum length 50"
// With skip_bad_lines, bad lines are counted and skipped instead; the first few messages are kept
// (Corpus::bad_line_messages) for the caller's report (Corpus::bad_lines_summary()).
// A file with no examples (empty, or every line blank or skipped) is an error naming the file.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/models/spm.hpp"
#include "attnkit/train/vocab.hpp"

namespace attnkit::train {

enum class DataFormat { Auto, Tsv, Jsonl };

struct DataOptions {
  Tokenizer tokenizer = Tokenizer::Char;         // the source's, and the target's unless target_tokenizer
  std::optional<Tokenizer> target_tokenizer;
  std::optional<models::SpmModel> src_spm, tgt_spm;  // the SentencePiece model of a side whose tokenizer is spm
  DataFormat format = DataFormat::Auto;
  int64_t max_len = 0;          // > 0: most tokens on either side (without <bos>/<eos>); 0: no limit
  bool skip_bad_lines = false;  // count and skip bad lines instead of failing on the first
  int64_t max_reported = 5;     // bad-line messages kept when skipping
  bool allow_empty = false;     // no examples is an empty Corpus, not an error (one part of a file)
  // >= 0: the text starts at this byte of the file (one part of it), and a bad line is named by its own
  // byte in the file, "<file>: the line at byte <n>: <reason>", instead of a line number the part cannot know
  int64_t first_byte = -1;
};

// The format a file of this name is read in: `format` unless Auto, else JSONL for .jsonl, .ndjson and .json,
// TSV otherwise.
DataFormat data_format(std::string_view name, DataFormat format);

struct Example {
  std::vector<std::string> src;
  std::vector<std::string> tgt;
  int64_t line = 0;  // where it was read (1-based), or its index in a generated set
};

struct Corpus {
  std::string name;  // the file name, or a generated set's description ("reverse/train")
  Tokenizer src_tokenizer = Tokenizer::Char;
  Tokenizer tgt_tokenizer = Tokenizer::Char;
  std::vector<Example> examples;
  int64_t bad_lines = 0;                        // lines skipped (skip_bad_lines)
  std::vector<std::string> bad_line_messages;   // the first max_reported of them, "<file>:<line>: <reason>"

  int64_t size() const { return static_cast<int64_t>(examples.size()); }
  // "" when nothing was skipped, else "train.tsv: skipped 3 bad lines; first: train.tsv:7: no tab ...; ...".
  std::string bad_lines_summary() const;
};

// Reads a data file ("-" is standard input); throws attnkit::Error naming the file (and line).
Corpus read_corpus(const std::string& path, const DataOptions& options);
// The same on text already in memory; `name` stands for the file in messages and picks the format
// when options.format is Auto.
Corpus parse_corpus(std::string_view text, std::string_view name, const DataOptions& options);

// The untokenized texts of a file's pairs, for training a tokenizer on one side (a SentencePiece model): every
// line read as read_corpus reads it, a line that cannot be split into source and target refused (or, with
// skip_bad_lines, skipped); src[i] and tgt[i] are one pair's, lines[i] its line.
struct TextPairs {
  std::vector<std::string> src, tgt;
  std::vector<int64_t> lines;
};
TextPairs read_text_pairs(const std::string& path, const DataOptions& options);

// Vocabulary building from a corpus' sources, targets or both (VocabBuilder with the given order).
enum class Side { Source, Target, Both };
void add_to_vocab(VocabBuilder& builder, const Corpus& corpus, Side side);
Vocab build_vocab(const Corpus& corpus, Side side, VocabOrder order, int64_t min_count = 1, int64_t max_size = 0);

// A corpus as ids: src[i], tgt[i] are example i's sequences (no <bos>/<eos>; Batcher adds them).
struct EncodedCorpus {
  std::vector<std::vector<int64_t>> src;
  std::vector<std::vector<int64_t>> tgt;
  int64_t unknown_src = 0;  // tokens mapped to <unk>
  int64_t unknown_tgt = 0;
  int64_t size() const { return static_cast<int64_t>(src.size()); }
};
EncodedCorpus encode(const Corpus& corpus, const Vocab& src_vocab, const Vocab& tgt_vocab);
// Every target's ids reversed in place (a right-to-left model's data, trainer.hpp `right_left`).
void reverse_targets(EncodedCorpus& corpus);

// Examples grouped by source, for scoring against every reference (G2P words with several
// pronunciations): groups in order of the source's first appearance, each with its distinct targets
// in order of appearance, and the index of its first example.
struct ReferenceGroup {
  std::vector<std::string> src;
  std::vector<std::vector<std::string>> references;
  int64_t first_example = 0;
};
std::vector<ReferenceGroup> group_by_source(const Corpus& corpus);

}  // namespace attnkit::train
