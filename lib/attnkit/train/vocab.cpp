#include "attnkit/train/vocab.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "attnkit/io/json_reader.hpp"
#include "attnkit/io/tensor_file.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::train {

namespace {

// Length of the UTF-8 sequence starting at s[i], or 0 when it is not a valid one (overlong forms,
// surrogates and code points past U+10FFFF are invalid, as in RFC 3629).
size_t utf8_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  const auto cont = [&](size_t k) { return k < s.size() && (b(k) & 0xC0) == 0x80; };
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(i + 1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(i + 1) || !cont(i + 2)) return 0;
    if (c == 0xE0 && b(i + 1) < 0xA0) return 0;   // overlong
    if (c == 0xED && b(i + 1) >= 0xA0) return 0;  // surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(i + 1) || !cont(i + 2) || !cont(i + 3)) return 0;
    if (c == 0xF0 && b(i + 1) < 0x90) return 0;   // overlong
    if (c == 0xF4 && b(i + 1) >= 0x90) return 0;  // past U+10FFFF
    return 4;
  }
  return 0;
}

// "" or "invalid UTF-8 at byte N" (1-based).
std::string check_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_length(s, i);
    if (n == 0) return fmt::format("invalid UTF-8 at byte {}", i + 1);
    i += n;
  }
  return "";
}

