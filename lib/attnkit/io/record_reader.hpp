// Reading input: a whole file as text, and a stream of JSON documents one record at a time
// (docs/tensor-format.md).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "attnkit/io/json_parser.hpp"
#include "attnkit/io/value.hpp"

namespace attnkit::io {

// Whole file (or standard input for "-") as text; throws attnkit::Error naming the path. `check`, when
// given, sees the bytes read so far after each read (those from `from` on are new) and may throw: a device
// or an endless stream is refused at its first impossible bytes instead of being read to its end.
std::string read_text(const std::string& path, const std::function<void(std::string_view text, size_t from)>& check = {});

// read_text for a text file that is not JSON (training data, a vocabulary, a text): the first NUL byte ends the
// reading ("data.tsv: byte 0 is a NUL byte: not a text file"), so /dev/zero or a binary file is refused at once.
std::string read_plain_text(const std::string& path);
// read_text for one JSON document (a model config): its first impossible byte (json_impossible_at) ends the
// reading with the parser's message.
std::string read_json_text(const std::string& path);

// Where input stops being possibly JSON, checked as it arrives: the first byte of text[from..] that is a
// control character other than tab, LF and CR (JSON holds none, in strings or out), or, when the bytes
// before `from` were blank, a first non-blank byte that starts no JSON value; npos when there is none.
// Parsing the text read so far then gives the parser's message for it.
size_t json_impossible_at(std::string_view text, size_t from);
bool json_value_can_start(char c);  // [ { " - 0-9 t f n

// The documents of a file or of standard input ("-"), read one record at a time as they arrive
// (NDJSON, as parse_json_stream: a document may span lines and must end its line). Memory holds
// the record being read and a read buffer, never the whole stream; messages give the line in the
// whole input ("<stdin>:20001:5: ..."). An input without any document is refused ("empty input").
// A file named *.npy, *.npz or *.safetensors is read whole as the one document (io/tensor_file.hpp), and so
// is standard input when its first bytes are such a file's (io::sniff_format). Either way the first bytes
// that cannot start the format (json_impossible_at, io::refuse_impossible_start) end the reading with the
// parser's message: `tensor show /dev/zero` stops at its first byte.
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
