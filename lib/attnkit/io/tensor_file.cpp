// .npy, .npz and .safetensors (io/tensor_file.hpp). Every size read from a file is checked against
// the bytes that are there and against ReadOptions::max_elements before anything is allocated.
#include "attnkit/io/tensor_file.hpp"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <unordered_map>

#include "attnkit/io/atomic_file.hpp"
#include "attnkit/tensor/creation.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::io {

FileFormat file_format(std::string_view path) {
  auto ends_with = [&](std::string_view ext) {
    if (path.size() <= ext.size()) return false;
    for (size_t i = 0; i < ext.size(); ++i)
      if (std::tolower(static_cast<unsigned char>(path[path.size() - ext.size() + i])) != ext[i]) return false;
    return true;
  };
  if (ends_with(".npy")) return FileFormat::Npy;
  if (ends_with(".npz")) return FileFormat::Npz;
  if (ends_with(".safetensors")) return FileFormat::Safetensors;
  return FileFormat::Json;
}

std::string_view format_name(FileFormat format) {
  switch (format) {
    case FileFormat::Npy: return ".npy";
    case FileFormat::Npz: return ".npz";
    case FileFormat::Safetensors: return ".safetensors";
    default: return "JSON";
  }
}

namespace {

// ---------------------------------------------------------------------------------------------
// Element types and their conversion to float32

enum class DType { F32, F64, F16, BF16, I8, I16, I32, I64, U8, U16, U32, U64, Bool };

struct DTypeInfo {
  DType type;
  int size;
  const char* name;  // numpy's name, for messages
};

uint16_t load16(const unsigned char* p, bool swap) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return swap ? static_cast<uint16_t>(__builtin_bswap16(v)) : v;
}
uint32_t load32(const unsigned char* p, bool swap) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return swap ? __builtin_bswap32(v) : v;
}
uint64_t load64(const unsigned char* p, bool swap) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return swap ? __builtin_bswap64(v) : v;
}

float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// IEEE half -> float (exact: every half is a float).
float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (mant << 13));  // inf, NaN (payload kept)
  if (exp == 0) {
    if (mant == 0) return bits_to_float(sign);
    int e = -1;  // subnormal: normalise
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400) == 0);
    return bits_to_float(sign | ((127 - 15 - e) << 23) | ((mant & 0x3ff) << 13));
  }
  return bits_to_float(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

// Whether an integer of this magnitude is a float32 exactly: its odd part fits in 24 bits.
bool exact_in_float(uint64_t magnitude) {
  if (magnitude == 0) return true;
  return (magnitude >> __builtin_ctzll(magnitude)) < (uint64_t{1} << 24);
}

// Converts n elements at `src` into `dst`; tells options.note (once) when a value changed.
void convert(const unsigned char* src, const DTypeInfo& dt, bool swap, int64_t n, const Shape& shape, float* dst,
             const std::string& what, const ReadOptions& options) {
  int64_t changed = 0, first = -1;
  double first_value = 0;
  auto lost = [&](int64_t i, double original) {
    if (changed++ == 0) first = i, first_value = original;
  };
  for (int64_t i = 0; i < n; ++i) {
    const unsigned char* p = src + i * dt.size;
    switch (dt.type) {
      case DType::F32: dst[i] = bits_to_float(load32(p, swap)); break;
      case DType::F16: dst[i] = half_to_float(load16(p, swap)); break;
      case DType::BF16: dst[i] = bits_to_float(static_cast<uint32_t>(load16(p, swap)) << 16); break;
      case DType::F64: {
        const uint64_t u = load64(p, swap);
        double d;
        std::memcpy(&d, &u, 8);
        dst[i] = static_cast<float>(d);
        if (!std::isnan(d) && static_cast<double>(dst[i]) != d) lost(i, d);
        break;
      }
      case DType::I8: dst[i] = static_cast<float>(static_cast<int8_t>(*p)); break;
      case DType::U8: dst[i] = static_cast<float>(*p); break;
      case DType::Bool: dst[i] = *p ? 1.0f : 0.0f; break;
      case DType::I16: dst[i] = static_cast<float>(static_cast<int16_t>(load16(p, swap))); break;
      case DType::U16: dst[i] = static_cast<float>(load16(p, swap)); break;
      case DType::I32: {
        const int32_t v = static_cast<int32_t>(load32(p, swap));
        dst[i] = static_cast<float>(v);
        if (!exact_in_float(v < 0 ? uint64_t{0} - static_cast<uint64_t>(static_cast<int64_t>(v)) : static_cast<uint64_t>(v))) lost(i, v);
        break;
      }
      case DType::U32: {
        const uint32_t v = load32(p, swap);
        dst[i] = static_cast<float>(v);
        if (!exact_in_float(v)) lost(i, v);
        break;
      }
      case DType::I64: {
        const int64_t v = static_cast<int64_t>(load64(p, swap));
        dst[i] = static_cast<float>(v);
        if (!exact_in_float(v < 0 ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v))) lost(i, static_cast<double>(v));
        break;
      }
      case DType::U64: {
        const uint64_t v = load64(p, swap);
        dst[i] = static_cast<float>(v);
        if (!exact_in_float(v)) lost(i, static_cast<double>(v));
        break;
      }
    }
  }
  if (changed && options.note)
    options.note(fmt::format("{}: {} rounded to float32: {} of {} values changed (first at {}: {} -> {})", what, dt.name,
                             changed, n, shape_str(unravel_index(first, shape)), first_value, static_cast<double>(dst[first])));
}

