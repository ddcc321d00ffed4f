// JsonScanner (internal: include from .cpp files only): the token level of io::parse_json: the
// cursor over the text, positions and syntax errors, and the scalars (numbers, strings, literals).
// The structure (arrays, tensors, objects) is io/json_parser.cpp's Parser, built on this class.
// Everything is defined here, in the class, so that the number path inlines into the parser's loops.
#pragma once
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include <fast_float/fast_float.h>
#include <fmt/format.h>

#include "attnkit/io/json_parser.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::io::detail {

inline bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

class JsonScanner {
 protected:
  // first_line: the line `text` starts on in its input (a record of a stream)
  JsonScanner(std::string_view text, std::string_view source, const ReadOptions& options, int64_t first_line)
      : begin_(text.data()), p_(text.data()), end_(text.data() + text.size()), source_(source), options_(options),
        pos_line_(first_line), first_line_(first_line) {}

  const char* begin_;
  const char* p_;
  const char* end_;
  std::string_view source_;
  const ReadOptions& options_;

  // --- positions and errors ---
  // Line and column (1-based, in bytes) of `at`. Positions are mostly asked for in increasing
  // order (an object's many string members), so the scan resumes from the last one asked.
  mutable const char* pos_at_ = nullptr;
  mutable int64_t pos_line_ = 1, pos_col_ = 1;
  int64_t first_line_ = 1;
  std::pair<int64_t, int64_t> line_col(const char* at) const {
    if (at > end_) at = end_;
    if (pos_at_ == nullptr || at < pos_at_) {
      pos_at_ = begin_;
      pos_line_ = first_line_;
      pos_col_ = 1;
    }
    for (const char* q = pos_at_; q < at; ++q) {
      if (*q == '\n') {
        ++pos_line_;
        pos_col_ = 1;
      } else {
        ++pos_col_;
      }
    }
    pos_at_ = at;
    return {pos_line_, pos_col_};
  }
  std::string where(const char* at) const {
    auto [line, col] = line_col(at);
    return fmt::format("line {}, column {}", line, col);
  }
  [[noreturn]] void syntax_error_at(const char* at, const std::string& message) const {
    auto [line, col] = line_col(at);
    fail("{}:{}:{}: {}", source_, line, col, message);
  }
  [[noreturn]] void syntax_error(const std::string& message) const { syntax_error_at(p_, message); }
  std::string describe_here() const {
    if (p_ >= end_) return "the end of the input";
    unsigned char c = static_cast<unsigned char>(*p_);
    if (c >= 0x20 && c < 0x7f) return fmt::format("'{}'", *p_);
    return fmt::format("byte 0x{:02x}", c);
  }
  [[noreturn]] void expected(const char* what) const {
    for (const char* word : {"NaN", "Infinity", "-Infinity"}) {  // what Python's json.dumps writes
      size_t n = std::strlen(word);
      if (static_cast<size_t>(end_ - p_) >= n && std::memcmp(p_, word, n) == 0)
        syntax_error(fmt::format("expected {}, found {} (JSON has no {}: write the string \"{}\")", what, word, word, word));
    }
    syntax_error(fmt::format("expected {}, found {}", what, describe_here()));
  }

  void skip_ws() {
    while (p_ < end_ && is_ws(*p_)) ++p_;
  }
  void enter(int depth) const {
    if (depth >= options_.max_depth)
      syntax_error(fmt::format("nesting deeper than {} levels", options_.max_depth));
  }

  // --- scalars ---
  // Validates the JSON number grammar at p_ and returns its end; p_ is unchanged.
  const char* scan_number() const {
    const char* q = p_;
    if (q < end_ && *q == '-') ++q;
    if (q == end_ || !(*q >= '0' && *q <= '9')) syntax_error_at(q, "expected a digit in a number");
    if (*q == '0') {
      ++q;
      if (q < end_ && *q >= '0' && *q <= '9') syntax_error_at(q, "a number may not have a leading zero");
    } else {
      while (q < end_ && *q >= '0' && *q <= '9') ++q;
    }
    if (q < end_ && *q == '.') {
      ++q;
      if (q == end_ || !(*q >= '0' && *q <= '9')) syntax_error_at(q, "expected a digit after the decimal point");
      while (q < end_ && *q >= '0' && *q <= '9') ++q;
    }
    if (q < end_ && (*q == 'e' || *q == 'E')) {
      ++q;
      if (q < end_ && (*q == '+' || *q == '-')) ++q;
      if (q == end_ || !(*q >= '0' && *q <= '9')) syntax_error_at(q, "expected a digit in the exponent");
      while (q < end_ && *q >= '0' && *q <= '9') ++q;
    }
    return q;
  }

  // Whether [start, stop), as read by fast_float, is a JSON number that ends there: a digit after
  // the sign, no leading zero, digits on both sides of '.', and no dangling exponent or '.'.
  bool json_number(const char* start, const char* stop, std::errc ec) const {
    if (ec != std::errc() && ec != std::errc::result_out_of_range) return false;
    const char* q = start + (*start == '-');
    if (q >= stop || *q < '0' || *q > '9') return false;
    if (*q == '0') {
      ++q;
      if (q < stop && *q >= '0' && *q <= '9') return false;
    } else {
      while (q < stop && *q >= '0' && *q <= '9') ++q;
    }
    if (q < stop && *q == '.' && (q + 1 == stop || q[1] < '0' || q[1] > '9')) return false;
    return stop == end_ || (*stop != 'e' && *stop != 'E' && *stop != '.');
  }

