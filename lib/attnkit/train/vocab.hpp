// Tokenizers and vocabularies for sequence-to-sequence data.
//
// Tokenizers (Tokenizer, tokenize, join_tokens):
//   char   one token per Unicode character (a UTF-8 sequence); spaces are tokens too ("jan 5" -> j a n ␠ 5).
//          Text that is not valid UTF-8 is refused.
//   space  tokens separated by runs of spaces or tabs ("hh ax l ow" -> hh ax l ow); leading and trailing
//          spaces are ignored.
//   ids    whitespace-separated non-negative integers below 2^31, kept as their canonical decimal text
//          ("007" -> "7"); anything else ("-3", "x1", "+4") is refused. Ids are tokens like any other: they
//          are mapped through the vocabulary (id k is NOT row k of an embedding: rows 0-3 are the specials).
//   The special tokens' texts (<pad> <bos> <eos> <unk>) are reserved: data containing one as a token is
//   refused (a space-tokenized "<eos>" in a data file would otherwise be silently taken as the real one).
//
// Vocabulary (Vocab): ids 0-3 are the special tokens <pad>=0 <bos>=1 <eos>=2 <unk>=3, then the tokens.
//   Built from data (VocabBuilder) in one of three deterministic orders (VocabOrder):
//     Frequency  most frequent first; ties by text in byte order (the default for char and space)
//     FirstSeen  in order of first appearance in the data
//     Numeric    by integer value (the default for ids: "2" before "10"); every token must be an integer
//   or given as a list of tokens (Vocab(tokens)).
//   Stored in a checkpoint as the bundle {"tokens": ["<pad>", "<bos>", "<eos>", "<unk>", "a", ...]} (to_value /
//   from_value); the list is an io::Value::other whose JSON text is the list itself.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "attnkit/io/value.hpp"

namespace attnkit::train {

enum class Tokenizer { Char, Space, Ids };

// "char", "space", "ids" -> Tokenizer; anything else is an attnkit::Error listing the three.
Tokenizer tokenizer_from_name(std::string_view name);
std::string_view tokenizer_name(Tokenizer tokenizer);

// Splits `text` into `out` (cleared first). Returns "" on success, else the reason it cannot
// ("invalid UTF-8 at byte 3", "\"x1\" is not a non-negative integer", "\"<eos>\" is a reserved special token");
// the data readers turn the reason into a bad-line message.
std::string tokenize(std::string_view text, Tokenizer tokenizer, std::vector<std::string>& out);
// The same, throwing attnkit::Error with the reason.
std::vector<std::string> tokenize(std::string_view text, Tokenizer tokenizer);
// The inverse for display: char concatenates, space and ids join with one space.
std::string join_tokens(const std::vector<std::string>& tokens, Tokenizer tokenizer);

enum class VocabOrder { Frequency, FirstSeen, Numeric };
// The order a tokenizer's vocabulary is built in by default: Numeric for ids, else Frequency.
VocabOrder default_order(Tokenizer tokenizer);

class Vocab {
 public:
  static constexpr int64_t kPad = 0;
  static constexpr int64_t kBos = 1;
  static constexpr int64_t kEos = 2;
  static constexpr int64_t kUnk = 3;
  static constexpr int64_t kNumSpecials = 4;
  static const std::array<std::string, 4>& specials();  // "<pad>", "<bos>", "<eos>", "<unk>"

  Vocab();  // the special tokens only
  // The special tokens, then `tokens` in the given order. Refuses an empty token, a duplicate and a special
  // token's text (attnkit::Error naming the token and its position).
  explicit Vocab(const std::vector<std::string>& tokens);

  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  // Every token including the specials, by id.
  const std::vector<std::string>& tokens() const { return tokens_; }
  const std::string& token(int64_t id) const;  // throws for an id outside [0, size())
  // The id of `token`, or unk_id() when it is not in the vocabulary.
  int64_t id(std::string_view token) const;
  bool contains(std::string_view token) const;

  // Tokens -> ids (unknown tokens -> unk_id(); no <bos> or <eos> added). `unknown`, when given, counts them.
  std::vector<int64_t> encode(const std::vector<std::string>& tokens, int64_t* unknown = nullptr) const;
  // Ids -> tokens: stops at the first <eos>, skips <pad> and <bos>, keeps <unk> as "<unk>".
  // An id outside [0, size()) is refused.
  std::vector<std::string> decode(const std::vector<int64_t>& ids) const;

  // {"tokens": [every token by id, the specials included]}.
  io::Value to_value() const;
  // The inverse; `what` names the bundle in messages ("model.json: vocab/target"). Refuses a missing or
  // non-list "tokens", a non-string entry, specials not first in their order, an empty or duplicate token.
  static Vocab from_value(const io::Value& value, std::string_view what);

  // The special tokens' ids. A vocabulary built here or read from a checkpoint has them at 0-3 (kPad ...);
  // one exported from elsewhere (from_exported) may have them anywhere.
  int64_t pad_id() const { return pad_; }
  int64_t bos_id() const { return bos_; }
  int64_t eos_id() const { return eos_; }
  int64_t unk_id() const { return unk_; }
  // Special ids given by a model's config; -1: not given.
  struct SpecialIds {
    int64_t pad = -1, bos = -1, eos = -1, unk = -1;
  };
  // A vocabulary exported with a model (transformer-decode --weights): {"tokens": [...]} in the exporter's
  // order, every entry kept at its position. Each special's id is the one `given`, else the position of its
  // text (<pad> <bos> <eos> <unk>) in the list; the four must be distinct ids inside the list. Refuses a
  // special neither given nor listed, an id outside the list, two specials on one id, an empty or duplicate
  // token (naming `what`).
  static Vocab from_exported(const io::Value& value, const SpecialIds& given, std::string_view what);

  bool operator==(const Vocab& other) const {
    return tokens_ == other.tokens_ && pad_ == other.pad_ && bos_ == other.bos_ && eos_ == other.eos_ &&
           unk_ == other.unk_;
  }
  bool operator!=(const Vocab& other) const { return !(*this == other); }

 private:
  friend Vocab parse_vocab(std::string_view text, std::string_view name);
  // Adds a token after the checks of Vocab(tokens); messages say "<what>: <entry> <position> ...".
  void append(const std::string& token, int64_t position, std::string_view what, std::string_view entry);

  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int64_t> ids_;
  int64_t pad_ = kPad, bos_ = kBos, eos_ = kEos, unk_ = kUnk;
};

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

// "" when the two are equal, else the first difference, for a resume's message:
//   "42 tokens in model.json, 43 in train.tsv; token 17 is \"ax\" in model.json, \"ay\" in train.tsv"
std::string vocab_difference(const Vocab& expected, std::string_view expected_name, const Vocab& actual,
                             std::string_view actual_name);
// Throws attnkit::Error("<what>: the vocabulary differs: <difference>") unless the two are equal.
void check_same_vocab(const Vocab& expected, std::string_view expected_name, const Vocab& actual,
                      std::string_view actual_name, std::string_view what);

// Counts tokens, then builds a Vocab.
class VocabBuilder {
 public:
  void add(const std::vector<std::string>& tokens);
  // Tokens seen at least min_count times, in `order`; max_size > 0 keeps at most that many ids in all
  // (specials included; the first tokens in the order are kept). Numeric refuses a non-integer token.
  Vocab build(VocabOrder order, int64_t min_count = 1, int64_t max_size = 0) const;

 private:
  std::unordered_map<std::string, int64_t> index_;  // token -> position in counts_
  std::vector<std::pair<std::string, int64_t>> counts_;  // in order of first appearance
};

}  // namespace attnkit::train