// numel of a shape from a file: each size and the product checked (overflow, max_elements).
int64_t checked_numel(const Shape& shape, const std::string& what, const ReadOptions& options) {
  AK_CHECK(shape.size() <= static_cast<size_t>(kMaxRank), "{}: shape {} has {} dimensions, more than {}", what,
           shape_str(shape), shape.size(), kMaxRank);
  int64_t n = 1;
  bool overflow = false;
  for (int64_t d : shape) {
    AK_CHECK(d >= 0, "{}: shape {} has a negative size", what, shape_str(shape));
    overflow = overflow || __builtin_mul_overflow(n, d, &n);
  }
  AK_CHECK(!overflow && n <= options.max_elements, "{}: shape {} has more than {} elements (see --max-elements)", what,
           shape_str(shape), options.max_elements);
  return n;
}

Tensor make_tensor(const unsigned char* data, const DTypeInfo& dt, bool swap, const Shape& shape, int64_t n,
                   const std::string& what, const ReadOptions& options) {
  Tensor t{Shape(shape)};
  convert(data, dt, swap, n, shape, t.data(), what, options);
  return t;
}

// Names joined by '.', tensors only: the members a flat file holds.
void flatten(const Value& v, const std::string& prefix, std::vector<std::pair<std::string, const Tensor*>>& out,
             std::string_view target, std::string_view format) {
  for (const auto& [name, member] : v.members()) {
    const std::string full = prefix.empty() ? name : prefix + "." + name;
    if (member.is_bundle()) {
      flatten(member, full, out, target, format);
    } else if (member.is_tensor()) {
      out.emplace_back(full, &member.tensor());
    } else {
      fail("{}: member \"{}\" is not a tensor ({}); {} holds tensors only (write JSON to keep it)", target, full,
           member.why(), format);
    }
  }
}

