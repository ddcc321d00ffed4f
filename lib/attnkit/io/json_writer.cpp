#include "attnkit/io/json_writer.hpp"

#include <charconv>
#include <cmath>

namespace attnkit::io {

void append_float(std::string& out, float x) {
  if (std::isnan(x)) {
    out += "\"NaN\"";
    return;
  }
  if (std::isinf(x)) {
    out += x > 0 ? "\"Infinity\"" : "\"-Infinity\"";
    return;
  }
  char buf[32];
  auto result = std::to_chars(buf, buf + sizeof buf, x);
  out.append(buf, result.ptr);
}

namespace {

void append_string(std::string& out, const std::string& s) {
  out += '"';
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

void newline(std::string& out, int indent) {
  out += '\n';
  out.append(static_cast<size_t>(indent), ' ');
}

// Nested arrays: [[1,2],[3,4]] compact; pretty puts each innermost row on its own line:
// [[1, 2],
//  [3, 4]]
void write_nested(std::string& out, const float* data, const Shape& shape, size_t level, int indent, bool pretty) {
  if (level == shape.size()) {
    append_float(out, *data);
    return;
  }
  int64_t stride = 1;
  for (size_t i = level + 1; i < shape.size(); ++i) stride *= shape[i];
  out += '[';
  bool innermost = level + 1 == shape.size();
  for (int64_t i = 0; i < shape[level]; ++i) {
    if (i > 0) {
      out += ',';
      if (pretty) {
        if (innermost) {
          out += ' ';
        } else {
          // a blank line between blocks of rank >= 3, as numpy prints them
          for (size_t k = level + 2; k < shape.size(); ++k) out += '\n';
          newline(out, indent + 1 + static_cast<int>(level));
        }
      }
    }
    write_nested(out, data + i * stride, shape, level + 1, indent, pretty);
  }
  out += ']';
}

void write_tensor(std::string& out, const Tensor& t, const WriteOptions& options, int indent) {
  if (options.format == TensorFormat::Nested) {
    write_nested(out, t.data(), t.shape(), 0, indent, options.pretty);
    return;
  }
  const char* sep = options.pretty ? ", " : ",";
  out += options.pretty ? "{\"shape\": [" : "{\"shape\":[";
  for (size_t i = 0; i < t.shape().size(); ++i) {
    if (i) out += sep;
    out += std::to_string(t.shape()[i]);
  }
  out += options.pretty ? "], \"data\": [" : "],\"data\":[";
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (i) out += sep;
    append_float(out, t[i]);
  }
  out += "]}";
}

void write_value(std::string& out, const Value& v, const WriteOptions& options, int indent) {
  if (v.is_tensor()) {
    write_tensor(out, v.tensor(), options, indent);
    return;
  }
  if (v.kind() == Value::Kind::Boolean) {
    out += v.why();
    return;
  }
  if (!v.is_bundle()) {  // Other: as it was read, or the string why() when made by attnkit
    if (!v.json().empty()) out += v.json();
    else append_string(out, v.why());
    return;
  }
  out += '{';
  bool first = true;
  for (const auto& [name, member] : v.members()) {
    if (!first) out += ',';
    first = false;
    if (options.pretty) newline(out, indent + 2);
    append_string(out, name);
    out += options.pretty ? ": " : ":";
    int member_indent = indent + 2 + static_cast<int>(name.size()) + 4;  // nested rows align under '['
    write_value(out, member, options, member.is_bundle() ? indent + 2 : member_indent);
  }
  if (options.pretty && !v.members().empty()) newline(out, indent);
  out += '}';
}

}  // namespace

void write_json(std::string& out, const Value& value, const WriteOptions& options) {
  write_value(out, value, options, 0);
}

std::string to_json(const Value& value, const WriteOptions& options) {
  std::string out;
  write_json(out, value, options);
  return out;
}

}  // namespace attnkit::io
