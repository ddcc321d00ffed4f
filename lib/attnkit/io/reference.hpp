// Tensor references: PATH[#NAME[/NAME...]] (DESIGN.md §3).
//   x.json            the whole document
//   run.json#h_n      member h_n of a bundle
//   ckpt.json#enc/W   a nested member
//   -  and  -#output  standard input, read once and referenced any number of times
// Standard input may hold an NDJSON stream; `-` then refers to the selected record.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/io/json_reader.hpp"

namespace attnkit::io {

struct Reference {
  std::string path;                // "-" for standard input
  std::vector<std::string> names;  // empty: the whole document
  std::string text() const;        // back to PATH#a/b
};

// Whether a reference reads standard input: "-" or "-#NAME" (a file "-x.json" does not).
bool is_stdin(std::string_view ref);
// How messages name a reference: standard input as "<stdin>" ("-#a" -> "<stdin>#a"), files as typed.
std::string display_name(std::string_view ref);

// Throws attnkit::Error on an empty path or an empty name ("x.json#", "x.json#a//b").
Reference parse_reference(std::string_view ref);

class Sources {
 public:
  explicit Sources(ReadOptions options = {}) : options_(options) {}

  // The value a reference names (documents are read and parsed once, then cached).
  const Value& value(std::string_view ref);
  // A tensor or a bundle, not Other ("<stdin>: not a tensor: a string (line 1, column 1)").
  const Value& tensor_or_bundle(std::string_view ref);
  // The tensor a reference names; `role` says what it is for in messages ("query", "weights").
  // A NaN is refused with its position unless allow_nan (infinities pass).
  Tensor tensor(std::string_view ref, std::string_view role = "", bool allow_nan = false);

  // NDJSON on standard input: how many records it holds (reads it if not yet read), and which
  // one `-` refers to from now on.
  size_t stdin_records();
  void select_stdin_record(size_t index);

 private:
  const Value& document(const std::string& path);
  ReadOptions options_;
  std::map<std::string, std::unique_ptr<Value>> files_;
  std::vector<Value> stdin_;
  bool stdin_read_ = false;
  std::string stdin_end_ = "1:1";  // LINE:COL of the end of an empty standard input
  size_t stdin_index_ = 0;
};

// Index of the first NaN, or -1.
int64_t find_nan(const Tensor& t);

}  // namespace attnkit::io