std::vector<std::pair<std::string, const Tensor*>> flat_members(const Value& value, std::string_view target,
                                                                 std::string_view format) {
  AK_CHECK(value.is_bundle(), "{}: {} holds a bundle of named tensors, and this is one tensor of shape {} (name it: tensor pack NAME=FILE -o {})",
           target, format, value.is_tensor() ? value.tensor().shape_str() : std::string("?"), target);
  std::vector<std::pair<std::string, const Tensor*>> out;
  flatten(value, "", out, target, format);
  std::set<std::string> seen;
  for (const auto& [name, t] : out)
    AK_CHECK(seen.insert(name).second, "{}: two members are named \"{}\" once nested names are joined with '.'", target, name);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Documents: bundles that hold more than tensors (io/tensor_file.hpp, "Documents")

bool holds_other(const Value& v) {
  for (const auto& [name, m] : v.members())
    if (m.is_bundle() ? holds_other(m) : !m.is_tensor()) return true;
  return false;
}

// `v` with each tensor replaced by null; the tensors into `out` under their names joined by '.'.
Value skeleton_of(const Value& v, const std::string& prefix, std::vector<std::pair<std::string, const Tensor*>>& out,
                  std::string_view target) {
  Value s = Value::bundle();
  for (const auto& [name, m] : v.members()) {
    const std::string full = prefix.empty() ? name : prefix + "." + name;
    AK_CHECK(m.kind() != Value::Kind::Other || m.json() != "null",
             "{}: member \"{}\" is null, which {} uses to place tensors (write JSON to keep it)", target, full,
             kMetaName);
    if (m.is_tensor()) {
      out.emplace_back(full, &m.tensor());
      s.append(name, Value::other("a tensor", "null"));
    } else if (m.is_bundle()) {
      s.append(name, skeleton_of(m, full, out, target));
    } else {
      s.append(name, m);
    }
  }
  return s;
}

// What a binary bundle file holds: the tensors by joined name and, for a document with other values, its
// JSON text with the tensors replaced by null ("" for a bundle of tensors only: nothing is stored beside them).
struct FlatFile {
  std::vector<std::pair<std::string, const Tensor*>> tensors;
  std::string meta;
};

FlatFile flat_file(const Value& value, std::string_view target, std::string_view format) {
  FlatFile f;
  if (!value.is_bundle() || !holds_other(value)) {
    f.tensors = flat_members(value, target, format);
  } else {
    f.meta = to_json(skeleton_of(value, "", f.tensors, target));
    std::set<std::string> seen;
    for (const auto& [name, t] : f.tensors)
      AK_CHECK(seen.insert(name).second, "{}: two tensors are named \"{}\" once nested names are joined with '.'", target,
               name);
  }
  for (const auto& [name, t] : f.tensors) {
    AK_CHECK(format != ".npz" || name != kMetaName,
             "{}: a tensor named \"{}\" would collide with the member that holds a document's other values", target,
             kMetaName);
    AK_CHECK(format != ".safetensors" || name != "__metadata__", "{}: a tensor cannot be named \"__metadata__\" in {}",
             target, format);
  }
  return f;
}

// Puts the tensors `items` where the skeleton `s` has null (by joined name), marking them used.
// Every tensor's joined name must be new (written back, the names must not collide) and not one the formats
// reserve.
Value place_tensors(const Value& s, const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& items,
                    const std::unordered_map<std::string, size_t>& index, std::vector<bool>& used,
                    std::set<std::string>& names, const std::string& what) {
  Value out = Value::bundle();
  for (const auto& [name, m] : s.members()) {
    const std::string full = prefix.empty() ? name : prefix + "." + name;
    const bool placed = m.kind() == Value::Kind::Other && m.json() == "null";
    if (placed || m.is_tensor()) {
      AK_CHECK(names.insert(full).second, "{}: {} has two tensors named \"{}\" once nested names are joined with '.'",
               what, kMetaName, full);
      AK_CHECK(full != kMetaName && full != "__metadata__", "{}: {} names a tensor \"{}\", a name the files reserve",
               what, kMetaName, full);
    }
    if (m.is_bundle()) {
      out.append(name, place_tensors(m, full, items, index, used, names, what));
    } else if (placed) {
      const auto it = index.find(full);
      AK_CHECK(it != index.end(), "{}: {} places a tensor \"{}\" that the file does not hold", what, kMetaName, full);
      AK_CHECK(!used[it->second], "{}: {} places the tensor \"{}\" twice", what, kMetaName, full);
      used[it->second] = true;
      out.append(name, Value(std::move(items[it->second].second)));
    } else {
      out.append(name, m);
    }
  }
  return out;
}

// The bundle a binary file reads as: its tensors in file order, or with `meta` the document it describes.
Value assemble(std::vector<std::pair<std::string, Tensor>> items, const std::optional<std::string>& meta,
               const std::string& what, const ReadOptions& options) {
  Value out = Value::bundle();
  if (!meta) {
    for (auto& [name, t] : items) out.append(std::move(name), Value(std::move(t)));
    return out;
  }
  const std::string where = what + "#" + kMetaName;
  const Value skeleton = parse_json(*meta, where, options);
  AK_CHECK(skeleton.is_bundle(), "{}: the document is not a JSON object{}", where,
           (skeleton.kind() == Value::Kind::Other || skeleton.is_string()) ? " (" + skeleton.why() + ")" : std::string());
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < items.size(); ++i) index.emplace(items[i].first, i);
  std::vector<bool> used(items.size());
  std::set<std::string> names;
  out = place_tensors(skeleton, "", items, index, used, names, what);
  for (size_t i = 0; i < items.size(); ++i)
    AK_CHECK(used[i], "{}#{}: a tensor that the document in {} does not place", what, items[i].first, kMetaName);
  if (holds_other(out)) return out;
  // tensors only: a flat bundle, as such a bundle is written (and would read back)
  std::vector<std::pair<std::string, const Tensor*>> flat;
  flatten(out, "", flat, what, "a bundle");
  Value bundle = Value::bundle();
  for (const auto& [name, t] : flat) bundle.append(name, Value(*t));
  return bundle;
}

