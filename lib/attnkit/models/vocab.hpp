// A translation model's vocabulary: the token <-> id mapping of one side (source or target).
//   Ids 0-3 are the special tokens <pad>=0 <bos>=1 <eos>=2 <unk>=3 (models/tokens.hpp), then the tokens;
//   built from data by train/vocab.hpp's VocabBuilder, or given as a list of tokens (Vocab(tokens)).
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
#include "attnkit/models/tokenizer.hpp"
#include "attnkit/models/tokens.hpp"

namespace attnkit::models {

class Vocab {
 public:
  static constexpr int64_t kPad = models::kPad;
  static constexpr int64_t kBos = models::kBos;
  static constexpr int64_t kEos = models::kEos;
  static constexpr int64_t kUnk = models::kUnk;
  static constexpr int64_t kNumSpecials = models::kNumSpecials;
  static const std::array<std::string, 4>& specials() { return special_tokens(); }  // "<pad>", "<bos>", ...

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

  // Adds a token with the checks of Vocab(tokens); messages say "<what>: <entry> <position> ..." (a vocabulary
  // file's reader: "vocab.txt: line 7 ...").
  void append(const std::string& token, int64_t position, std::string_view what, std::string_view entry);

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
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int64_t> ids_;
  int64_t pad_ = kPad, bos_ = kBos, eos_ = kEos, unk_ = kUnk;
};

// "" when the two are equal, else the first difference, for a resume's message:
//   "42 tokens in model.json, 43 in train.tsv; token 17 is \"ax\" in model.json, \"ay\" in train.tsv"
std::string vocab_difference(const Vocab& expected, std::string_view expected_name, const Vocab& actual,
                             std::string_view actual_name);
// Throws attnkit::Error("<what>: the vocabulary differs: <difference>") unless the two are equal.
void check_same_vocab(const Vocab& expected, std::string_view expected_name, const Vocab& actual,
                      std::string_view actual_name, std::string_view what);

}  // namespace attnkit::models
