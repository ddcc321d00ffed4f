// Writing tensors and bundles as JSON (docs/tensor-format.md).
// Floats are written in the shortest form that reads back to the same float32 (std::to_chars);
// non-finite values as the strings "NaN", "Infinity", "-Infinity".
#pragma once
#include <string>

#include "attnkit/io/value.hpp"

namespace attnkit::io {

// Nested writes a tensor of rank >= 2 with a size 0 ([2, 0, 4], [3, 0]) in the flat form all the
// same: nested arrays cannot show the sizes after a 0, and the shape must survive. [0] is "[]".
enum class TensorFormat { Nested, Flat };

struct WriteOptions {
  TensorFormat format = TensorFormat::Nested;
  bool pretty = false;  // newlines and indentation; innermost rows stay on one line
};

// Appends the JSON text of `value` (no trailing newline).
void write_json(std::string& out, const Value& value, const WriteOptions& options = {});
std::string to_json(const Value& value, const WriteOptions& options = {});

// Appends one float32 as JSON.
void append_float(std::string& out, float x);

}  // namespace attnkit::io