void append_le32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}
void append_le16(std::string& s, uint16_t v) {
  s += static_cast<char>(v & 0xff);
  s += static_cast<char>(v >> 8);
}
void append_floats(std::string& s, const Tensor& t) {
  static_assert(sizeof(float) == 4, "float32");
  const size_t at = s.size();
  s.resize(at + static_cast<size_t>(t.numel()) * 4);
  if (t.numel()) std::memcpy(&s[at], t.data(), static_cast<size_t>(t.numel()) * 4);  // little-endian hosts
}

// ---------------------------------------------------------------------------------------------
// .npy

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

// ---------------------------------------------------------------------------------------------
// .npz (zip)

constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50;

struct ZipEntry {
  std::string name;
  uint16_t method = 0, flags = 0;
  uint32_t crc = 0;
  uint64_t compressed = 0, size = 0, local = 0;
};

std::string inflate_raw(std::string_view in, uint64_t size, const std::string& what) {
  std::string out(size, '\0');
  z_stream z{};
  AK_CHECK(inflateInit2(&z, -MAX_WBITS) == Z_OK, "{}: zlib: cannot start inflating", what);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(size);
  const int rc = inflate(&z, Z_FINISH);
  const uint64_t produced = z.total_out;
  inflateEnd(&z);
  AK_CHECK(rc == Z_STREAM_END && produced == size, "{}: deflated data is damaged or does not inflate to its declared {} bytes", what, size);
  return out;
}

