#include "attnkit/models/vocab.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "attnkit/tensor/error.hpp"

namespace attnkit::models {

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
  AK_CHECK(!is_special_token(t), "{}: {} {} is {}, a special token's text (the specials are ids 0-3)", what, entry,
           position, shown_token(t));
  auto [it, added] = ids_.emplace(t, size());
  AK_CHECK(added, "{}: {} {} is {} again (id {})", what, entry, position, shown_token(t), it->second);
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
    AK_CHECK(added, "{}: tokens[{}] is {} again (id {})", what, i, shown_token(t), it->second);
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
               shown_token(t), shown_token(specials()[i]));
    } else {
      vocab.append(t, static_cast<int64_t>(i), what, "tokens entry");
    }
  }
  return vocab;
}


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
      out += fmt::format("token {} is {} in {}, {} in {}", i, shown_token(expected.token(i)), expected_name,
                         shown_token(actual.token(i)), actual_name);
      return out;
    }
  }
  // Same prefix: name the first extra token.
  const Vocab& longer = expected.size() > actual.size() ? expected : actual;
  std::string_view longer_name = expected.size() > actual.size() ? expected_name : actual_name;
  out += fmt::format("; {} has {} first as token {}", longer_name, shown_token(longer.token(common)), common);
  return out;
}

void check_same_vocab(const Vocab& expected, std::string_view expected_name, const Vocab& actual,
                      std::string_view actual_name, std::string_view what) {
  std::string diff = vocab_difference(expected, expected_name, actual, actual_name);
  AK_CHECK(diff.empty(), "{}: the vocabulary differs: {}", what, diff);
}

}  // namespace attnkit::models
