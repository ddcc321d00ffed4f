#include "attnkit/models/tokenizer.hpp"

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "attnkit/models/tokens.hpp"
#include "attnkit/tensor/enum_names.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::models {

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

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

}  // namespace

size_t utf8_sequence_length(std::string_view s, size_t i) { return utf8_length(s, i); }

std::string byte_token(unsigned char b) {
  if (b >= 0x20 && b <= 0x7E) return std::string(1, char(b));
  return fmt::format("<0x{:02X}>", b);
}

std::string check_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_length(s, i);
    if (n == 0) return fmt::format("invalid UTF-8 at byte {}", i + 1);
    i += n;
  }
  return "";
}

bool is_special_token(std::string_view token) {
  for (const auto& s : special_tokens())
    if (token == s) return true;
  return false;
}

bool is_canonical_integer(std::string_view s) {
  if (s.empty() || (s.size() > 1 && s[0] == '0')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string shown_token(std::string_view s) {
  std::string shown(s.substr(0, 40));
  if (s.size() > 40) shown += "...";
  return nlohmann::json(shown).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

constexpr EnumName<Tokenizer> kTokenizerNames[] = {
    {Tokenizer::Char, "char"}, {Tokenizer::Space, "space"}, {Tokenizer::Ids, "ids"}, {Tokenizer::Byte, "byte"},
    {Tokenizer::Spm, "spm"}};

Tokenizer tokenizer_from_name(std::string_view name) {
  if (const std::optional<Tokenizer> tokenizer = parse_name(kTokenizerNames, name)) return *tokenizer;
  fail("unknown tokenizer {}: expected {}", shown_token(name), names_or(kTokenizerNames));
}

std::string_view tokenizer_name(Tokenizer tokenizer) { return name_of(kTokenizerNames, tokenizer); }

std::string tokenize(std::string_view text, Tokenizer tokenizer, std::vector<std::string>& out) {
  out.clear();
  if (tokenizer == Tokenizer::Spm) return "the spm tokenizer needs its SentencePiece model";
  if (tokenizer == Tokenizer::Byte) {
    for (char c : text) out.push_back(byte_token(static_cast<unsigned char>(c)));
    return "";
  }
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
      if (is_special_token(token)) return fmt::format("{} is a reserved special token", shown_token(token));
      out.emplace_back(token);
      continue;
    }
    // ids: digits only, below 2^31, written canonically.
    const bool digits = std::all_of(token.begin(), token.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits) return fmt::format("{} is not a non-negative integer", shown_token(token));
    size_t first = token.find_first_not_of('0');
    std::string_view value = first == std::string_view::npos ? std::string_view("0") : token.substr(first);
    if (value.size() > 10 || (value.size() == 10 && value > "2147483647"))
      return fmt::format("{} is too large for an id (at most 2147483647)", shown_token(token));
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
  if (tokenizer == Tokenizer::Byte) {
    for (const std::string& t : tokens) {
      unsigned value = 0;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
          std::sscanf(t.c_str() + 3, "%2X", &value) == 1)
        out += static_cast<char>(value);
      else
        out += t;
    }
    return out;
  }
  if (tokenizer == Tokenizer::Spm) {
    for (const std::string& t : tokens) out += t;
    for (size_t p = out.find("\xE2\x96\x81"); p != std::string::npos; p = out.find("\xE2\x96\x81", p + 1))
      out.replace(p, 3, " ");
    return out;
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0 && tokenizer != Tokenizer::Char) out += ' ';
    out += tokens[i];
  }
  return out;
}

}  // namespace attnkit::models