bool is_special(std::string_view token) {
  for (const auto& s : Vocab::specials())
    if (token == s) return true;
  return false;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// A canonical non-negative decimal integer: "0", or digits without a leading zero.
bool is_canonical_integer(std::string_view s) {
  if (s.empty() || (s.size() > 1 && s[0] == '0')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Text shown in messages: quoted JSON-style, cut after 40 bytes.
std::string show(std::string_view s) {
  std::string shown(s.substr(0, 40));
  if (s.size() > 40) shown += "...";
  return nlohmann::json(shown).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

Tokenizer tokenizer_from_name(std::string_view name) {
  if (name == "char") return Tokenizer::Char;
  if (name == "space") return Tokenizer::Space;
  if (name == "ids") return Tokenizer::Ids;
  fail("unknown tokenizer {}: expected char, space or ids", show(name));
}

std::string_view tokenizer_name(Tokenizer tokenizer) {
  switch (tokenizer) {
    case Tokenizer::Char: return "char";
    case Tokenizer::Space: return "space";
    case Tokenizer::Ids: return "ids";
  }
  return "?";
}

std::string tokenize(std::string_view text, Tokenizer tokenizer, std::vector<std::string>& out) {
  out.clear();
  if (std::string bad = check_utf8(text); !bad.empty()) return bad;
  if (tokenizer == Tokenizer::Char) {
    for (size_t i = 0; i < text.size();) {
      const size_t n = utf8_length(text, i);
      out.emplace_back(text.substr(i, n));
      i += n;
    }
    return "";
  }
  for (size_t i = 0; i < text.size();) {
    if (is_space(text[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && !is_space(text[j])) ++j;
    std::string_view token = text.substr(i, j - i);
    i = j;
    if (tokenizer == Tokenizer::Space) {
      if (is_special(token)) return fmt::format("{} is a reserved special token", show(token));
      out.emplace_back(token);
      continue;
    }
    // ids: digits only, below 2^31, written canonically.
    const bool digits = std::all_of(token.begin(), token.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits) return fmt::format("{} is not a non-negative integer", show(token));
    size_t first = token.find_first_not_of('0');
    std::string_view value = first == std::string_view::npos ? std::string_view("0") : token.substr(first);
    if (value.size() > 10 || (value.size() == 10 && value > "2147483647"))
      return fmt::format("{} is too large for an id (at most 2147483647)", show(token));
    out.emplace_back(value);
  }
  return "";
}

std::vector<std::string> tokenize(std::string_view text, Tokenizer tokenizer) {
  std::vector<std::string> out;
  std::string bad = tokenize(text, tokenizer, out);
  if (!bad.empty()) fail("{} tokenizer: {}", tokenizer_name(tokenizer), bad);
  return out;
}

std::string join_tokens(const std::vector<std::string>& tokens, Tokenizer tokenizer) {
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0 && tokenizer != Tokenizer::Char) out += ' ';
    out += tokens[i];
  }
  return out;
}

VocabOrder default_order(Tokenizer tokenizer) {
  return tokenizer == Tokenizer::Ids ? VocabOrder::Numeric : VocabOrder::Frequency;
}

// --- Vocab ---

const std::array<std::string, 4>& Vocab::specials() {
  static const std::array<std::string, 4> names = {"<pad>", "<bos>", "<eos>", "<unk>"};
  return names;
}

Vocab::Vocab() {
  for (const auto& s : specials()) {
    ids_.emplace(s, size());
    tokens_.push_back(s);
  }
}

Vocab::Vocab(const std::vector<std::string>& tokens) : Vocab() {
  tokens_.reserve(tokens.size() + kNumSpecials);
  for (size_t i = 0; i < tokens.size(); ++i) append(tokens[i], static_cast<int64_t>(i), "vocabulary", "token");
}

void Vocab::append(const std::string& t, int64_t position, std::string_view what, std::string_view entry) {
  AK_CHECK(!t.empty(), "{}: {} {} is empty", what, entry, position);
  std::string bad = check_utf8(t);
  AK_CHECK(bad.empty(), "{}: {} {} is not valid text: {}", what, entry, position, bad);
  AK_CHECK(!is_special(t), "{}: {} {} is {}, a special token's text (the specials are ids 0-3)", what, entry,
           position, show(t));
  auto [it, added] = ids_.emplace(t, size());
  AK_CHECK(added, "{}: {} {} is {} again (id {})", what, entry, position, show(t), it->second);
  tokens_.push_back(t);
}

const std::string& Vocab::token(int64_t id) const {
  AK_CHECK(id >= 0 && id < size(), "vocabulary: id {} is out of range (the vocabulary has {} tokens)", id, size());
  return tokens_[static_cast<size_t>(id)];
}

int64_t Vocab::id(std::string_view token) const {
  auto it = ids_.find(std::string(token));
  return it == ids_.end() ? unk_ : it->second;
}

bool Vocab::contains(std::string_view token) const { return ids_.count(std::string(token)) > 0; }

std::vector<int64_t> Vocab::encode(const std::vector<std::string>& tokens, int64_t* unknown) const {
  std::vector<int64_t> ids;
  ids.reserve(tokens.size());
  for (const auto& t : tokens) {
    auto it = ids_.find(t);
    if (it == ids_.end()) {
      ids.push_back(unk_);
      if (unknown) ++*unknown;
    } else {
      ids.push_back(it->second);
    }
  }
  return ids;
}

std::vector<std::string> Vocab::decode(const std::vector<int64_t>& ids) const {
  std::vector<std::string> out;
  for (int64_t id : ids) {
    if (id == eos_) break;
    if (id == pad_ || id == bos_) continue;
    out.push_back(token(id));
  }
  return out;
}

namespace {

// The "tokens" list of a vocabulary object {"tokens": [...]} (the reader keeps a list of strings as an Other
// value with its JSON text), as a JSON array; its entries are checked by the caller.
nlohmann::json token_list(const io::Value& value, std::string_view what) {
  AK_CHECK(value.is_bundle(), "{}: a vocabulary must be an object {{\"tokens\": [...]}}", what);
  const io::Value* tokens = value.find("tokens");
  AK_CHECK(tokens != nullptr, "{}: the vocabulary has no \"tokens\" list", what);
  AK_CHECK(tokens->kind() == io::Value::Kind::Other && !tokens->json().empty(),
           "{}: \"tokens\" must be a list of strings", what);
  nlohmann::json list = nlohmann::json::parse(tokens->json(), nullptr, false);
  AK_CHECK(list.is_array(), "{}: \"tokens\" must be a list of strings", what);
  return list;
}

}  // namespace

Vocab Vocab::from_exported(const io::Value& value, const SpecialIds& given, std::string_view what) {
  nlohmann::json list = token_list(value, what);
  Vocab vocab;
  vocab.tokens_.clear();
  vocab.ids_.clear();
  for (size_t i = 0; i < list.size(); ++i) {
    AK_CHECK(list[i].is_string(), "{}: tokens[{}] is not a string", what, i);
    std::string t = list[i].get<std::string>();
    AK_CHECK(!t.empty(), "{}: tokens[{}] is empty", what, i);
    const std::string bad = check_utf8(t);
    AK_CHECK(bad.empty(), "{}: tokens[{}] is not valid text: {}", what, i, bad);
    auto [it, added] = vocab.ids_.emplace(t, static_cast<int64_t>(i));
    AK_CHECK(added, "{}: tokens[{}] is {} again (id {})", what, i, show(t), it->second);
    vocab.tokens_.push_back(std::move(t));
  }
  const int64_t V = vocab.size();
  const int64_t wanted[4] = {given.pad, given.bos, given.eos, given.unk};
  const char* names[4] = {"pad_id", "bos_id", "eos_id", "unk_id"};
  int64_t ids[4];
  for (int k = 0; k < 4; ++k) {
    if (wanted[k] >= 0) {
      AK_CHECK(wanted[k] < V, "{}: {} {} is outside the {} tokens", what, names[k], wanted[k], V);
      ids[k] = wanted[k];
    } else {
      auto it = vocab.ids_.find(specials()[size_t(k)]);
      AK_CHECK(it != vocab.ids_.end(), "{}: no {} token in \"tokens\" and no \"{}\" in the config", what,
               specials()[size_t(k)], names[k]);
      ids[k] = it->second;
    }
    for (int j = 0; j < k; ++j)
      AK_CHECK(ids[j] != ids[k], "{}: {} and {} are both id {} (the special tokens must differ)", what,
               specials()[size_t(j)], specials()[size_t(k)], ids[k]);
  }
  vocab.pad_ = ids[0], vocab.bos_ = ids[1], vocab.eos_ = ids[2], vocab.unk_ = ids[3];
  return vocab;
}

io::Value Vocab::to_value() const {
  nlohmann::json list = tokens_;
  return io::Value::bundle().set("tokens", io::Value::other("the vocabulary's tokens", list.dump()));
}

Vocab Vocab::from_value(const io::Value& value, std::string_view what) {
  nlohmann::json list = token_list(value, what);
  AK_CHECK(list.size() >= static_cast<size_t>(kNumSpecials),
           "{}: \"tokens\" has {} entries; it must start with the 4 special tokens <pad> <bos> <eos> <unk>", what,
           list.size());
  Vocab vocab;
  const std::string where = fmt::format("{}: \"tokens\"", what);
  for (size_t i = 0; i < list.size(); ++i) {
    AK_CHECK(list[i].is_string(), "{}: tokens[{}] is not a string", what, i);
    std::string t = list[i].get<std::string>();
    if (i < static_cast<size_t>(kNumSpecials)) {
      AK_CHECK(t == specials()[i], "{}: tokens[{}] is {}, expected {} (ids 0-3 are <pad> <bos> <eos> <unk>)", what, i,
               show(t), show(specials()[i]));
    } else {
      vocab.append(t, static_cast<int64_t>(i), what, "tokens entry");
    }
  }
  return vocab;
}

Vocab parse_vocab(std::string_view text, std::string_view name) {
  const size_t start = text.find_first_not_of(" \t\r\n");
  if (start != std::string_view::npos && text[start] == '{')
    return Vocab::from_value(io::parse_json(text, name), name);
  Vocab vocab;
  int64_t line_no = 0;
  size_t specials_seen = 0;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(at, end - at);
    at = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    AK_CHECK(!line.empty(), "{}:{}: a blank line (one token per line; a token cannot be empty)", name, line_no);
    if (specials_seen == static_cast<size_t>(line_no - 1) && specials_seen < Vocab::specials().size() &&
        line == Vocab::specials()[specials_seen]) {
      ++specials_seen;
      continue;
    }
    AK_CHECK(specials_seen == 0 || specials_seen == Vocab::specials().size(),
             "{}:{}: the file starts with {} of the special tokens; list all four (<pad> <bos> <eos> <unk>) or none",
             name, line_no, specials_seen);
    vocab.append(std::string(line), line_no, name, "line");
  }
  AK_CHECK(line_no > 0, "{}: the vocabulary file is empty", name);
  return vocab;
}

VocabPair parse_vocab_pair(std::string_view text, std::string_view name) {
  const size_t start = text.find_first_not_of(" \t\r\n");
  if (start == std::string_view::npos || text[start] != '{') {
    Vocab v = parse_vocab(text, name);
    return {v, v};
  }
  return vocab_pair_of(io::parse_json(text, name), name);
}

VocabPair vocab_pair_of(const io::Value& doc, std::string_view name) {
  AK_CHECK(doc.is_bundle(), "{}: a vocabulary file must be an object or one token per line", name);
  const io::Value* vocab = doc.find("vocab");
  const io::Value& v = vocab ? *vocab : doc;
  const std::string where = std::string(name) + (vocab ? ": vocab" : "");
  if (v.is_bundle() && v.find("tokens") == nullptr) {
    const io::Value* src = v.find("source");
    const io::Value* tgt = v.find("target");
    AK_CHECK(src && tgt, "{}: expected {{\"tokens\": [...]}} or {{\"source\": {{\"tokens\": [...]}}, \"target\": ...}}",
             where);
    return {Vocab::from_value(*src, where + "/source"), Vocab::from_value(*tgt, where + "/target")};
  }
  Vocab both = Vocab::from_value(v, where);
  return {both, both};
}

VocabPair read_vocab_pair(const std::string& path) {
  if (io::is_binary_format(path)) return vocab_pair_of(io::read_value_file(path), path);  // a checkpoint
  return parse_vocab_pair(io::read_text(path), path == "-" ? "<stdin>" : path);
}

Vocab read_vocab(const std::string& path) { return parse_vocab(io::read_text(path), path == "-" ? "<stdin>" : path); }

std::string vocab_difference(const Vocab& expected, std::string_view expected_name, const Vocab& actual,
                             std::string_view actual_name) {
  if (expected == actual) return "";
  std::string out;
  if (expected.size() != actual.size())
    out = fmt::format("{} tokens in {}, {} in {}", expected.size(), expected_name, actual.size(), actual_name);
  const int64_t common = std::min(expected.size(), actual.size());
  for (int64_t i = 0; i < common; ++i) {
    if (expected.token(i) != actual.token(i)) {
      if (!out.empty()) out += "; ";
      out += fmt::format("token {} is {} in {}, {} in {}", i, show(expected.token(i)), expected_name,
                         show(actual.token(i)), actual_name);
      return out;
    }
  }
  // Same prefix: name the first extra token.
  const Vocab& longer = expected.size() > actual.size() ? expected : actual;
  std::string_view longer_name = expected.size() > actual.size() ? expected_name : actual_name;
  out += fmt::format("; {} has {} first as token {}", longer_name, show(longer.token(common)), common);
  return out;
}

void check_same_vocab(const Vocab& expected, std::string_view expected_name, const Vocab& actual,
                      std::string_view actual_name, std::string_view what) {
  std::string diff = vocab_difference(expected, expected_name, actual, actual_name);
  AK_CHECK(diff.empty(), "{}: the vocabulary differs: {}", what, diff);
}

// --- VocabBuilder ---

void VocabBuilder::add(const std::vector<std::string>& tokens) {
  for (const auto& t : tokens) {
    auto [it, added] = index_.emplace(t, static_cast<int64_t>(counts_.size()));
    if (added) counts_.emplace_back(t, 0);
    ++counts_[static_cast<size_t>(it->second)].second;
  }
}

Vocab VocabBuilder::build(VocabOrder order, int64_t min_count, int64_t max_size) const {
  AK_CHECK(max_size == 0 || max_size >= Vocab::kNumSpecials,
           "vocabulary: a maximum size of {} leaves no room for the 4 special tokens", max_size);
  std::vector<std::pair<std::string, int64_t>> kept;
  for (const auto& c : counts_)
    if (c.second >= min_count) kept.push_back(c);
  switch (order) {
    case VocabOrder::FirstSeen:
      break;
    case VocabOrder::Frequency:
      std::stable_sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) {
        return a.second != b.second ? a.second > b.second : a.first < b.first;
      });
      break;
    case VocabOrder::Numeric:
      for (const auto& c : kept)
        AK_CHECK(is_canonical_integer(c.first), "vocabulary: numeric order needs integer tokens, got {}",
                 show(c.first));
      // Canonical decimals: shorter is smaller, then by text.
      std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) {
        return a.first.size() != b.first.size() ? a.first.size() < b.first.size() : a.first < b.first;
      });
      break;
  }
  if (max_size > 0 && static_cast<int64_t>(kept.size()) > max_size - Vocab::kNumSpecials)
    kept.resize(static_cast<size_t>(max_size - Vocab::kNumSpecials));
  std::vector<std::string> tokens;
  tokens.reserve(kept.size());
  for (auto& c : kept) tokens.push_back(c.first);
  return Vocab(tokens);
}

}  // namespace attnkit::train