Value parse_npz(std::string_view bytes, const std::string& what, const ReadOptions& options) {
  const auto* u = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  AK_CHECK(n >= 22 && (load32(u, false) == kLocalSig || load32(u, false) == kEndSig), "{}: not a .npz file (not a zip archive)", what);
  // end of central directory: the last 22 + up to 65535 (comment) bytes
  size_t end = std::string_view::npos;
  for (size_t i = n - 22 + 1; i-- > 0 && n - i <= 22 + 65535;)
    if (load32(u + i, false) == kEndSig && i + 22 + load16(u + i + 20, false) == n) {
      end = i;
      break;
    }
  AK_CHECK(end != std::string_view::npos, "{}: not a .npz file (no zip end record; truncated?)", what);
  const uint16_t count = load16(u + end + 10, false);
  const uint32_t cd_size = load32(u + end + 12, false), cd_at = load32(u + end + 16, false);
  AK_CHECK(load16(u + end + 4, false) == 0 && load16(u + end + 6, false) == 0 && load16(u + end + 8, false) == count,
           "{}: multi-part zip archives are not supported", what);
  AK_CHECK(cd_at != 0xffffffffu && count != 0xffff, "{}: zip64 archives (over 4 GiB or 65535 members) are not supported", what);
  AK_CHECK(uint64_t{cd_at} + cd_size <= end, "{}: the zip's central directory [{}, {}) lies past its end record at {}", what,
           cd_at, uint64_t{cd_at} + cd_size, end);
  std::vector<ZipEntry> entries;
  size_t p = cd_at;
  for (uint16_t e = 0; e < count; ++e) {
    AK_CHECK(p + 46 <= uint64_t{cd_at} + cd_size && load32(u + p, false) == kCentralSig, "{}: zip central directory entry {} is damaged", what, e + 1);
    ZipEntry z;
    z.flags = load16(u + p + 8, false);
    z.method = load16(u + p + 10, false);
    z.crc = load32(u + p + 16, false);
    z.compressed = load32(u + p + 20, false);
    z.size = load32(u + p + 24, false);
    const size_t name_len = load16(u + p + 28, false), extra_len = load16(u + p + 30, false), comment_len = load16(u + p + 32, false);
    z.local = load32(u + p + 42, false);
    AK_CHECK(p + 46 + name_len + extra_len + comment_len <= uint64_t{cd_at} + cd_size, "{}: zip central directory entry {} is damaged", what, e + 1);
    z.name.assign(bytes.substr(p + 46, name_len));
    // zip64 extra field (id 1): the 64-bit values of the fields saturated at 0xffffffff, in this order
    for (size_t x = p + 46 + name_len; x + 4 <= p + 46 + name_len + extra_len;) {
      const uint16_t id = load16(u + x, false), len = load16(u + x + 2, false);
      AK_CHECK(x + 4 + len <= p + 46 + name_len + extra_len, "{}: {}: damaged zip extra field", what, z.name);
      if (id == 1) {
        size_t f = x + 4;
        for (uint64_t* field : {&z.size, &z.compressed, &z.local}) {
          if (*field != 0xffffffffu) continue;
          AK_CHECK(f + 8 <= x + 4 + len, "{}: {}: damaged zip64 extra field", what, z.name);
          *field = load64(u + f, false), f += 8;
        }
      }
      x += 4 + len;
    }
    entries.push_back(std::move(z));
    p += 46 + name_len + extra_len + comment_len;
  }
  // every member's local header and data inside the file, before the central directory, and no two
  // overlapping (checked before anything is inflated: overlapping members are a zip bomb's trick)
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  std::vector<uint64_t> data_at(entries.size());
  for (size_t e = 0; e < entries.size(); ++e) {
    const ZipEntry& z = entries[e];
    const std::string at = what + "#" + z.name;
    AK_CHECK(z.local <= cd_at && cd_at - z.local >= 30 && load32(u + z.local, false) == kLocalSig, "{}: local header at {} is missing or past the central directory", at, z.local);
    data_at[e] = z.local + 30 + load16(u + z.local + 26, false) + load16(u + z.local + 28, false);
    AK_CHECK(data_at[e] <= cd_at && z.compressed <= cd_at - data_at[e], "{}: data [{}, {}) runs past the members' end at {}", at,
             data_at[e], data_at[e] + z.compressed, cd_at);
    spans.emplace_back(z.local, data_at[e] + z.compressed);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    AK_CHECK(spans[i].first >= spans[i - 1].second, "{}: zip members overlap at bytes {} to {}", what, spans[i].first,
             spans[i - 1].second);
  std::vector<std::pair<std::string, Tensor>> items;
  std::set<std::string> names;
  std::optional<std::string> meta;
  for (size_t e = 0; e < entries.size(); ++e) {
    const ZipEntry& z = entries[e];
    const std::string at = what + "#" + z.name;
    AK_CHECK(!(z.flags & 1), "{}: encrypted zip members are not supported", at);
    AK_CHECK(z.method == 0 || z.method == 8, "{}: zip compression method {} is not supported (stored and deflated are)", at, z.method);
    AK_CHECK(z.name.size() > 4 && z.name.compare(z.name.size() - 4, 4, ".npy") == 0, "{}: not a .npy member (a .npz holds NAME.npy arrays)", at);
    const std::string name = z.name.substr(0, z.name.size() - 4);
    AK_CHECK(names.insert(name).second, "{}: member \"{}\" is given twice", what, name);
    // the largest .npy the limit allows: 8-byte elements and a header (64 KiB for version 1)
    const uint64_t largest = static_cast<uint64_t>(options.max_elements) * 8 + (uint64_t{1} << 17);
    AK_CHECK(z.size <= largest, "{}: {} bytes uncompressed, more than a tensor of --max-elements {} can take", at, z.size, options.max_elements);
    if (z.method == 0) AK_CHECK(z.size == z.compressed, "{}: stored member's sizes disagree ({} and {})", at, z.compressed, z.size);
    std::string inflated;
    std::string_view data = bytes.substr(data_at[e], z.compressed);
    if (z.method == 8) {
      AK_CHECK(z.size < 0xffffffffu && z.compressed < 0xffffffffu, "{}: deflated members over 4 GiB are not supported", at);
      inflated = inflate_raw(data, z.size, at), data = inflated;
    }
    const uint32_t crc = static_cast<uint32_t>(crc32_z(0L, reinterpret_cast<const Bytef*>(data.data()), data.size()));
    AK_CHECK(crc == z.crc, "{}: CRC-32 {:08x} of the data is not the zip's {:08x} (damaged file)", at, crc, z.crc);
    if (name == kMetaName) meta = text_of_npy(parse_npy(data, at, options), at);
    else items.emplace_back(name, parse_npy(data, at, options));
  }
  return assemble(std::move(items), meta, what, options);
}

std::string npz_of(const FlatFile& flat, std::string_view target) {
  std::string out, central;
  const auto& members = flat.tensors;
  const size_t count = members.size() + (flat.meta.empty() ? 0 : 1);
  for (size_t m = 0; m < count; ++m) {
    const bool meta = m == members.size();  // the document's other values, last
    const std::string& name = meta ? std::string(kMetaName) : members[m].first;
    const std::string file = name + ".npy";
    AK_CHECK(file.size() < 0xffff, "{}: member name \"{}\" is too long for a zip", target, name);
    const std::string data = meta ? npy_of_text(flat.meta) : npy_of(*members[m].second);
    AK_CHECK(out.size() + data.size() + 30 + file.size() < 0xffffffffu, "{}: more than 4 GiB: write .safetensors instead", target);
    const uint32_t crc = static_cast<uint32_t>(crc32_z(0L, reinterpret_cast<const Bytef*>(data.data()), data.size()));
    const uint32_t offset = static_cast<uint32_t>(out.size());
    // local header: version 2.0, no flags, stored, time/date 1980-01-01 00:00 (as numpy's zipfile does)
    append_le32(out, kLocalSig);
    append_le16(out, 20), append_le16(out, 0), append_le16(out, 0), append_le16(out, 0), append_le16(out, 0x21);
    append_le32(out, crc), append_le32(out, static_cast<uint32_t>(data.size())), append_le32(out, static_cast<uint32_t>(data.size()));
    append_le16(out, static_cast<uint16_t>(file.size())), append_le16(out, 0);
    out += file;
    out += data;
    append_le32(central, kCentralSig);
    append_le16(central, 20), append_le16(central, 20), append_le16(central, 0), append_le16(central, 0);
    append_le16(central, 0), append_le16(central, 0x21);
    append_le32(central, crc), append_le32(central, static_cast<uint32_t>(data.size())), append_le32(central, static_cast<uint32_t>(data.size()));
    append_le16(central, static_cast<uint16_t>(file.size())), append_le16(central, 0), append_le16(central, 0);
    append_le16(central, 0), append_le16(central, 0), append_le32(central, 0x01800000u /* -rw------- */), append_le32(central, offset);
    central += file;
  }
  AK_CHECK(count < 0xffff && out.size() + central.size() < 0xffffffffu, "{}: too large for a zip: write .safetensors instead", target);
  const uint32_t cd_at = static_cast<uint32_t>(out.size());
  out += central;
  append_le32(out, kEndSig);
  append_le16(out, 0), append_le16(out, 0);
  append_le16(out, static_cast<uint16_t>(count)), append_le16(out, static_cast<uint16_t>(count));
  append_le32(out, static_cast<uint32_t>(central.size())), append_le32(out, cd_at), append_le16(out, 0);
  return out;
}

// ---------------------------------------------------------------------------------------------
// .safetensors

constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;  // as the reference implementation

DTypeInfo safetensors_dtype(const std::string& name, const std::string& what) {
  static const std::pair<const char*, DTypeInfo> table[] = {
      {"F32", {DType::F32, 4, "float32"}}, {"F64", {DType::F64, 8, "float64"}}, {"F16", {DType::F16, 2, "float16"}},
      {"BF16", {DType::BF16, 2, "bfloat16"}}, {"I8", {DType::I8, 1, "int8"}},  {"I16", {DType::I16, 2, "int16"}},
      {"I32", {DType::I32, 4, "int32"}},   {"I64", {DType::I64, 8, "int64"}},   {"U8", {DType::U8, 1, "uint8"}},
      {"U16", {DType::U16, 2, "uint16"}},  {"U32", {DType::U32, 4, "uint32"}},  {"U64", {DType::U64, 8, "uint64"}},
      {"BOOL", {DType::Bool, 1, "bool"}}};
  for (const auto& [n, info] : table)
    if (name == n) return info;
  fail("{}: dtype \"{}\" is not supported (F16, BF16, F32, F64, I8-I64, U8-U64 and BOOL are)", what, name);
}

Value parse_safetensors(std::string_view bytes, const std::string& what, const ReadOptions& options) {
  const auto* u = reinterpret_cast<const unsigned char*>(bytes.data());
  AK_CHECK(bytes.size() >= 8, "{}: not a .safetensors file (shorter than its 8-byte header size)", what);
  const uint64_t header_len = load64(u, false);
  AK_CHECK(header_len <= kMaxSafetensorsHeader, "{}: header size {} is more than {} bytes (not a .safetensors file?)", what,
           header_len, kMaxSafetensorsHeader);
  AK_CHECK(header_len <= bytes.size() - 8, "{}: truncated: its header says {} bytes, the file has {} after the size", what,
           header_len, bytes.size() - 8);
  const std::string_view header = bytes.substr(8, header_len);
  AK_CHECK(!header.empty() && header[0] == '{', "{}: the header is not a JSON object", what);
  // the header's nesting is 3 deep at most ({name: {"shape": [..]}}): deeper is refused before parsing
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < header.size(); ++i) {
    const char c = header[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      AK_CHECK(++depth <= 3, "{}: the header nests deeper than a safetensors header does", what);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header.begin(), header.end());
  } catch (const nlohmann::json::exception& e) {
    fail("{}: the header is not valid JSON ({})", what, e.what());
  }
  AK_CHECK(j.is_object(), "{}: the header is not a JSON object", what);
  std::optional<std::string> meta;  // "__metadata__": {"attnkit_meta": the document's other values}
  if (j.contains("__metadata__") && j["__metadata__"].is_object() && j["__metadata__"].contains(kMetaName)) {
    const auto& m = j["__metadata__"][kMetaName];
    AK_CHECK(m.is_string(), "{}: __metadata__'s \"{}\" is not a string", what, kMetaName);
    meta = m.get<std::string>();
  }
  const std::string_view data = bytes.substr(8 + header_len);
  struct Item {
    uint64_t begin, end;
    std::string name;
    DTypeInfo dt;
    Shape shape;
    int64_t n;
  };
  std::vector<Item> items;
  for (const auto& [name, entry] : j.items()) {
    if (name == "__metadata__") continue;  // free-form strings (e.g. {"format": "pt"}): not tensors
    const std::string at = what + "#" + name;
    AK_CHECK(entry.is_object() && entry.contains("dtype") && entry.contains("shape") && entry.contains("data_offsets"),
             "{}: a header entry needs \"dtype\", \"shape\" and \"data_offsets\"", at);
    AK_CHECK(entry.size() == 3, "{}: a header entry holds \"dtype\", \"shape\" and \"data_offsets\" only", at);
    const auto& dtype = entry["dtype"];
    const auto& shape = entry["shape"];
    const auto& off = entry["data_offsets"];
    AK_CHECK(dtype.is_string(), "{}: \"dtype\" is not a string", at);
    AK_CHECK(shape.is_array(), "{}: \"shape\" is not an array of sizes", at);
    AK_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(),
             "{}: \"data_offsets\" is not [begin, end]", at);
    Item it{off[0].get<uint64_t>(), off[1].get<uint64_t>(), name, safetensors_dtype(dtype.get<std::string>(), at), {}, 0};
    AK_CHECK(shape.size() <= static_cast<size_t>(kMaxRank), "{}: shape has {} dimensions, more than {}", at, shape.size(), kMaxRank);
    for (const auto& d : shape) {
      AK_CHECK(d.is_number_unsigned() && d.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX), "{}: \"shape\" holds something that is not a size", at);
      it.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
    }
    it.n = checked_numel(it.shape, at, options);
    AK_CHECK(it.begin <= it.end && it.end <= data.size(), "{}: data_offsets [{}, {}] lie outside the {} bytes of data", at,
             it.begin, it.end, data.size());
    AK_CHECK(it.end - it.begin == static_cast<uint64_t>(it.n) * static_cast<uint64_t>(it.dt.size),
             "{}: data_offsets [{}, {}] hold {} bytes; shape {} of {} needs {}", at, it.begin, it.end, it.end - it.begin,
             shape_str(it.shape), it.dt.name, static_cast<uint64_t>(it.n) * static_cast<uint64_t>(it.dt.size));
    items.push_back(std::move(it));
  }
  // in the order of the data; the tensors must cover the data exactly: no overlap, no hole
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t covered = 0;
  for (const auto& it : items) {
    AK_CHECK(it.begin >= covered, "{}#{}: data [{}, {}) overlaps the tensor before it (which ends at {})", what, it.name, it.begin,
             it.end, covered);
    AK_CHECK(it.begin == covered, "{}#{}: a hole of {} bytes before its data at {} (safetensors data has no holes)", what, it.name,
             it.begin - covered, it.begin);
    covered = it.end;
  }
  AK_CHECK(covered == data.size(), "{}: {} bytes after the last tensor's data", what, data.size() - covered);
  std::vector<std::pair<std::string, Tensor>> tensors;
  tensors.reserve(items.size());
  for (const auto& it : items)
    tensors.emplace_back(it.name, make_tensor(reinterpret_cast<const unsigned char*>(data.data()) + it.begin, it.dt, false,
                                              it.shape, it.n, what + "#" + it.name, options));
  return assemble(std::move(tensors), meta, what, options);
}

