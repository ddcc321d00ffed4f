#include "attnkit/train/vocab.hpp"

#include <algorithm>
#include <climits>
#include <cstring>

#include "attnkit/io/json_reader.hpp"
#include "attnkit/io/tensor_file.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::train {

VocabOrder default_order(Tokenizer tokenizer) {
  return tokenizer == Tokenizer::Ids ? VocabOrder::Numeric : VocabOrder::Frequency;
}

namespace {
// A UTF-8 byte-order mark before the first token or the JSON is no part of them (as with data files).
std::string_view without_bom(std::string_view text) { return text.substr(0, 3) == "\xEF\xBB\xBF" ? text.substr(3) : text; }
}  // namespace

Vocab parse_vocab(std::string_view text, std::string_view name) {
  text = without_bom(text);
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
  text = without_bom(text);
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
  return parse_vocab_pair(io::read_plain_text(path), path == "-" ? "<stdin>" : path);
}


Vocab read_vocab(const std::string& path) { return parse_vocab(io::read_plain_text(path), path == "-" ? "<stdin>" : path); }

// --- VocabBuilder ---

void VocabBuilder::add(const std::vector<std::string>& tokens) {
  for (const auto& t : tokens) {
    auto [it, added] = index_.emplace(t, static_cast<int64_t>(counts_.size()));
    if (added) counts_.emplace_back(t, 0);
    ++counts_[static_cast<size_t>(it->second)].second;
  }
}

void VocabBuilder::merge(const VocabBuilder& other) {
  for (const auto& [token, count] : other.counts_) {
    auto [it, added] = index_.emplace(token, static_cast<int64_t>(counts_.size()));
    if (added) counts_.emplace_back(token, 0);
    counts_[static_cast<size_t>(it->second)].second += count;
  }
}

std::string VocabBuilder::to_bytes() const {
  std::string out;
  auto put = [&](uint64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); };
  for (const auto& [token, count] : counts_) {
    put(token.size());
    out += token;
    put(static_cast<uint64_t>(count));
  }
  return out;
}

VocabBuilder VocabBuilder::from_bytes(std::string_view bytes, std::string_view name) {
  VocabBuilder b;
  auto get = [&](uint64_t& v) {
    AK_CHECK(bytes.size() >= sizeof v, "{}: token counts cut short", name);
    std::memcpy(&v, bytes.data(), sizeof v);
    bytes.remove_prefix(sizeof v);
  };
  while (!bytes.empty()) {
    uint64_t length = 0, count = 0;
    get(length);
    AK_CHECK(length <= bytes.size(), "{}: token counts cut short", name);
    std::string token(bytes.substr(0, length));
    bytes.remove_prefix(length);
    get(count);
    AK_CHECK(count >= 1 && count <= uint64_t(INT64_MAX) && b.index_.count(token) == 0,
             "{}: a token counted {} times, or twice", name, count);
    b.index_.emplace(token, static_cast<int64_t>(b.counts_.size()));
    b.counts_.emplace_back(std::move(token), static_cast<int64_t>(count));
  }
  return b;
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
        AK_CHECK(models::is_canonical_integer(c.first), "vocabulary: numeric order needs integer tokens, got {}",
                 models::shown_token(c.first));
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
