// Reading tensors and bundles from JSON text (DESIGN.md §3, docs/tensor-format.md).
// A strict RFC 8259 parser written for tensors: numbers stream straight into a float buffer
// (fast_float, correctly rounded to float32), no DOM node per number. Errors name the source and
// the position: "x.json:3:17: expected a number".
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/io/value.hpp"

namespace attnkit::io {

struct ReadOptions {
  // Largest tensor accepted, in elements; a declared or growing tensor past it is refused
  // before it is allocated. 2^30 floats = 4 GiB.
  int64_t max_elements = int64_t{1} << 30;
  // Deepest nesting of arrays and objects; deeper input is refused (never a stack overflow).
  int max_depth = 64;
  // Told when reading changed a value (a .npy/.npz/.safetensors float64 or int64 rounded to float32,
  // io/tensor_file.hpp), once per tensor; unset: silent. The tools print it on standard error.
  std::function<void(const std::string&)> note;
};

// One JSON document; `source` names it in messages (a path, or "<stdin>").
Value parse_json(std::string_view text, std::string_view source, const ReadOptions& options = {});

// A stream of documents, one per line (NDJSON). A single document may span lines; a document
// must end its line. Blank input gives no documents.
std::vector<Value> parse_json_stream(std::string_view text, std::string_view source,
                                     const ReadOptions& options = {});

// Whole file (or standard input for "-") as text; throws attnkit::Error naming the path.
std::string read_text(const std::string& path);

// The documents of a file or of standard input ("-"), read one record at a time as they arrive
// (NDJSON, as parse_json_stream: a document may span lines and must end its line). Memory holds
// the record being read and a read buffer, never the whole stream; messages give the line in the
// whole input ("<stdin>:20001:5: ..."). An input without any document is refused ("empty input").
// A file named *.npy, *.npz or *.safetensors is read whole as the one document (io/tensor_file.hpp), and so
// is standard input when its first bytes are such a file's (io::sniff_format).
class RecordReader {
 public:
  RecordReader(const std::string& path, const ReadOptions& options = {});
  ~RecordReader();
  RecordReader(const RecordReader&) = delete;
  RecordReader& operator=(const RecordReader&) = delete;
  // The next document into `out`; false at the end of the input.
  bool next(Value& out);
  size_t records() const { return records_; }  // documents read so far
  const std::string& source() const { return source_; }  // "<stdin>" or the path

 private:
  bool fill();  // reads more input; false at its end
  std::string source_;
  ReadOptions options_;
  int fd_ = -1;
  bool eof_ = false;
  std::string buf_;
  size_t start_ = 0;  // where the current record starts in buf_ (the start of a line)
  size_t used_ = 0;   // bytes of buf_ holding input
  int64_t line_ = 1;  // line number of start_ in the whole input
  size_t records_ = 0;
  // scanning state of the current record (resumed when more input arrives)
  size_t scan_ = 0;
  int64_t depth_ = 0, newlines_ = 0;
  bool in_string_ = false, started_ = false;
  bool binary_ = false;  // a .npy, .npz or .safetensors file: one document (io/tensor_file.hpp)
  int format_ = 0;       // then its io::FileFormat: by extension, or sniffed on standard input
  bool sniffed_ = false; // standard input's first bytes looked at
};

}  // namespace attnkit::io
