// Reading tensors and bundles from JSON text (docs/architecture.md, docs/tensor-format.md).
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

// One record of a stream (NDJSON): one document, then nothing but spaces up to the end of its
// line or of `text`. `first_line` is the line `text` starts on in its input, so that messages give
// the line in the whole input (io/record_reader.hpp).
Value parse_json_record(std::string_view text, std::string_view source, const ReadOptions& options,
                        int64_t first_line);

}  // namespace attnkit::io