  // The number at p_. The hot path of the reader: fast_float reads it in one pass, then the few
  // rules by which JSON is stricter than from_chars are checked on what it read (json_number).
  // Anything unusual (an error, an infinity) takes number_slow, which validates character by
  // character and says where it went wrong. `flatten` inlines fast_float here.
  __attribute__((flatten)) float number() {
    float f = 0.0f;
    auto result = fast_float::from_chars(p_, end_, f);
    if (json_number(p_, result.ptr, result.ec) && std::isfinite(f)) {
      p_ = result.ptr;
      return f;
    }
    return number_slow();
  }

  __attribute__((noinline)) float number_slow() {
    if (end_ - p_ > 1 && p_[0] == '-' && p_[1] == 'I') expected("a number");  // bare -Infinity
    const char* start = p_;
    float f = 0.0f;
    const char* stop = scan_number();  // throws with the position of the first wrong character
    auto result = fast_float::from_chars(start, stop, f);
    if (result.ptr != stop) syntax_error_at(start, "malformed number");
    // fast_float rounds tiny values to 0 (fine) and huge ones to infinity: valid JSON, but not a
    // float32 value, so the caller notes it as "not a tensor" (a JSON number is never infinite).
    if (std::isinf(f) && !inf_at_) inf_at_ = start, inf_end_ = stop;
    p_ = stop;
    return f;
  }

  // The first number read as infinity since the caller last looked (number_run's rows check it
  // once a row, not once a number).
  const char* inf_at_ = nullptr;
  const char* inf_end_ = nullptr;

  // Why a number that read as infinity is not a tensor value; [at, stop) is its text.
  std::string out_of_range(const char* at, const char* stop) const {
    return fmt::format("number {} is out of the float32 range (write \"Infinity\" for infinity)",
                       std::string_view(at, static_cast<size_t>(std::min<ptrdiff_t>(stop - at, 40))));
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  uint32_t hex4() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i, ++p_) {
      if (p_ == end_) syntax_error("unterminated \\u escape");
      char c = *p_;
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
      else syntax_error("expected a hex digit in a \\u escape");
    }
    return v;
  }

  // A string at p_ (on the opening quote); strict: escapes, no control characters, valid UTF-8,
  // no lone surrogates.
  std::string string() {
    const char* open = p_;
    ++p_;
    std::string out;
    for (;;) {
      if (p_ == end_) syntax_error_at(open, "unterminated string");
      auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        ++p_;
        return out;
      }
      if (c < 0x20) syntax_error("control character in a string (escape it)");
      if (c == '\\') {
        ++p_;
        if (p_ == end_) syntax_error_at(open, "unterminated string");
        char e = *p_++;
        switch (e) {
          case '"': out += '"'; break;
          case '\\': out += '\\'; break;
          case '/': out += '/'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'n': out += '\n'; break;
          case 'r': out += '\r'; break;
          case 't': out += '\t'; break;
          case 'u': {
            const char* esc = p_ - 2;
            uint32_t cp = hex4();
            if (cp >= 0xD800 && cp <= 0xDBFF) {
              if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') syntax_error_at(esc, "lone UTF-16 surrogate in a \\u escape");
              p_ += 2;
              uint32_t lo = hex4();
              if (lo < 0xDC00 || lo > 0xDFFF) syntax_error_at(esc, "invalid UTF-16 surrogate pair in a \\u escape");
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
              syntax_error_at(esc, "lone UTF-16 surrogate in a \\u escape");
            }
            append_utf8(out, cp);
            break;
          }
          default: syntax_error_at(p_ - 1, "invalid escape in a string");
        }
        continue;
      }
      if (c < 0x80) {
        out += static_cast<char>(c);
        ++p_;
        continue;
      }
      // UTF-8 multi-byte sequence: reject overlong forms, surrogates and code points past U+10FFFF.
      int n = 0;
      uint32_t cp = 0;
      if ((c & 0xE0) == 0xC0) { n = 1; cp = c & 0x1F; }
      else if ((c & 0xF0) == 0xE0) { n = 2; cp = c & 0x0F; }
      else if ((c & 0xF8) == 0xF0) { n = 3; cp = c & 0x07; }
      else syntax_error("invalid UTF-8 in a string");
      if (end_ - p_ <= n) syntax_error("truncated UTF-8 in a string");
      for (int i = 1; i <= n; ++i) {
        auto cc = static_cast<unsigned char>(p_[i]);
        if ((cc & 0xC0) != 0x80) syntax_error("invalid UTF-8 in a string");
        cp = (cp << 6) | (cc & 0x3F);
      }
      static constexpr uint32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
      if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) syntax_error("invalid UTF-8 in a string");
      out.append(p_, static_cast<size_t>(n + 1));
      p_ += n + 1;
    }
  }

  bool literal(const char* word) {
    size_t n = std::strlen(word);
    if (static_cast<size_t>(end_ - p_) >= n && std::memcmp(p_, word, n) == 0) {
      p_ += n;
      return true;
    }
    return false;
  }

  static bool non_finite(const std::string& s, float& f) {
    if (s == "NaN") f = std::numeric_limits<float>::quiet_NaN();
    else if (s == "Infinity") f = std::numeric_limits<float>::infinity();
    else if (s == "-Infinity") f = -std::numeric_limits<float>::infinity();
    else return false;
    return true;
  }

  // JSON text without the whitespace between tokens (the text is valid JSON already).
  static std::string compact(const char* from, const char* to) {
    std::string out;
    out.reserve(static_cast<size_t>(to - from));
    bool in_string = false;
    for (const char* q = from; q < to; ++q) {
      char c = *q;
      if (in_string) {
        out += c;
        if (c == '\\') out += *++q;
        else if (c == '"') in_string = false;
      } else if (!is_ws(c)) {
        out += c;
        in_string = c == '"';
      }
    }
    return out;
  }
};

}  // namespace attnkit::io::detail