std::string safetensors_of(const FlatFile& flat) {
  const auto& members = flat.tensors;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!flat.meta.empty()) header["__metadata__"] = {{kMetaName, flat.meta}};
  uint64_t at = 0;
  for (const auto& [name, t] : members) {
    const uint64_t size = static_cast<uint64_t>(t->numel()) * 4;
    header[name] = {{"dtype", "F32"}, {"shape", t->shape()}, {"data_offsets", {at, at + size}}};
    at += size;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data 8-byte aligned, as the reference writer does
  std::string out;
  out.reserve(8 + text.size() + at);
  for (int i = 0; i < 8; ++i) out += static_cast<char>((static_cast<uint64_t>(text.size()) >> (8 * i)) & 0xff);
  out += text;
  for (const auto& m : members) append_floats(out, *m.second);
  return out;
}

std::string read_file_bytes(const std::string& path) {
  AK_CHECK(path != "-", "standard input has no extension to name its format; read it with read_value_file");
  return read_text(path);
}

}  // namespace

Value read_npy(std::string_view bytes, std::string_view source, const ReadOptions& options) {
  return Value(parse_npy(bytes, std::string(source), options));
}

Value read_npz(std::string_view bytes, std::string_view source, const ReadOptions& options) {
  return parse_npz(bytes, std::string(source), options);
}

