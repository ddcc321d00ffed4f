// Value: a JSON document as attnkit sees it (docs/architecture.md).
//   Tensor  a nested numeric array, a bare number, a non-finite string ("NaN", "Infinity",
//           "-Infinity") or the flat form {"shape": [...], "data": [...], "dtype"?}
//   Bundle  an object of named values (members in document order; bundles nest)
//   String  a JSON string that is not a non-finite literal: its contents (a config's "lstm", a checkpoint's
//           integers as decimal strings "32", which read back exactly where a JSON number is a float32)
//   Other   anything else: kept with the reason it is not a tensor (and its JSON text), so that a
//           bundle may carry labels or metadata, and the error is raised only when someone asks
//           for a tensor there.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attnkit/tensor/tensor.hpp"

namespace attnkit::io {

class Value {
 public:
  enum class Kind { Tensor, Bundle, Other, Boolean, String };

  Value() : kind_(Kind::Bundle) {}  // an empty bundle
  Value(Tensor t) : kind_(Kind::Tensor), tensor_(std::move(t)) {}  // NOLINT: implicit on purpose
  static Value bundle() { return Value(); }
  // Other values are written out as the JSON string why(): metadata such as {"cell": "lstm"}.
  static Value other(std::string why) {
    Value v;
    v.kind_ = Kind::Other;
    v.why_ = std::move(why);
    return v;
  }

  // A value as the reader found it: why it is not a tensor, and its JSON text (compact), which
  // the writer writes back unchanged, so that metadata in a bundle survives `tensor get` or `pack`.
  static Value other(std::string why, std::string json) {
    Value v = other(std::move(why));
    v.json_ = std::move(json);
    return v;
  }

  // Written as true/false (reports such as tensor diff's "equal"); never produced by the reader.
  static Value boolean(bool b) {
    Value v;
    v.kind_ = Kind::Boolean;
    v.why_ = b ? "true" : "false";
    return v;
  }

  // A string made by attnkit, written as a JSON string of `text`.
  static Value string(std::string text) { return string(std::move(text), "a string", ""); }
  // A string as the reader found it: its contents, why it is not a tensor ("a string (line 1, column 9)") and its
  // JSON text (compact), which the writer writes back unchanged.
  static Value string(std::string text, std::string why, std::string json) {
    Value v = other(std::move(why), std::move(json));
    v.kind_ = Kind::String;
    v.text_ = std::move(text);
    return v;
  }

  Kind kind() const { return kind_; }
  bool is_tensor() const { return kind_ == Kind::Tensor; }
  bool is_bundle() const { return kind_ == Kind::Bundle; }
  bool is_string() const { return kind_ == Kind::String; }

  const Tensor& tensor() const { return tensor_; }  // Kind::Tensor only
  Tensor& tensor() { return tensor_; }
  Tensor take_tensor() { return std::move(tensor_); }
  // Kind::String: its contents.
  const std::string& str() const { return text_; }
  // Kind::Other and Kind::String: why this is not a tensor, with where it stands ("a string (line 1, column 9)").
  const std::string& why() const { return why_; }
  // Kind::Other and Kind::String from the reader: its JSON text; "" for Value::other(why) (then written as why())
  // and Value::string(text) (written as text).
  const std::string& json() const { return json_; }

  // Bundle members.
  const std::vector<std::pair<std::string, Value>>& members() const { return members_; }
  const Value* find(std::string_view name) const;
  std::vector<std::string> names() const;
  // Adds a member (replacing one of the same name); returns *this for chaining.
  Value& set(std::string name, Value value);
  // Adds a member whose name the caller knows is new (the reader, which checked): no search.
  Value& append(std::string name, Value value);
  // Sets a nested member, making the bundles on the way: set_path({"enc", "W"}, w).
  // Throws attnkit::Error if a name on the way is a tensor, or the last name is taken.
  void set_path(const std::vector<std::string>& names, Value value);

 private:
  Kind kind_;
  Tensor tensor_;
  std::vector<std::pair<std::string, Value>> members_;
  std::string why_;
  std::string json_;
  std::string text_;  // Kind::String
};

}  // namespace attnkit::io
