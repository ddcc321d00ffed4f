// Typed fields of a bundle: a checkpoint's sections and a model's config (models/checkpoint.hpp). attnkit writes
// every field as a JSON string ("32", "0.001", "lstm", "true"), so that integers read back exactly (a JSON
// number is read as a float32 tensor); a field written by hand may also be a JSON number or boolean. One set of
// rules for every reader:
//   integer  decimal digits after an optional '-', inside the caller's bounds [lo, hi]
//   count    a non-negative integer (int64), u64 the whole unsigned range (a generator's state)
//   real     a finite decimal number (real32: read as a float, as the model's float members are)
//   boolean  true or false
//   choice   a name read by the caller's parse function (an enum), whose error is prefixed by where it is
// Messages: "<what>: <label>\"<name>\" is \"<text>\", not an integer", where the label is "config " for a
// model config and empty for the other sections. A string field is an io::Value string (the reader's, or
// text_value's); an Other value holding a JSON string, boolean or number as its text is read the same way.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "attnkit/io/value.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::models {

// The writing side: a field as attnkit writes it, a JSON string (integers: text_value(std::to_string(n))).
io::Value text_value(std::string_view text);
// A real number's shortest text that reads back to the same double.
io::Value real_value(double x);

class Fields {
 public:
  // Refuses a value that is not a bundle ("<what>: expected an object").
  Fields(const io::Value& bundle, std::string what, std::string label = "");

  const std::string& what() const { return what_; }
  bool has(std::string_view name) const { return bundle_.find(name) != nullptr; }
  // A member of any kind; refuses a missing one.
  const io::Value& member(std::string_view name) const;

  // The field's text: a string's contents, or a number's / boolean's JSON text; nullopt when absent.
  std::optional<std::string> text_if(std::string_view name) const;
  std::string text(std::string_view name) const;
  std::string text(std::string_view name, std::string_view fallback) const;

  int64_t integer(std::string_view name, int64_t lo, int64_t hi) const;
  int64_t integer(std::string_view name, int64_t fallback, int64_t lo, int64_t hi) const;
  int64_t count(std::string_view name) const;
  uint64_t u64(std::string_view name) const;
  double real(std::string_view name) const;
  float real32(std::string_view name, float fallback) const;
  bool boolean(std::string_view name) const;
  bool boolean(std::string_view name, bool fallback) const;

  // parse(text) of the field (or of `fallback` when it is absent and a fallback is given); an attnkit::Error
  // it throws is prefixed by where the field is ("m.json: config: unknown cell ...").
  template <typename Parse>
  auto choice(std::string_view name, Parse parse) const {
    const std::string t = text(name);
    try {
      return parse(std::string_view(t));
    } catch (const Error& e) {
      rethrow_where(e);
    }
  }
  template <typename Parse>
  auto choice(std::string_view name, std::string_view fallback, Parse parse) const {
    const std::string t = text(name, fallback);
    try {
      return parse(std::string_view(t));
    } catch (const Error& e) {
      rethrow_where(e);
    }
  }
  // Throws `e` again, its message prefixed by "<what>: <label>: " (unless it already names `what`).
  [[noreturn]] void rethrow_where(const Error& e) const;

 private:
  int64_t parse_integer(std::string_view name, const std::string& text) const;

  const io::Value& bundle_;
  std::string what_, label_;
};

}  // namespace attnkit::models