Value read_safetensors(std::string_view bytes, std::string_view source, const ReadOptions& options) {
  return parse_safetensors(bytes, std::string(source), options);
}

Value read_binary_file(const std::string& path, const ReadOptions& options) {
  const std::string bytes = read_file_bytes(path);
  switch (file_format(path)) {
    case FileFormat::Npy: return read_npy(bytes, path, options);
    case FileFormat::Npz: return read_npz(bytes, path, options);
    case FileFormat::Safetensors: return read_safetensors(bytes, path, options);
    default: fail("{}: not a .npy, .npz or .safetensors file", path);
  }
}

FileFormat sniff_format(std::string_view b) {
  if (b.size() >= 6 && b.substr(0, 6) == std::string_view("\x93NUMPY", 6)) return FileFormat::Npy;
  if (b.size() >= 4 && (b.substr(0, 4) == std::string_view("PK\x03\x04", 4) || b.substr(0, 4) == std::string_view("PK\x05\x06", 4)))
    return FileFormat::Npz;
  if (b.size() >= 9 && b[8] == '{') {
    const uint64_t header = load64(reinterpret_cast<const unsigned char*>(b.data()), false);
    if (header <= kMaxSafetensorsHeader && header >= 2) return FileFormat::Safetensors;
  }
  return FileFormat::Json;
}

