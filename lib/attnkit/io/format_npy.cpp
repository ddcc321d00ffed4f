// .npy: one tensor in NumPy's format (io/tensor_file.hpp), versions 1 to 3, C or Fortran order; also the
// members of a .npz (io/format_npz.cpp).
#include "attnkit/io/tensor_file.hpp"

#include <cmath>
#include <cstring>

#include "attnkit/io/binary_format.hpp"
#include "attnkit/tensor/creation.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::io {

using namespace binary;

namespace {

// The header dict: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
struct NpyHeader {
  std::string descr;
  bool fortran = false;
  Shape shape;
};

class NpyHeaderParser {
 public:
  NpyHeaderParser(std::string_view text, const std::string& what) : s_(text), what_(what) {}
  NpyHeader parse() {
    NpyHeader h;
    bool have_descr = false, have_order = false, have_shape = false;
    expect('{');
    for (;;) {
      ws();
      if (peek() == '}') break;
      const std::string key = string();
      ws();
      expect(':');
      ws();
      if (key == "descr") {
        AK_CHECK(!have_descr, "{}: header gives 'descr' twice", what_);
        AK_CHECK(peek() == '\'' || peek() == '"', "{}: header's 'descr' is not a simple dtype (structured arrays are not tensors)", what_);
        h.descr = string(), have_descr = true;
      } else if (key == "fortran_order") {
        AK_CHECK(!have_order, "{}: header gives 'fortran_order' twice", what_);
        if (s_.substr(i_, 4) == "True") h.fortran = true, i_ += 4;
        else if (s_.substr(i_, 5) == "False") h.fortran = false, i_ += 5;
        else bad("'fortran_order' is not True or False");
        have_order = true;
      } else if (key == "shape") {
        AK_CHECK(!have_shape, "{}: header gives 'shape' twice", what_);
        h.shape = tuple(), have_shape = true;
      } else {
        bad("unknown key '" + key + "'");
      }
      ws();
      if (peek() == ',') ++i_;
      else if (peek() != '}') bad("expected ',' or '}'");
    }
    ++i_;
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\0')) ++i_;
    AK_CHECK(i_ == s_.size(), "{}: header has text after its closing '}}'", what_);
    AK_CHECK(have_descr && have_order && have_shape, "{}: header lacks {}", what_,
             !have_descr ? "'descr'" : !have_order ? "'fortran_order'" : "'shape'");
    return h;
  }

 private:
  [[noreturn]] void bad(const std::string& why) { fail("{}: bad header at byte {}: {}", what_, i_, why); }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void ws() {
    while (peek() == ' ' || peek() == '\t' || peek() == '\n') ++i_;
  }
  void expect(char c) {
    if (peek() != c) bad(fmt::format("expected '{}'", c));
    ++i_;
  }
  std::string string() {
    const char q = peek();
    if (q != '\'' && q != '"') bad("expected a quoted name");
    const size_t end = s_.find(q, i_ + 1);
    if (end == std::string_view::npos) bad("unterminated string");
    std::string out(s_.substr(i_ + 1, end - i_ - 1));
    i_ = end + 1;
    return out;
  }
  Shape tuple() {
    Shape shape;
    expect('(');
    for (;;) {
      ws();
      if (peek() == ')') break;
      if (peek() < '0' || peek() > '9') bad("expected a size in 'shape'");
      int64_t d = 0;
      while (peek() >= '0' && peek() <= '9') {
        if (__builtin_mul_overflow(d, 10, &d) || __builtin_add_overflow(d, peek() - '0', &d)) bad("a size in 'shape' overflows");
        ++i_;
      }
      if (peek() == 'L') ++i_;  // Python 2's long
      shape.push_back(d);
      if (shape.size() > static_cast<size_t>(kMaxRank)) bad(fmt::format("'shape' has more than {} dimensions", kMaxRank));
      ws();
      if (peek() == ',') ++i_;
      else if (peek() != ')') bad("expected ',' or ')' in 'shape'");
    }
    ++i_;
    return shape;
  }
  std::string_view s_;
  std::string what_;
  size_t i_ = 0;
};

DTypeInfo npy_dtype(const std::string& descr, bool& swap, const std::string& what) {
  AK_CHECK(descr.size() >= 3, "{}: dtype '{}' is not supported", what, descr);
  const char order = descr[0];
  const std::string kind = descr.substr(1);
  AK_CHECK(order == '<' || order == '>' || order == '|' || order == '=', "{}: dtype '{}' is not supported", what, descr);
  swap = order == '>';
  static const std::pair<const char*, DTypeInfo> table[] = {
      {"f4", {DType::F32, 4, "float32"}}, {"f8", {DType::F64, 8, "float64"}}, {"f2", {DType::F16, 2, "float16"}},
      {"i1", {DType::I8, 1, "int8"}},     {"i2", {DType::I16, 2, "int16"}},   {"i4", {DType::I32, 4, "int32"}},
      {"i8", {DType::I64, 8, "int64"}},   {"u1", {DType::U8, 1, "uint8"}},    {"u2", {DType::U16, 2, "uint16"}},
      {"u4", {DType::U32, 4, "uint32"}},  {"u8", {DType::U64, 8, "uint64"}},  {"b1", {DType::Bool, 1, "bool"}}};
  for (const auto& [name, info] : table)
    if (kind == name) return info;
  fail("{}: dtype '{}' is not supported (float16/32/64, (u)int8-64 and bool are)", what, descr);
}

std::string npy_header(const Shape& dims, const char* descr) {
  std::string shape = "(";
  for (size_t i = 0; i < dims.size(); ++i) shape += fmt::format("{}{}", i ? ", " : "", dims[i]);
  if (dims.size() == 1) shape += ",";
  shape += ")";
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr, shape);
  // numpy pads the header with spaces to a multiple of 64 bytes (with the 10-byte preamble), '\n' last
  const size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
  header.append(total - 10 - header.size() - 1, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  append_le16(out, static_cast<uint16_t>(header.size()));
  out += header;
  return out;
}

}  // namespace

