// .safetensors: a bundle as an 8-byte little-endian header size, a JSON header
// {NAME: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__"?} and the raw data
// (io/tensor_file.hpp).
#include "attnkit/io/tensor_file.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>

#include "attnkit/io/binary_format.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::io {

using namespace binary;

namespace {

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

// header_only: every check, then nothing is converted (an empty Value).
Value parse_safetensors(std::string_view bytes, const std::string& what, const ReadOptions& options,
                        bool header_only = false) {
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
  if (header_only) return Value();
  std::vector<std::pair<std::string, Tensor>> tensors;
  tensors.reserve(items.size());
  for (const auto& it : items)
    tensors.emplace_back(it.name, make_tensor(reinterpret_cast<const unsigned char*>(data.data()) + it.begin, it.dt, false,
                                              it.shape, it.n, what + "#" + it.name, options));
  return assemble(std::move(tensors), meta, what, options);
}

// The element type a tensor is written in: "F32" unless `dtypes` names it.
const std::string& dtype_of(const std::map<std::string, std::string>& dtypes, const std::string& name) {
  static const std::string f32 = "F32";
  const auto it = dtypes.find(name);
  return it == dtypes.end() ? f32 : it->second;
}

// t's values as int8 or bfloat16, each checked to be held exactly.
void append_narrow(std::string& out, const Tensor& t, const std::string& dtype, const std::string& what) {
  const float* x = t.data();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dtype == "I8") {
      AK_CHECK(x[i] >= -128 && x[i] <= 127 && x[i] == std::nearbyint(x[i]), "{}: value [{}] = {} is not an int8",
               what, i, x[i]);
      out += static_cast<char>(static_cast<int8_t>(x[i]));
    } else {
      uint32_t bits;
      std::memcpy(&bits, &x[i], 4);
      AK_CHECK((bits & 0xffffu) == 0, "{}: value [{}] = {} is not a bfloat16", what, i, x[i]);
      append_le16(out, static_cast<uint16_t>(bits >> 16));
    }
  }
}

std::string safetensors_of(const FlatFile& flat, const std::map<std::string, std::string>& dtypes = {},
                           std::string_view target = {}) {
  const auto& members = flat.tensors;
  for (const auto& entry : dtypes) {
    const std::string& name = entry.first;  // (a structured binding cannot be captured before C++20)
    const std::string& dtype = entry.second;
    AK_CHECK(dtype == "I8" || dtype == "BF16", "{}#{}: dtype {} (I8 or BF16 are written besides F32)", target, name,
             dtype);
    AK_CHECK(std::any_of(members.begin(), members.end(), [&](const auto& m) { return m.first == name; }),
             "{}: no tensor {} to store as {}", target, name, dtype);
  }
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!flat.meta.empty()) header["__metadata__"] = {{kMetaName, flat.meta}};
  uint64_t at = 0;
  for (const auto& [name, t] : members) {
    const std::string& dtype = dtype_of(dtypes, name);
    const uint64_t size = static_cast<uint64_t>(t->numel()) * (dtype == "F32" ? 4 : dtype == "I8" ? 1 : 2);
    header[name] = {{"dtype", dtype}, {"shape", t->shape()}, {"data_offsets", {at, at + size}}};
    at += size;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data 8-byte aligned, as the reference writer does
  std::string out;
  out.reserve(8 + text.size() + at);
  for (int i = 0; i < 8; ++i) out += static_cast<char>((static_cast<uint64_t>(text.size()) >> (8 * i)) & 0xff);
  out += text;
  for (const auto& [name, t] : members) {
    const std::string& dtype = dtype_of(dtypes, name);
    if (dtype == "F32") append_floats(out, *t);
    else append_narrow(out, *t, dtype, std::string(target) + "#" + name);
  }
  return out;
}

}  // namespace

Value read_safetensors(std::string_view bytes, std::string_view source, const ReadOptions& options) {
  return parse_safetensors(bytes, std::string(source), options);
}

std::string safetensors_bytes(const Value& value, std::string_view target) {
  return safetensors_of(flat_file(value, target, ".safetensors"));
}

std::string safetensors_bytes(const Value& value, std::string_view target,
                              const std::map<std::string, std::string>& dtypes) {
  return safetensors_of(flat_file(value, target, ".safetensors"), dtypes, target);
}

std::map<std::string, std::string> safetensors_dtypes(std::string_view bytes, std::string_view source) {
  const std::string what(source);
  ReadOptions options;
  options.max_elements = int64_t{1} << 62;  // nothing is allocated: the sizes are only checked against the bytes
  parse_safetensors(bytes, what, options, /*header_only=*/true);
  const uint64_t header_len = load64(reinterpret_cast<const unsigned char*>(bytes.data()), false);
  const nlohmann::json j = nlohmann::json::parse(bytes.substr(8, header_len));  // checked by parse_safetensors
  std::map<std::string, std::string> out;
  for (const auto& [name, entry] : j.items())
    if (name != "__metadata__") out[name] = entry["dtype"].get<std::string>();
  return out;
}

}  // namespace attnkit::io
