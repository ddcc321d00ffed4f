// Vocabularies built from data, and read from vocabulary files, for training.
// The tokenizers and the Vocab itself (the token <-> id mapping a model decodes with) are models/tokenizer.hpp's
// and models/vocab.hpp's; train names them here too, since the data readers and the trainer use them throughout.
//
// Building (VocabBuilder) in one of three deterministic orders (VocabOrder):
//   Frequency  most frequent first; ties by text in byte order (the default for char and space)
//   FirstSeen  in order of first appearance in the data
//   Numeric    by integer value (the default for ids: "2" before "10"); every token must be an integer
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "attnkit/io/value.hpp"
#include "attnkit/models/tokenizer.hpp"
#include "attnkit/models/vocab.hpp"

namespace attnkit::train {

using models::check_same_vocab;
using models::join_tokens;
using models::tokenize;
using models::Tokenizer;
using models::tokenizer_from_name;
using models::tokenizer_name;
using models::Vocab;
using models::vocab_difference;

enum class VocabOrder { Frequency, FirstSeen, Numeric };
// The order a tokenizer's vocabulary is built in by default: Numeric for ids, else Frequency.
VocabOrder default_order(Tokenizer tokenizer);

// A vocabulary given in a file ("-" is standard input): either the JSON form {"tokens": [...]} (what to_value
// writes, as in a checkpoint), or text with one token per line (the specials' lines, if the file starts with
// them, are skipped; a CR before the LF is dropped; blank lines are refused, since a token cannot be empty).
// Errors name the file (and the line).
Vocab read_vocab(const std::string& path);
Vocab parse_vocab(std::string_view text, std::string_view name);

// The vocabularies of both sides of a translation model from one file (seq2seq-train --vocab):
//   text, one token per line, or {"tokens": [...]}      the same vocabulary for source and target
//   {"source": {"tokens": [...]}, "target": {"tokens": [...]}}   each side its own (a checkpoint's "vocab")
//   a checkpoint (an object with a "vocab" member)      its two vocabularies (a .safetensors / .npz one too)
// Errors name the file.
struct VocabPair {
  Vocab source, target;
};
VocabPair read_vocab_pair(const std::string& path);
VocabPair parse_vocab_pair(std::string_view text, std::string_view name);
// The vocabularies of a document already read (a checkpoint, or {"source": ..., "target": ...}).
VocabPair vocab_pair_of(const io::Value& doc, std::string_view name);

// Counts tokens, then builds a Vocab.
class VocabBuilder {
 public:
  void add(const std::vector<std::string>& tokens);
  // Tokens seen at least min_count times, in `order`; max_size > 0 keeps at most that many ids in all
  // (specials included; the first tokens in the order are kept). Numeric refuses a non-integer token.
  Vocab build(VocabOrder order, int64_t min_count = 1, int64_t max_size = 0) const;
  // Adds `other`'s counts, its new tokens after this one's in its order of first appearance: the builders of a
  // file's parts merged in part order hold the whole file's counts and order, for every cut.
  void merge(const VocabBuilder& other);
  // The counts as bytes (to send to other processes: each token's length, bytes and count) and back;
  // `name` is said in the message for bytes that are not such a list.
  std::string to_bytes() const;
  static VocabBuilder from_bytes(std::string_view bytes, std::string_view name);

 private:
  std::unordered_map<std::string, int64_t> index_;  // token -> position in counts_
  std::vector<std::pair<std::string, int64_t>> counts_;  // in order of first appearance
};

}  // namespace attnkit::train