namespace binary {

Tensor parse_npy(std::string_view bytes, const std::string& what, const ReadOptions& options) {
  const auto* u = reinterpret_cast<const unsigned char*>(bytes.data());
  AK_CHECK(bytes.size() >= 10 && bytes.substr(0, 6) == std::string_view("\x93NUMPY", 6), "{}: not a .npy file (no \\x93NUMPY at its start)", what);
  const int major = u[6];
  AK_CHECK(major >= 1 && major <= 3, "{}: .npy format version {}.{} is not supported (1 to 3 are)", what, major, u[7]);
  size_t header_len = 0, start = 0;
  if (major == 1) {
    header_len = load16(u + 8, false), start = 10;
  } else {
    AK_CHECK(bytes.size() >= 12, "{}: truncated in its header", what);
    header_len = load32(u + 8, false), start = 12;
  }
  AK_CHECK(header_len <= bytes.size() - start, "{}: truncated: its header says {} bytes, the file has {} after the preamble",
           what, header_len, bytes.size() - start);
  const NpyHeader h = NpyHeaderParser(bytes.substr(start, header_len), what).parse();
  bool swap = false;
  const DTypeInfo dt = npy_dtype(h.descr, swap, what);
  const int64_t n = checked_numel(h.shape, what, options);
  const size_t data_at = start + header_len;
  const uint64_t need = static_cast<uint64_t>(n) * static_cast<uint64_t>(dt.size);
  AK_CHECK(bytes.size() - data_at >= need, "{}: truncated: shape {} of {} needs {} bytes of data, the file has {}", what,
           shape_str(h.shape), dt.name, need, bytes.size() - data_at);
  AK_CHECK(bytes.size() - data_at == need, "{}: {} bytes after the data of shape {} ({})", what, bytes.size() - data_at - need,
           shape_str(h.shape), dt.name);
  if (!h.fortran || h.shape.size() < 2) return make_tensor(u + data_at, dt, swap, h.shape, n, what, options);
  // Fortran order: the data is the transpose's, row-major: read with the axes reversed, then reverse them
  Shape reversed(h.shape.rbegin(), h.shape.rend());
  return transpose(make_tensor(u + data_at, dt, swap, reversed, n, what, options));
}

std::string npy_of(const Tensor& t) {
  std::string out = npy_header(t.shape(), "<f4");
  append_floats(out, t);
  return out;
}

// A document's JSON text as a 1-D uint8 array (np.load(f)["attnkit_meta"].tobytes().decode()).
std::string npy_of_text(std::string_view text) {
  std::string out = npy_header({static_cast<int64_t>(text.size())}, "|u1");
  out += text;
  return out;
}

// The text back from the array the reader made of it (each element a byte, exactly, as uint8 converts).
std::string text_of_npy(const Tensor& t, const std::string& what) {
  AK_CHECK(t.shape().size() == 1, "{}: expected a 1-D array of bytes (the document's JSON text), got shape {}", what,
           t.shape_str());
  std::string out(static_cast<size_t>(t.numel()), '\0');
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float x = t.data()[i];
    AK_CHECK(x >= 0.0f && x <= 255.0f && x == std::floor(x), "{}: element {} is {}, not a byte", what, i, x);
    out[static_cast<size_t>(i)] = static_cast<char>(static_cast<unsigned char>(x));
  }
  return out;
}

}  // namespace binary

Value read_npy(std::string_view bytes, std::string_view source, const ReadOptions& options) {
  return Value(binary::parse_npy(bytes, std::string(source), options));
}

std::string npy_bytes(const Value& value, std::string_view target) {
  if (!value.is_tensor()) {
    if (value.is_bundle()) {
      auto names = value.names();
      fail("{}: .npy holds one tensor, and this is a bundle (has: {}); write .npz or .safetensors, or pick one with #NAME",
           target, names.empty() ? "nothing" : fmt::format("{}", fmt::join(names, ", ")));
    }
    fail("{}: .npy holds one tensor, and this is not a tensor ({})", target, value.why());
  }
  return binary::npy_of(value.tensor());
}

}  // namespace attnkit::io