Value read_document(std::string_view bytes, FileFormat format, std::string_view source, const ReadOptions& options) {
  switch (format) {
    case FileFormat::Npy: return read_npy(bytes, source, options);
    case FileFormat::Npz: return read_npz(bytes, source, options);
    case FileFormat::Safetensors: return read_safetensors(bytes, source, options);
    default: return parse_json(bytes, source, options);
  }
}

Value read_value_file(const std::string& path, const ReadOptions& options) {
  const std::string bytes = read_text(path);
  if (path == "-") return read_document(bytes, sniff_format(bytes), "<stdin>", options);
  return read_document(bytes, file_format(path), path, options);
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
  return npy_of(value.tensor());
}

std::string npz_bytes(const Value& value, std::string_view target) {
  return npz_of(flat_file(value, target, ".npz"), target);
}

std::string safetensors_bytes(const Value& value, std::string_view target) {
  return safetensors_of(flat_file(value, target, ".safetensors"));
}

void write_value_file(const std::string& path, const Value& value, const WriteOptions& json) {
  switch (file_format(path)) {
    case FileFormat::Npy: return write_file_atomic(path, npy_bytes(value, path));
    case FileFormat::Npz: return write_file_atomic(path, npz_bytes(value, path));
    case FileFormat::Safetensors: return write_file_atomic(path, safetensors_bytes(value, path));
    default: return write_file_atomic(path, to_json(value, json) + "\n");
  }
}

}  // namespace attnkit::io
