// Tensor references: PATH[#NAME[/NAME...]].
//   x.json            the whole document
//   run.json#h_n      member h_n of a bundle
//   ckpt.json#enc/W   a nested member
//   model.json#enc.   the members named enc.* as one bundle, the prefix stripped (state_dict keys)
//   run.json#h_n[-1]  part of a member tensor, numpy indexing as in `tensor get --index` (h_n[-1])
//   -  and  -#output  standard input, read once and referenced any number of times
// Any input (standard input or a file) may hold an NDJSON stream; a reference then names the
// current record (see Sources).
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
  std::string index;               // "-1" of #h_n[-1]: numpy indexing of the tensor named (empty: all of it)
  std::string text() const;        // back to PATH#a/b[index]
};

// Whether a reference reads standard input: "-" or "-#NAME" (a file "-x.json" does not).
bool is_stdin(std::string_view ref);
// How messages name a reference: standard input as "<stdin>" ("-#a" -> "<stdin>#a"), files as typed.
std::string display_name(std::string_view ref);

// Throws attnkit::Error on an empty path or an empty name ("x.json#", "x.json#a//b").
Reference parse_reference(std::string_view ref);

// The inputs of one run. Every input (standard input or a file) holds one document or a stream
// of several (NDJSON); a tool computes its first result from the first record of each, then
// next_record() moves on, until every stream has ended:
//   - an input holding one document is used with every record of the others;
//   - inputs holding several are paired record by record, and must hold as many (else refused).
// Records are read as they are needed: memory holds the current record of each input (and the
// next one while moving on), never a whole stream.
class Sources {
 public:
  explicit Sources(ReadOptions options = {});
  ~Sources();
  Sources(const Sources&) = delete;
  Sources& operator=(const Sources&) = delete;

  // The value a reference names in the current record (each input is opened and read once).
  const Value& value(std::string_view ref);
  // A tensor or a bundle, not Other ("<stdin>: not a tensor: a string (line 1, column 1)").
  const Value& tensor_or_bundle(std::string_view ref);
  // The tensor a reference names; `role` says what it is for in messages ("query", "weights").
  // A NaN is refused with its position unless allow_nan (infinities pass).
  Tensor tensor(std::string_view ref, std::string_view role = "", bool allow_nan = false);
  // For what is read once, before the records (weights): the reference's input must hold one
  // document; a stream is refused ("w.ndjson holds more than one record; weights take one document").
  const Value& single_value(std::string_view ref, std::string_view role);

  // Moves every input that holds several records to its next record; false when all have ended.
  // Throws if paired streams end at different records.
  bool next_record();
  size_t record_index() const { return record_; }  // 0 for the first record
  bool streaming() const;  // an input has shown a second record

 private:
  struct Input;
  Input& input(const std::string& path);
  const Value& document(const std::string& path);
  ReadOptions options_;
  std::vector<std::unique_ptr<Input>> inputs_;  // in the order they were first used
  size_t record_ = 0;
  std::vector<std::unique_ptr<Value>> made_;  // bundles made by prefix references (#enc.)
};

// The members of `bundle` whose names start with `prefix` (ending in '.'), the prefix stripped: a
// PyTorch state_dict's flat keys enc.weight_ih_l0, enc.bias_ih_l0 select as {weight_ih_l0, bias_ih_l0}.
// Nested members named prefix-without-the-dot are taken whole. `at` names the bundle in messages.
Value select_prefix(const Value& bundle, const std::string& prefix, const std::string& at);

// Index of the first NaN, or -1.
int64_t find_nan(const Tensor& t);

}  // namespace attnkit::io
